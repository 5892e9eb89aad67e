"""Glue between API Gateway's v2 events and our API functions (the only Lambda-aware part of the API).

Each function serves one route (one path, one to three methods) that API Gateway has already selected, so the
routing here is a dictionary lookup: Powertools' resolver would cost its whole event-handler package at every
cold start (most of an API handler's import, docs/cold-start.md) for nothing we use.

Every route handler is ``serve(app, endpoint)``: build the request from the v2 event, read the body for
POST/PUT/DELETE before anything else (the reference reads bodies before routing), build the context, run the
endpoint, and turn any exception into the reference's envelopes (ApiError → its code; anything else → 500
with a sanitized ``error.cause``; configuration failures → stage ``config``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from amsg.context import AppContext
from amsg.errors import ApiError, CloudGuardError, StoreUnavailable, api_error
from amsg.http.body import read_body
from amsg.http.request import ApiRequest
from amsg.http.responses import ApiResponse, from_error, internal_error, to_lambda_result
from amsg.http.tenant_gate import tenant_scoped
from amsg.observability import logger

Endpoint = Callable[[ApiRequest, AppContext], ApiResponse]
Route = Callable[..., dict[str, Any]]
R = TypeVar("R", bound=Route)
BODY_METHODS = frozenset({"POST", "PUT", "DELETE"})
PREFIX = "/api/v1"  # routes are served both at ``/`` and under ``/api/v1/`` (both client setups)


class CurrentEvent:
    def __init__(self, raw_event: dict[str, Any], lambda_context: object = None) -> None:
        self.raw_event = raw_event
        self.lambda_context = lambda_context


class HttpApp:
    """The routes of one function: ``@app.get(path)`` (and post/put/delete), ``@app.not_found``, then
    ``app.resolve(event, context)``. A request no route takes answers the reference's 404 envelope."""

    def __init__(self) -> None:
        self._routes: dict[tuple[str, str], Route] = {}
        self._not_found: Callable[[Exception | None], dict[str, Any]] | None = None
        self._local = threading.local()  # the event being resolved, per thread (the local stack runs threads)

    def route(self, path: str, method: str) -> Callable[[R], R]:
        def register(function: R) -> R:
            self._routes[(method, path)] = function
            return function

        return register

    def get(self, path: str) -> Callable[[R], R]:
        return self.route(path, "GET")

    def post(self, path: str) -> Callable[[R], R]:
        return self.route(path, "POST")

    def put(self, path: str) -> Callable[[R], R]:
        return self.route(path, "PUT")

    def delete(self, path: str) -> Callable[[R], R]:
        return self.route(path, "DELETE")

    def not_found(self, function: Callable[[Exception | None], dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        self._not_found = function
        return function

    @property
    def current_event(self) -> CurrentEvent:
        event: CurrentEvent | None = getattr(self._local, "event", None)
        assert event is not None, "current_event is only set while resolve() runs"
        return event

    def resolve(self, event: dict[str, Any], context: object = None) -> dict[str, Any]:
        path = str(event.get("rawPath") or "/")
        if path == PREFIX or path.startswith(PREFIX + "/"):
            path = path[len(PREFIX) :] or "/"
        method = str(((event.get("requestContext") or {}).get("http") or {}).get("method") or "").upper()
        route = self._routes.get((method, path))
        self._local.event = CurrentEvent(event, context)
        try:
            if route is not None:
                return route()
            if self._not_found is not None:
                return self._not_found(None)
            return handle(event, unknown_route)
        finally:
            self._local.event = None


def http_app() -> HttpApp:
    """One app per function (module level, so the routes are registered once per sandbox)."""
    return HttpApp()


def unknown_route(request: ApiRequest, context: AppContext) -> ApiResponse:
    """The $default route's answer. Never behind the tenant gate: an unknown path is 404 for anyone, and the 404
    function has no AWS access to verify a token with (docs/tenancy.md)."""
    raise api_error("NOT_FOUND")


def handle(event: dict, endpoint: Endpoint, lambda_context: Any = None) -> dict:
    """Run one endpoint for a raw v2 event and return the Lambda proxy result (used by tests too)."""
    from amsg import runtime

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
        context = runtime.app_context()
    except Exception as exc:
        logger.exception("configuration failed")
        return to_lambda_result(internal_error(exc, "config"))
    try:
        if context.settings.multi_tenant and endpoint is not unknown_route:  # the tenant first (docs/tenancy.md)
            context = tenant_scoped(request, context)
        response = endpoint(request, context)
    except ApiError as error:
        response = from_error(error)
    except CloudGuardError as error:  # guard violations are 409 {code, message} (docs/compatibility.md)
        response = ApiResponse(409, {"success": False, "error": {"code": error.code, "message": str(error)}})
    except StoreUnavailable as exc:
        logger.warning("store unavailable", extra={"error": type(exc).__name__})
        response = internal_error(exc, "request")
    except Exception as exc:
        logger.exception("request failed")
        response = internal_error(exc, "request")
    return to_lambda_result(response)


def serve(app: HttpApp, endpoint: Endpoint) -> dict[str, Any]:
    """The Lambda proxy result of ``endpoint`` for the event ``app`` is resolving."""
    current = app.current_event
    return handle(current.raw_event, endpoint, current.lambda_context)
