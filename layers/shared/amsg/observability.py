"""The one Logger and Metrics of the service (Powertools). Tracing is X-Ray's Lambda-level segments only:
the Powertools Tracer pulls in aws-xray-sdk (~70 ms of cold start) for little extra here."""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics

logger = Logger(service="amsg")
metrics = Metrics(namespace="amsg", service="amsg")
