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
replace those two on purpose (see docs/operations.md for what clients see).

The names are the stack's (``--stack``, default ``amsg``): those an existing stack was deployed with, else the
ones template.yaml derives when its name parameters are empty (``/amsg/<stack>/master-key``), so a second stack
in the account gets keys of its own. ``--master-key-param`` / ``--vapid-private-key-param`` override them.
"""

from __future__ import annotations

import argparse
import json
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
) -> BootstrapResult:
    """Create what is missing (and rotate what was asked) with the given boto3 SSM client."""
    from amsg.vapid import generate_vapid_keys, public_key_from_private

    created: list[str] = []
    kept: list[str] = []
    rotated: list[str] = []

    if _read(ssm, master_key_param) is None:
        _write(ssm, master_key_param, secrets.token_hex(32), overwrite=False, description="amsg master key")
        created.append(master_key_param)
    else:
        kept.append(master_key_param)

    private = _read(ssm, vapid_private_key_param)
    if private is None or "vapid" in rotate:
        public, new_private = generate_vapid_keys()
        _write(ssm, vapid_private_key_param, new_private, overwrite=private is not None, description="amsg VAPID key")
        (rotated if private is not None else created).append(vapid_private_key_param)
    else:
        public = public_key_from_private(private)
        kept.append(vapid_private_key_param)

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
        )
    except (BotoCoreError, ClientError) as exc:
        print(f"amsg bootstrap-secrets: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result.as_json(), indent=2))
        return 0
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
    return 0
