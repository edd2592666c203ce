"""Credentials out of every text that leaves a process: messages, reprs, logs, job records.

* ``mask_url`` — a URL with its userinfo (``user:password@``) replaced by ``***@``: for
  messages about one URL (a setting that does not parse, a repr).
* ``redact_userinfo`` — the same anywhere in a text (log lines quote URLs).
* ``redact_secrets`` — userinfo, ``Bearer``/``Basic`` credentials, values of key-like fields
  (``x-api-key: …``, ``"api_key": "…"``, ``password=…``), strings shaped like provider keys
  (``sk-…``, ``AIza…``, ``hf_…``, JWTs) and every value given to ``remember_secret`` (the
  configured API keys: a provider that echoes the request quotes them in no known shape).

Provider error texts go through ``redact_secrets`` before they become an error's message, so
the logs, the job record's ``error`` and the events (which every client reads) never carry a
credential.
"""

from __future__ import annotations

import re
import threading

__all__ = ["mask_url", "redact_secrets", "redact_userinfo", "remember_secret"]

MASK = "***"
_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@:]*(?::[^/\s@]*)?@")
# "Basic" only after a key-like field name (below): alone it is an English word.
_AUTH_SCHEME = re.compile(r"(?i)\b(bearer)(\s+)[A-Za-z0-9._~+/=-]{8,}")
_KEY_FIELD = re.compile(
    r"(?i)\b((?:x-)?api[_-]?key|x-goog-api-key|authorization|(?:access|auth|refresh)[_-]?token"
    r"|client[_-]?secret|secret[_-]?key|password|passwd)"
    r"(\"?'?\s*[:=]\s*\"?'?\s*(?:(?:bearer|basic|token)\s+)?+)"
    r"(?!\*\*\*)[^\s\"',;&}\]]+")
_KEY_SHAPES = re.compile(
    r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{8,}|\bsk_(?:live|test)_[A-Za-z0-9]{8,}"
    r"|\bAIza[0-9A-Za-z_-]{20,}|\b(?:gsk|hf|ghp|gho|github_pat|xai)[_-][A-Za-z0-9_]{8,}"
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")
_MIN_KNOWN = 6  # shorter remembered values would mask ordinary words

_known: tuple[str, ...] = ()
_known_lock = threading.Lock()


def remember_secret(value: str | None) -> None:
    """Mask ``value`` wherever ``redact_secrets`` meets it in this process from now on."""
    global _known
    if not value or len(value) < _MIN_KNOWN:
        return
    with _known_lock:
        if value not in _known:
            # longest first, so a key that contains another is masked whole
            _known = tuple(sorted((*_known, value), key=len, reverse=True))


def mask_url(url: str) -> str:
    """``redis://user:pw@host:6379/0`` → ``redis://***@host:6379/0``. Everything before the
    last ``@`` ahead of the query is masked, so a password holding ``/`` or ``#`` (which URL
    parsers split at) never shows either; other URLs are returned unchanged."""
    scheme, sep, rest = url.partition("://")
    before_query = rest.split("?", 1)[0]
    if not sep or "@" not in before_query:
        return url
    return f"{scheme}://{MASK}@{rest[len(before_query.rpartition('@')[0]) + 1:]}"


def redact_userinfo(text: str) -> str:
    """``http://user:pw@host`` → ``http://***@host``, anywhere in ``text``."""
    return _USERINFO.sub(r"\g<scheme>***@", text) if "@" in text else text


def redact_secrets(text: str) -> str:
    """``text`` without URL userinfo, auth credentials, key-like values and known secrets."""
    for secret in _known:
        if secret in text:
            text = text.replace(secret, MASK)
    text = redact_userinfo(text)
    text = _AUTH_SCHEME.sub(rf"\1\2{MASK}", text)
    text = _KEY_FIELD.sub(rf"\1\2{MASK}", text)
    return _KEY_SHAPES.sub(MASK, text)
