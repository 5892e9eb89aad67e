"""Shared fixtures. Nothing here talks to real AWS: dummy credentials, moto in process, or local servers."""

from __future__ import annotations

import gc
import os
import types
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_METRICS_NAMESPACE": "amsg-test",
        "POWERTOOLS_DEV": "false",
    }
)
for _name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS", "AWS_PROFILE"):
    os.environ.pop(_name, None)

# ---- Hypothesis: the full suite keeps its example counts; `make unit` runs at most FAST_EXAMPLES per property
# (the same properties, fewer random inputs: a developer's minute, while `make test` explores as before)
FAST_EXAMPLES = 25


def fast_tests() -> bool:
    """``AMSG_FAST_TESTS=1``: `make unit` (the fast path) is running."""
    return os.environ.get("AMSG_FAST_TESTS") == "1"


def examples(full: int) -> int:
    """A property's example count: ``full`` in the full suite, at most FAST_EXAMPLES under `make unit`. For a
    test that names its own ``max_examples`` (an explicit count overrides the profile below)."""
    return min(full, FAST_EXAMPLES) if fast_tests() else full


def _hypothesis_profiles() -> None:
    from hypothesis import settings

    settings.register_profile("full", settings.get_profile("default"))
    settings.register_profile("fast", max_examples=FAST_EXAMPLES)
    settings.load_profile("fast" if fast_tests() else "full")


_hypothesis_profiles()

# ---- the cyclic garbage collector: Python's default (a young collection every 700 new objects, a full one every
# 100 of those) made ~40 full collections of the test process's heap (moto's models, the parsed template and
# OpenAPI document, every collected test) per 500 handler tests, ~15 % of their CPU. Larger young generations
# and, after collection, the heap built so far moved out of the collector's sight (`gc.freeze`) keep garbage
# collection to ~5 % of it; nothing a test checks depends on when cycles are freed (tests that need it call
# gc.collect() themselves).
gc.set_threshold(50_000, 20, 100)


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.freeze()  # the imported modules and the collected tests live for the whole session


MASTER_KEY = "a" * 64
TABLE = "amsg-test"
# 2030-01-01T00:00:00.000Z minus one day: schedules "in the future" relative to the fixed clock
T0_MS = 1_893_369_600_000


def base_env(**overrides: str) -> dict[str, str]:
    env = {
        "AMSG_TABLE_NAME": TABLE,
        "AMSG_MASTER_KEY": MASTER_KEY,
        "AMSG_VAPID_PUBLIC_KEY": "BPublicKeyForTests",
        "AMSG_VAPID_EMAIL": "ops@example.test",
        "AMSG_VAPID_PRIVATE_KEY": "private-key-for-tests",
    }
    env.update(overrides)
    return env


@pytest.fixture(scope="session", autouse=True)
def moto_applies_one_request_at_a_time() -> Iterator[None]:
    """moto's in-process backends are plain dicts: two threads inside its request handling at once can fail
    (16 threads of conditional updates and index queries raised a KeyError inside moto) or interleave a
    conditional write. DynamoDB applies each request atomically, so moto is made to as well; concurrency
    itself is proven on DynamoDB Local."""
    import threading

    from moto.core.botocore_stubber import BotocoreStubber

    original = BotocoreStubber.process_request
    lock = threading.RLock()

    def one_at_a_time(self, request):  # type: ignore[no-untyped-def]
        with lock:
            return original(self, request)

    BotocoreStubber.process_request = one_at_a_time  # type: ignore[method-assign]
    yield
    BotocoreStubber.process_request = original  # type: ignore[method-assign]


@pytest.fixture(scope="session", autouse=True)
def botocore_sessions_share_one_loader() -> Iterator[None]:
    """Every boto3 session in a process reads the same service models, endpoints and paginators from disk;
    the adapters make a session per table and each test a new table, so each test parsed those JSON files
    again. One loader for every session in the test process, as boto3's default session already shares one
    between its clients; the loaded documents are only read."""
    import botocore.loaders
    import botocore.session

    shared = botocore.loaders.create_loader()
    original = botocore.session.Session._register_data_loader

    def register(self):  # type: ignore[no-untyped-def]
        self._components.lazy_register_component("data_loader", lambda: shared)

    botocore.session.Session._register_data_loader = register  # type: ignore[method-assign]
    yield
    botocore.session.Session._register_data_loader = original  # type: ignore[method-assign]


@pytest.fixture(scope="session", autouse=True)
def httpx_clients_share_one_tls_context() -> Iterator[None]:
    """Every httpx client (the Web Push sender, the LLM client, a test's own) builds a TLS context and loads
    certifi's CA bundle into it, ~10-20 ms of CPU each, though the tests only speak plain HTTP to loopback
    services. The default context (verify on, no client certificate) is built once per process and shared, as
    one client shares it between its connections; a test asking for anything else gets its own."""
    from httpx._transports import default

    original = default.create_ssl_context
    shared: dict[tuple[str | None, ...], Any] = {}

    def create_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        if verify is not True or cert is not None:
            return original(verify=verify, cert=cert, trust_env=trust_env)
        # with trust_env the bundle named by SSL_CERT_FILE / SSL_CERT_DIR, as httpx reads them, is the key
        key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")) if trust_env else ("",)
        if key not in shared:
            shared[key] = original(verify=verify, cert=cert, trust_env=trust_env)
        return shared[key]

    default.create_ssl_context = create_ssl_context  # type: ignore[assignment]
    yield
    default.create_ssl_context = original  # type: ignore[assignment]


@pytest.fixture(scope="session", autouse=True)
def table_sessions_share_one_loader() -> Iterator[None]:
    """The table adapter builds its DynamoDB client from a session with a loader of its own (one service, no
    directory scan: amsg/adapters/dynamo/session.py), so the shared loader above did not reach it and every
    test's context parsed the DynamoDB model and endpoint rules again (~0.1 s of CPU per moto test). One such
    loader per data path for the test process; the loaded documents are only read."""
    from amsg.adapters.dynamo import session

    original = session.OneServiceLoader
    loaders: dict[tuple[str, ...], Any] = {}

    def shared(extra_search_paths: list[str] | None = None) -> Any:
        key = tuple(extra_search_paths or ())
        if key not in loaders:
            loaders[key] = original(extra_search_paths=list(key))
        return loaders[key]

    session.OneServiceLoader = shared  # type: ignore[assignment,misc]
    yield
    session.OneServiceLoader = original  # type: ignore[misc]


@pytest.fixture(scope="session", autouse=True)
def moto_runs_as_in_the_local_stack() -> None:
    """The in-process moto of the handler tests gets the two process-wide changes the local stack makes
    (tools/amsg_local/embedded.py): a transaction's rollback copy is the items it touches, not a deep copy of
    every table, and moto's models stop recording every instance they create (a list only its dashboard
    reads). Transactions keep moto's own checks and all-or-nothing outcome (tests/unit/test_local_moto_memory.py)."""
    from amsg_local.embedded import install_fast_transactions, stop_instance_tracking

    install_fast_transactions()
    stop_instance_tracking()


@pytest.fixture(scope="session", autouse=True)
def moto_kms_symmetric_keys_skip_rsa() -> Iterator[None]:
    """moto gives every KMS key an RSA-2048 private key, used only by the asymmetric operations (Sign,
    GetPublicKey); for a symmetric key (the stack's, each multi-tenant test makes one) that generation was
    ~40 ms of CPU. A symmetric key gets one shared, never-used key instead; other specs are generated as before."""
    from moto.kms import models

    original = models.generate_private_key
    shared: list[Any] = []

    def private_key(key_spec: str) -> Any:
        if key_spec not in ("SYMMETRIC_DEFAULT", "", None):
            return original(key_spec)
        if not shared:
            shared.append(original(key_spec))
        return shared[0]

    models.generate_private_key = private_key  # type: ignore[assignment]
    yield
    models.generate_private_key = original


_session_cache: dict[str, Any] = {}


def parsed_template() -> dict[str, Any]:
    """template.yaml parsed once per session (a parse costs ~0.1 s of CPU and two were made per test); a deep
    copy, so no test can change another's."""
    import copy

    return copy.deepcopy(shared_template())


def shared_template() -> dict[str, Any]:
    """The session's parsed template itself, for the fixtures here that only read it (the table and queue
    builders take a ``Mapping``): deep-copying it twice per moto test cost ~35 ms of CPU."""
    if "template" not in _session_cache:
        from amsg_local.template import load_template

        _session_cache["template"] = load_template()
    return _session_cache["template"]


def moto_client(service: str) -> Any:
    """One boto3 client per service for the session: moto intercepts a client whenever a mock is active, and
    building one costs ~0.07 s of CPU."""
    if service not in _session_cache:
        import boto3

        _session_cache[service] = boto3.client(service, region_name="us-east-1")
    return _session_cache[service]


def moto_table_resource(name: str = TABLE) -> Any:
    """A boto3 ``Table`` for reading or writing items directly in a moto test, from one DynamoDB resource for the
    session: moto starts each mock with a fresh default session, so ``boto3.resource`` built a session and loaded
    the resource model again (~55 ms of CPU per test that looked at its items)."""
    if "dynamodb-resource" not in _session_cache:
        import boto3

        _session_cache["dynamodb-resource"] = boto3.resource("dynamodb", region_name="us-east-1")
    return _session_cache["dynamodb-resource"].Table(name)


@pytest.fixture
def moto_table() -> Iterator[str]:
    """A table built from template.yaml inside moto's in-process mock: the template's keys, indexes and TTL
    setting, as ``create_tables_from_template`` makes them (tests/unit/test_local_tables_moto.py), without its
    waits: moto creates a table ACTIVE, so the describe calls that wait for it (~3.6 ms of CPU per test) go."""
    from amsg_local.template import table_definition, table_ttl_attribute
    from moto import mock_aws

    template = shared_template()
    client = moto_client("dynamodb")
    with mock_aws():
        client.create_table(TableName=TABLE, **table_definition(template))
        ttl = table_ttl_attribute(template)
        if ttl:
            client.update_time_to_live(TableName=TABLE, TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl})
        yield TABLE


@pytest.fixture
def make_context(moto_table: str):
    """Build and install an AppContext from env values (as Lambda would), with a hand-driven clock."""
    from amsg import runtime
    from amsg.clock import FixedClock

    def build(**env_overrides: str):
        # moto 5.2 runs no conditional PartiQL (its BatchExecuteStatement ignores conditions): the table's single
        # writes go one UpdateItem / DeleteItem each here; DynamoDB Local runs both forms (tests/ddb_local)
        env_overrides.setdefault("AMSG_DYNAMO_STATEMENTS", "off")
        ctx = runtime.build_context(base_env(**env_overrides))
        ctx.clock = FixedClock(T0_MS)
        runtime.use(ctx)
        return ctx

    yield build
    runtime.use(None)


def on_fakes(node: pytest.Item) -> bool:
    """Whether the ``ctx`` of this test is the in-memory fakes: a ``memory_store`` test (not ``dynamo_store``)
    under `make unit`. The full suite runs the same test on moto, so every handler test still goes through the
    DynamoDB adapter there; the fakes themselves are held to the adapter by tests/contract."""
    marked = node.get_closest_marker("memory_store") and not node.get_closest_marker("dynamo_store")
    return bool(marked) and fast_tests()


@pytest.fixture
def ctx(request: pytest.FixtureRequest):
    """The default context: on moto, or on the in-memory fakes under `make unit` in a test marked
    ``memory_store`` (a module moves onto them with ``pytestmark``; a test that needs the table there is marked
    ``dynamo_store``)."""
    if on_fakes(request.node):
        return request.getfixturevalue("memory_ctx")
    return request.getfixturevalue("make_context")()


@pytest.fixture
def memory_ctx():
    """The context of ``make_context`` on in-memory stores (tests/support/fakes): no moto, no table; a port
    without a fake raises ``NotFaked``."""
    from amsg import runtime

    from tests.support.fakes import memory_context

    context = memory_context(base_env(), T0_MS)
    runtime.use(context)
    yield context
    runtime.use(None)


@pytest.fixture
def api(ctx):
    """A wire client (independent implementation) driving the real handlers in process."""
    from tests.support.inprocess import InProcessApi
    from tests.support.wire_client import WireClient

    client = WireClient(InProcessApi(), user_id=str(uuid.uuid4()))
    client.init()
    return client


@pytest.fixture
def engine(request: pytest.FixtureRequest):
    """Context wired for delivery: real VAPID keys, a loopback fake push service, a fake LLM, the SQS queue
    built from the template, no pacing sleeps. Yields a namespace with everything a test needs. On the fakes
    (see :func:`on_fakes`) the stores are in memory and the queue is the local stack's SQS model."""
    if on_fakes(request.node):
        yield from _memory_engine()
    else:
        request.getfixturevalue("moto_table")
        yield from _moto_engine(request.getfixturevalue("make_context"))


def _vapid_env(public: str, private: str, queue_url: str) -> dict[str, str]:
    return {
        "AMSG_QUEUE_URL": queue_url,
        "AMSG_VAPID_PUBLIC_KEY": public,
        "AMSG_VAPID_PRIVATE_KEY": private,
        "AMSG_PUSH_PACING_MS": "0",
    }


def _memory_engine() -> Iterator[Any]:
    from amsg import runtime
    from amsg.adapters.sqs_queue import SqsTaskQueue
    from amsg.vapid import generate_vapid_keys
    from amsg_local.sqs_model import LocalSqs, LocalSqsClient

    from tests.support.engine_harness import EngineHarness
    from tests.support.fakes import memory_context

    public, private = generate_vapid_keys()
    sqs = LocalSqsClient(LocalSqs())
    queue_url = sqs.create_queue(QueueName="amsg-test-tasks")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    task_queue = SqsTaskQueue(queue_url)
    task_queue._client = sqs
    ctx = memory_context(base_env(**_vapid_env(public, private, queue_url)), T0_MS, queue=task_queue)
    runtime.use(ctx)
    try:
        queue = types.SimpleNamespace(url=queue_url, arn=arn)
        yield from _engine_namespace(ctx, public, queue, EngineHarness(queue_url, arn, sqs))
    finally:
        runtime.use(None)


def _moto_engine(make_context: Any) -> Iterator[Any]:
    from amsg.vapid import generate_vapid_keys
    from amsg_local.tables import create_queue_from_template

    from tests.support.engine_harness import EngineHarness

    public, private = generate_vapid_keys()
    queue = create_queue_from_template(moto_client("sqs"), shared_template(), "amsg-test-tasks")
    ctx = make_context(**_vapid_env(public, private, queue.url))
    yield from _engine_namespace(ctx, public, queue, EngineHarness(queue.url, queue.arn, moto_client("sqs")))


def _engine_namespace(ctx: Any, public: str, queue: Any, harness: Any) -> Iterator[Any]:
    from tests.support.fake_llm import FakeLlmServer
    from tests.support.fake_push import FakePushService
    from tests.support.inprocess import InProcessApi
    from tests.support.wire_client import WireClient

    # the engine's waits (the instant path's back-off between attempts) are recorded, not slept: the clock is
    # fixed, so a real sleep moved nothing a test reads and only held a worker (3 s per failing instant task)
    sleeps: list[float] = []
    ctx.delivery.sleep = sleeps.append
    with FakePushService(vapid_public_key=public) as push, FakeLlmServer() as llm:
        client = WireClient(InProcessApi(), user_id=str(uuid.uuid4()))
        client.init()
        subscription = push.subscribe()
        assert client.put_subscription(subscription.to_json()).status == 200
        yield types.SimpleNamespace(
            ctx=ctx,
            api=client,
            push=push,
            llm=llm,
            subscription=subscription,
            harness=harness,
            queue=queue,
            sleeps=sleeps,
        )


# ---- the fast path (`make unit`) --------------------------------------------------------------------------

DIRECTORY_MARKS = {"ddb_local": "ddb_local", "e2e": "e2e"}
# a test that uses one of these fixtures needs DynamoDB Local, whatever its directory
DDB_LOCAL_FIXTURES = {"ddb_local_server", "ddb_local_endpoint", "ddb_local_client", "ddb_local_table"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks by where a test lives and what it uses, so `-m "not ddb_local and not e2e and not slow"` is the
    honest fast path without every module having to remember its marks."""
    tests_dir = os.path.dirname(__file__)
    for item in items:
        parts = os.path.relpath(str(item.path), tests_dir).split(os.sep)
        mark = DIRECTORY_MARKS.get(parts[0]) if len(parts) > 1 else None
        if mark and not item.get_closest_marker(mark):
            item.add_marker(mark)
        if DDB_LOCAL_FIXTURES & set(getattr(item, "fixturenames", ())) and not item.get_closest_marker("ddb_local"):
            item.add_marker("ddb_local")
        # under `make test` (xdist --dist loadgroup) the DynamoDB Local tests share one worker and so one JVM,
        # and the end-to-end modules share one worker and its stacks; everything else spreads over the rest
        for group in ("ddb_local", "e2e"):
            if item.get_closest_marker(group) and not item.get_closest_marker("xdist_group"):
                item.add_marker(pytest.mark.xdist_group(group))
                break
    if getattr(config.option, "loadgroup", False):  # set in each xdist worker under --dist loadgroup
        _name_xdist_groups(items)


def _name_xdist_groups(items: list[pytest.Item]) -> None:
    """pytest-xdist sends a group to one worker by the ``@group`` suffix it appends to each test's node id, but
    it writes ``item._nodeid``, which pytest 9 no longer reads (the id is ``item._id``): without this every
    group was silently spread over the workers (two DynamoDB Local JVMs, stacks and journeys built twice)."""
    from _pytest.nodeid import NodeId

    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is None or "@" in item.nodeid:
            continue  # no group, or a pytest whose ids xdist still sets itself
        name = mark.args[0] if mark.args else mark.kwargs.get("name", "default")
        item._id = NodeId.parse(f"{item.nodeid}@{name}")  # type: ignore[attr-defined]


@pytest.fixture(scope="session", autouse=True)
def fast_path_guard() -> Iterator[None]:
    """With ``AMSG_FAST_TESTS=1`` (`make unit`) starting a subprocess, DynamoDB Local or the local stack fails
    the test: the fast path stays what it claims to be, and such a test must be marked ``slow``."""
    if os.environ.get("AMSG_FAST_TESTS") != "1":
        yield
        return
    import subprocess

    from amsg_local import cli, dynamodb_local, stack

    def refuse(what: str):  # type: ignore[no-untyped-def]
        def refused(*args, **kwargs):  # type: ignore[no-untyped-def]
            raise AssertionError(f"`make unit` runs no {what}: mark this test `slow`")

        return refused

    patches = [
        (subprocess.Popen, "__init__", refuse("subprocess")),
        (cli, "start_local_stack", refuse("local stack")),
        (stack, "start_local_stack", refuse("local stack")),
        (dynamodb_local, "start_dynamodb_local", refuse("DynamoDB Local")),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, replacement in patches:
        setattr(owner, name, replacement)
    yield
    for owner, name, original in saved:
        setattr(owner, name, original)
