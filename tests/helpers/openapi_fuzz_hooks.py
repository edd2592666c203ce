"""Schemathesis hooks of ``helpers.openapi_fuzz`` (``SCHEMATHESIS_HOOKS``): how a generated body
of ``PUT /v1/sessions/{id}/jsonl`` (``application/x-ndjson``) goes on the wire."""

from __future__ import annotations

import json
from typing import Any

import schemathesis


@schemathesis.serializer("application/x-ndjson")
def ndjson(_: Any, value: Any) -> bytes:
    """A string as its UTF-8 bytes (lone surrogates kept: the server must refuse them), any
    other generated value as one JSON line."""
    if isinstance(value, bytes):
        return value
    text = value if isinstance(value, str) else json.dumps(value)
    return text.encode("utf-8", "surrogatepass")
