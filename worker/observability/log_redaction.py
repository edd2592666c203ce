"""Keep credentials out of log lines: URL userinfo (``scheme://user:password@host``), bearer
tokens, key-like values and the configured API keys are replaced by ``***``.

httpx logs every request's full URL at INFO ("HTTP Request: POST http://user:pw@host/..."), and
error texts from Redis, HTTP clients or model providers may quote a URL or a key.
:func:`install` wraps the logging record factory of the worker process, so every record (of any
logger, before any handler or formatter sees it) is cleaned by
:func:`api_client.contract.redaction.redact_secrets`.
"""

from __future__ import annotations

import logging
from typing import Any

from api_client.contract.redaction import redact_secrets, redact_userinfo

__all__ = ["install", "redact"]

redact = redact_userinfo  # ``http://user:pw@host`` → ``http://***@host`` (anywhere in a text)


def _redacting(factory: Any) -> Any:
    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record: logging.LogRecord = factory(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to logging's own error report
            return record
        cleaned = redact_secrets(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return record

    make.compactor_redacting = True  # type: ignore[attr-defined]
    return make


def install() -> None:
    """Redact credentials in every log record of this process (idempotent)."""
    current = logging.getLogRecordFactory()
    if not getattr(current, "compactor_redacting", False):
        logging.setLogRecordFactory(_redacting(current))
