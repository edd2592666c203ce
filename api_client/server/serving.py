"""Run the HTTP API on uvicorn, after the start checks: ``compactor serve`` and
``python -m api_client.server`` (the same options) both end here."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import sys
from collections.abc import Sequence

from api_client.contract.errors import ConfigurationError
from api_client.contract.settings import ClientSettings, load_settings
from api_client.server.auth import TokenTable, check_start
from api_client.server.settings import ServerSettings
from api_client.server.slow_clients import uvicorn_options
from api_client.server.summarize_url import access_log_config

__all__ = ["SERVER_EXTRA", "add_options", "main", "run", "serve"]

SERVER_EXTRA = ("fastapi", "uvicorn")

log = logging.getLogger("api_client.server")


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=None,
                        help="address to listen on (default COMPACTOR_API_HOST, 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None,
                        help="port (default COMPACTOR_API_PORT, 8080; 0: a free one)")
    parser.add_argument("--workers", type=int, default=None,
                        help="serving processes on the port (default COMPACTOR_API_WORKERS, 1)")
    parser.add_argument("--insecure-no-auth", action="store_true",
                        help="serve without bearer tokens; only on a loopback address")
    parser.add_argument("--log-level", default="info",
                        choices=["critical", "error", "warning", "info", "debug"],
                        help="uvicorn's log level (default: %(default)s)")


def serve(settings: ServerSettings, *, insecure_no_auth: bool = False,
          redis_url: str | None = None, log_level: str = "info") -> int:
    """Check the settings (one-line :class:`ConfigurationError`), then serve until stopped
    (in ``settings.api_workers`` processes: :mod:`api_client.server.processes`)."""
    import uvicorn

    from api_client.server.asgi import create_app

    check_start(TokenTable.parse(settings.api_tokens), settings.api_host, insecure_no_auth)
    client = load_settings(ClientSettings, **({"redis_url": redis_url} if redis_url else {}))
    if insecure_no_auth:
        log.warning("serving WITHOUT authentication on %s (--insecure-no-auth)",
                    settings.api_host)
    # proxy_headers off: the app reads no client address, and a forged header must not matter.
    # The access log shows no summarize URL's secret (summarize_url.access_log_config).
    config = uvicorn.Config(create_app(settings, client), host=settings.api_host,
                            port=settings.api_port, log_level=log_level, proxy_headers=False,
                            server_header=False, timeout_graceful_shutdown=10,
                            log_config=access_log_config(),
                            **uvicorn_options(settings))  # slow clients: docs/security.md
    if settings.api_workers > 1:
        from api_client.server.processes import serve_processes

        return serve_processes(config, settings.api_workers)
    server = uvicorn.Server(config)
    server.run()
    return 0 if server.started else 3  # as uvicorn.run: 3 when it could not start


def main(argv: Sequence[str] | None = None, *, redis_url: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog="compactor serve",
                                     description="Serve the Compactor HTTP API")
    add_options(parser)
    args = parser.parse_args(argv)
    return run(args, redis_url=redis_url)


def run(args: argparse.Namespace, *, redis_url: str | None = None) -> int:
    """Serve with parsed :func:`add_options` options; 2 with one line when it cannot start."""
    missing = [name for name in SERVER_EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        print(f"compactor serve: error: the server extra is not installed (no "
              f"{', '.join(missing)}): pip install 'compactor[server]'", file=sys.stderr)
        return 2
    overrides = {k: v for k, v in (("api_host", args.host), ("api_port", args.port),
                                   ("api_workers", args.workers)) if v is not None}
    try:
        settings = ServerSettings(**overrides)
        return serve(settings, insecure_no_auth=args.insecure_no_auth, redis_url=redis_url,
                     log_level=args.log_level)
    except ConfigurationError as err:
        print(f"compactor serve: error: {err}", file=sys.stderr)
        return 2
