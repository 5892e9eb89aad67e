"""Secrets come from SSM through Powertools Parameters with a max age: nothing is read before a request asks,
a value is cached for the max age, and a rotated value is picked up afterwards without a new deployment."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from tests.conftest import TABLE
from tests.support.aws_calls import record_aws_calls


@pytest.fixture
def ssm():
    with mock_aws():
        client = boto3.client("ssm", region_name="us-east-1")
        client.put_parameter(Name="/t/master", Value="a" * 64, Type="SecureString")
        client.put_parameter(Name="/t/token", Value="token-1", Type="SecureString")
        client.put_parameter(Name="/t/vapid", Value="private-1", Type="SecureString")
        yield client


def _env(**extra: str) -> dict[str, str]:
    return {
        "AMSG_TABLE_NAME": TABLE,
        "AMSG_MASTER_KEY_PARAM": "/t/master",
        "AMSG_CLIENT_TOKEN_PARAM": "/t/token",
        "AMSG_VAPID_PRIVATE_KEY_PARAM": "/t/vapid",
        **extra,
    }


def test_building_the_context_reads_no_secret(ssm):
    from amsg import runtime

    with record_aws_calls() as rec:
        ctx = runtime.build_context(_env())
        assert rec.calls == []
        assert ctx.secrets.client_token == "token-1"
    assert [c.operation for c in rec.calls] == ["GetParameter"]
    assert rec.calls[0].params == {"Name": "/t/token", "WithDecryption": True}


def test_a_value_is_cached_for_the_max_age(ssm):
    from amsg import runtime

    ctx = runtime.build_context(_env())
    assert ctx.secrets.client_token == "token-1"
    ssm.put_parameter(Name="/t/token", Value="token-2", Type="SecureString", Overwrite=True)
    with record_aws_calls() as rec:
        assert ctx.secrets.client_token == "token-1"  # within the default 300 s
    assert rec.calls == []


def test_a_rotated_value_is_picked_up_after_the_max_age(ssm):
    from amsg import runtime

    ctx = runtime.build_context(_env(AMSG_SECRETS_MAX_AGE_S="0"))  # 0: every access is past the max age
    assert ctx.secrets.client_token == "token-1"
    assert ctx.secrets.vapid_private_key == "private-1"
    ssm.put_parameter(Name="/t/token", Value="token-2", Type="SecureString", Overwrite=True)
    ssm.put_parameter(Name="/t/vapid", Value="private-2", Type="SecureString", Overwrite=True)
    assert ctx.secrets.client_token == "token-2"
    assert ctx.secrets.vapid_private_key == "private-2"


def test_the_push_sender_follows_a_rotated_vapid_key(ssm):
    from amsg import runtime
    from amsg.vapid import generate_vapid_keys

    public1, private1 = generate_vapid_keys()
    public2, private2 = generate_vapid_keys()
    ssm.put_parameter(Name="/t/vapid", Value=private1, Type="SecureString", Overwrite=True)
    env = _env(AMSG_SECRETS_MAX_AGE_S="0", AMSG_VAPID_PUBLIC_KEY=public1, AMSG_VAPID_EMAIL="ops@example.test")
    ctx = runtime.build_context(env)
    first = ctx.delivery.push_sender
    assert first is not None and ctx.delivery.push_sender is first  # same key: same sender
    ssm.put_parameter(Name="/t/vapid", Value=private2, Type="SecureString", Overwrite=True)
    # the new private key no longer matches the deployed public key: delivery pauses (nothing is claimed)
    # instead of signing with a key the push services do not expect
    assert ctx.delivery.push_sender is None
    ctx = runtime.build_context({**env, "AMSG_VAPID_PUBLIC_KEY": public2})
    assert ctx.delivery.push_sender is not None


def test_a_missing_parameter_is_a_config_error_naming_the_parameter_only(ssm):
    from amsg import runtime
    from amsg.config import ConfigError

    ctx = runtime.build_context(_env(AMSG_MASTER_KEY_PARAM="/t/absent"))
    with pytest.raises(ConfigError) as info:
        _ = ctx.secrets.master_key
    assert str(info.value) == "cannot read SSM parameter /t/absent: ParameterNotFound"
