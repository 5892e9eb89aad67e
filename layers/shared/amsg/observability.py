"""The one Logger and Metrics of the service (Powertools), and optional X-Ray tracing.

Tracing is off unless the stack is deployed with ``Tracing=Active`` (``AMSG_TRACING=true``): only then is the
Powertools Tracer built, on the first request, and the X-Ray SDK imported (a cold-start cost otherwise spent
for nothing). It patches boto3/botocore and httpx, so every DynamoDB, SSM, SQS and LLM call is a subsegment of
the function's trace; a Web Push POST is one through :func:`traced`.

The ``service`` (log field and metric dimension) is the stack's name (``POWERTOOLS_SERVICE_NAME``, set by
template.yaml), so two stacks in one account keep their metrics, dashboards and alarms apart; ``amsg`` when
unset (tests, the local stack).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.shared import constants

from amsg import jsonio, snapstart
from amsg.log_format import LeanFormatter

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME", "").strip() or "amsg"
# Powertools' lines, for less CPU each (amsg/log_format.py); built with the keys Logger gives its own formatter
_SAMPLING_RATE = os.environ.get(constants.LOGGER_LOG_SAMPLING_RATE)
logger = Logger(service=SERVICE, logger_formatter=LeanFormatter(service=SERVICE, sampling_rate=_SAMPLING_RATE))
metrics = Metrics(namespace="amsg", service=SERVICE)
# every handler imports this module at init: the one place that registers the SnapStart hooks (a no-op
# unless Lambda initialises this sandbox for a snapshot)
snapstart.install()

_tracer: list[Any] = []


def start_tracing(env: Mapping[str, str]) -> Any | None:
    """Build the Tracer once per sandbox when tracing is enabled; returns it (None when tracing is off)."""
    if env.get("AMSG_TRACING", "").strip().lower() != "true":
        return None
    if not _tracer:
        from aws_lambda_powertools import Tracer

        _tracer.append(Tracer(service=SERVICE, auto_patch=True, patch_modules=("boto3", "botocore", "httpx")))
    return _tracer[0]


@contextmanager
def traced(name: str) -> Iterator[None]:
    """A subsegment around a call that no patched library traces (the Web Push POST goes through
    ``http.client`` by hand, which X-Ray's patches do not see); nothing at all when tracing is off."""
    if not _tracer:
        yield
        return
    with _tracer[0].provider.in_subsegment(name):
        yield


# dimension set -> metric name -> (unit, values): what emit_metric collected in the open batch, if any
_Batch = dict[tuple[tuple[str, str], ...], dict[str, tuple[str, list[float]]]]
_batch: list[_Batch] = []
_batch_depth = [0]  # batches open in this process (a Lambda sandbox runs one; the local stack's threads may overlap)
_batch_lock = threading.Lock()  # a batch's records run on several threads


@contextmanager
def metric_batch() -> Iterator[None]:
    """Within it, :func:`emit_metric` collects, and at its end prints one EMF document per dimension set with
    every value (at most 100 per metric and document, EMF's limit): run_task's batch then prints a few
    documents instead of several per delivery, and CloudWatch still sees every value (its p99 over them is the
    fleet's). A batch cut short by the function's timeout loses its values, like the handler's metric set."""
    with _batch_lock:
        if not _batch_depth[0]:
            _batch[:] = [{}]
        _batch_depth[0] += 1
    try:
        yield
    finally:
        with _batch_lock:
            _batch_depth[0] -= 1
            collected = _batch.pop() if not _batch_depth[0] and _batch else {}
        _print_batch(collected)  # overlapping batches print together, when the last one ends


def _print_batch(collected: _Batch) -> None:
    from aws_lambda_powertools.metrics.base import MetricManager
    from aws_lambda_powertools.metrics.functions import is_metrics_disabled

    if not collected or is_metrics_disabled():
        return
    for dimensions, by_name in collected.items():
        document = MetricManager(namespace="amsg")
        for key, item in dimensions:
            document.add_dimension(name=key, value=item)
        for name, (unit, values) in by_name.items():
            for value in values:  # the manager prints a full document by itself at 100 values
                document.add_metric(name=name, unit=unit, value=value)
        if document.metric_set:
            print(jsonio.dumps(document.serialize_metric_set()))


def emit_metric(name: str, unit: str, value: float, **dimensions: str) -> None:
    """Print one EMF metric now, in the ``amsg`` namespace with the ``service`` dimension plus ``dimensions``
    (inside :func:`metric_batch`: at the batch's end, with the batch's other values).

    For metrics raised inside adapters, which also run in API functions that never flush ``metrics``.
    Dimensions must stay low-cardinality (a status class, an outcome), never a user, task or URL.
    """
    with _batch_lock:
        if _batch:
            dimension_set = (("service", SERVICE), *sorted(dimensions.items()))
            _batch[0].setdefault(dimension_set, {}).setdefault(name, (unit, []))[1].append(value)
            return
    from aws_lambda_powertools.metrics import MetricUnit, single_metric
    from aws_lambda_powertools.metrics.functions import is_metrics_disabled

    if is_metrics_disabled():  # POWERTOOLS_METRICS_DISABLED (the local stack): single_metric would print anyway
        return
    with single_metric(
        name=name, unit=MetricUnit(unit), value=value, namespace="amsg", default_dimensions={"service": SERVICE}
    ) as metric:
        for key, item in dimensions.items():
            metric.add_dimension(name=key, value=item)


def status_class(status: int | None) -> str:
    """``2xx``/``4xx``/``5xx`` for an HTTP status, ``network`` when the upstream never answered."""
    return f"{status // 100}xx" if isinstance(status, int) and 100 <= status < 600 else "network"


def delivery_latency_ms(occurrence_ms: int | None, deferred_until_ms: int | None, delivered_ms: int) -> int | None:
    """Due to pushed, in ms: from the occurrence, or from the end of a delivery-policy deferral (quiet hours,
    a full cap) when one moved it, since the user asked for that wait. Retries and a host hook's deferral
    count as lateness: the user waits for them. None when the task has no occurrence."""
    if not occurrence_ms:
        return None
    return max(0, delivered_ms - max(occurrence_ms, deferred_until_ms or occurrence_ms))


MAX_METRIC_TENANTS = 20  # tenants named in AMSG_METRICS_TENANTS; each is a metric per name (docs/operations.md)
OTHER_TENANTS = "other"


def tenant_dimension(tenant_id: str | None, named: frozenset[str]) -> str | None:
    """The ``Tenant`` dimension of a delivery metric: the tenant's id when the deployment names it, ``other``
    for every other tenant (bounded cardinality), None on the single line (no dimension)."""
    if tenant_id is None:
        return None
    return tenant_id if tenant_id in named else OTHER_TENANTS


def record_delivery_latency(
    occurrence_ms: int | None,
    deferred_until_ms: int | None,
    delivered_ms: int,
    pushed: int,
    *,
    tenant: str | None = None,
) -> None:
    """``DeliveryLatency`` for one scheduled delivery that pushed at least once (what DeliveryLatencyAlarm reads;
    docs/operations.md), and on the multi-tenant line the same value again under its ``Tenant`` dimension (see
    :func:`tenant_dimension`). Through :func:`emit_metric`: run_task prints a batch's values together, and
    ``amsg run-task``, which flushes no metric set, at once."""
    latency = delivery_latency_ms(occurrence_ms, deferred_until_ms, delivered_ms) if pushed else None
    if latency is not None:
        emit_metric("DeliveryLatency", "Milliseconds", latency)
        if tenant is not None:
            emit_metric("DeliveryLatency", "Milliseconds", latency, Tenant=tenant)
