"""Glue between Powertools' HTTP resolver and our API functions (the only Lambda-aware part of the API).

Every route handler is ``serve(app, endpoint)``: build the request from the v2 event, read the body for
POST/PUT/DELETE before anything else (the reference reads bodies before routing), build the context, run the
endpoint, and turn any exception into the reference's envelopes (ApiError → its code; anything else → 500
with a sanitized ``error.cause``; configuration failures → stage ``config``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from amsg.context import AppContext
from amsg.errors import ApiError, CloudGuardError, StoreUnavailable
from amsg.http.body import read_body
from amsg.http.request import ApiRequest
from amsg.http.responses import ApiResponse, from_error, internal_error, to_lambda_result
from amsg.observability import logger

Endpoint = Callable[[ApiRequest, AppContext], ApiResponse]
BODY_METHODS = frozenset({"POST", "PUT", "DELETE"})


def http_app() -> APIGatewayHttpResolver:
    """One resolver per function; routes are served both at ``/`` and under ``/api/v1/`` (both client setups)."""
    return APIGatewayHttpResolver(strip_prefixes=["/api/v1"])


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


def serve(app: APIGatewayHttpResolver, endpoint: Endpoint) -> Response:
    result = handle(app.current_event.raw_event, endpoint, app.lambda_context)
    return Response(
        status_code=result["statusCode"],
        content_type=result["headers"]["content-type"],
        body=result["body"],
    )
