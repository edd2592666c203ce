"""The OpenAPI document of the HTTP API, as checked in at ``docs/openapi.json``.

``python -m api_client.server.openapi_doc docs/openapi.json`` writes it again after a change of
the routes or bodies; ``tests/server/test_server_units.py`` fails while the file differs.

FastAPI writes the routes and bodies; :func:`complete` adds what it cannot see (docs/http-api.md
"The OpenAPI document"): every problem ``code`` the server sends, the id patterns the server
checks (a request outside them is a 400 ``invalid_id``), the texts a route refuses as empty, and
the ``Retry-After`` of a 429. ``make fuzz-api`` checks the document against the server.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from api_client.contract.keys import JOB_ID_PATTERN, SESSION_ID_PATTERN
from api_client.contract.session.validate import SAFE_ID
from api_client.server.schemas import ProblemBody

__all__ = ["complete", "render"]

_ENTRY_ID = f"^{SAFE_ID.pattern}$"
_PATH_PATTERNS = {"session_id": SESSION_ID_PATTERN, "job_id": JOB_ID_PATTERN,
                  "url_secret": "^[A-Za-z0-9_-]{43}$"}  # base64url of a SHA-256 HMAC
_STREAM_POSITION = "^(start|now|[0-9]+(-[0-9]+)?)$"  # since= and Last-Event-ID
_NOT_BLANK = "\\S"  # a text with more than white space
# (schema, property) -> what the server checks of it (string properties; null stays allowed).
_PROPERTY_PATTERNS = {("CreateSession", "sessionId"): SESSION_ID_PATTERN,
                      ("BranchSummaryRequest", "targetId"): _ENTRY_ID,
                      ("SetLeaf", "leafId"): f"^({SAFE_ID.pattern})?$",  # "": null
                      ("SummarizeRequest", "prompt"): _NOT_BLANK}
# chat/completions: a message other than a system one, and, when it is the only one, with text
# (its string content, or a text part), else 400 invalid_request (nothing to summarize).
_NOT_SYSTEM = {"properties": {"role": {"not": {"enum": ["system", "developer"]}}}}
_WITH_TEXT = {"anyOf": [
    {"type": "string", "pattern": _NOT_BLANK},
    {"type": "array", "contains": {"type": "object", "required": ["type", "text"], "properties": {
        "type": {"const": "text"}, "text": {"pattern": _NOT_BLANK}}}}]}
_CHAT_MESSAGES = {"anyOf": [
    {"contains": _NOT_SYSTEM, "minContains": 2},
    {"contains": {"required": ["content"], "properties": {
        **_NOT_SYSTEM["properties"], "content": _WITH_TEXT}}}]}
# What a client reads of one Server-Sent Event (docs/http-api.md "Events").
_SSE_EVENT = {"type": "object", "required": ["data"], "properties": {
    "id": {"type": "string", "description": "the stream id (Last-Event-ID)"},
    "event": {"type": "string", "description": "the JobEvent's type"},
    "data": {"type": "string", "description": "the JobEvent as JSON"}}}
_RETRY_AFTER = {"Retry-After": {"description": "seconds until a request may succeed",
                                "schema": {"type": "integer", "minimum": 1}}}


def complete(document: dict[str, Any], codes: Iterable[str], *, auth: bool = True
             ) -> dict[str, Any]:
    """``document`` with the problem codes, patterns and headers FastAPI does not write.
    Without ``auth`` (``--insecure-no-auth``) no route asks for a token or a URL secret."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    problem = ProblemBody.model_json_schema()
    problem["properties"]["code"]["enum"] = sorted(codes)
    schemas["ProblemBody"] = problem
    for (name, prop), pattern in _PROPERTY_PATTERNS.items():
        _string_pattern(schemas[name]["properties"][prop], pattern)
    chat = schemas["ChatCompletionRequest"]["properties"]
    chat["messages"].update(_CHAT_MESSAGES)
    chat["stream"]["const"] = False  # true: 400, this endpoint answers once
    _integer_bounds(schemas)
    if not auth:
        document["components"].pop("securitySchemes", None)
    for operation in _operations(document):
        if not auth:
            operation.pop("security", None)
        for parameter in operation.get("parameters", []):
            pattern = _parameter_pattern(parameter["name"], parameter["in"], auth)
            if pattern:  # a header or query value is a string (absent: the default)
                parameter["schema"] = {k: v for k, v in parameter["schema"].items()
                                       if k != "anyOf"} | {"type": "string", "pattern": pattern}
        for response in operation["responses"].values():
            stream = response.get("content", {}).get("text/event-stream")
            if stream is not None:
                stream["schema"] = _SSE_EVENT
        too_many = dict(operation["responses"].get("4XX", {}), description=(
            "over the tenant's request rate or open streams (rate_limited, too_many_streams, "
            "too_many_waiters), the process's requests at once (overloaded), a quota "
            "(quota_exceeded) or a loop (compaction_loop)"),
            headers=_RETRY_AFTER)
        operation["responses"].setdefault("429", too_many)
    return document


def _operations(document: dict[str, Any]) -> Iterable[dict[str, Any]]:
    for path in document.get("paths", {}).values():
        yield from path.values()


_BOUNDS = {"gt": "exclusiveMinimum", "ge": "minimum", "lt": "exclusiveMaximum", "le": "maximum"}


def _integer_bounds(node: Any) -> None:
    """An integer's bounds in JSON Schema's words, as ints: pydantic writes the bounds of a
    validated int (``JsonInt``) as ``gt``/``le``, and ``le=10_000_000`` as ``10000000.0``."""
    if isinstance(node, dict):
        if node.get("type") == "integer":
            for pydantic_word, word in _BOUNDS.items():
                if pydantic_word in node:
                    node[word] = node.pop(pydantic_word)
            for bound in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
                value = node.get(bound)
                if isinstance(value, float) and value.is_integer():
                    node[bound] = int(value)
        for child in node.values():
            _integer_bounds(child)
    elif isinstance(node, list):
        for child in node:
            _integer_bounds(child)


def _parameter_pattern(name: str, where: str, auth: bool) -> str:
    if where == "path":
        return _PATH_PATTERNS.get(name, "") if auth or name != "url_secret" else ""
    return _STREAM_POSITION if name in ("since", "Last-Event-ID") else ""


def _string_pattern(schema: dict[str, Any], pattern: str) -> None:
    """The pattern on ``schema``'s string (its string branch of an ``anyOf`` with null)."""
    for branch in schema.get("anyOf", [schema]):
        if branch.get("type") == "string":
            branch["pattern"] = pattern


def render() -> str:
    """The document as the server serves it at ``/openapi.json``, stably formatted."""
    from api_client.server.asgi import create_app  # asgi imports complete() from here
    from api_client.server.settings import ServerSettings

    tokens = SecretStr(json.dumps({"a-token-of-the-document": "default"}))  # as deployed
    document = create_app(ServerSettings(api_tokens=tokens)).openapi()
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m api_client.server.openapi_doc docs/openapi.json")
    Path(sys.argv[1]).write_text(render(), encoding="utf-8")
