"""``amsg bootstrap-secrets`` against moto's SSM: it creates what a new stack reads, never replaces the master
key, keeps what exists, rotates on request, and what it writes is what the runtime can use."""

from __future__ import annotations

import json
import re

import boto3
import pytest
from amsg_local.bootstrap_secrets import bootstrap
from amsg_local.cli import main
from moto import mock_aws


@pytest.fixture
def ssm():
    with mock_aws():
        yield boto3.client("ssm", region_name="us-east-1")


def _value(ssm, name: str) -> str:
    return ssm.get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"]


def test_a_new_stack_gets_a_master_key_and_a_vapid_pair(ssm):
    from amsg.vapid import public_key_from_private

    result = bootstrap(ssm)
    assert result.created == ["/amsg/amsg/master-key", "/amsg/amsg/vapid-private-key"]
    for name in result.created:
        assert ssm.get_parameter(Name=name)["Parameter"]["Type"] == "SecureString"
    assert re.fullmatch(r"[0-9a-f]{64}", _value(ssm, "/amsg/amsg/master-key"))
    assert public_key_from_private(_value(ssm, "/amsg/amsg/vapid-private-key")) == result.vapid_public_key
    assert result.parameter_overrides == {
        "VapidPublicKey": result.vapid_public_key,
        "MasterKeyParameterName": "/amsg/amsg/master-key",
        "VapidPrivateKeyParameterName": "/amsg/amsg/vapid-private-key",
    }
    assert result.client_token is None


def test_running_again_keeps_everything(ssm):
    first = bootstrap(ssm, client_token_param="/amsg/client-token")
    master, token = _value(ssm, "/amsg/amsg/master-key"), _value(ssm, "/amsg/client-token")
    again = bootstrap(ssm, client_token_param="/amsg/client-token")
    assert again.created == [] and again.rotated == []
    assert again.kept == ["/amsg/amsg/master-key", "/amsg/amsg/vapid-private-key", "/amsg/client-token"]
    assert again.vapid_public_key == first.vapid_public_key  # derived from the stored private key
    assert again.client_token is None  # an existing token is never printed again
    assert (_value(ssm, "/amsg/amsg/master-key"), _value(ssm, "/amsg/client-token")) == (master, token)


def test_rotation_replaces_vapid_and_token_but_never_the_master_key(ssm):
    first = bootstrap(ssm, client_token_param="/amsg/client-token")
    master = _value(ssm, "/amsg/amsg/master-key")
    rotated = bootstrap(ssm, client_token_param="/amsg/client-token", rotate=("vapid", "client-token"))
    assert rotated.rotated == ["/amsg/amsg/vapid-private-key", "/amsg/client-token"]
    assert rotated.vapid_public_key != first.vapid_public_key
    assert rotated.client_token and rotated.client_token != first.client_token
    assert _value(ssm, "/amsg/client-token") == rotated.client_token
    assert _value(ssm, "/amsg/amsg/master-key") == master


def test_what_it_writes_is_what_the_runtime_reads(ssm):
    from amsg import runtime

    result = bootstrap(ssm, client_token_param="/amsg/client-token")
    ctx = runtime.build_context(
        {
            "AMSG_TABLE_NAME": "t",
            "AMSG_MASTER_KEY_PARAM": "/amsg/amsg/master-key",
            "AMSG_VAPID_PRIVATE_KEY_PARAM": "/amsg/amsg/vapid-private-key",
            "AMSG_CLIENT_TOKEN_PARAM": "/amsg/client-token",
            "AMSG_VAPID_PUBLIC_KEY": result.vapid_public_key,
            "AMSG_VAPID_EMAIL": "ops@example.test",
        }
    )
    assert ctx.delivery.push_sender is not None  # the pair matches: pushes can be signed
    assert len(ctx.user_key("u1")) == 64
    assert ctx.secrets.client_token == result.client_token


def test_the_amsg_command_prints_the_public_key_and_the_overrides(ssm, capsys):
    assert main(["bootstrap-secrets", "--region", "us-east-1", "--client-token-param", "/x/token"]) == 0
    out = capsys.readouterr().out
    public = re.search(r"VAPID public key: (\S+)", out).group(1)
    assert f"sam deploy --parameter-overrides VapidPublicKey={public} " in out
    assert "ClientTokenParameterName=/x/token" in out
    assert _value(ssm, "/amsg/amsg/master-key") not in out  # the master key is never printed
    assert main(["bootstrap-secrets", "--region", "us-east-1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["vapidPublicKey"] == public and report["created"] == [] and "clientToken" not in report


def test_parameter_names_must_be_fully_qualified(ssm, capsys):
    assert main(["bootstrap-secrets", "--master-key-param", "amsg/master-key"]) == 2
    assert "must start with /" in capsys.readouterr().out


# ---- one stack's secrets, not another's ----------------------------------------------------------------------


def test_a_second_stack_gets_secrets_of_its_own(ssm, capsys):
    assert main(["bootstrap-secrets", "--region", "us-east-1", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["bootstrap-secrets", "--region", "us-east-1", "--stack", "amsg-staging", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["created"] == ["/amsg/amsg-staging/master-key", "/amsg/amsg-staging/vapid-private-key"]
    assert second["vapidPublicKey"] != first["vapidPublicKey"]
    assert _value(ssm, "/amsg/amsg-staging/master-key") != _value(ssm, "/amsg/amsg/master-key")


def test_an_existing_stack_keeps_the_names_it_was_deployed_with(ssm, capsys):
    """A stack deployed before names were per stack read /amsg/master-key: that is the key its data needs."""
    ssm.put_parameter(Name="/amsg/master-key", Value="b" * 64, Type="SecureString")
    template = {
        "Parameters": {
            "MasterKeyParameterName": {"Type": "String"},
            "VapidPrivateKeyParameterName": {"Type": "String"},
        },
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
    }
    boto3.client("cloudformation", region_name="us-east-1").create_stack(
        StackName="old",
        TemplateBody=json.dumps(template),
        Parameters=[
            {"ParameterKey": "MasterKeyParameterName", "ParameterValue": "/amsg/master-key"},
            {"ParameterKey": "VapidPrivateKeyParameterName", "ParameterValue": "/amsg/vapid-private-key"},
        ],
    )
    assert main(["bootstrap-secrets", "--region", "us-east-1", "--stack", "old", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kept"] == ["/amsg/master-key"] and report["created"] == ["/amsg/vapid-private-key"]
    assert _value(ssm, "/amsg/master-key") == "b" * 64
    given = ["--master-key-param", "/x/mk", "--vapid-private-key-param", "/x/vapid"]
    assert main(["bootstrap-secrets", "--region", "us-east-1", "--stack", "old", "--json", *given]) == 0
    assert json.loads(capsys.readouterr().out)["created"] == ["/x/mk", "/x/vapid"]  # given names win


@pytest.mark.parametrize("stack", ["amsg", "amsg-staging"])
def test_the_names_are_the_ones_the_template_derives_for_the_stack(stack):
    from amsg_local.bootstrap_secrets import stack_secret_names

    from tests.support.template import project_template
    from tests.template.test_stacks import resolve_in_stack

    tpl = project_template()
    env = resolve_in_stack(tpl["Globals"]["Function"]["Environment"]["Variables"], tpl, stack)
    assert stack_secret_names(stack) == (env["AMSG_MASTER_KEY_PARAM"], env["AMSG_VAPID_PRIVATE_KEY_PARAM"])


def test_the_multi_tenant_line_gets_its_signing_key_and_init_secret(ssm):
    from amsg.runtime import secrets_from_env
    from amsg_local.bootstrap_secrets import tenancy_secret_names

    names = tenancy_secret_names("amsg")
    first = bootstrap(ssm, tenancy_params=names)
    assert set(names) <= set(first.created)
    assert first.parameter_overrides["Tenancy"] == "multi"
    assert first.init_secret == _value(ssm, "/amsg/amsg/init-secret")
    signing = _value(ssm, "/amsg/amsg/tenant-token-signing-key")
    resolved = secrets_from_env({"AMSG_TENANT_TOKEN_SIGNING_KEY_PARAM": names[0], "AMSG_INIT_SECRET_PARAM": names[1]})
    assert resolved.tenant_token_signing_key == signing and resolved.init_secret == first.init_secret
    again = bootstrap(ssm, tenancy_params=names)
    assert set(names) <= set(again.kept) and again.init_secret is None
    rotated = bootstrap(ssm, tenancy_params=names, rotate=("signing-key",))
    assert rotated.rotated == [names[0]] and _value(ssm, names[0]) != signing
    assert rotated.init_secret is None  # the init secret was kept


def test_a_given_vapid_pair_is_stored_instead_of_a_generated_one(ssm, capsys, monkeypatch):
    """Moving in: the reference's pair, so the subscriptions its users made keep accepting our pushes."""
    from amsg.vapid import generate_vapid_keys

    public, private = generate_vapid_keys()
    monkeypatch.setenv("REF_VAPID_PRIVATE_KEY", f"  {private}\n")
    argv = ["bootstrap-secrets", "--region", "us-east-1", "--json", "--vapid-public-key", public]
    assert main([*argv, "--vapid-private-key-env", "REF_VAPID_PRIVATE_KEY"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["vapidPublicKey"] == public and "/amsg/amsg/vapid-private-key" in report["created"]
    assert _value(ssm, "/amsg/amsg/vapid-private-key") == private
    assert private not in json.dumps(report)  # the private key is never printed
    # again with the same pair: kept
    assert main([*argv, "--vapid-private-key-env", "REF_VAPID_PRIVATE_KEY"]) == 0
    assert "/amsg/amsg/vapid-private-key" in json.loads(capsys.readouterr().out)["kept"]

    # another pair over an existing key is refused unless asked to rotate
    other_public, other_private = generate_vapid_keys()
    monkeypatch.setenv("OTHER_PRIVATE", other_private)
    other = ["bootstrap-secrets", "--region", "us-east-1", "--json", "--vapid-public-key", other_public]
    assert main([*other, "--vapid-private-key-env", "OTHER_PRIVATE"]) == 2
    assert "--rotate vapid" in capsys.readouterr().err
    assert _value(ssm, "/amsg/amsg/vapid-private-key") == private
    assert main([*other, "--vapid-private-key-env", "OTHER_PRIVATE", "--rotate", "vapid"]) == 0
    assert json.loads(capsys.readouterr().out)["rotated"] == ["/amsg/amsg/vapid-private-key"]
    assert _value(ssm, "/amsg/amsg/vapid-private-key") == other_private


def test_a_given_pair_that_does_not_match_is_refused_before_anything_is_written(ssm, capsys, monkeypatch):
    from amsg.vapid import generate_vapid_keys

    public, _ = generate_vapid_keys()
    _, private = generate_vapid_keys()
    monkeypatch.setenv("REF_VAPID_PRIVATE_KEY", private)
    base = ["bootstrap-secrets", "--region", "us-east-1", "--vapid-public-key", public]
    assert main([*base, "--vapid-private-key-env", "REF_VAPID_PRIVATE_KEY"]) == 2
    assert "does not belong" in capsys.readouterr().err
    assert main([*base, "--vapid-private-key-env", "UNSET_VARIABLE_X"]) == 2
    assert "empty or not set" in capsys.readouterr().err
    assert main(base) == 2
    assert "without its private key" in capsys.readouterr().err
    assert ssm.describe_parameters()["Parameters"] == []
