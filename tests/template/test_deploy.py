"""The deploy recipe: scripts/deploy never runs `sam deploy --guided` (one "no authentication" prompt per
route), saves its answers for plain `sam deploy`, and the `sam local invoke` env-vars sample only sets
variables the template declares (SAM ignores any other)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.support.template import REPO_ROOT, project_template

pytestmark = pytest.mark.slow  # runs scripts/deploy


def _deploy(**env: str) -> subprocess.CompletedProcess[str]:
    unset = ("VAPID_EMAIL", "REGION", "CLIENT_TOKEN_PARAM", "STACK", "CONFIG_ENV", "SNAP_START", "MASTER_KEY_PARAM")
    base = {k: v for k, v in os.environ.items() if k not in unset and k != "VAPID_PRIVATE_KEY_PARAM"}
    return subprocess.run(
        [str(REPO_ROOT / "scripts" / "deploy")],
        env={**base, "DRY_RUN": "1", "SAM": "/bin/true", **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_deploy_saves_its_answers_and_never_asks():
    result = _deploy(
        VAPID_EMAIL="ops@example.com",
        REGION="eu-west-1",
        VAPID_PUBLIC_KEY="BPublic",
        ALLOW_ORIGINS="https://app.example.com",
        CLIENT_TOKEN_PARAM="/amsg/client-token",
        ALARM_TOPIC_ARN="arn:aws:sns:eu-west-1:123456789012:ops",
    )
    assert result.returncode == 0, result.stderr
    build, deploy = result.stdout.strip().splitlines()
    assert build.split() == ["/bin/true", "build", "--region", "eu-west-1"]
    assert "--guided" not in deploy
    args = deploy.split()
    assert args[:2] == ["/bin/true", "deploy"]
    assert {"--save-params", "--no-confirm-changeset", "--resolve-s3"} <= set(args)
    assert args[args.index("--stack-name") + 1] == "amsg" and args[args.index("--config-env") + 1] == "default"
    overrides = args[args.index("--parameter-overrides") + 1 : args.index("--save-params")]
    assert overrides == [
        "VapidPublicKey=BPublic",
        "VapidEmail=ops@example.com",
        "AllowOrigins=https://app.example.com",
        "ClientTokenParameterName=/amsg/client-token",
        "AlarmTopicArn=arn:aws:sns:eu-west-1:123456789012:ops",
    ]
    parameters = project_template()["Parameters"]
    assert {o.split("=", 1)[0] for o in overrides} <= set(parameters)


def test_deploy_needs_a_vapid_contact_and_a_region():
    result = _deploy(REGION="eu-west-1", VAPID_PUBLIC_KEY="BPublic")
    assert result.returncode != 0 and "VAPID_EMAIL" in result.stderr


def test_env_vars_sample_only_sets_declared_variables():
    sample = json.loads((REPO_ROOT / "env-vars.sample.json").read_text())
    declared = set(project_template()["Globals"]["Function"]["Environment"]["Variables"])
    assert set(sample) == {"Parameters"}
    assert set(sample["Parameters"]) <= declared


def test_a_second_stack_saves_its_answers_apart_and_can_name_its_secrets():
    result = _deploy(
        VAPID_EMAIL="ops@example.com",
        REGION="eu-west-1",
        VAPID_PUBLIC_KEY="BPublic",
        STACK="amsg-staging",
        SNAP_START="PublishedVersions",
        MASTER_KEY_PARAM="/staging/mk",
        VAPID_PRIVATE_KEY_PARAM="/staging/vapid",
    )
    assert result.returncode == 0, result.stderr
    args = result.stdout.strip().splitlines()[1].split()
    assert args[args.index("--stack-name") + 1] == "amsg-staging"
    assert args[args.index("--config-env") + 1] == "amsg-staging"  # never the first stack's saved answers
    overrides = args[args.index("--parameter-overrides") + 1 : args.index("--save-params")]
    assert overrides[-3:] == [
        "SnapStart=PublishedVersions",
        "MasterKeyParameterName=/staging/mk",
        "VapidPrivateKeyParameterName=/staging/vapid",
    ]
    assert {o.split("=", 1)[0] for o in overrides} <= set(project_template()["Parameters"])


def test_without_given_names_the_template_decides_them():
    result = _deploy(VAPID_EMAIL="ops@example.com", REGION="eu-west-1", VAPID_PUBLIC_KEY="BPublic", STACK="b")
    assert result.returncode == 0, result.stderr
    assert "ParameterName=" not in result.stdout  # a new stack derives /amsg/b/...; an existing one keeps its own
