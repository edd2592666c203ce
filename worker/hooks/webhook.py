"""The HTTP webhook adapter: a built-in plugin that POSTs each hook event as JSON.

Request: ``POST <url>`` with a JSON body ``{"event", "sessionId", ...event inputs in camelCase}``
and the headers ``X-Compactor-Event``, ``X-Compactor-Delivery`` (a fresh id per request),
``X-Compactor-Timestamp`` (unix seconds) and ``X-Compactor-Signature: sha256=<hex>``, the
HMAC-SHA256 with the shared secret over ``<timestamp>.<body bytes>``: the timestamp is signed so
a captured request cannot be replayed later. Response: a JSON object with the keys of
docs/hooks.md "The five events", or
an empty body / 204 for no answer. A non-2xx status, a body that is not a JSON object (or is
nested past the entries' 64 levels), a body over ``max_response_bytes`` or no whole answer
within the deadline counts as a raising hook (logged and skipped). The deadline is wall-clock
(``worker.outbound.deadline_http``): a receiver that trickles its answer a byte at a time is
cut off at it, and the request's thread ends there.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import ipaddress
import json
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
from pydantic import SecretStr

from api_client.contract.errors import HookError
from api_client.contract.redaction import mask_url, redact_secrets
from api_client.contract.session import Entry
from worker.hooks._frozen import thaw
from worker.hooks.errors import HookLoadError
from worker.hooks.settings import HookSettings
from worker.hooks.specs import TreePreparation, hookimpl
from worker.outbound.bounded_json import loads_bounded
from worker.outbound.deadline_http import (
    BodyTooLarge,
    BodyUnreadable,
    guarded,
    make_client,
    read_capped,
)

__all__ = [
    "DELIVERY_HEADER",
    "EVENT_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "WebhookError",
    "WebhookPlugin",
    "check_webhook_url",
    "sign",
    "to_camel",
]

SIGNATURE_HEADER = "X-Compactor-Signature"
TIMESTAMP_HEADER = "X-Compactor-Timestamp"
EVENT_HEADER = "X-Compactor-Event"
DELIVERY_HEADER = "X-Compactor-Delivery"


class WebhookError(HookError):
    """The webhook did not answer usably (status, body or transport)."""


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    """The signature header value for ``body`` sent at ``timestamp``."""
    digest = hmac.new(secret, timestamp.encode("ascii") + b"." + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


def check_webhook_url(url: str) -> httpx.URL:
    """https, or http to a loopback host only (the body carries session content)."""
    shown = repr(mask_url(url))  # never the credentials a URL may carry
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as err:
        raise HookLoadError(f"webhook url {shown} is not a URL") from err
    if not parsed.host:
        raise HookLoadError(f"webhook url {shown} has no host")
    if parsed.scheme == "https":
        return parsed
    if parsed.scheme == "http" and _is_loopback(parsed.host):
        return parsed
    raise HookLoadError(f"webhook url {shown} must use https (plain http only to a loopback host)")


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def to_camel(value: Any) -> Any:
    """Plain JSON of a hook input: dataclasses as camelCase objects, entries as their JSON."""
    if isinstance(value, Entry):
        return thaw(value.raw)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            _camel(field.name): to_camel(getattr(value, field.name))
            for field in dataclasses.fields(value)
        }
    if isinstance(value, Mapping):
        return {key: to_camel(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_camel(item) for item in value]
    return value


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


class WebhookPlugin:
    """Implements all five events by POSTing them to one URL."""

    def __init__(self, url: str, secret: SecretStr | str, *, timeout_s: float = 5.0,
                 max_response_bytes: int = 1024 * 1024, max_connections: int = 16) -> None:
        self.url = check_webhook_url(url)
        raw = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
        if not raw:
            raise HookLoadError("webhook_secret must be set when webhook_url is")
        self._secret = raw.encode("utf-8")
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        self._max_connections = max_connections
        self._client: httpx.Client | None = None
        self._pid = 0

    @classmethod
    def from_settings(cls, settings: HookSettings) -> WebhookPlugin:
        if settings.webhook_url is None:
            raise HookLoadError("webhook_url is not set")
        secret = settings.webhook_secret or SecretStr("")
        # The runner ends the call's thread at timeout_s; the request ends by itself first, so
        # its connection is closed the ordinary way.
        return cls(settings.webhook_url, secret,
                   timeout_s=min(settings.webhook_timeout_s, 0.9 * settings.timeout_s),
                   max_response_bytes=settings.webhook_max_response_bytes,
                   max_connections=settings.max_calls)

    def __repr__(self) -> str:  # never show the secret, nor credentials in the URL
        return f"WebhookPlugin({mask_url(str(self.url))!r})"

    # -- events --------------------------------------------------------------------------------
    @hookimpl
    def session_before_compact(
        self, preparation: Any, branch_entries: Sequence[Entry],
        custom_instructions: str | None, session_id: str | None,
    ) -> Any:
        return self.post("session_before_compact", session_id, {
            "preparation": to_camel(preparation),
            "branchEntries": to_camel(branch_entries),
            "customInstructions": custom_instructions,
        })

    @hookimpl
    def session_compacting(self, session_id: str | None, messages: Sequence[Any]) -> Any:
        return self.post("session_compacting", session_id, {"messages": to_camel(messages)})

    @hookimpl
    def session_compact(
        self, compaction_entry: Mapping[str, Any], from_extension: bool, session_id: str | None
    ) -> None:
        self.post("session_compact", session_id, {
            "compactionEntry": to_camel(compaction_entry), "fromExtension": from_extension,
        })

    @hookimpl
    def session_before_tree(self, preparation: TreePreparation, session_id: str | None) -> Any:
        return self.post("session_before_tree", session_id, {"preparation": to_camel(preparation)})

    @hookimpl
    def session_tree(
        self, new_leaf_id: str | None, old_leaf_id: str | None,
        summary_entry: Mapping[str, Any] | None, from_extension: bool | None,
        session_id: str | None,
    ) -> None:
        self.post("session_tree", session_id, {
            "newLeafId": new_leaf_id, "oldLeafId": old_leaf_id,
            "summaryEntry": to_camel(summary_entry), "fromExtension": from_extension,
        })

    # -- transport -----------------------------------------------------------------------------
    def post(
        self, event: str, session_id: str | None, data: dict[str, Any]
    ) -> dict[str, Any] | None:
        """POST one signed event; the decoded JSON answer, or None for an empty one."""
        body = json.dumps({"event": event, "sessionId": session_id, **data},
                          separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        timestamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            EVENT_HEADER: event,
            DELIVERY_HEADER: uuid.uuid4().hex,
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: sign(self._secret, timestamp, body),
        }
        try:
            with guarded(None, time.monotonic() + self.timeout_s), self._http().stream(
                    "POST", self.url, content=body, headers=headers) as response:
                status = response.status_code
                content = read_capped(response, self.max_response_bytes)
        except BodyTooLarge as err:
            raise WebhookError(f"webhook {event}: response over {err.limit} bytes "
                               "(COMPACTOR_HOOKS_WEBHOOK_MAX_RESPONSE_BYTES)") from err
        except BodyUnreadable as err:
            raise WebhookError(f"webhook {event}: {err}") from err
        except httpx.TimeoutException as err:
            raise WebhookError(f"webhook {event}: no whole answer within {self.timeout_s:g} s "
                               "(COMPACTOR_HOOKS_WEBHOOK_TIMEOUT_S; "
                               f"{type(err).__name__})") from err
        except httpx.HTTPError as err:
            text = redact_secrets(str(err))
            raise WebhookError(f"webhook {event}: {type(err).__name__}: {text}") from err
        return _answer(event, status, content)

    def _http(self) -> httpx.Client:
        # A client made before a prefork fork would share its sockets with the children.
        if self._client is None or self._pid != os.getpid():
            self._client = make_client(self._max_connections, timeout_s=self.timeout_s)
            self._pid = os.getpid()
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def _answer(event: str, status: int, content: bytes) -> dict[str, Any] | None:
    """The decoded JSON answer, None for an empty one; ``WebhookError`` for anything else."""
    if not 200 <= status < 300:
        raise WebhookError(f"webhook {event}: HTTP {status}")
    if status == 204 or not content.strip():
        return None
    try:
        answer = loads_bounded(content)
    except ValueError as err:
        raise WebhookError(f"webhook {event}: response is not JSON ({err})") from err
    if answer is None:
        return None
    if not isinstance(answer, dict):
        raise WebhookError(f"webhook {event}: response must be a JSON object")
    return answer
