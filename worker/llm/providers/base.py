"""What every provider offers the router."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from api_client.contract.redaction import mask_url
from worker.llm.errors import InsecureEndpointError, ModelCallError
from worker.llm.settings import DEFAULT_MAX_RESPONSE_BYTES, ModelCandidate
from worker.summary_requests import CancelToken, SummaryRequest, Usage

__all__ = ["HttpContext", "Provider", "Reply", "as_int",
           "check_endpoint", "is_loopback_host"]


@dataclass(frozen=True)
class Reply:
    text: str
    usage: Usage


@dataclass(frozen=True)
class HttpContext:
    """What the HTTP providers share: one client, one connect timeout, one body cap."""

    client: httpx.Client
    connect_timeout_s: float = 10.0
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES


class Provider(Protocol):
    candidate: ModelCandidate
    uses_http: bool

    def problem(self) -> ModelCallError | None:
        """A reason not to call this candidate at all (e.g. no API key), or None."""
        ...

    def output_reserve(self, max_tokens: int, request: SummaryRequest) -> int:
        """Tokens of the context window the answer may take (thinking budget included)."""
        ...

    def complete(self, request: SummaryRequest, max_tokens: int,
                 cancel: CancelToken | None) -> Reply:
        """One attempt. Raises a ``ModelCallError`` subclass on failure."""
        ...


# A usage count above this is a hostile or broken answer, not a model call (it would turn
# the cost metrics into inf): counted as 0, as other unusable counts are.
_MAX_COUNT = 10**9


def as_int(value: Any) -> int:
    usable = isinstance(value, int) and not isinstance(value, bool) and 0 < value <= _MAX_COUNT
    return value if usable else 0


def is_loopback_host(host: str) -> bool:
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_endpoint(candidate: ModelCandidate) -> None:
    """https, or plain http to a loopback host, or plain http the candidate allows
    (``allow_http``): the request carries the API key and the whole conversation."""
    url = candidate.resolved_base_url
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and parts.hostname and (
            candidate.allow_http or is_loopback_host(parts.hostname)):
        return
    raise InsecureEndpointError(
        f"{candidate.label}: base_url {mask_url(url)!r} must use https (plain http only to a "
        'loopback host, or with "allow_http": true on the candidate)')
