"""``amsg bootstrap-secrets``: create the SSM SecureString parameters a new stack reads, and print what
``sam deploy`` needs.

* the master key: 32 random bytes as 64 hex characters. Never overwritten: every stored value is encrypted
  under keys derived from it, so replacing it would make all data unreadable;
* the VAPID key pair (P-256): the private key goes to SSM, the public key is printed for the ``VapidPublicKey``
  template parameter (derived from the stored private key when that already exists);
* optionally the shared client token (``--client-token-param``);
* with ``--multi-tenant`` (template parameter ``Tenancy=multi``, docs/tenancy.md): the tenant-token signing key
  (``/amsg/<stack>/tenant-token-signing-key``) and the init-tenant secret (``/amsg/<stack>/init-secret``, printed
  once for the operator). Rotating the signing key (``--rotate signing-key``) revokes every tenant's tokens.

Existing parameters are kept, so running it again is safe. ``--rotate vapid`` / ``--rotate client-token``
replace those two on purpose (see docs/operations.md for what clients see). ``--vapid-public-key`` with
``--vapid-private-key-env`` stores a given pair instead of a generated one: moving in from the reference, its
pair, since its users' push subscriptions accept only pushes signed with it (docs/import.md).

The names are the stack's (``--stack``, default ``amsg``): those an existing stack was deployed with, else the
ones template.yaml derives when its name parameters are empty (``/amsg/<stack>/master-key``), so a second stack
in the account gets keys of its own. ``--master-key-param`` / ``--vapid-private-key-param`` override them.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from dataclasses import dataclass, field
from typing import Any

DEFAULT_STACK = "amsg"
MASTER_KEY_NAME_PARAMETER = "MasterKeyParameterName"  # the template parameters that name the secrets
VAPID_NAME_PARAMETER = "VapidPrivateKeyParameterName"


def tenancy_secret_names(stack: str) -> tuple[str, str]:
    """The names template.yaml reads with ``Tenancy=multi``: the token signing key and the init secret."""
    return f"/amsg/{stack}/tenant-token-signing-key", f"/amsg/{stack}/init-secret"


def stack_secret_names(stack: str) -> tuple[str, str]:
    """The names template.yaml gives the secrets of stack ``stack`` when its name parameters are empty."""
    return f"/amsg/{stack}/master-key", f"/amsg/{stack}/vapid-private-key"


DEFAULT_MASTER_KEY_PARAM, DEFAULT_VAPID_PRIVATE_KEY_PARAM = stack_secret_names(DEFAULT_STACK)


def deployed_secret_names(cloudformation: Any, stack: str) -> dict[str, str]:
    """The non-empty secret-name parameters an existing stack was deployed with ({} when there is no stack)."""
    from botocore.exceptions import ClientError

    try:
        stacks = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    except ClientError as exc:
        if "does not exist" in str(exc):
            return {}
        raise
    values = {item["ParameterKey"]: item.get("ParameterValue", "") for item in stacks[0].get("Parameters", [])}
    return {key: values[key] for key in (MASTER_KEY_NAME_PARAMETER, VAPID_NAME_PARAMETER) if values.get(key)}


def secret_names(
    stack: str, deployed: dict[str, str], master_key_param: str | None, vapid_private_key_param: str | None
) -> tuple[str, str]:
    """Given names win, then the deployed stack's, then the stack's own (what the template derives)."""
    own_master, own_vapid = stack_secret_names(stack)
    return (
        master_key_param or deployed.get(MASTER_KEY_NAME_PARAMETER) or own_master,
        vapid_private_key_param or deployed.get(VAPID_NAME_PARAMETER) or own_vapid,
    )


@dataclass
class BootstrapResult:
    vapid_public_key: str
    created: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    rotated: list[str] = field(default_factory=list)
    client_token: str | None = None  # only when generated now (shown once, to the operator)
    parameter_overrides: dict[str, str] = field(default_factory=dict)
    init_secret: str | None = None  # only when generated now (shown once)

    def as_json(self) -> dict[str, Any]:
        return {
            "vapidPublicKey": self.vapid_public_key,
            "created": self.created,
            "kept": self.kept,
            "rotated": self.rotated,
            "parameterOverrides": self.parameter_overrides,
            **({"clientToken": self.client_token} if self.client_token else {}),
            **({"initSecret": self.init_secret} if self.init_secret else {}),
        }


def _read(ssm: Any, name: str) -> str | None:
    try:
        return str(ssm.get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"])
    except ssm.exceptions.ParameterNotFound:
        return None


def _write(ssm: Any, name: str, value: str, *, overwrite: bool, description: str) -> None:
    ssm.put_parameter(
        Name=name, Value=value, Type="SecureString", Overwrite=overwrite, Description=description, Tier="Standard"
    )


def bootstrap(
    ssm: Any,
    *,
    master_key_param: str = DEFAULT_MASTER_KEY_PARAM,
    vapid_private_key_param: str = DEFAULT_VAPID_PRIVATE_KEY_PARAM,
    client_token_param: str | None = None,
    rotate: tuple[str, ...] = (),
    tenancy_params: tuple[str, str] | None = None,
    vapid_pair: tuple[str, str] | None = None,
) -> BootstrapResult:
    """Create what is missing (and rotate what was asked) with the given boto3 SSM client. ``vapid_pair``
    (public, private) is a pair given, not generated: the reference's, when moving in (docs/import.md)."""
    created: list[str] = []
    kept: list[str] = []
    rotated: list[str] = []

    if _read(ssm, master_key_param) is None:
        _write(ssm, master_key_param, secrets.token_hex(32), overwrite=False, description="amsg master key")
        created.append(master_key_param)
    else:
        kept.append(master_key_param)

    public = _vapid(ssm, vapid_private_key_param, "vapid" in rotate, vapid_pair, (created, kept, rotated))

    token: str | None = None
    if client_token_param:
        existing = _read(ssm, client_token_param)
        if existing is None or "client-token" in rotate:
            token = secrets.token_urlsafe(32)
            _write(ssm, client_token_param, token, overwrite=existing is not None, description="amsg client token")
            (rotated if existing is not None else created).append(client_token_param)
        else:
            kept.append(client_token_param)

    init_secret = _tenancy_secrets(ssm, tenancy_params, rotate, created, kept, rotated) if tenancy_params else None

    overrides = {
        "VapidPublicKey": public,
        "MasterKeyParameterName": master_key_param,
        "VapidPrivateKeyParameterName": vapid_private_key_param,
    }
    if client_token_param:
        overrides["ClientTokenParameterName"] = client_token_param
    if tenancy_params:
        overrides["Tenancy"] = "multi"
    return BootstrapResult(public, created, kept, rotated, token, overrides, init_secret)


class GivenPairConflict(ValueError):
    """The stack already holds another VAPID private key than the one given (replacing it is ``--rotate vapid``)."""


def given_vapid_pair(public: str | None, private: str | None) -> tuple[str, str] | None:
    """The pair an operator gives, checked: the private key must be P-256 and belong to the public key (a
    mismatch would sign pushes no subscription accepts). None when neither is given."""
    from amsg.vapid import VapidConfigError, b64url_decode, public_key_from_private

    public, private = (public or "").strip(), (private or "").strip()
    if not public and not private:
        return None
    if not private:
        raise ValueError("a VAPID public key without its private key: name the variable with --vapid-private-key-env")
    try:
        derived = public_key_from_private(private)
        if public and b64url_decode(public) != b64url_decode(derived):
            raise ValueError("the given VAPID private key does not belong to the given public key")
    except VapidConfigError as exc:
        raise ValueError(f"unusable VAPID key: {exc}") from None
    return derived, private


def _vapid(
    ssm: Any,
    name: str,
    rotate: bool,
    given: tuple[str, str] | None,
    lists: tuple[list[str], list[str], list[str]],
) -> str:
    """The VAPID private key in SSM (generated, or the given pair's); answers the public key."""
    from amsg.vapid import generate_vapid_keys, public_key_from_private

    created, kept, rotated = lists
    stored = _read(ssm, name)
    if stored is not None and (given is None or stored.strip() == given[1]) and not (rotate and given is None):
        kept.append(name)
        return given[0] if given else public_key_from_private(stored)
    if stored is not None and not rotate:
        raise GivenPairConflict(
            f"{name} holds another VAPID private key: pass --rotate vapid to replace it with the given pair "
            "(push subscriptions made for the old key stop receiving pushes)"
        )
    public, private = given or generate_vapid_keys()
    _write(ssm, name, private, overwrite=stored is not None, description="amsg VAPID key")
    (rotated if stored is not None else created).append(name)
    return public


def _tenancy_secrets(
    ssm: Any,
    names: tuple[str, str],
    rotate: tuple[str, ...],
    created: list[str],
    kept: list[str],
    rotated: list[str],
) -> str | None:
    """The signing key and the init secret; answers the init secret when it was generated now."""
    generated: str | None = None
    for name, label, rotation in ((names[0], "signing", "signing-key"), (names[1], "init", "init-secret")):
        existing = _read(ssm, name)
        if existing is not None and rotation not in rotate:
            kept.append(name)
            continue
        value = secrets.token_urlsafe(48 if label == "signing" else 32)
        _write(ssm, name, value, overwrite=existing is not None, description=f"amsg tenant {label} secret")
        (rotated if existing is not None else created).append(name)
        if label == "init":
            generated = value
    return generated


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "bootstrap-secrets",
        help="create the SSM SecureString parameters of a new stack (master key, VAPID pair, optional client "
        "token) and print the VAPID public key and the sam deploy parameter overrides",
    )
    parser.add_argument(
        "--stack",
        default=DEFAULT_STACK,
        help="the stack whose secrets these are: the names it was deployed with, else /amsg/<stack>/... "
        f"(default {DEFAULT_STACK})",
    )
    parser.add_argument("--master-key-param", metavar="NAME", help="default: the stack's (see --stack)")
    parser.add_argument("--vapid-private-key-param", metavar="NAME", help="default: the stack's (see --stack)")
    parser.add_argument("--client-token-param", metavar="NAME", help="also create a shared X-Client-Token here")
    parser.add_argument(
        "--rotate",
        action="append",
        choices=("vapid", "client-token", "signing-key", "init-secret"),
        default=[],
        help="replace this secret even though it exists (the master key is never replaced)",
    )
    parser.add_argument(
        "--multi-tenant",
        action="store_true",
        help="also the multi-tenant line's secrets (Tenancy=multi): the token signing key and the init secret",
    )
    parser.add_argument(
        "--vapid-public-key",
        metavar="KEY",
        help="use this VAPID pair instead of generating one (moving in: the reference's NEXT_PUBLIC_VAPID_PUBLIC_KEY, "
        "so its users' push subscriptions keep working); with --vapid-private-key-env",
    )
    parser.add_argument(
        "--vapid-private-key-env",
        metavar="VAR",
        help="the environment variable holding that pair's private key (e.g. the reference's VAPID_PRIVATE_KEY; "
        "never on the command line)",
    )
    parser.add_argument("--region", help="AWS region (default from the environment / AWS profile)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def main(args: argparse.Namespace) -> int:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    for name in (args.master_key_param, args.vapid_private_key_param, args.client_token_param):
        if name is not None and not name.startswith("/"):
            print(f"amsg bootstrap-secrets: {name}: parameter names must start with / (the template needs it)")
            return 2
    region = {"region_name": args.region} if args.region else {}
    try:
        vapid_pair = _pair_from(args)
    except ValueError as exc:
        print(f"amsg bootstrap-secrets: {exc}", file=sys.stderr)
        return 2
    try:
        ssm = boto3.client("ssm", **region)
        deployed = {}
        if args.master_key_param is None or args.vapid_private_key_param is None:
            deployed = deployed_secret_names(boto3.client("cloudformation", **region), args.stack)
        master_key_param, vapid_private_key_param = secret_names(
            args.stack, deployed, args.master_key_param, args.vapid_private_key_param
        )
        result = bootstrap(
            ssm,
            master_key_param=master_key_param,
            vapid_private_key_param=vapid_private_key_param,
            client_token_param=args.client_token_param,
            rotate=tuple(args.rotate),
            tenancy_params=tenancy_secret_names(args.stack) if args.multi_tenant else None,
            vapid_pair=vapid_pair,
        )
    except GivenPairConflict as exc:
        print(f"amsg bootstrap-secrets: {exc}", file=sys.stderr)
        return 2
    except (BotoCoreError, ClientError) as exc:
        print(f"amsg bootstrap-secrets: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    _print_result(result, as_json=args.json)
    return 0


def _pair_from(args: argparse.Namespace) -> tuple[str, str] | None:
    """The VAPID pair given on the command line, its private key read from the variable it names."""
    private = os.environ.get(args.vapid_private_key_env, "") if args.vapid_private_key_env else None
    if args.vapid_private_key_env and not private:
        raise ValueError(f"the environment variable {args.vapid_private_key_env} is empty or not set")
    return given_vapid_pair(args.vapid_public_key, private)


def _print_result(result: BootstrapResult, *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result.as_json(), indent=2))
        return
    for label, names in (("created", result.created), ("rotated", result.rotated), ("kept", result.kept)):
        for name in names:
            print(f"{label:8} {name}")
    print(f"\nVAPID public key: {result.vapid_public_key}")
    if result.client_token:
        print(f"client token (give it to your app; shown only now): {result.client_token}")
    if result.init_secret:
        print(f"init secret (X-Init-Secret of init-tenant; shown only now): {result.init_secret}")
    overrides = " ".join(f"{key}={value}" for key, value in result.parameter_overrides.items())
    print(f"\nsam deploy --parameter-overrides {overrides}")
