"""Summarize URLs: ``POST /v1/summarize/<secret>``, oh-my-pi's remote compaction endpoint with
auth on (docs/oh-my-pi.md).

oh-my-pi sends no ``Authorization`` header to a ``compaction.remoteEndpoint`` that does not end
in ``/chat/completions``, so the credential of this route is in its path. Each API token has one
such secret, derived from it::

    secret = base64url(HMAC-SHA256(key=SHA-256(token), msg="compactor summarize-url v1"))

- it names the token's tenant and admits this one route only: whoever holds the URL can have
  summaries made (and spend that tenant's model budget), not read or change its sessions;
- the token cannot be computed back from it (HMAC), and it is revoked with its token (another
  token of the same tenant gives another URL: that is how one URL is replaced);
- the server keeps no new secret: it derives the URL secrets from the token digests it holds
  (:class:`~api_client.server.auth.TokenTable`), so no setting is added or can be missed.

A presented secret is compared in constant time against every one (SHA-256 digests,
:func:`hmac.compare_digest`); a wrong one is the same 401 whatever it is. uvicorn's access log
shows the path as ``/v1/summarize/<redacted>`` (:class:`RedactSummarizeSecrets`).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import logging
import re
from dataclasses import dataclass
from typing import Any

from api_client.server.auth import TokenTable

__all__ = ["PATH_PREFIX", "RedactSummarizeSecrets", "SummarizeSecrets", "access_log_config",
           "redact", "summarize_url", "url_secret"]

PATH_PREFIX = "/v1/summarize/"
REDACTED = "<redacted>"
_CONTEXT = b"compactor summarize-url v1"


def _of_token_digest(digest: bytes) -> str:
    mac = hmac.new(digest, _CONTEXT, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


def url_secret(token: str) -> str:
    """The path secret of ``token`` (43 characters of base64url)."""
    return _of_token_digest(hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest())


def summarize_url(base_url: str, token: str) -> str:
    """The summarize URL of ``token`` on the server at ``base_url``."""
    return base_url.rstrip("/") + PATH_PREFIX + url_secret(token)


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True, slots=True)
class SummarizeSecrets:
    """Digests of the URL secrets of the configured tokens, and their tenants."""

    entries: tuple[tuple[bytes, str], ...]

    @classmethod
    def of(cls, tokens: TokenTable) -> SummarizeSecrets:
        return cls(tuple((_digest(_of_token_digest(token_digest)), tenant)
                         for token_digest, tenant in tokens.entries))

    def tenant(self, path: str) -> str | None:
        """The tenant of the summarize URL ``path`` (``/v1/summarize/<secret>``), or None;
        always compares against every secret."""
        presented = path[len(PATH_PREFIX):] if path.startswith(PATH_PREFIX) else ""
        given, found = _digest(presented), None
        for digest, tenant in self.entries:
            if hmac.compare_digest(given, digest):
                found = tenant
        return found


# A credential a caller put in the query string (the server reads none there: 401), kept out
# of the access log all the same (docs/security.md).
_QUERY_SECRET = re.compile(r"(?i)([?&](?:access_token|token|api_key|apikey|key|secret|password)"
                           r"=)[^&]*")


def redact(path: str) -> str:
    """``path`` with a summarize URL's secret (and anything after it) and the values of
    credential-like query parameters (``access_token``, ``token``, ``api_key``, ...) replaced."""
    if path.startswith(PATH_PREFIX):
        return PATH_PREFIX + REDACTED
    return _QUERY_SECRET.sub(r"\1" + REDACTED, path) if "?" in path else path


class RedactSummarizeSecrets(logging.Filter):
    """Rewrites the path of uvicorn's access log records (``uvicorn.access``: args are client,
    method, path, HTTP version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], redact(args[2]), *args[3:])
        return True


def access_log_config() -> dict[str, Any]:
    """uvicorn's own logging configuration with :class:`RedactSummarizeSecrets` on its access
    log handler."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["summarize_secrets"] = {
        "()": f"{__name__}.RedactSummarizeSecrets"}
    config["handlers"]["access"].setdefault("filters", []).append("summarize_secrets")
    return config
