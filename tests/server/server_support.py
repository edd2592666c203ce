"""The HTTP API for the server tests: uvicorn in a thread of this process on a free loopback
port (real sockets), in front of a real Redis and a real worker the test starts."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import redis
import uvicorn
from conftest import free_port
from pydantic import SecretStr

from api_client import ClientSettings
from api_client.contract.keys import KeyLayout
from api_client.server.asgi import create_app
from api_client.server.settings import ServerSettings
from helpers.waits import wait_until

TOKEN = "test-token-0123456789abcdef"
# The tokens of two more tenants (``tenant_api`` in conftest binds them) and the sample session.
ACME, GLOBEX = TOKEN + "-acme", TOKEN + "-globex"
DEMO = (Path(__file__).resolve().parents[2] / "worker" / "data" / "demo-session.jsonl").read_text(
    encoding="utf-8")


def tenant_http(url: str, token: str) -> httpx.Client:
    """A client of the API with ``token`` (one tenant's)."""
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def server_settings(tokens: dict[str, str] | None = None, **overrides: Any) -> ServerSettings:
    table = {TOKEN: "default"} if tokens is None else tokens
    secret = SecretStr(json.dumps(table)) if table else None
    return ServerSettings(api_tokens=secret, **overrides)


@contextmanager
def running_api(redis_url: str, settings: ServerSettings | None = None,
                app: Any = None) -> Iterator[str]:
    """The app (``create_app``'s, unless given) on uvicorn; yields its base URL
    (``http://127.0.0.1:<port>``)."""
    port = free_port()
    if app is None:
        app = create_app(settings or server_settings(), ClientSettings(redis_url=redis_url))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the HTTP API did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)


def wait_alive(redis_url: str, timeout: float = 10.0) -> None:
    """Until a worker's heartbeat counts (``GET /v1/workers``' read): a worker that has just
    started may not have beaten yet, and the summary routes answer 424 ``no_worker`` while none
    has."""
    raw: redis.Redis[str] = redis.Redis.from_url(redis_url, decode_responses=True)
    key = KeyLayout().workers

    def fresh() -> int:
        seconds, micros = raw.time()
        return int(raw.zcount(key, f"({int(seconds) * 1000 + int(micros) // 1000}", "+inf"))

    try:
        wait_until(fresh, timeout, "a worker's heartbeat")
    finally:
        raw.close()
