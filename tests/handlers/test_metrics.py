"""The EMF metrics the dashboard and alarms read, emitted by the real handlers and adapters: names, units and
dimensions (low-cardinality only: the service, an outcome or a status class; never a user, task or URL)."""

from __future__ import annotations

import json

import pytest

from tests.handlers.test_delivery import due, schedule, schedule_ai

pytestmark = pytest.mark.memory_store  # the engine on the in-memory fakes under `make unit`

ALLOWED_DIMENSIONS = {"service": {"amsg"}, "Outcome": {"ok", "timeout", "network", "2xx", "4xx", "5xx"}}
ALLOWED_DIMENSIONS["StatusClass"] = {"timeout", "network", "4xx", "5xx"}


def emitted(out: str) -> list[tuple[str, str, dict[str, str], list[float]]]:
    """Every metric in the EMF lines of ``out``: (name, unit, dimensions, values)."""
    found = []
    for line in out.splitlines():
        if not line.startswith('{"_aws"'):
            continue
        blob = json.loads(line)
        for directive in blob["_aws"]["CloudWatchMetrics"]:
            assert directive["Namespace"] == "amsg"
            (dimension_names,) = directive["Dimensions"]
            dims = {name: blob[name] for name in dimension_names}
            for metric in directive["Metrics"]:
                values = blob[metric["Name"]]
                found.append((metric["Name"], metric["Unit"], dims, values if isinstance(values, list) else [values]))
    return found


@pytest.fixture(autouse=True)
def metrics_on(monkeypatch):
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)


def test_delivery_emits_the_dashboard_metrics(engine, capsys):
    engine.llm.reply_content("你好！")
    schedule_ai(engine, "sk-metrics-0123456789")
    schedule(engine, userMessage="fixed")
    capsys.readouterr()
    due(engine, 61_000 + 5_000)
    engine.harness.tick_and_drain()
    metrics = emitted(capsys.readouterr().out)
    by_name: dict[str, list] = {}
    for name, unit, dims, values in metrics:
        for key, value in dims.items():
            assert value in ALLOWED_DIMENSIONS[key], (name, key, value)
        by_name.setdefault(name, []).append((unit, dims, values))
    assert by_name["TasksDue"] == [("Count", {"service": "amsg"}, [2.0])]
    assert by_name["TasksClaimed"] == [("Count", {"service": "amsg"}, [2.0])]
    assert by_name["EnqueueFailures"] == [("Count", {"service": "amsg"}, [0.0])]
    assert [v for _, _, values in by_name["TasksDelivered"] for v in values] == [1.0, 1.0]
    assert {(unit, tuple(dims.items())) for unit, dims, _ in by_name["DeliveryLatency"]} == {
        ("Milliseconds", (("service", "amsg"),))
    }
    latencies = [v for _, _, values in by_name["DeliveryLatency"] for v in values]
    assert latencies == [6_000.0, 6_000.0]  # due at +60 s, delivered at +66 s on the test clock
    ((unit, dims, llm),) = by_name["LlmLatency"]
    assert unit == "Milliseconds" and dims == {"service": "amsg", "Outcome": "ok"} and llm[0] > 0
    assert {unit for unit, _, _ in by_name["PushLatency"]} == {"Milliseconds"}
    assert "PushFailures" not in by_name


def test_a_batch_prints_its_values_together_one_document_per_dimension_set(engine, capsys):
    """run_task's batch prints every delivery's DeliveryLatency and PushLatency in one EMF document (not one per
    delivery): CloudWatch still receives every value, so the p99 the alarm reads is over every delivery."""
    for n in range(3):
        schedule(engine, userMessage=f"m{n}")
    capsys.readouterr()
    due(engine, 61_000 + 7_000)
    engine.harness.tick_and_drain()
    assert len(engine.push.payloads()) == 3
    documents = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')]
    latency = [d for d in documents if "DeliveryLatency" in d]
    assert len(latency) == 1, latency  # the three deliveries ran as one batch
    (document,) = latency
    assert document["DeliveryLatency"] == [8_000.0] * 3  # due at +60 s, pushed at +68 s
    assert len(document["PushLatency"]) == 3
    (directive,) = document["_aws"]["CloudWatchMetrics"]
    assert directive["Dimensions"] == [["service"]] and document["service"] == "amsg"
    assert {m["Name"]: m["Unit"] for m in directive["Metrics"]} == {
        "DeliveryLatency": "Milliseconds",
        "PushLatency": "Milliseconds",
    }


def test_a_metric_batch_splits_at_the_emf_limit_and_keeps_dimension_sets_apart(capsys):
    from amsg.observability import emit_metric, metric_batch

    with metric_batch():
        for n in range(150):
            emit_metric("DeliveryLatency", "Milliseconds", n)
        emit_metric("DeliveryLatency", "Milliseconds", 5, Tenant="other")
        assert capsys.readouterr().out == ""  # nothing before the batch's end
    found = emitted(capsys.readouterr().out)
    assert [(dims, len(values)) for _, _, dims, values in found] == [
        ({"service": "amsg"}, 100),  # EMF takes at most 100 values of a metric per document
        ({"service": "amsg"}, 50),
        ({"Tenant": "other", "service": "amsg"}, 1),
    ]
    assert [v for _, _, dims, values in found[:2] for v in values] == [float(n) for n in range(150)]
    with metric_batch():  # batches that overlap in one process print together, when the last one ends
        emit_metric("PushLatency", "Milliseconds", 1)
        with metric_batch():
            emit_metric("PushLatency", "Milliseconds", 2)
        assert capsys.readouterr().out == ""
    assert emitted(capsys.readouterr().out) == [("PushLatency", "Milliseconds", {"service": "amsg"}, [1.0, 2.0])]
    emit_metric("PushUnconfirmed", "Count", 1)  # outside a batch: at once, as before
    assert emitted(capsys.readouterr().out) == [("PushUnconfirmed", "Count", {"service": "amsg"}, [1.0])]


def test_push_failures_are_counted_by_status_class(engine, capsys):
    created = schedule(engine)
    engine.push.set_status(engine.subscription.endpoint_id, 503)
    capsys.readouterr()
    due(engine)
    engine.harness.tick_and_drain()
    failures = [(dims, values) for name, _, dims, values in emitted(capsys.readouterr().out) if name == "PushFailures"]
    assert failures == [({"service": "amsg", "StatusClass": "5xx"}, [1.0])]
    assert engine.api.get_message(created["uuid"]).data["task"]["retryCount"] == 1


def test_llm_failures_are_measured_with_their_outcome(engine, capsys):
    engine.llm.reply_error(401, "bad key")
    schedule_ai(engine, "sk-metrics-0123456789")
    capsys.readouterr()
    due(engine)
    engine.harness.tick_and_drain()
    outcomes = [dims["Outcome"] for name, _, dims, _ in emitted(capsys.readouterr().out) if name == "LlmLatency"]
    assert outcomes == ["4xx"]


def test_metrics_are_not_printed_when_disabled(engine, capsys, monkeypatch):
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    from amsg.observability import emit_metric

    emit_metric("PushFailures", "Count", 1, StatusClass="5xx")
    assert '"_aws"' not in capsys.readouterr().out


@pytest.mark.slow  # a subprocess
def test_the_service_dimension_is_the_stacks_name():
    """template.yaml sets POWERTOOLS_SERVICE_NAME to the stack's name: its metrics are its own."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    probe = (
        "from amsg.observability import emit_metric, logger, metrics\n"
        "emit_metric('PushFailures', 'Count', 1, StatusClass='5xx')\n"
        "metrics.add_metric(name='TasksDue', unit='Count', value=1)\n"
        "metrics.flush_metrics()\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root / "layers" / "shared"), "POWERTOOLS_SERVICE_NAME": "amsg-staging"}
    env.pop("POWERTOOLS_METRICS_DISABLED", None)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True).stdout
    found = {(name, dims["service"]) for name, _, dims, _ in emitted(out)}
    assert found == {("PushFailures", "amsg-staging"), ("TasksDue", "amsg-staging")}
