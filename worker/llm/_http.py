"""The model layer's HTTP call: one JSON POST with the attempt's deadline and cancellation in
the socket reads (``worker.outbound.deadline_http``), a bounded body, and typed errors.

A cancelled call raises out of httpcore, which closes the connection (the server sees it go
away), so a cancelled job stops its HTTP call within a fraction of a second, and a hung or
trickling provider cannot hold a job past its deadline. The body is streamed and abandoned
past ``max_response_bytes`` (``COMPACTOR_LLM_MAX_RESPONSE_BYTES``): a model that writes 100 MB,
or never stops, costs the worker that many bytes at most.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from worker.llm.errors import (
    ConnectionFailed,
    MalformedResponse,
    ModelCancelledError,
    ModelTimeout,
    ResponseTooLarge,
    Who,
)
from worker.llm.settings import DEFAULT_MAX_RESPONSE_BYTES
from worker.outbound.bounded_json import loads_bounded
from worker.outbound.deadline_http import (
    SLICE_S,
    BodyTooLarge,
    BodyUnreadable,
    CallCancelled,
    guarded,
    make_client,
    read_capped,
)
from worker.summary_requests import CancelToken

__all__ = ["SLICE_S", "HttpReply", "guarded", "make_client", "post_json"]


@dataclass(frozen=True)
class HttpReply:
    status: int
    reason: str
    headers: httpx.Headers
    body: bytes

    def json(self) -> Any:
        """The body's JSON; ``ValueError`` for anything unreadable, nesting past the bound
        included (a RecursionError of the parser never escapes)."""
        return loads_bounded(self.body)


def post_json(client: httpx.Client, url: str, payload: dict[str, Any], *, headers: dict[str, str],
              timeout_s: float, connect_timeout_s: float, cancel: CancelToken | None,
              provider: str, model: str,
              max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> HttpReply:
    """POST one JSON body; transport failures and oversized bodies become typed errors, any
    HTTP status is returned."""
    body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    all_headers = {"content-type": "application/json", "accept": "application/json", **headers}
    timeout = httpx.Timeout(timeout_s, connect=min(connect_timeout_s, timeout_s))
    who: Who = {"provider": provider, "model": model}
    try:
        with guarded(cancel, time.monotonic() + timeout_s), client.stream(
                "POST", url, content=body, headers=all_headers, timeout=timeout) as response:
            content = read_capped(response, max_response_bytes)
    except CallCancelled as err:
        raise ModelCancelledError(**who) from err
    except BodyTooLarge as err:
        raise ResponseTooLarge(f"Response body over {err.limit} bytes (COMPACTOR_LLM_MAX_"
                               "RESPONSE_BYTES); stopped reading", **who) from err
    except BodyUnreadable as err:
        raise MalformedResponse(f"Unreadable response body: {err}", **who) from err
    except httpx.TimeoutException as err:
        raise ModelTimeout(f"Request timed out after {timeout_s:g} s ({type(err).__name__})",
                           **who) from err
    except httpx.HTTPError as err:
        raise ConnectionFailed(f"Connection error: {type(err).__name__}: {err}", **who) from err
    return HttpReply(response.status_code, response.reason_phrase, response.headers, content)
