"""Retention: every key of a session expires once the session has been idle for
``session_ttl_s`` (``COMPACTOR_SESSION_TTL_S``, 30 days; 0 = keep forever).

Each write of a session refreshes the TTLs of all its keys in the same step (they share one
expiry instant, moved once 1 % of the retention has run down: a session expires between 99 %
and 100 % of the retention after its last write). The Lua scripts end their writing paths with
``retain(...)`` (``lua/_retention.lua``, included like ``_walk``); writes made by plain
commands (progress events, token counts, the loop guard's count, a refusal's event) send
:func:`retain_command` / :func:`retain_in` (``lua/retain.lua``) in the same MULTI or
pipeline.
Keys with a shorter lifetime of their own (events, single-flight slots, draft, pace, ...) keep
it, capped at the retention; job records keep their own TTLs (``job_ttl_s``).
"""

from __future__ import annotations

from typing import Any

from api_client.contract.lua_scripts import eval_args
from api_client.contract.redis_flows import Command, cmd

__all__ = ["capped_ttl", "retain_args", "retain_command", "retain_in"]


def retain_args(session_key: str, retention_s: int, *, written: bool = False,
                ttl_s: int | None = None) -> tuple[str | int, ...]:
    """``EVAL`` of ``retain.lua`` for the session ``session_key`` belongs to, as arguments of a
    pipeline's ``execute_command`` (:func:`~api_client.contract.lua_scripts.eval_args`), for a
    flow's MULTI, which cannot load the script first (a NOSCRIPT there could not be recovered).
    ``written``: ``session_key`` is the only key of the session the write touched, so only it
    is checked unless the expiry instant moves (``retain_keys`` of ``lua/_retention.lua``: two
    commands in Redis instead of twenty); ``ttl_s``: the TTL the write gave it just before (an
    ``EXPIRE`` in the same pipeline), capped without reading it back (one command)."""
    return eval_args("retain", [session_key], _args(retention_s, written, ttl_s))


def _args(retention_s: int, written: bool, ttl_s: int | None) -> list[str]:
    mode: list[str] = []
    if written:
        mode = ["written"] if ttl_s is None else ["written", str(ttl_s)]
    return [str(retention_s), *mode]


def retain_in(pipe: Any, session_key: str, retention_s: int, *, written: bool = False,
              ttl_s: int | None = None) -> None:
    """Queue the refresh in a redis-py pipeline or MULTI (plain or Cluster) as EVAL with the
    loader's text (:func:`~api_client.contract.lua_scripts.eval_args`). It rides along with
    nearly every write of a job (each event, each count): EVALSHA loaded before the MULTI
    would add a ``SCRIPT EXISTS`` round trip to every one of them, and a NOSCRIPT inside the
    MULTI (Redis restarted) cannot be recovered."""
    pipe.execute_command(*retain_args(session_key, retention_s, written=written, ttl_s=ttl_s))


def retain_command(session_key: str, retention_s: int) -> Command:
    """The same as a flow command (a client's pipeline)."""
    return cmd("execute_command", *retain_args(session_key, retention_s))


def capped_ttl(ttl_s: int, retention_s: int) -> int:
    """A key's own TTL, never longer than the session's retention (0 = no retention)."""
    return min(ttl_s, retention_s) if retention_s > 0 else ttl_s
