"""Client settings (pydantic-settings, env prefix ``COMPACTOR_``, ``.env`` read when present).

The worker's ``WorkerSettings`` subclasses :class:`ClientSettings`, so every field here means the
same on both sides. ``COMPACTOR_REDIS_URL`` serves sessions, broker and results unless
``COMPACTOR_BROKER_URL`` / ``COMPACTOR_RESULT_BACKEND`` override it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from api_client.contract.errors import ConfigurationError

__all__ = ["ClientSettings", "load_settings"]

REDIS_SCHEMES = ("redis", "rediss", "unix")
BROKER_SCHEMES = (*REDIS_SCHEMES, "redis+socket", "sentinel", "amqp", "amqps", "pyamqp")


def check_url(value: str, schemes: tuple[str, ...]) -> str:
    """``value`` if it is a URL of one of ``schemes`` with a host (or a unix path)."""
    parts = urlsplit(value)
    example = "redis://localhost:6379/0"
    if parts.scheme not in schemes:
        raise ValueError(f"{value!r} is not a {'/'.join(schemes)} URL (e.g. {example})")
    if not (parts.hostname or (parts.scheme in ("unix", "redis+socket") and parts.path)):
        raise ValueError(f"{value!r} names no host (e.g. {example})")
    try:
        _ = parts.port  # a port that is not a number raises here
    except ValueError:
        raise ValueError(f"{value!r} has a port that is not a number") from None
    return value


class ClientSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="COMPACTOR_", env_file=".env", env_file_encoding="utf-8", extra="ignore",
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
    # Emit Celery's task-sent event so Flower sees jobs from "sent" on (one more publish).
    send_sent_event: bool = True

    # SPEC §14 compaction settings used by should_compact (and by the worker's planner).
    compaction_enabled: bool = True
    reserve_tokens: int = Field(default=16_384, ge=0)
    keep_recent_tokens: int = Field(default=20_000, ge=0)

    # Instant compaction (README "Instant compaction"): a speculative draft lives this long.
    draft_ttl_s: int = Field(default=900, gt=0)
    # should_precompute: the band below the threshold = clamp(share × threshold, min, max).
    precompute_enabled: bool = True
    precompute_band_share: float = Field(default=0.125, ge=0, le=1)
    precompute_band_min_tokens: int = Field(default=8_192, ge=0)
    precompute_band_max_tokens: int = Field(default=32_000, ge=0)
    # Loop guard: a compaction leaving more than share × threshold tokens is flagged
    # ``ineffective``; more than max automatic compactions within window_s fail the next one.
    loop_guard_share: float = Field(default=0.8, gt=0, le=1)
    loop_guard_max: int = Field(default=3, ge=1)
    loop_guard_window_s: float = Field(default=600.0, gt=0)

    @field_validator("key_prefix")
    @classmethod
    def _prefix_has_no_tags(cls, value: str) -> str:
        if not value or any(c in value for c in "{} \t\r\n"):
            raise ValueError("key_prefix must be non-empty, without braces or whitespace")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str) -> str:
        return check_url(value, REDIS_SCHEMES)

    @field_validator("broker_url")
    @classmethod
    def _broker_url(cls, value: str | None) -> str | None:
        return None if value is None else check_url(value, BROKER_SCHEMES)

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
