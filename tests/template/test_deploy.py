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
    base = {k: v for k, v in os.environ.items() if k not in ("VAPID_EMAIL", "REGION", "CLIENT_TOKEN_PARAM")}
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
