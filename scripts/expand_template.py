"""Expand the SAM template with aws-sam-translator (offline) and print the CloudFormation JSON.

Run with the tools venv: ``.venv-tools/bin/python scripts/expand_template.py [template.yaml]``.
Local ``CodeUri``/``ContentUri`` paths are replaced by placeholder S3 URIs (what ``sam package`` would
do) and the managed-policy map is empty (no IAM call), so this needs no credentials and no network.
Used by scripts/lint-template to run cfn-lint on the expanded template as a second check.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from samcli.yamlhelper import yaml_parse
from samtranslator.translator.transform import transform

_LOCAL_URI = {
    "AWS::Serverless::Function": "CodeUri",
    "AWS::Serverless::LayerVersion": "ContentUri",
}


class _NoIamPolicyLoader:
    def load(self) -> dict[str, str]:
        return {}


def expand(path: Path, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    template = yaml_parse(path.read_text())
    for name, res in template.get("Resources", {}).items():
        key = _LOCAL_URI.get(res.get("Type", ""))
        props = res.get("Properties", {})
        if key and isinstance(props.get(key), str) and not props[key].startswith("s3://"):
            props[key] = f"s3://placeholder-bucket/{name}.zip"
    return transform(template, parameters or {}, _NoIamPolicyLoader())  # type: ignore[arg-type]


def main() -> None:
    # The translator needs a region for pseudo parameters; any commercial region gives the same output.
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "template.yaml")
    json.dump(expand(path), sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
