"""amsg-aws: the ReiStandard active-messaging server for AWS Lambda (shared layer package).

Layering (enforced by tests/unit/test_architecture.py):
  amsg.domain.*   pure rules (validation, recurrence, projection, splitting); no I/O, no os, no boto3
  amsg.api.*      one function per HTTP route: check order, envelopes, error codes; talks to ports only
  amsg.ports      the small interfaces the domain needs (TaskStore, PushSender, LlmClient, Clock, ...)
  amsg.adapters.* the only modules that import boto3 / httpx / pywebpush
  amsg.runtime    composition root: reads the environment lazily and builds adapters once per sandbox
"""

__version__ = "0.1.0"
