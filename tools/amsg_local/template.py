"""Read template.yaml the way the local stack needs it: routes, the table, the queue, CORS, function settings.

The template is the single source of truth: the local gateway serves exactly its HttpApi routes, and the tests
build their tables from its ``Properties``, so drift between template, tests and local stack fails a test.

Only the intrinsic functions this template uses are evaluated (Ref to parameters/pseudo parameters, If,
Equals, Not, And, Or, Join, Select, Split, Sub, GetAtt). A Ref or GetAtt to a resource cannot be known locally
and becomes a readable placeholder string.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "NO_VALUE",
    "CorsConfig",
    "FunctionSpec",
    "Route",
    "TemplateError",
    "cors_config",
    "find_template",
    "function_spec",
    "functions_with_event",
    "global_environment",
    "http_routes",
    "layer_dirs",
    "load_template",
    "queue_definition",
    "resolve",
    "table_definition",
    "table_logical_id",
    "table_ttl_attribute",
]

PROJECT_ROOT = Path(__file__).resolve().parents[2]

# Lambda's defaults when neither the function nor Globals set a value.
_DEFAULT_TIMEOUT_S = 3
_DEFAULT_MEMORY_MB = 128


class TemplateError(ValueError):
    """The template does not have the shape the local stack relies on."""


class _NoValue:
    """``AWS::NoValue``: the key it is assigned to disappears."""

    def __repr__(self) -> str:
        return "NO_VALUE"


NO_VALUE = _NoValue()


# --------------------------------------------------------------------------------------------- YAML loading


class _CfnLoader(yaml.SafeLoader):
    """SafeLoader that turns CloudFormation short-form tags into their long JSON form."""


def _construct_tag(loader: _CfnLoader, tag_suffix: str, node: yaml.Node) -> dict[str, Any]:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    if tag_suffix == "Ref":
        return {"Ref": value}
    if tag_suffix == "Condition":
        return {"Condition": value}
    if tag_suffix == "GetAtt" and isinstance(value, str):
        resource, _, attribute = value.partition(".")
        value = [resource, attribute]
    return {f"Fn::{tag_suffix}": value}


_CfnLoader.add_multi_constructor("!", _construct_tag)


def find_template(start: Path | None = None) -> Path:
    """The project's template.yaml: found upwards from ``start`` (cwd by default), else the repo's own."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / "template.yaml"
        if candidate.is_file():
            return candidate
    fallback = PROJECT_ROOT / "template.yaml"
    if fallback.is_file():
        return fallback
    raise TemplateError(f"no template.yaml found from {here} upwards")


def load_template(path: Path | str | None = None) -> dict[str, Any]:
    """Parse a SAM template; ``__file__`` records its path so relative CodeUris can be resolved."""
    template_path = Path(path) if path is not None else find_template()
    with template_path.open(encoding="utf-8") as handle:
        data = yaml.load(handle, Loader=_CfnLoader)  # noqa: S506 - SafeLoader subclass
    if not isinstance(data, dict) or not isinstance(data.get("Resources"), dict):
        raise TemplateError(f"{template_path} is not a CloudFormation template (no Resources)")
    data["__file__"] = str(template_path.resolve())
    return data


def template_dir(template: Mapping[str, Any]) -> Path:
    return Path(template.get("__file__", PROJECT_ROOT / "template.yaml")).parent


# --------------------------------------------------------------------------------------------- intrinsics


@dataclass
class _Scope:
    template: Mapping[str, Any]
    parameters: dict[str, Any]
    conditions: dict[str, bool] = field(default_factory=dict)
    region: str = "us-east-1"
    account: str = "123456789012"
    stack_name: str = "amsg-local"

    def pseudo(self, name: str) -> Any:
        return {
            "AWS::Region": self.region,
            "AWS::AccountId": self.account,
            "AWS::StackName": self.stack_name,
            "AWS::StackId": f"arn:aws:cloudformation:{self.region}:{self.account}:stack/{self.stack_name}/local",
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::NoValue": NO_VALUE,
        }.get(name)


def _parameter_values(template: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, spec in (template.get("Parameters") or {}).items():
        spec = spec or {}
        raw = (overrides or {}).get(name, spec.get("Default"))
        kind = str(spec.get("Type", "String"))
        if kind == "CommaDelimitedList" or kind.startswith("List<"):
            if raw is None:
                raw = []
            elif isinstance(raw, str):
                raw = [item.strip() for item in raw.split(",")] if raw.strip() else [""]
            else:
                raw = [str(item) for item in raw]
        values[name] = raw
    for name, value in (overrides or {}).items():
        values.setdefault(name, value)
    return values


def _scope(template: Mapping[str, Any], parameters: Mapping[str, Any] | None) -> _Scope:
    scope = _Scope(template=template, parameters=_parameter_values(template, parameters))
    for name, expression in (template.get("Conditions") or {}).items():
        scope.conditions[name] = bool(_resolve(expression, scope))
    return scope


def resolve(value: Any, template: Mapping[str, Any], parameters: Mapping[str, Any] | None = None) -> Any:
    """Evaluate intrinsics in ``value`` with the template's parameter defaults (overridden by ``parameters``)."""
    return _resolve(value, _scope(template, parameters))


def _resolve(value: Any, scope: _Scope) -> Any:
    if isinstance(value, list):
        items = [_resolve(item, scope) for item in value]
        return [item for item in items if item is not NO_VALUE]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((key, arg),) = value.items()
        intrinsic = _INTRINSICS.get(key)
        if intrinsic is not None:
            return intrinsic(arg, scope)
    resolved = {key: _resolve(item, scope) for key, item in value.items()}
    return {key: item for key, item in resolved.items() if item is not NO_VALUE}


def _if(arg: Any, scope: _Scope) -> Any:
    name, when_true, when_false = arg
    return _resolve(when_true if scope.conditions.get(name, False) else when_false, scope)


def _equals(arg: Any, scope: _Scope) -> bool:
    left, right = (_resolve(item, scope) for item in arg)
    return bool(_normalise(left) == _normalise(right))


def _join(arg: Any, scope: _Scope) -> str:
    delimiter, items = arg
    items = _resolve(items, scope)
    return str(delimiter).join(str(item) for item in (items if isinstance(items, list) else [items]))


def _select(arg: Any, scope: _Scope) -> Any:
    index, items = arg
    return _resolve(items, scope)[int(_resolve(index, scope))]


def _split(arg: Any, scope: _Scope) -> list[str]:
    delimiter, text = arg
    return str(_resolve(text, scope)).split(delimiter)


def _get_att(arg: Any, scope: _Scope) -> str:
    resource, attribute = arg if isinstance(arg, list) else str(arg).split(".", 1)
    return f"{resource}.{attribute}"


# The intrinsic functions the template uses, by their one key; any other single-key mapping is plain data.
_INTRINSICS: dict[str, Callable[[Any, _Scope], Any]] = {
    "Ref": lambda arg, scope: _ref(arg, scope),
    "Condition": lambda arg, scope: scope.conditions.get(arg, False),
    "Fn::If": _if,
    "Fn::Equals": _equals,
    "Fn::Not": lambda arg, scope: not _resolve(arg[0], scope),
    "Fn::And": lambda arg, scope: all(_resolve(item, scope) for item in arg),
    "Fn::Or": lambda arg, scope: any(_resolve(item, scope) for item in arg),
    "Fn::Join": _join,
    "Fn::Select": _select,
    "Fn::Split": _split,
    "Fn::Sub": lambda arg, scope: _sub(arg, scope),
    "Fn::GetAtt": _get_att,
    "Fn::ImportValue": lambda arg, scope: f"import:{_resolve(arg, scope)}",
}


def _normalise(value: Any) -> Any:
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _ref(name: str, scope: _Scope) -> Any:
    if name.startswith("AWS::"):
        return scope.pseudo(name)
    if name in scope.parameters:
        return scope.parameters[name]
    return name  # a resource: its physical id is unknown locally; the logical id stands in


_SUB_VAR = re.compile(r"\$\{([^}!][^}]*)\}")


def _sub(arg: Any, scope: _Scope) -> str:
    text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
    local_vars = {key: _resolve(item, scope) for key, item in variables.items()}

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in local_vars:
            return str(local_vars[name])
        if "." in name and not name.startswith("AWS::"):
            return name
        resolved = _ref(name, scope)
        return ",".join(resolved) if isinstance(resolved, list) else str(resolved)

    return _SUB_VAR.sub(replace, text).replace("${!", "${")


# --------------------------------------------------------------------------------------------- functions


@dataclass(frozen=True)
class FunctionSpec:
    """What the local runtime needs to invoke one AWS::Serverless::Function in process."""

    logical_id: str
    code_uri: Path
    handler: str
    timeout: int
    memory_size: int
    environment: dict[str, str]
    reserved_concurrency: int | None = None

    @property
    def module_name(self) -> str:
        return self.handler.rsplit(".", 1)[0]

    @property
    def function_name(self) -> str:
        return self.handler.rsplit(".", 1)[1]

    @property
    def handler_file(self) -> Path:
        return self.code_uri / (self.module_name.replace(".", "/") + ".py")


@dataclass(frozen=True)
class Route:
    """One HttpApi event: ``method`` is upper case (``ANY`` allowed), ``path`` may be ``$default``."""

    method: str
    path: str
    function_logical_id: str
    code_uri: Path
    handler: str
    event_name: str = ""

    @property
    def route_key(self) -> str:
        return "$default" if self.path == "$default" else f"{self.method} {self.path}"


def _resources_of_type(template: Mapping[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {
        name: resource
        for name, resource in template["Resources"].items()
        if isinstance(resource, dict) and resource.get("Type") == kind
    }


def _function_globals(template: Mapping[str, Any]) -> dict[str, Any]:
    return ((template.get("Globals") or {}).get("Function")) or {}


def function_spec(
    template: Mapping[str, Any], logical_id: str, parameters: Mapping[str, Any] | None = None
) -> FunctionSpec:
    """Merge Globals.Function with the function's own properties (function values win, env is merged)."""
    resource = template["Resources"].get(logical_id)
    if not resource or resource.get("Type") != "AWS::Serverless::Function":
        raise TemplateError(f"{logical_id} is not an AWS::Serverless::Function")
    scope = _scope(template, parameters)
    props = _resolve(resource.get("Properties") or {}, scope)
    glob = _resolve(_function_globals(template), scope)
    code_uri = props.get("CodeUri", glob.get("CodeUri"))
    handler = props.get("Handler", glob.get("Handler"))
    if not isinstance(code_uri, str) or not isinstance(handler, str) or "." not in handler:
        raise TemplateError(f"{logical_id}: CodeUri/Handler missing or not local")
    env: dict[str, str] = {}
    for source in (glob, props):
        variables = ((source.get("Environment") or {}).get("Variables")) or {}
        env.update({key: _env_text(value) for key, value in variables.items()})
    return FunctionSpec(
        logical_id=logical_id,
        code_uri=(template_dir(template) / code_uri).resolve(),
        handler=handler,
        timeout=int(props.get("Timeout", glob.get("Timeout", _DEFAULT_TIMEOUT_S))),
        memory_size=int(props.get("MemorySize", glob.get("MemorySize", _DEFAULT_MEMORY_MB))),
        environment=env,
        reserved_concurrency=_optional_int(props.get("ReservedConcurrentExecutions")),
    )


def _optional_int(value: Any) -> int | None:
    return None if value is None or isinstance(value, dict) else int(value)


def _env_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    return str(value)


def global_environment(template: Mapping[str, Any], parameters: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Globals.Function.Environment with parameter defaults applied (resource Refs stay logical ids)."""
    glob = resolve(_function_globals(template), template, parameters)
    variables = ((glob.get("Environment") or {}).get("Variables")) or {}
    return {key: _env_text(value) for key, value in variables.items()}


def functions_with_event(template: Mapping[str, Any], event_type: str) -> list[str]:
    """Logical ids of functions that have at least one event of ``event_type`` (e.g. ``SQS``)."""
    found = []
    for name, resource in _resources_of_type(template, "AWS::Serverless::Function").items():
        events = (resource.get("Properties") or {}).get("Events") or {}
        if any(isinstance(event, dict) and event.get("Type") == event_type for event in events.values()):
            found.append(name)
    return found


def function_events(template: Mapping[str, Any], logical_id: str, event_type: str) -> list[dict[str, Any]]:
    """Resolved ``Properties`` of the function's events of ``event_type``."""
    resource = template["Resources"][logical_id]
    events = (resource.get("Properties") or {}).get("Events") or {}
    return [
        resolve(event.get("Properties") or {}, template)
        for event in events.values()
        if isinstance(event, dict) and event.get("Type") == event_type
    ]


def http_routes(template: Mapping[str, Any], parameters: Mapping[str, Any] | None = None) -> list[Route]:
    """Every HttpApi event of every function, ``$default`` included, in template order."""
    routes: list[Route] = []
    seen: dict[str, str] = {}
    for logical_id, resource in _resources_of_type(template, "AWS::Serverless::Function").items():
        events = (resource.get("Properties") or {}).get("Events") or {}
        http_events = {
            name: event for name, event in events.items() if isinstance(event, dict) and event.get("Type") == "HttpApi"
        }
        if not http_events:
            continue
        spec = function_spec(template, logical_id, parameters)
        for event_name, event in http_events.items():
            props = resolve(event.get("Properties") or {}, template, parameters)
            path = str(props.get("Path", "$default"))
            method = str(props.get("Method", "ANY")).upper()
            if method == "X-AMAZON-APIGATEWAY-ANY-METHOD":
                method = "ANY"
            route = Route(method, path, logical_id, spec.code_uri, spec.handler, event_name)
            if route.route_key in seen:
                raise TemplateError(f"route {route.route_key} declared twice ({seen[route.route_key]}, {logical_id})")
            seen[route.route_key] = logical_id
            routes.append(route)
    return routes


def layer_dirs(template: Mapping[str, Any]) -> list[Path]:
    """Local ContentUri of every AWS::Serverless::LayerVersion (what Lambda mounts under /opt/python)."""
    dirs = []
    for resource in _resources_of_type(template, "AWS::Serverless::LayerVersion").values():
        content = (resource.get("Properties") or {}).get("ContentUri")
        if isinstance(content, str):
            dirs.append((template_dir(template) / content).resolve())
    return dirs


# --------------------------------------------------------------------------------------------- CORS


@dataclass(frozen=True)
class CorsConfig:
    """The HttpApi CorsConfiguration, resolved for given allowed origins."""

    allow_origins: tuple[str, ...]
    allow_methods: tuple[str, ...] = ()
    allow_headers: tuple[str, ...] = ()
    expose_headers: tuple[str, ...] = ()
    max_age: int | None = None
    allow_credentials: bool = False

    def match_origin(self, origin: str) -> str | None:
        """The ``access-control-allow-origin`` value for ``origin``, or None when it is not allowed."""
        for allowed in self.allow_origins:
            if allowed == "*":
                return origin if self.allow_credentials else "*"
            if allowed.endswith("://*") and origin.lower().startswith(allowed[:-1].lower()):
                return origin
            if allowed.rstrip("/").lower() == origin.rstrip("/").lower():
                return origin
        return None


def _list(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    return tuple(str(item).strip() for item in value if str(item).strip())


def cors_config(
    template: Mapping[str, Any],
    allow_origins: Sequence[str] | str | None,
    api_logical_id: str | None = None,
) -> CorsConfig | None:
    """CorsConfiguration of the HttpApi with AllowOrigins set to ``allow_origins`` (None: no CORS at all).

    The template wires the origins through its ``AllowOrigins`` parameter, so the configuration is resolved
    with that parameter overridden; the configured AllowOrigins list is then replaced by ``allow_origins``.
    """
    origins = _list(allow_origins)
    if not origins:
        return None
    apis = _resources_of_type(template, "AWS::Serverless::HttpApi")
    if api_logical_id is None:
        if len(apis) != 1:
            raise TemplateError(f"expected exactly one AWS::Serverless::HttpApi, found {sorted(apis)}")
        api_logical_id = next(iter(apis))
    props = apis[api_logical_id].get("Properties") or {}
    overrides = {"AllowOrigins": ",".join(origins)} if "AllowOrigins" in (template.get("Parameters") or {}) else {}
    raw = resolve(props.get("CorsConfiguration"), template, overrides)
    if raw is None or raw is NO_VALUE or raw is False:
        return None
    if raw is True:
        raw = {}
    if not isinstance(raw, dict):
        raise TemplateError("CorsConfiguration must be a mapping or true")
    max_age = raw.get("MaxAge")
    return CorsConfig(
        allow_origins=origins,
        allow_methods=_list(raw.get("AllowMethods")),
        allow_headers=_list(raw.get("AllowHeaders")),
        expose_headers=_list(raw.get("ExposeHeaders")),
        max_age=int(max_age) if max_age not in (None, "") else None,
        allow_credentials=bool(raw.get("AllowCredentials", False)),
    )


# --------------------------------------------------------------------------------------------- table & queue


def table_logical_id(template: Mapping[str, Any]) -> str:
    tables = _resources_of_type(template, "AWS::DynamoDB::Table")
    if len(tables) != 1:
        raise TemplateError(f"expected exactly one AWS::DynamoDB::Table, found {sorted(tables)}")
    return next(iter(tables))


def _table_props(template: Mapping[str, Any], logical_id: str | None) -> dict[str, Any]:
    logical_id = logical_id or table_logical_id(template)
    resource = template["Resources"].get(logical_id) or {}
    if resource.get("Type") != "AWS::DynamoDB::Table":
        raise TemplateError(f"{logical_id} is not an AWS::DynamoDB::Table")
    return _resolved_properties(resource, template)


def table_definition(template: Mapping[str, Any], logical_id: str | None = None) -> dict[str, Any]:
    """Keyword arguments for ``create_table`` (without ``TableName``) taken verbatim from the template.

    Only what DynamoDB's CreateTable accepts and what the emulators implement is passed: keys, attribute
    definitions, GSIs, LSIs and billing. TTL is a separate call (:func:`table_ttl_attribute`); PITR and SSE
    are AWS-only settings.
    """
    props = _table_props(template, logical_id)
    billing = props.get("BillingMode", "PROVISIONED")
    kwargs: dict[str, Any] = {
        "AttributeDefinitions": props["AttributeDefinitions"],
        "KeySchema": props["KeySchema"],
        "BillingMode": billing,
    }
    if billing == "PROVISIONED":
        kwargs["ProvisionedThroughput"] = _throughput(props.get("ProvisionedThroughput"))
    gsis = []
    for gsi in props.get("GlobalSecondaryIndexes") or []:
        index = {key: gsi[key] for key in ("IndexName", "KeySchema", "Projection")}
        if billing == "PROVISIONED":
            index["ProvisionedThroughput"] = _throughput(gsi.get("ProvisionedThroughput"))
        gsis.append(index)
    if gsis:
        kwargs["GlobalSecondaryIndexes"] = gsis
    lsis = [
        {key: lsi[key] for key in ("IndexName", "KeySchema", "Projection")}
        for lsi in props.get("LocalSecondaryIndexes") or []
    ]
    if lsis:
        kwargs["LocalSecondaryIndexes"] = lsis
    return kwargs


def _throughput(value: Mapping[str, Any] | None) -> dict[str, int]:
    value = value or {}
    return {
        "ReadCapacityUnits": int(value.get("ReadCapacityUnits", 5)),
        "WriteCapacityUnits": int(value.get("WriteCapacityUnits", 5)),
    }


def table_ttl_attribute(template: Mapping[str, Any], logical_id: str | None = None) -> str | None:
    """The TTL attribute when TimeToLiveSpecification is enabled, else None."""
    spec = _table_props(template, logical_id).get("TimeToLiveSpecification") or {}
    enabled = spec.get("Enabled", False)
    if isinstance(enabled, str):
        enabled = enabled.lower() == "true"
    return spec.get("AttributeName") if enabled else None


def queue_definition(template: Mapping[str, Any], logical_id: str) -> dict[str, Any]:
    """Resolved properties of an AWS::SQS::Queue."""
    resource = template["Resources"].get(logical_id) or {}
    if resource.get("Type") != "AWS::SQS::Queue":
        raise TemplateError(f"{logical_id} is not an AWS::SQS::Queue")
    return _resolved_properties(resource, template)


def _resolved_properties(resource: Mapping[str, Any], template: Mapping[str, Any]) -> dict[str, Any]:
    properties = resolve(resource.get("Properties") or {}, template)
    if not isinstance(properties, dict):
        raise TemplateError("a resource's Properties must be a mapping")
    return properties
