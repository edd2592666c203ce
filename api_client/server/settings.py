"""Settings of ``compactor serve`` (env prefix ``COMPACTOR_``, ``.env`` read when present).

The Redis, broker and key settings are the client's (:class:`ClientSettings`): the server is a
client. These add what only the HTTP side needs; nothing here imports the web framework.
"""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["ServerSettings"]


class ServerSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="COMPACTOR_", env_file=".env", env_file_encoding="utf-8", extra="ignore",
        env_ignore_empty=True,
    )

    # A JSON object, bearer token -> tenant name (docs/tenants.md). Unset: the
    # server refuses to start, unless told --insecure-no-auth on a loopback address.
    api_tokens: SecretStr | None = None
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8080, ge=0, le=65_535)
    # Larger request bodies are refused with 413 before they are read to the end (a session
    # import is the largest body: pi JSONL of a long session runs to a few MB).
    api_max_body_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    # The longest GET /v1/jobs/{id}?wait=S holds a request (a larger S is cut to this).
    api_max_wait_s: float = Field(default=60.0, gt=0)
    # An SSE stream with nothing to say sends a comment this often (proxies close idle ones).
    api_sse_keepalive_s: float = Field(default=15.0, gt=0)
    # /v1/summarize and /v1/chat/completions wait this long for their job, then cancel it and
    # answer 504; above the workers' job deadline (300 s) so the job's own end comes first.
    api_summarize_timeout_s: float = Field(default=330.0, gt=0)
