"""A throwaway SAM project (template + one-file handlers) for testing the local gateway and stack.

The handlers are deliberately dumb and record what they receive, so the tests pin the *gateway's* behaviour
(events, routing, CORS, limits, partial batches) independently of the real amsg handlers.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

TEMPLATE = """\
AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Parameters:
  AllowOrigins:
    Type: CommaDelimitedList
    Default: ""
  CorsMaxAge:
    Type: Number
    Default: 600
Conditions:
  HasCors: !Not [!Equals [!Join ["", !Ref AllowOrigins], ""]]
Globals:
  Function:
    Runtime: python3.12
    Timeout: 5
    MemorySize: 256
    Layers: [!Ref SharedLayer]
    Environment:
      Variables:
        TINY_TABLE: !Ref Table
        TINY_KNOB: "7"
Resources:
  SharedLayer:
    Type: AWS::Serverless::LayerVersion
    Properties:
      ContentUri: layers/shared/
  HttpApi:
    Type: AWS::Serverless::HttpApi
    Properties:
      CorsConfiguration: !If
        - HasCors
        - AllowOrigins: !Ref AllowOrigins
          AllowMethods: [GET, POST, PUT, DELETE, OPTIONS]
          AllowHeaders: [Content-Type, X-User-Id]
          MaxAge: !Ref CorsMaxAge
        - !Ref AWS::NoValue
  Table:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions:
        - { AttributeName: PK, AttributeType: S }
        - { AttributeName: SK, AttributeType: S }
        - { AttributeName: g_pk, AttributeType: S }
        - { AttributeName: l_sk, AttributeType: S }
      KeySchema:
        - { AttributeName: PK, KeyType: HASH }
        - { AttributeName: SK, KeyType: RANGE }
      GlobalSecondaryIndexes:
        - IndexName: gsi_one
          KeySchema: [{ AttributeName: g_pk, KeyType: HASH }]
          Projection: { ProjectionType: KEYS_ONLY }
      LocalSecondaryIndexes:
        - IndexName: lsi_one
          KeySchema: [{ AttributeName: PK, KeyType: HASH }, { AttributeName: l_sk, KeyType: RANGE }]
          Projection: { ProjectionType: ALL }
      TimeToLiveSpecification: { AttributeName: ttl, Enabled: true }
  Queue:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: 600
      RedrivePolicy:
        deadLetterTargetArn: !GetAtt DeadLetters.Arn
        maxReceiveCount: 3
  DeadLetters:
    Type: AWS::SQS::Queue
  EchoFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/echo/
      Handler: echo_handler.handler
      Events:
        GetEcho: { Type: HttpApi, Properties: { ApiId: !Ref HttpApi, Method: GET, Path: /echo } }
        PostEcho: { Type: HttpApi, Properties: { ApiId: !Ref HttpApi, Method: POST, Path: /echo } }
        GetEchoV1: { Type: HttpApi, Properties: { ApiId: !Ref HttpApi, Method: GET, Path: /api/v1/echo } }
        GetItem: { Type: HttpApi, Properties: { ApiId: !Ref HttpApi, Method: GET, Path: "/items/{id}" } }
  MiscFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/misc/
      Handler: misc_handler.handler
      Timeout: 1
      Events:
        Plain: { Type: HttpApi, Properties: { ApiId: !Ref HttpApi, Method: GET, Path: /plain } }
        Binary: { Type: HttpApi, Properties: { ApiId: !Ref HttpApi, Method: GET, Path: /bin } }
        Boom: { Type: HttpApi, Properties: { ApiId: !Ref HttpApi, Method: GET, Path: /boom } }
        Slow: { Type: HttpApi, Properties: { ApiId: !Ref HttpApi, Method: GET, Path: /slow } }
        Ctx: { Type: HttpApi, Properties: { ApiId: !Ref HttpApi, Method: GET, Path: /ctx } }
        Env: { Type: HttpApi, Properties: { ApiId: !Ref HttpApi, Method: GET, Path: /env } }
        Big: { Type: HttpApi, Properties: { ApiId: !Ref HttpApi, Method: GET, Path: /big } }
        Bad: { Type: HttpApi, Properties: { ApiId: !Ref HttpApi, Method: GET, Path: /bad } }
        Nap: { Type: HttpApi, Properties: { ApiId: !Ref HttpApi, Method: GET, Path: /nap } }
  SlowFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/slow/
      Handler: slow_handler.handler
      Timeout: 60
      Events:
        Slow: { Type: HttpApi, Properties: { ApiId: !Ref HttpApi, Method: GET, Path: /very-slow } }
  ResolverFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/resolver/
      Handler: resolver_handler.handler
      ReservedConcurrentExecutions: 40
      Events:
        Whoami: { Type: HttpApi, Properties: { ApiId: !Ref HttpApi, Method: GET, Path: /whoami } }
  MissingFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/missing/
      Handler: missing_handler.handler
      Events:
        Missing: { Type: HttpApi, Properties: { ApiId: !Ref HttpApi, Method: GET, Path: /missing } }
  NotFoundFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/not_found/
      Handler: not_found_handler.handler
      Events:
        Default: { Type: HttpApi, Properties: { ApiId: !Ref HttpApi, Path: $default, Method: ANY } }
  TickFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/tick/
      Handler: tick_handler.handler
      Events:
        EveryMinute:
          Type: ScheduleV2
          Properties:
            ScheduleExpression: rate(1 minute)
            Input: '{"scheduledTime":"<aws.scheduler.scheduled-time>","executionId":"<aws.scheduler.execution-id>"}'
  RunTaskFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/run_task/
      Handler: run_task_handler.handler
      Events:
        Tasks:
          Type: SQS
          Properties:
            Queue: !GetAtt Queue.Arn
            BatchSize: 5
            FunctionResponseTypes: [ReportBatchItemFailures]
            ScalingConfig:
              MaximumConcurrency: 3
"""

HANDLERS = {
    "layers/shared/tinylib.py": """
        import json
        import threading

        from aws_lambda_powertools import Logger

        logger = Logger(service="tiny")  # one logger for every sandbox, like the real layer's

        # how many run_task invocations ran at once (the layer is shared by every sandbox of this process)
        running = 0
        most_running = 0
        _lock = threading.Lock()


        def reply(status, payload, **headers):
            return {"statusCode": status, "headers": {"content-type": "application/json", **headers},
                    "body": json.dumps(payload)}
    """,
    "functions/echo/echo_handler.py": """
        import tinylib

        def handler(event, context):
            return tinylib.reply(200, {"event": event, "module": __name__},
                                 **{"Access-Control-Allow-Origin": "https://evil.example", "x-custom": "1"})
    """,
    "functions/misc/misc_handler.py": """
        import base64
        import os
        import time

        def handler(event, context):
            path = event["rawPath"]
            if path == "/plain":
                return {"hello": "world"}
            if path == "/bin":
                return {"statusCode": 200, "headers": {"content-type": "application/octet-stream"},
                        "body": base64.b64encode(bytes(range(256))).decode(), "isBase64Encoded": True}
            if path == "/boom":
                raise RuntimeError("boom")
            if path == "/slow":
                time.sleep(1.5)
                return {"statusCode": 200, "body": "too late"}
            if path == "/ctx":
                return {"statusCode": 200, "body": "", "headers": {
                    "x-function-name": context.function_name,
                    "x-memory": context.memory_limit_in_mb,
                    "x-request-id": context.aws_request_id,
                    "x-remaining": str(context.get_remaining_time_in_millis()),
                }}
            if path == "/big":
                return {"statusCode": 200, "body": "x" * (6 * 1024 * 1024 + 10)}
            if path == "/bad":
                return {"statusCode": 200, "body": {"not": "a string"}}
            if path == "/env":
                names = ("AMSG_TABLE_NAME", "AWS_ENDPOINT_URL_DYNAMODB", "TINY_KNOB", "AWS_SESSION_TOKEN")
                return {name: os.environ.get(name) for name in names}
            if path == "/nap":
                began = time.time()
                time.sleep(0.4)
                return {"statusCode": 200, "body": f"{__name__}@{os.getpid()}@{began}@{time.time()}"}
            return {"statusCode": 500, "body": "unexpected"}
    """,
    "functions/resolver/resolver_handler.py": """
        import time

        from aws_lambda_powertools import Logger
        from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
        from aws_lambda_powertools.logging import correlation_paths

        import tinylib

        app = APIGatewayHttpResolver()


        @app.get("/whoami")
        def whoami():
            tinylib.logger.append_keys(caller=app.current_event.query_string_parameters["id"])
            time.sleep(float(app.current_event.query_string_parameters.get("nap", "0")))
            keys = tinylib.logger.get_current_keys()
            return {"id": app.current_event.query_string_parameters["id"],
                    "requestId": app.lambda_context.aws_request_id,
                    "logKeys": {"caller": keys.get("caller"), "function_request_id": keys.get("function_request_id"),
                                "correlation_id": keys.get("correlation_id")}}


        @tinylib.logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
        def handler(event, context):
            return app.resolve(event, context)
    """,
    "functions/slow/slow_handler.py": """
        import time

        def handler(event, context):
            time.sleep(1.5)
            return {"statusCode": 200, "body": "too late"}
    """,
    "functions/not_found/not_found_handler.py": """
        import json

        def handler(event, context):
            return {"statusCode": 404, "headers": {"content-type": "application/json; charset=utf-8"},
                    "body": json.dumps({"success": False, "error": {"code": "NOT_FOUND", "message": "not found",
                                        "details": {"routeKey": event["routeKey"], "path": event["rawPath"],
                                                    "method": event["requestContext"]["http"]["method"]}}})}
    """,
    "functions/tick/tick_handler.py": """
        import json
        import os

        import boto3

        def handler(event, context):
            record_dir = os.environ.get("TINY_RECORD_DIR")
            if record_dir:
                with open(os.path.join(record_dir, "tick.json"), "w") as fh:
                    json.dump(event, fh)
            sqs = boto3.client("sqs")
            bodies = os.environ.get("TINY_TICK_BODIES", "[]")
            if bodies.startswith("@"):  # a file the test rewrites (a warm sandbox keeps its environment)
                with open(bodies[1:]) as fh:
                    bodies = fh.read()
            bodies = json.loads(bodies)
            for body in bodies:
                sqs.send_message(QueueUrl=os.environ["AMSG_QUEUE_URL"], MessageBody=body,
                                 MessageAttributes={"kind": {"DataType": "String", "StringValue": "task"}})
            return {"enqueued": len(bodies)}
    """,
    "functions/run_task/run_task_handler.py": """
        import json
        import os
        import time

        import tinylib

        def handler(event, context):
            with tinylib._lock:
                tinylib.running += 1
                tinylib.most_running = max(tinylib.most_running, tinylib.running)
            began = time.time()
            try:
                if any(r["body"].startswith("nap") for r in event["Records"]):
                    time.sleep(0.3)
            finally:
                with tinylib._lock:
                    tinylib.running -= 1
            record_dir = os.environ.get("TINY_RECORD_DIR")
            if record_dir:
                with open(os.path.join(record_dir, "spans.jsonl"), "a") as fh:
                    fh.write(json.dumps({"pid": os.getpid(), "start": began, "end": time.time()}) + "\\n")
                with open(os.path.join(record_dir, "run_task.jsonl"), "a") as fh:
                    fh.write(json.dumps(event) + "\\n")
            failures = [{"itemIdentifier": r["messageId"]} for r in event["Records"] if r["body"].startswith("fail")]
            return {"batchItemFailures": failures}
    """,
}


def write_tiny_project(root: Path, *, with_delivery: bool = True) -> Path:
    """Write the template and handlers under ``root``; returns the template path."""
    template = root / "template.yaml"
    template.write_text(TEMPLATE, encoding="utf-8")
    for relative, source in HANDLERS.items():
        if not with_delivery and relative.startswith(("functions/tick/", "functions/run_task/")):
            continue
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    return template
