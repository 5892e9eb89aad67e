"""DeliveryLatency, the promise users feel (due → pushed), through the real handlers on moto with the injected
clock: on time, late, retried, deferred by quiet hours, agentic; and DeliveryLatencyAlarm's metric math read
from template.yaml turns the emitted value into what it compares with its threshold (docs/operations.md)."""

from __future__ import annotations

import pytest
from amsg.observability import delivery_latency_ms

from tests.conftest import T0_MS
from tests.handlers.test_agentic_fire import KEY
from tests.handlers.test_delivery import FIRST_MS, due, schedule, schedule_ai
from tests.handlers.test_delivery_policy import HOUR, NIGHT
from tests.handlers.test_metrics import emitted
from tests.support import hooks_agentic
from tests.support.hooks_agentic import SCRIPT
from tests.support.template import project_template
from tests.template.test_operations import alarm_threshold, alarm_value, delivery_latency_alarm

pytestmark = pytest.mark.memory_store  # the engine on the in-memory fakes under `make unit`

MINUTE = 60_000


@pytest.fixture(autouse=True)
def metrics_on(monkeypatch):
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)


def latencies(capsys) -> list[float]:
    return [v for name, _, _, values in emitted(capsys.readouterr().out) if name == "DeliveryLatency" for v in values]


def alarm_sees(latency_ms: float) -> tuple[float, bool]:
    """What DeliveryLatencyAlarm compares (its expression over a p99 of this one value) and whether it breaches."""
    tpl = project_template()
    props = delivery_latency_alarm(tpl)
    (query,) = [q for q in props["Metrics"] if "MetricStat" in q]
    value = alarm_value(props, {query["Id"]: latency_ms})  # the p99 of a single datapoint is that datapoint
    assert props["ComparisonOperator"] == "GreaterThanThreshold"
    return value, value > alarm_threshold(tpl, props)


def test_a_task_delivered_late_carries_its_lateness_and_the_alarm_breaches(engine, capsys):
    schedule(engine, userMessage="late")  # due at +60 s
    capsys.readouterr()
    due(engine, 60_000 + 5 * MINUTE)  # the tick stopped for five minutes
    engine.harness.tick_and_drain()
    assert [p["message"] for p in engine.push.payloads()] == ["late"]
    assert latencies(capsys) == [5 * MINUTE]
    assert alarm_sees(5 * MINUTE) == (300.0, True)  # seconds, over the default 120


def test_an_on_time_delivery_stays_under_the_threshold(engine, capsys):
    schedule(engine, userMessage="now")
    capsys.readouterr()
    due(engine, 60_000 + 4_000)
    engine.harness.tick_and_drain()
    assert latencies(capsys) == [4_000.0]
    assert alarm_sees(4_000) == (4.0, False)


def test_a_retried_delivery_is_measured_from_the_occurrence(engine, capsys):
    engine.push.set_status(engine.subscription.endpoint_id, 500, 201)
    schedule(engine, userMessage="retry")
    capsys.readouterr()
    due(engine)
    engine.harness.tick_and_drain()
    assert latencies(capsys) == []  # nothing pushed: no latency yet
    due(engine, 61_000 + 120_000)  # the back-off's end
    engine.harness.tick_and_drain()
    assert [p["message"] for p in engine.push.payloads()] == ["retry"]
    assert latencies(capsys) == [121_000.0]  # the user waited for the retry: that is lateness


def test_a_quiet_hours_deferral_is_not_lateness(engine, capsys):
    assert engine.api.put_delivery_policy(NIGHT).status == 200
    schedule(engine, userMessage="morning")  # due 00:01 UTC, inside 23:00-07:00
    due(engine)
    engine.harness.tick_and_drain()
    assert engine.push.payloads() == []
    capsys.readouterr()
    engine.ctx.clock.current_ms = T0_MS + 7 * HOUR + 30_000  # the window ended 30 s ago
    engine.harness.tick_and_drain()
    assert [p["message"] for p in engine.push.payloads()] == ["morning"]
    assert latencies(capsys) == [30_000.0]  # from the deferral's end, not the 7 h from the occurrence
    assert alarm_sees(30_000)[1] is False


def test_a_deferred_occurrence_that_fails_and_is_retried_counts_from_the_deferral_end(engine, capsys):
    """The occurrence's eligible time (the end of the quiet hours) survives its retries: only the failed push
    and the back-off are lateness, not the seven hours the user asked for."""
    assert engine.api.put_delivery_policy(NIGHT).status == 200
    schedule(engine, userMessage="morning")  # due 00:01 UTC, inside 23:00-07:00
    due(engine)
    engine.harness.tick_and_drain()
    assert engine.push.payloads() == []
    engine.push.set_status(engine.subscription.endpoint_id, 500, 201)
    engine.ctx.clock.current_ms = T0_MS + 7 * HOUR + 30_000  # the window ended 30 s ago
    engine.harness.tick_and_drain()  # the push fails: a retry after the back-off
    capsys.readouterr()
    engine.ctx.clock.current_ms = T0_MS + 7 * HOUR + 30_000 + 120_000
    engine.harness.tick_and_drain()
    assert [p["message"] for p in engine.push.payloads()] == ["morning"]
    assert latencies(capsys) == [150_000.0]  # 30 s late, then the 120 s back-off: lateness the user waited for


def test_an_agentic_delivery_emits_it_too(engine, capsys):
    settings = engine.ctx.settings
    engine.ctx.settings = type(settings)(**{**settings.__dict__, "hooks_module": "tests.support.hooks_agentic"})
    hooks_agentic.reset()
    try:

        def output(ctx):  # type: ignore[no-untyped-def]
            return {
                "decision": "finish",
                "push_payloads": [{"messageKind": "content", "message": "agentic", "title": ctx.contact_name}],
            }

        SCRIPT.before = lambda ctx: {"messages": [{"role": "user", "content": "hi"}]}  # handled by the host
        SCRIPT.output = output
        engine.llm.reply_content("ignored")
        schedule_ai(engine, KEY)
        capsys.readouterr()
        due(engine, 61_000 + 10_000)
        engine.harness.tick_and_drain()
        assert [p["message"] for p in engine.push.payloads()] == ["agentic"]
        assert latencies(capsys) == [11_000.0]
    finally:
        hooks_agentic.reset()


@pytest.mark.parametrize(
    ("occurrence", "deferred_until", "delivered", "expected"),
    [
        (FIRST_MS, None, FIRST_MS + 5_000, 5_000),
        (FIRST_MS, FIRST_MS + HOUR, FIRST_MS + HOUR + 2_000, 2_000),  # a policy deferral restarts the clock
        (FIRST_MS, None, FIRST_MS - 1_000, 0),  # a clock a little behind never reports a negative latency
        (None, None, FIRST_MS, None),
    ],
)
def test_latency_rule(occurrence, deferred_until, delivered, expected):
    assert delivery_latency_ms(occurrence, deferred_until, delivered) == expected
