"""Glue between API Gateway's v2 events and our API functions (the only Lambda-aware part of the API).

Each function serves one route (one path, one to three methods) that API Gateway has already selected, so the
routing here is a dictionary lookup: Powertools' resolver would cost its whole event-handler package at every
cold start (most of an API handler's import, docs/cold-start.md) for nothing we use.

A handler module builds one :class:`HttpApp` from a typed route table and the context factory it was given
(the composition root lives above this floor: the handler passes ``runtime.app_context``). For each event the
app builds the request, reads the body for POST/PUT/DELETE before anything else (the reference reads bodies
before routing), builds the context, runs the endpoint, and turns any exception into the reference's
envelopes (ApiError → its code; anything else → 500 with a sanitized ``error.cause``; configuration failures →
stage ``config``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Literal, Protocol

from amsg.context import AppContext
from amsg.errors import ApiError, CloudGuardError, StoreUnavailable, api_error
from amsg.http.body import read_body
from amsg.http.request import ApiRequest
from amsg.http.responses import ApiResponse, from_error, internal_error, to_lambda_result
from amsg.http.tenant_gate import tenant_scoped
from amsg.jsonio import JsonObject
from amsg.observability import logger

Method = Literal["GET", "POST", "PUT", "DELETE"]
Endpoint = Callable[[ApiRequest, AppContext], ApiResponse]
RouteTable = Mapping[tuple[Method, str], Endpoint]
ContextFactory = Callable[[], AppContext]
LambdaEvent = Mapping[str, Any]
LambdaResult = JsonObject
BODY_METHODS = frozenset({"POST", "PUT", "DELETE"})
PREFIX = "/api/v1"  # routes are served both at ``/`` and under ``/api/v1/`` (both client setups)


class RemainingTime(Protocol):
    """What the app reads of Lambda's context object (absent in tests and some local callers)."""

    def get_remaining_time_in_millis(self) -> int: ...


def unknown_route(request: ApiRequest, context: AppContext) -> ApiResponse:
    """The $default route's answer. Never behind the tenant gate: an unknown path is 404 for anyone, and the 404
    function has no AWS access to verify a token with (docs/tenancy.md)."""
    raise api_error("NOT_FOUND")


class HttpApp:
    """The routes of one function: ``HttpApp({("GET", "/message"): get_message}, context=runtime.app_context)``
    then ``app.resolve(event, lambda_context)``. What no entry takes goes to ``fallback``: the reference's 404
    envelope, or the one endpoint of a function that routes its sub-paths itself (cloud data)."""

    def __init__(self, routes: RouteTable, *, context: ContextFactory, fallback: Endpoint = unknown_route) -> None:
        self.routes: dict[tuple[str, str], Endpoint] = {(method, path): run for (method, path), run in routes.items()}
        self.context = context
        self.fallback = fallback

    def endpoint_for(self, event: LambdaEvent) -> Endpoint:
        path = str(event.get("rawPath") or "/")
        if path == PREFIX or path.startswith(PREFIX + "/"):
            path = path[len(PREFIX) :] or "/"
        method = str(((event.get("requestContext") or {}).get("http") or {}).get("method") or "").upper()
        return self.routes.get((method, path), self.fallback)

    def resolve(self, event: LambdaEvent, lambda_context: RemainingTime | None = None) -> LambdaResult:
        """The Lambda proxy result for one raw v2 event."""
        return handle(event, self.endpoint_for(event), self.context, lambda_context)


def handle(
    event: LambdaEvent, endpoint: Endpoint, app_context: ContextFactory, lambda_context: object = None
) -> LambdaResult:
    """Run one endpoint for a raw v2 event and return the Lambda proxy result."""
    request = ApiRequest.from_v2_event(event)
    remaining = getattr(lambda_context, "get_remaining_time_in_millis", None)
    if callable(remaining):
        request = replace(request, remaining_ms=remaining)
    try:
        if request.method in BODY_METHODS:
            request = read_body(request)
    except ApiError as error:
        return to_lambda_result(from_error(error))
    try:
        context = app_context()
    except Exception as exc:
        logger.exception("configuration failed")
        return to_lambda_result(internal_error(exc, "config"))
    return to_lambda_result(_run(endpoint, request, context))


def _run(endpoint: Endpoint, request: ApiRequest, context: AppContext) -> ApiResponse:
    try:
        if context.settings.multi_tenant and endpoint is not unknown_route:  # the tenant first (docs/tenancy.md)
            context = tenant_scoped(request, context)
        return endpoint(request, context)
    except ApiError as error:
        return from_error(error)
    except CloudGuardError as error:  # guard violations are 409 {code, message} (docs/compatibility.md)
        return ApiResponse(409, {"success": False, "error": {"code": error.code, "message": str(error)}})
    except StoreUnavailable as exc:
        logger.warning("store unavailable", extra={"error": type(exc).__name__})
        return internal_error(exc, "request")
    except Exception as exc:
        logger.exception("request failed")
        return internal_error(exc, "request")
