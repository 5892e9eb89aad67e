"""The session the table's DynamoDB client is built from.

botocore checks that a service exists by listing every service directory of its data (~420, each listed and
probed for the model file) before loading a model, and does it twice per client (the service model and its
endpoint rules). That scan was the largest part of building the client after parsing the JSON models, on
every cold start of a route that reads the table (docs/cold-start.md). This session's loader serves the one
service we build clients for and skips the scan; everything else (search paths, ``AWS_DATA_PATH``, model
files, versions) is botocore's own. A missing model still fails, when it is loaded.

The session is a boto3 session around that botocore session, so that tools hooking boto3 sessions (the
request-count benches) see the client.
"""

from __future__ import annotations

import os

import boto3
import botocore.session
from botocore.loaders import Loader

SERVICE = "dynamodb"


class OneServiceLoader(Loader):  # type: ignore[misc]  # botocore ships no types
    """botocore's data loader for a session that only builds ``SERVICE`` clients."""

    def list_available_services(self, type_name: str) -> list[str]:
        return [SERVICE]


def dynamodb_session() -> boto3.session.Session:
    core = botocore.session.Session()
    data_path = core.get_config_variable("data_path")  # AWS_DATA_PATH, as botocore's own loader reads it
    extra = [os.path.expanduser(os.path.expandvars(p)) for p in data_path.split(os.pathsep)] if data_path else []
    core.register_component("data_loader", OneServiceLoader(extra_search_paths=extra))
    return boto3.session.Session(botocore_session=core)
