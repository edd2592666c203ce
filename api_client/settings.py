"""Client settings (pydantic-settings, env prefix ``COMPACTOR_``, ``.env`` read when present).

The worker's ``WorkerSettings`` subclasses :class:`ClientSettings`, so every field here means the
same on both sides. ``COMPACTOR_REDIS_URL`` serves sessions, broker and results unless
``COMPACTOR_BROKER_URL`` / ``COMPACTOR_RESULT_BACKEND`` override it.
"""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["ClientSettings"]


class ClientSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="COMPACTOR_", env_file=".env", env_file_encoding="utf-8", extra="ignore",
    )

    redis_url: str = "redis://127.0.0.1:6379/0"
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

    # The request path's budget: with Redis down, enqueue fails within about this long.
    enqueue_timeout_s: float = Field(default=2.0, gt=0)
    # Emit Celery's task-sent event so Flower sees jobs from "sent" on (one more publish).
    send_sent_event: bool = True

    # SPEC §14 compaction settings used by should_compact (and by the worker's planner).
    compaction_enabled: bool = True
    reserve_tokens: int = Field(default=16_384, ge=0)
    keep_recent_tokens: int = Field(default=20_000, ge=0)

    @field_validator("key_prefix")
    @classmethod
    def _prefix_has_no_tags(cls, value: str) -> str:
        if not value or any(c in value for c in "{} \t\r\n"):
            raise ValueError("key_prefix must be non-empty, without braces or whitespace")
        return value

    @property
    def resolved_broker_url(self) -> str:
        return self.broker_url or self.redis_url

    @property
    def resolved_result_backend(self) -> str:
        return self.result_backend or self.redis_url

    @property
    def connect_timeout_s(self) -> float:
        """TCP connect timeout: a quarter of the budget, so one retry still fits."""
        return self.enqueue_timeout_s / 4

    @property
    def socket_timeout_s(self) -> float:
        """Per-command timeout on the request-path connections (not used for blocking reads)."""
        return self.enqueue_timeout_s / 2
