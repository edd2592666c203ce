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
    # Serving processes on the one port (``--workers``; docs/http-api.md "Serving
    # processes"): about one per core the server may use. Each has its own pools and reader.
    api_workers: int = Field(default=1, ge=1)
    # Larger request bodies are refused with 413 before they are read to the end (a session
    # import is the largest body: pi JSONL of a long session runs to a few MB).
    api_max_body_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    # The longest GET /v1/jobs/{id}?wait=S holds a request (a larger S is cut to this).
    api_max_wait_s: float = Field(default=60.0, gt=0)
    # An SSE stream with nothing to say sends a comment this often (proxies close idle ones).
    api_sse_keepalive_s: float = Field(default=15.0, gt=0)
    # Long polls and following event streams one process holds at most (each is an open
    # socket and a few hundred bytes: no Redis connection, docs/http-api.md "Many waiters");
    # past it a new one is 429 too_many_waiters with Retry-After. 0 = no limit.
    api_waiters_max: int = Field(default=10_000, ge=0)
    # Other requests one process works on at once (server.inflight); past it 429 overloaded with
    # Retry-After. An event loop serves them one at a time: a few hundred keep each one's wait
    # well under the per-command Redis timeout. 0 = no limit.
    api_inflight_max: int = Field(default=256, ge=0)
    # /v1/summarize and /v1/chat/completions wait this long for their job, then cancel it and
    # answer 504; above the workers' job deadline (300 s) so the job's own end comes first.
    api_summarize_timeout_s: float = Field(default=330.0, gt=0)
    # What one tenant may take of a replica (docs/security.md): requests per second (a token
    # bucket refilled at this rate, holding at most api_rate_burst; 0 = no limit) and open
    # event streams (0 = no limit). Over either: 429 with Retry-After, before any header out.
    api_rate_per_s: float = Field(default=100.0, ge=0)
    api_rate_burst: int = Field(default=200, gt=0)
    # A request over the rate gets its 429 after this pause (0: at once), outside the in-flight
    # count: a client that retries at once is paced to one request a pause per connection, and
    # a flood of refusals does not take the event loop from the other tenants.
    api_rate_pause_s: float = Field(default=1.0, ge=0)
    # Each open stream holds a socket and a task of this process for as long as it is open: a
    # tenant's streams cannot take what its other requests, and the other tenants, need.
    api_sse_streams_max: int = Field(default=32, ge=0)
    # Slow clients (slowloris): a connection whose request head is not in after
    # api_header_timeout_s, or whose body is not in after api_body_timeout_s, is closed; an
    # idle keep-alive connection after api_keepalive_timeout_s; a head over api_max_header_bytes
    # is refused (400).
    api_header_timeout_s: float = Field(default=10.0, gt=0)
    api_body_timeout_s: float = Field(default=60.0, gt=0)
    api_keepalive_timeout_s: int = Field(default=5, gt=0)
    api_max_header_bytes: int = Field(default=16 * 1024, ge=1024)
    # GET /v1/sessions/{id} and /context build the whole session as JSON: a session whose
    # stored lines are over this is refused (413 session_too_large_to_read) on those two
    # routes; GET /v1/sessions/{id}/jsonl streams a session of any size in pages.
    api_max_read_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
