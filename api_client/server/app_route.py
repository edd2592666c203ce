"""The route class of every route the app serves (:class:`AppRoute`): FastAPI's, with two
things of its per-request work left out where it is pure overhead (issue 42, bench_http:
``compactor serve``'s CPU a request against FastAPI serving one Redis call).

- The bearer dependency (``server_state.authorize``) is the document's only. FastAPI resolves a
  route's dependencies on every request, and BearerAuth has checked the token before any route
  runs; that resolution (a nested pass over the request's query and headers) was ~5 % of a
  compact's CPU. ``route.dependant`` keeps it, so the document lists the scheme and each
  operation's ``security``.
- The routes platforms call on every turn (:data:`DIRECT_JSON_ROUTES`) read their JSON body
  themselves when it is one: a body declared ``application/json`` that parses and validates is
  handed to the endpoint with the path's ``str`` parameters, without FastAPI's parameter
  machinery (~14 % of the instructions of a compact under callgrind). Anything else (another or
  no content type, an empty body, invalid JSON, a body the model refuses, FastAPI's telemetry
  on) goes to FastAPI's own handler, which reads the same bytes again (Starlette keeps them) and
  answers or refuses exactly as before.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.telemetry import get_telemetry_data
from starlette.exceptions import HTTPException

from api_client.server.server_state import authorize

__all__ = ["DIRECT_JSON_ROUTES", "AppRoute"]

# POST /v1/sessions/{session_id}/compact and .../entries, by operation name.
DIRECT_JSON_ROUTES = frozenset({"compact", "append_entries"})

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class AppRoute(APIRoute):
    def get_route_handler(self) -> Handler:
        documented = self.dependant
        served = self.dependant = dataclasses.replace(documented, dependencies=[
            d for d in documented.dependencies if d.call is not authorize])
        try:
            handler = super().get_route_handler()
        finally:
            self.dependant = documented
        if self.name in DIRECT_JSON_ROUTES:
            return _direct_json(self, served, handler)
        return handler


def _direct_json(route: APIRoute, dependant: Dependant, fastapi_handler: Handler) -> Handler:
    """``fastapi_handler`` with the common case first: path parameters as Starlette matched
    them, a JSON object validated by the route's body field as FastAPI validates it."""
    (body,) = dependant.body_params  # one body, not embedded: FastAPI validates it at "body"
    assert route.body_field is body and not route._embed_body_fields, route.path
    paths = [param.name for param in dependant.path_params]
    assert all(param.field_info.annotation is str and not param.field_info.metadata
               for param in dependant.path_params), route.path  # nothing to convert or check
    assert dependant.request_param_name and dependant.call and not dependant.dependencies
    request_name, endpoint = dependant.request_param_name, dependant.call

    async def handler(request: Request) -> Response:
        try:
            raw = await request.body()
        except HTTPException:  # the body limit's 413
            raise
        except Exception as err:  # as FastAPI's handler
            raise HTTPException(400, "There was an error parsing the body") from err
        if raw and _declared_json(request) and get_telemetry_data() is None:
            try:
                value = json.loads(raw)
            except Exception:  # not JSON (or too deep): FastAPI's handler says which
                value = None
            if isinstance(value, dict):
                model, errors = body.validate(value, {}, loc=("body",))
                if not errors:
                    arguments = {name: request.path_params[name] for name in paths}
                    result: Response = await endpoint(
                        **arguments, **{body.name: model, request_name: request})
                    return result
        return await fastapi_handler(request)

    return handler


def _declared_json(request: Request) -> bool:
    """``application/json`` (any parameters): a type FastAPI parses as JSON too."""
    declared = request.headers.get("content-type", "")
    return declared.partition(";")[0].strip().lower() == "application/json"
