"""``compactor serve --workers N``: N processes on one listening socket (docs/http-api.md
"Serving processes").

The parent binds the socket, then forks N children; each runs uvicorn with its own event loop,
its own Redis pools and its own event reader (:mod:`api_client.server.fanout`), and shares
nothing with the others but the socket and Redis, as separate replicas would. The kernel hands
each new connection to one child. SIGTERM or SIGINT to the parent stops every child gracefully;
a child that dies stops the others and the parent exits 1, for the supervisor (systemd,
Kubernetes) to restart the whole.

Children are forked, not spawned: the app object (with the slow-client protocol class made for
these settings) is not picklable, and a fork starts a child without importing anything again.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
from types import FrameType

import uvicorn

__all__ = ["serve_processes"]

log = logging.getLogger("api_client.server")


def _child(config: uvicorn.Config, sock: socket.socket) -> None:
    uvicorn.Server(config).run(sockets=[sock])


def serve_processes(config: uvicorn.Config, count: int) -> int:
    """Serve ``config`` in ``count`` forked processes until stopped; 0 when stopped by a
    signal, 1 when a child died by itself."""
    sock = config.bind_socket()
    context = multiprocessing.get_context("fork")
    children = [context.Process(target=_child, args=(config, sock), name=f"serve-{i}")
                for i in range(count)]
    stopping = False

    def stop(signum: int = signal.SIGTERM, _: FrameType | None = None) -> None:
        nonlocal stopping
        stopping = stopping or signum in (signal.SIGTERM, signal.SIGINT)
        for child in children:
            if child.pid is not None and child.is_alive():
                os.kill(child.pid, signal.SIGTERM)

    for child in children:
        child.start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("serving in %d processes (parent %d)", count, os.getpid())
    died = False
    # One look at who is alive per turn: children that all exit between two looks left an
    # empty list, and wait([]) never returns (the parent hung on SIGTERM; bench_http saw it).
    while alive := [child.sentinel for child in children if child.is_alive()]:
        multiprocessing.connection.wait(alive)
        if not stopping and not died:
            died = True
            log.error("a serving process exited: stopping the others")
            stop(0)
    for child in children:
        child.join()
    sock.close()
    return 1 if died and not stopping else 0
