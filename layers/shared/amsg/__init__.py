"""amsg-aws: the ReiStandard active-messaging server for AWS Lambda (shared layer package).

Layering (enforced by tests/unit/test_architecture.py; the map is docs/architecture.md):
  amsg.domain.*   pure rules (validation, recurrence, projection, splitting); no I/O, no os, no boto3
  amsg.api.*      one function per HTTP route: check order, envelopes, error codes; talks to ports only
  amsg.engine.*   tick, run_task, runTask and the delivery chain; never imports api or http
  amsg.ports      the small interfaces (TaskStore, ClaimStore, PushSender, LlmClient, Clock, ...)
  amsg.failures   delivery failure types, a leaf every layer may raise
  amsg.adapters.* the only modules that import boto3 / httpx / http_ece
  amsg.runtime    composition root: reads the environment lazily and builds adapters once per sandbox
"""

__version__ = "0.1.0"
