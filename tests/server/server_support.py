"""The HTTP API for the server tests: uvicorn in a thread of this process on a free loopback
port (real sockets), in front of a real Redis and a real worker the test starts."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from conftest import free_port
from pydantic import SecretStr

from api_client import ClientSettings
from api_client.server.asgi import create_app
from api_client.server.settings import ServerSettings

TOKEN = "test-token-0123456789abcdef"


def server_settings(tokens: dict[str, str] | None = None, **overrides: Any) -> ServerSettings:
    table = {TOKEN: "default"} if tokens is None else tokens
    secret = SecretStr(json.dumps(table)) if table else None
    return ServerSettings(api_tokens=secret, **overrides)


@contextmanager
def running_api(redis_url: str, settings: ServerSettings | None = None) -> Iterator[str]:
    """The app on uvicorn; yields its base URL (``http://127.0.0.1:<port>``)."""
    port = free_port()
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
