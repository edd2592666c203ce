"""Client settings (pydantic-settings, env prefix ``COMPACTOR_``, ``.env`` read when present).

The worker's ``WorkerSettings`` holds one :class:`ClientSettings` (``settings.client``, read
from the same variables), so every field here means the same on both sides.
``COMPACTOR_REDIS_URL`` serves sessions, broker and results unless ``COMPACTOR_BROKER_URL`` /
``COMPACTOR_RESULT_BACKEND`` override it.
"""

from __future__ import annotations

import os
import ssl
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from api_client.contract.errors import ConfigurationError
from api_client.contract.keys import TENANT_NAME
from api_client.contract.redaction import mask_url

__all__ = ["DEFAULT_SESSION_TTL_S", "ClientSettings", "load_settings", "tls_options"]

DEFAULT_SESSION_TTL_S = 30 * 86_400  # a session idle for 30 days expires (0 = never)

REDIS_SCHEMES = ("redis", "rediss", "unix")
BROKER_SCHEMES = (*REDIS_SCHEMES, "redis+socket", "sentinel", "amqp", "amqps", "pyamqp")


# TLS options a rediss:// URL may carry in its query (redis-py's names, which kombu and
# Celery's result backend read too). ssl_cert_reqs defaults to "required": kombu alone would
# default a rediss:// broker to CERT_NONE, and Celery's backend refuses a URL without it.
TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
_CERT_REQS = {"required": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}


def tls_options(url: str) -> dict[str, Any] | None:
    """The TLS options of a ``rediss://`` URL for kombu's ``broker_use_ssl`` and Celery's
    ``redis_backend_use_ssl``: its query's ``ssl_*`` values, ``ssl_cert_reqs`` required unless
    it says otherwise; None for any other scheme."""
    parts = urlsplit(url)
    if parts.scheme != "rediss":
        return None
    query = dict(parse_qsl(parts.query))
    options: dict[str, Any] = {
        "ssl_cert_reqs": _CERT_REQS[query.get("ssl_cert_reqs", "required")],
        **{name: query[name] for name in TLS_FILES if name in query},
    }
    if "ssl_check_hostname" in query:
        options["ssl_check_hostname"] = query["ssl_check_hostname"].lower() != "false"
    return options


def _check_tls(shown: str, scheme: str, query: str) -> None:
    given = dict(parse_qsl(query))
    if scheme != "rediss":
        if scheme in REDIS_SCHEMES and any(k.startswith("ssl_") for k in given):
            raise ValueError(f"{shown}: ssl_* parameters need a rediss:// URL")
        return
    reqs = given.get("ssl_cert_reqs", "required")
    if reqs not in _CERT_REQS:
        raise ValueError(f"{shown}: ssl_cert_reqs must be required, optional or none "
                         f"(default required), not {reqs!r}")
    for name in TLS_FILES:
        if name in given and not os.path.isfile(given[name]):
            raise ValueError(f"{shown}: {name} {given[name]!r} is not a file")


def check_url(value: str, schemes: tuple[str, ...]) -> str:
    """``value`` if it is a URL of one of ``schemes`` with a host (or a unix path), and with
    sound TLS parameters (``rediss://``)."""
    shown = repr(mask_url(value))  # a message about the URL never shows its password
    example = "redis://localhost:6379/0"
    try:
        parts = urlsplit(value)
    except ValueError:  # e.g. an unbalanced "[" in the host
        raise ValueError(f"{shown} is not a URL (e.g. {example})") from None
    if parts.scheme not in schemes:
        raise ValueError(f"{shown} is not a {'/'.join(schemes)} URL (e.g. {example})")
    if not (parts.hostname or (parts.scheme in ("unix", "redis+socket") and parts.path)):
        raise ValueError(f"{shown} names no host (e.g. {example})")
    try:
        _ = parts.port  # a port that is not a number raises here
    except ValueError:
        raise ValueError(f"{shown} has a port that is not a number") from None
    _check_tls(shown, parts.scheme, parts.query)
    if parts.scheme in ("redis", "rediss"):
        _check_db(shown, parts.path, parts.query)
    return value


def _check_db(shown: str, path: str, query: str) -> None:
    """The database is a number (``/abc`` used to mean db 0 without a word)."""
    for db in (path.strip("/") or "0", dict(parse_qsl(query)).get("db", "0")):
        if not db.isdigit():
            raise ValueError(f"{shown}: the database must be a number (/0, /1, ...), "
                             f"not {db!r}")


# URLs that may carry a password: masked in repr() and str() (model_dump() keeps them whole).
URL_FIELDS = frozenset({"redis_url", "broker_url", "result_backend"})


class ClientSettings(BaseSettings):
    # hide_input_in_errors: pydantic's errors would quote a rejected URL with its password
    model_config = SettingsConfigDict(
        env_prefix="COMPACTOR_", env_file=".env", env_file_encoding="utf-8", extra="ignore",
        hide_input_in_errors=True,
    )

    redis_url: str = "redis://127.0.0.1:6379/0"
    # Session data on a Redis Cluster (``redis_url`` names any node). Every per-session key
    # shares the session's hash tag and the global keys are used one at a time, so no call is
    # cross-slot. The broker and result backend must then be given apart (a Celery broker
    # cannot be a cluster): a Redis or a RabbitMQ.
    redis_cluster: bool = False
    broker_url: str | None = None
    result_backend: str | None = None
    key_prefix: str = "compactor"
    # The tenant this client acts for (its sessions, jobs, drafts and events;
    # docs/tenants.md). Unset: "default", whose keys are those from before tenants existed.
    tenant: str = "default"
    # The client connects with its tenant's own Redis ACL user (docs/tenants.md "A Redis ACL
    # user per tenant"): a new job goes to the tenant's inbox, and the workers admit it (quotas,
    # fair order, broker); the client writes no key outside the tenant's own.
    tenant_inbox: bool = False

    # Finished job records live this long, then expire.
    job_ttl_s: int = Field(default=86_400, gt=0)
    # Safety net for records and single-flight keys of jobs that never finish (lost messages):
    # after this, a new request creates a new job instead of coalescing into a dead one.
    job_pending_ttl_s: int = Field(default=3_600, gt=0)
    event_stream_maxlen: int = Field(default=10_000, gt=0)
    session_event_maxlen: int = Field(default=1_000, gt=0)

    # A queued job whose message may be lost (a publish that failed halfway, a broker that
    # restarted without persistence) is sent again by the workers' sweep after this long, then
    # after twice as long, and so on (a duplicate message finds the job done and does nothing).
    requeue_after_s: float = Field(default=60.0, gt=0)

    # The request path's budget: with Redis down, enqueue fails within about this long.
    enqueue_timeout_s: float = Field(default=2.0, gt=0)
    # Connections of one asyncio client (``compactor serve``: per tenant and process). A call
    # waits for a free one (at most redis_pool_timeout_s) instead of failing: an event loop runs
    # one request's Python at a time and holds a connection for a round trip, so a few dozen
    # cover any load one process can serve; waits and event streams hold none (they share one
    # reader, docs/http-api.md "Many waiters").
    redis_pool_size: int = Field(default=32, ge=1)
    # How long a call waits for one of them (a burst of requests queues here, not in errors);
    # an unreachable Redis still fails within enqueue_timeout_s (the connect fails, not this).
    redis_pool_timeout_s: float = Field(default=10.0, gt=0)
    # Emit Celery's task-sent event so Flower sees jobs from "sent" on (one more publish).
    send_sent_event: bool = True

    # Compaction settings (docs/rules.md "Settings and constants") used by should_compact (and by
    # the worker's planner).
    compaction_enabled: bool = True
    reserve_tokens: int = Field(default=16_384, ge=0)
    keep_recent_tokens: int = Field(default=20_000, ge=0)

    # Instant compaction (docs/instant-compaction.md): a speculative draft lives this long.
    draft_ttl_s: int = Field(default=900, gt=0)
    # should_precompute: drafts in the band below the threshold (api_client.client.thresholds).
    precompute_enabled: bool = True
    # observe starts a draft earlier than the band when the agent's growth rate says the draft
    # would not land before the threshold: it takes as long as the session's last one, or this
    # long until one was measured (0: the band alone until then); never more than half the
    # threshold below it (thresholds.precompute_lead).
    precompute_draft_s: float = Field(default=0.0, ge=0)
    # Loop guard: a compaction leaving more than share × threshold tokens is flagged
    # ``ineffective``; more than max automatic compactions within window_s fail the next one.
    loop_guard_share: float = Field(default=0.8, gt=0, le=1)
    loop_guard_max: int = Field(default=3, ge=1)
    loop_guard_window_s: float = Field(default=600.0, gt=0)

    # Bounds on what one call may send (docs/configuration.md); an input over one raises a
    # LimitExceededError naming the setting, its value and the input's, before anything is sent.
    # One entry's stored JSON line (UTF-8 bytes; pi keeps tool outputs far below this).
    max_entry_bytes: int = Field(default=8 * 2**20, gt=0)
    # A session's header line (its cwd, title and the rest), created or imported; it counts
    # toward the tenant's stored_bytes like the entry lines (docs/security.md).
    max_header_bytes: int = Field(default=16 * 2**10, gt=0)
    # One append_many call: its entries' bytes together, and how many entries.
    max_append_bytes: int = Field(default=16 * 2**20, gt=0)
    max_append_entries: int = Field(default=1_000, gt=0)
    # Custom instructions of a compaction or branch summary (characters).
    max_instructions_chars: int = Field(default=10_000, gt=0)
    # A summary's system prompt and prompt by the estimate (characters / 4): over it the request
    # is refused before a job is made (PromptTooLargeError). The workers check each prompt's
    # count against their model's window before a call (docs/security.md); this bound is the
    # largest window any candidate may have, so a prompt no model takes is refused at once.
    max_prompt_tokens: int = Field(default=1_000_000, gt=0)
    # A worker does not load a session whose entries take more than this in Redis (MEMORY
    # USAGE of the entries hash): the job fails with SessionTooLargeError. 0 = no bound.
    max_session_bytes: int = Field(default=256 * 2**20, ge=0)
    # An append's reply is kept this long under its idempotency key, so that the same append
    # sent again (a retry after a lost reply) returns it instead of storing the entries twice.
    append_idempotency_ttl_s: int = Field(default=600, gt=0)
    # Retention: every key of a session expires once the session has been idle this long (each
    # write refreshes them all, atomically, to within 1 %: api_client/contract/lua/_retention.lua),
    # so Redis does not fill up with sessions nobody uses. 0 = keep sessions forever. Client and
    # workers must agree: each write applies the setting of the process that makes it.
    session_ttl_s: int = Field(default=DEFAULT_SESSION_TTL_S, ge=0)

    # Quotas per tenant (docs/tenants.md): these are every tenant's defaults, `compactor tenant
    # quota` overrides them for one tenant in Redis. 0 = no limit. Over a quota a request raises
    # QuotaExceededError (HTTP 429) and nothing is stored.
    queued_jobs_max: int = Field(default=0, ge=0)
    stored_bytes_max: int = Field(default=0, ge=0)
    # The model budget per UTC day, in tokens (input + output) and in USD (the models' prices).
    # Over it: manual compactions, branch summaries and summaries are refused; automatic ones
    # use the deterministic summarizer (over_budget_summarizer); drafts stop first, at
    # draft_budget_share of the budget.
    tokens_per_day: int = Field(default=0, ge=0)
    usd_per_day: float = Field(default=0.0, ge=0)
    over_budget_summarizer: Literal["deterministic", "refuse"] = "deterministic"
    draft_budget_share: float = Field(default=0.8, gt=0, le=1)
    # Fair order across tenants (the broker being the sessions' Redis): a new job takes its
    # place in its queue as if it had come fair_delay_ms later for each job of its tenant
    # (of the same or a more urgent kind) queued before it, divided by the tenant's weight. A
    # flood waits behind the next jobs of lighter tenants, for at most that long. 0: FIFO.
    fair_delay_ms: int = Field(default=1000, ge=0)
    weight: float = Field(default=1.0, gt=0)
    # Jobs of one tenant the fleet runs at once (0: no limit). A worker that takes a job over
    # it puts the job back (still queued, sent again within about a second plus the sweep).
    max_running: int = Field(default=0, ge=0)

    @field_validator("key_prefix")
    @classmethod
    def _prefix_has_no_tags(cls, value: str) -> str:
        if not value or any(c in value for c in "{} \t\r\n"):
            raise ValueError("key_prefix must be non-empty, without braces or whitespace")
        return value

    @field_validator("tenant")
    @classmethod
    def _tenant_name(cls, value: str) -> str:
        if not TENANT_NAME.fullmatch(value):
            raise ValueError("tenant must be 1-63 characters of a-z 0-9 _ -, starting with a "
                             "letter or digit")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str) -> str:
        if value.partition("://")[0].endswith("sentinel"):
            # Sessions need one writable primary; the client does not follow a Sentinel
            # failover (the Celery broker may still be a sentinel:// URL).
            raise ValueError(
                f"{mask_url(value)!r}: Redis Sentinel is not supported for sessions; give the "
                "primary's redis:// or rediss:// URL (COMPACTOR_BROKER_URL may be sentinel://)")
        return check_url(value, REDIS_SCHEMES)

    @field_validator("broker_url")
    @classmethod
    def _broker_url(cls, value: str | None) -> str | None:
        return None if value is None else check_url(value, BROKER_SCHEMES)

    @field_validator("result_backend")
    @classmethod
    def _result_backend(cls, value: str | None) -> str | None:
        if value is not None and "://" in value:
            parts = urlsplit(value)
            _check_tls(repr(mask_url(value)), parts.scheme, parts.query)
        return value

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, mask_url(value) if name in URL_FIELDS and value else value

    @property
    def resolved_broker_url(self) -> str:
        if self.broker_url is None and self.redis_cluster:
            raise ConfigurationError("COMPACTOR_REDIS_CLUSTER needs COMPACTOR_BROKER_URL: a "
                                     "Celery broker cannot be a Redis Cluster")
        return self.broker_url or self.redis_url

    @property
    def resolved_result_backend(self) -> str:
        if self.result_backend is None and self.redis_cluster:
            # Results are not needed by Compactor (records hold them); keep them off the cluster.
            broker = self.resolved_broker_url
            return "disabled://" if broker.partition("://")[0].endswith("amqp") else broker
        return self.result_backend or self.redis_url

    @property
    def connect_timeout_s(self) -> float:
        """TCP connect timeout: a quarter of the budget, so one retry still fits."""
        return self.enqueue_timeout_s / 4

    @property
    def socket_timeout_s(self) -> float:
        """Per-command timeout on the request-path connections (not used for blocking reads)."""
        return self.enqueue_timeout_s / 2


def load_settings(cls: type[ClientSettings] = ClientSettings, **values: Any) -> ClientSettings:
    """``cls(**values)`` (environment and ``.env`` fill the rest), with a bad value reported
    as a one-line :class:`ConfigurationError` instead of pydantic's ValidationError."""
    try:
        return cls(**values)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'settings'}: "
            f"{e['msg'].removeprefix('Value error, ')}"
            for e in err.errors()
        )
        raise ConfigurationError(f"invalid client settings: {problems}") from None
