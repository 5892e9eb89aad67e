"""End-to-end deliveries through the local stack (HTTP API → tick → SQS → run_task → Web Push to a loopback
push service), and DynamoDB requests per delivered task."""

from __future__ import annotations

import time
import uuid

from bench import counting


def main(tasks: int = 100) -> None:
    counting.install()
    from amsg.timeutil import iso_from_ms
    from amsg.vapid import generate_vapid_keys
    from amsg_local.cli import start_local_stack

    from tests.support.fake_push import FakePushService
    from tests.support.wire_client import WireClient, http_transport

    public, private = generate_vapid_keys()
    config = {
        "AMSG_MASTER_KEY": "b" * 64,
        "AMSG_VAPID_PUBLIC_KEY": public,
        "AMSG_VAPID_PRIVATE_KEY": private,
        "AMSG_VAPID_EMAIL": "bench@example.test",
        "AMSG_PUSH_PACING_MS": "0",
    }
    with FakePushService(vapid_public_key=public) as push, start_local_stack(config=config) as stack:
        local = stack.post_local

        now = local("/_local/clock", {"advanceMs": 0})["nowMs"]
        clients = []
        for _ in range(10):
            client = WireClient(http_transport(stack.base_url), str(uuid.uuid4()))
            client.init()
            client.put_subscription(push.subscribe().to_json())
            clients.append(client)
        started = time.perf_counter()
        for i in range(tasks):
            clients[i % 10].schedule(
                {
                    "contactName": "Rei",
                    "messageType": "fixed",
                    "userMessage": "你好。再见！",
                    "firstSendTime": iso_from_ms(now + 60_000),
                }
            )
        schedule_s = time.perf_counter() - started
        local("/_local/clock", {"advanceMs": 61_000})
        counting.reset()
        started = time.perf_counter()
        local("/_local/tick", {})
        deliver_s = time.perf_counter() - started
        delivered = len(push.received)
        print(f"== end to end through the local stack ({stack.backend})")
        print(f"  schedule-message     {tasks / schedule_s:8.1f} req/s over HTTP")
        rate = tasks / deliver_s
        print(f"  delivered tasks      {tasks} ({delivered} pushes) in {deliver_s:.2f} s -> {rate:.1f} tasks/s")
        print(f"  DynamoDB requests    {counting.dynamodb_total() / tasks:8.2f} per delivered task (tick + run_task)")
        top = sorted(((k, v) for k, v in counting.calls.items() if k.startswith("dynamodb.")), key=lambda kv: -kv[1])
        print("  by operation         " + ", ".join(f"{k.split('.', 1)[1]} {v / tasks:.2f}" for k, v in top))
