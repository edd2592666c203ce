"""Keep credentials out of log lines: URL userinfo (``scheme://user:password@host``) is redacted.

httpx logs every request's full URL at INFO ("HTTP Request: POST http://user:pw@host/..."), and
error texts from Redis or HTTP clients may quote a URL too. :func:`install` wraps the logging
record factory of the worker process, so every record (of any logger, before any handler or
formatter sees it) has such userinfo replaced by ``***``.
"""

from __future__ import annotations

import logging
import re
from typing import Any

__all__ = ["install", "redact"]

_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@:]*(?::[^/\s@]*)?@")


def redact(text: str) -> str:
    """``http://user:pw@host`` → ``http://***@host`` (anywhere in ``text``)."""
    return _USERINFO.sub(r"\g<scheme>***@", text)


def _redacting(factory: Any) -> Any:
    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record: logging.LogRecord = factory(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to logging's own error report
            return record
        if "@" in message:
            cleaned = redact(message)
            if cleaned != message:
                record.msg, record.args = cleaned, None
        return record

    make.compactor_redacting = True  # type: ignore[attr-defined]
    return make


def install() -> None:
    """Redact userinfo in every log record of this process (idempotent)."""
    current = logging.getLogRecordFactory()
    if not getattr(current, "compactor_redacting", False):
        logging.setLogRecordFactory(_redacting(current))
