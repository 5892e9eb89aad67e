"""SnapStart hooks, driven through the real handlers: the handler bootstrap registers them (only in a SnapStart
init), the before-snapshot hook keeps what init built out of the image, and the after-restore hook gives a
restored sandbox its own random state, clients and secret cache (docs/operations.md)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import types
import uuid
from pathlib import Path

import boto3
import pytest

from tests.conftest import MASTER_KEY, TABLE
from tests.support.aws_calls import record_aws_calls
from tests.support.inprocess import InProcessApi

ROOT = Path(__file__).resolve().parents[2]


class FakeRuntime(types.SimpleNamespace):
    """Stands in for Lambda's ``snapshot_restore_py``: records what was registered."""

    def __init__(self) -> None:
        super().__init__(before=[], after=[])

    def register_before_snapshot(self, func):  # type: ignore[no-untyped-def]
        self.before.append(func)
        return func

    def register_after_restore(self, func):  # type: ignore[no-untyped-def]
        self.after.append(func)
        return func


@pytest.fixture
def snapstart(monkeypatch):
    from amsg import snapstart as module

    monkeypatch.setattr(module, "_installed", [])
    return module


@pytest.fixture
def deployed(moto_table, monkeypatch):
    """The process environment of a deployed API function whose client token lives in SSM; no context yet."""
    from amsg import runtime

    ssm = boto3.client("ssm", region_name="us-east-1")
    ssm.put_parameter(Name="/amsg/test/client-token", Value="token-1", Type="SecureString")
    env = {
        "AMSG_TABLE_NAME": TABLE,
        "AMSG_MASTER_KEY": MASTER_KEY,
        "AMSG_CLIENT_TOKEN_PARAM": "/amsg/test/client-token",
        "POWERTOOLS_METRICS_DISABLED": "true",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    runtime.use(None)
    yield ssm
    runtime.use(None)


def _capabilities(token: str) -> int:
    status, _, _ = InProcessApi()(
        "GET", "/capabilities", {"X-Client-Token": token, "X-User-Id": str(uuid.uuid4())}, None
    )
    return status


def test_the_hooks_are_registered_only_in_a_snapstart_init(snapstart):
    assert snapstart.install({}) is False  # an ordinary cold start (or local run): nothing imported
    assert snapstart.install({"AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand"}) is False
    fake = FakeRuntime()
    assert snapstart.install({"AWS_LAMBDA_INITIALIZATION_TYPE": "snap-start"}, runtime_module=fake) is True
    assert fake.before == [snapstart.before_snapshot] and fake.after == [snapstart.after_restore]
    assert snapstart.install({"AWS_LAMBDA_INITIALIZATION_TYPE": "snap-start"}, runtime_module=fake) is True
    assert len(fake.after) == 1  # once per process


@pytest.mark.parametrize("function", ["tick", "run_task", "capabilities"])
@pytest.mark.slow  # a subprocess
def test_importing_a_handler_in_a_snapstart_init_registers_both_hooks(tmp_path, function):
    """The handler bootstrap as Lambda runs it: a fresh interpreter imports the handler file with the runtime's
    module on the path and AWS_LAMBDA_INITIALIZATION_TYPE=snap-start."""
    (tmp_path / "snapshot_restore_py.py").write_text(
        textwrap.dedent(
            """
            registered = {"before": [], "after": []}
            def register_before_snapshot(func, *args, **kwargs):
                registered["before"].append(func.__module__ + "." + func.__name__)
                return func
            def register_after_restore(func, *args, **kwargs):
                registered["after"].append(func.__module__ + "." + func.__name__)
                return func
            """
        )
    )
    handler = ROOT / "functions" / function / f"{function}_handler.py"
    probe = textwrap.dedent(
        f"""
        import importlib.util, json
        spec = importlib.util.spec_from_file_location("h", {str(handler)!r})
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
        import snapshot_restore_py
        print(json.dumps(snapshot_restore_py.registered))
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "layers" / "shared"), str(tmp_path)]),
        "AWS_LAMBDA_INITIALIZATION_TYPE": "snap-start",
    }
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stderr
    registered = json.loads(result.stdout.strip().splitlines()[-1])
    assert registered == {"before": ["amsg.snapstart.before_snapshot"], "after": ["amsg.snapstart.after_restore"]}


def test_before_snapshot_keeps_the_init_context_out_of_the_image(deployed, snapstart):
    from amsg import runtime

    assert _capabilities("token-1") == 200  # a request during init (priming) builds the context
    primed = runtime.app_context()
    snapstart.before_snapshot()
    assert runtime._current is None  # no session, client or cached secret goes into the snapshot
    with record_aws_calls() as calls:
        assert _capabilities("token-1") == 200
    assert runtime.app_context() is not primed
    assert [c.operation for c in calls.calls] == ["GetParameter"]  # the restored sandbox reads it afresh


def test_after_restore_gives_the_sandbox_its_own_secrets_and_clients(deployed, snapstart):
    from amsg import runtime

    assert _capabilities("token-1") == 200
    before = runtime.app_context()
    deployed.put_parameter(Name="/amsg/test/client-token", Value="token-2", Type="SecureString", Overwrite=True)
    assert _capabilities("token-1") == 200  # cached for its max age, measured on the snapshot's clock
    snapstart.after_restore()
    assert _capabilities("token-1") != 200
    assert _capabilities("token-2") == 200
    after = runtime.app_context()
    assert after is not before and after.tasks is not before.tasks  # new table sessions, new credentials


def test_after_restore_reseeds_random(snapstart):
    random.seed(1234)
    snapshot_draw = random.random()  # what every sandbox restored from one image would draw next
    random.seed(1234)
    snapstart.after_restore()
    assert random.random() != snapshot_draw


def test_a_failing_reset_does_not_stop_the_others(snapstart, monkeypatch):
    ran: list[str] = []
    monkeypatch.setattr(snapstart, "_resets", [])

    def broken() -> None:
        raise RuntimeError("boom")

    snapstart.on_reset(broken)
    snapstart.on_reset(lambda: ran.append("second"))
    snapstart.after_restore()
    assert ran == ["second"]
