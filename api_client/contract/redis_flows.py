"""Redis calls as data, and the two shells that run them (sans I/O, as httpx's ``BaseClient``).

Every client operation is written once, as a generator (a *flow*) that yields the Redis calls it
needs (:class:`Command`, :class:`Pipeline`, :class:`Script`), receives each reply (or, thrown in
at the ``yield``, the error it raised) and returns the operation's result. A flow is run by one
driver per side, as httpx's ``Auth.auth_flow`` is: :func:`drive` (sync) and :func:`drive_async`,
given what executes one call. :class:`SyncShell` executes calls on a ``redis.Redis``,
:class:`AsyncShell` on a ``redis.asyncio.Redis``; neither knows any operation. A dead server
becomes :class:`BrokerUnavailableError` and a full one (``OOM``) :class:`StorageFullError` in one
place per shell (:meth:`SyncShell.execute`, :meth:`AsyncShell.execute`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, NoReturn, TypeAlias, TypeVar

import redis
import redis.asyncio
from redis.exceptions import NoScriptError

from api_client.contract.lua_scripts import CONTRACT_SCRIPTS, lua
from api_client.contract.redis_conn import (
    REDIS_DOWN,
    STORAGE_FULL,
    check_decoding,
    refusal,
    storage_full,
    unavailable,
)

_Pack: TypeAlias = Callable[[tuple[Any, ...]], bytes]
pack_command: _Pack | None
try:  # redis[hiredis]: the C packer of the request path's EVALSHA (see SyncShell._evalsha)
    from hiredis import pack_command
except ImportError:  # without hiredis the shell sends scripts through redis-py
    pack_command = None

__all__ = [
    "AsyncShell",
    "Call",
    "Command",
    "Flow",
    "Pause",
    "Pipeline",
    "Rescue",
    "Script",
    "SyncShell",
    "cmd",
    "drive",
    "drive_async",
    "replied",
]

T = TypeVar("T")
C = TypeVar("C")
R = TypeVar("R", "redis.Redis[str]", "redis.asyncio.Redis[str]")

# What to make of an error reply: raise a typed error (or the reply's own), or return a value
# that stands in for the reply.
Rescue: TypeAlias = Callable[[redis.ResponseError], Any]


def reraise(err: redis.ResponseError) -> NoReturn:
    raise err


@dataclass(frozen=True, slots=True)
class Command:
    """One redis-py command by method name (``hgetall``, ``xread``, ...)."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    rescue: Rescue = reraise
    # On the connection without a read timeout (XREAD BLOCK may wait longer than any timeout).
    blocking: bool = False


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Commands sent in one round trip (MULTI/EXEC when ``transaction``); replies as a list."""

    commands: tuple[Command, ...]
    transaction: bool = True
    rescue: Rescue = reraise


@dataclass(frozen=True, slots=True)
class Script:
    """A packaged Lua script (``<package>/lua/<name>.lua``) by EVALSHA."""

    name: str
    keys: Sequence[str]
    args: Sequence[str]
    rescue: Rescue = reraise
    package: str = CONTRACT_SCRIPTS


@dataclass(frozen=True, slots=True)
class Pause:
    """No Redis call: the shell sleeps this long (``time.sleep`` / ``asyncio.sleep``), for a
    flow that waits for Redis to come back."""

    seconds: float


Call: TypeAlias = Command | Pipeline | Script | Pause
Flow: TypeAlias = Generator[Call, Any, T]


def cmd(name: str, *args: Any, **kwargs: Any) -> Command:
    return Command(name, args, kwargs)


class _Shell(Generic[R]):
    def __init__(self, client: R, blocking: Callable[[], R] | None = None) -> None:
        check_decoding(client)
        self.redis: R = client
        self._blocking: Callable[[], R] | None = blocking
        self._scripts: dict[tuple[str, str], Any] = {}

    def _script(self, call: Script) -> Any:
        """redis-py's script object (EVALSHA, loading the script on NOSCRIPT)."""
        key = (call.package, call.name)
        script = self._scripts.get(key)
        if script is None:
            script = self._scripts[key] = self.redis.register_script(lua(call.name, call.package))
        return script

    def _bound(self, call: Command | Pipeline | Script) -> Callable[[], Any]:
        """The call as a redis-py callable (no I/O yet: it runs when called)."""
        if isinstance(call, Script):
            return partial(self._script(call), keys=list(call.keys), args=list(call.args))
        if isinstance(call, Pipeline):
            pipe = self.redis.pipeline(transaction=call.transaction)
            for c in call.commands:
                getattr(pipe, c.name)(*c.args, **c.kwargs)
            return pipe.execute
        target = self._blocking() if call.blocking and self._blocking else self.redis
        method: Callable[..., Any] = getattr(target, call.name)
        return partial(method, *call.args, **call.kwargs)


def replied(err: Exception, rescue: Rescue = reraise) -> Any:
    """What an error of a Redis call means, in one place for both shells and the worker's stores
    (``worker.store.leases.guarded``): a typed error (a full or read-only Redis, refused
    credentials, Redis down), the caller's own ``rescue`` of an error reply, or the error
    itself."""
    if isinstance(err, STORAGE_FULL):
        raise storage_full(err) from err
    if (refused := refusal(err)) is not None:
        raise refused from err
    if isinstance(err, redis.ResponseError):
        return rescue(err)
    if isinstance(err, REDIS_DOWN):
        raise unavailable(err) from err
    raise err


def _replied(call: Command | Pipeline | Script, err: Exception) -> Any:
    return replied(err, call.rescue)


def drive(flow: Generator[C, Any, T], execute: Callable[[C], Any]) -> T:
    """The sync driver: run ``flow`` to its result, each call it yields by ``execute``; the
    reply is sent back, or the error it raised thrown in (the flow decides what it means)."""
    reply: Any = None
    error: Exception | None = None
    while True:
        try:
            call = flow.send(reply) if error is None else flow.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        try:
            reply, error = execute(call), None
        except Exception as err:
            reply, error = None, err


async def drive_async(flow: Generator[C, Any, T], execute: Callable[[C], Awaitable[Any]]) -> T:
    """:func:`drive` for asyncio: the same loop, each call awaited."""
    reply: Any = None
    error: Exception | None = None
    while True:
        try:
            call = flow.send(reply) if error is None else flow.throw(error)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        try:
            reply, error = await execute(call), None
        except Exception as err:
            reply, error = None, err


class SyncShell(_Shell["redis.Redis[str]"]):
    def __init__(self, client: redis.Redis[str],
                 blocking: Callable[[], redis.Redis[str]] | None = None) -> None:
        super().__init__(client, blocking)
        # Scripts go straight to a pooled connection on a plain redis.Redis (not a cluster,
        # not a subclass with its own execute_command).
        self._pack: _Pack | None = pack_command if type(client) is redis.Redis else None

    def run(self, flow: Flow[T]) -> T:
        return drive(flow, self.execute)

    def execute(self, call: Call) -> Any:
        if isinstance(call, Pause):
            time.sleep(call.seconds)
            return None
        try:
            if self._pack is not None and isinstance(call, Script):
                return self._evalsha(call, self._pack)
            return self._bound(call)()
        except Exception as err:
            return _replied(call, err)

    def _evalsha(self, call: Script, pack: _Pack) -> Any:
        """EVALSHA packed in C and sent on a pooled connection. Kept because ``make bench``
        shows it: redis-py's ``execute_command`` (its retry wrapper, hooks and per-argument
        packing) made ``compact()`` measurably slower (bench_enqueue, issue 28). The same retry rule
        as :func:`~api_client.contract.redis_conn.make_redis`: one immediate retry on a dropped
        connection; a timeout is not re-sent."""
        script = self._script(call)
        packed = [pack(("EVALSHA", script.sha, len(call.keys), *call.keys, *call.args))]
        try:
            return self._send(packed)
        except NoScriptError:  # a restarted or flushed server: load it, as redis-py does
            self.redis.script_load(script.script)  # type: ignore[no-untyped-call]
            return self._send(packed)

    def _send(self, packed: list[bytes]) -> Any:
        pool = self.redis.connection_pool
        for attempt in (1, 2):
            conn = pool.get_connection()
            try:
                # The connection disconnects itself on a socket error; a reply error is read.
                conn.send_packed_command(packed)
                return conn.read_response()
            except redis.ConnectionError:
                if attempt == 2:
                    raise
            finally:
                pool.release(conn)
        raise AssertionError("unreachable")  # pragma: no cover


class AsyncShell(_Shell["redis.asyncio.Redis[str]"]):
    def __init__(self, client: redis.asyncio.Redis[str],
                 blocking: Callable[[], redis.asyncio.Redis[str]] | None = None) -> None:
        super().__init__(client, blocking)
        # As SyncShell: scripts straight to a pooled connection of a plain redis.asyncio.Redis.
        self._pack: _Pack | None = (pack_command if type(client) is redis.asyncio.Redis
                                    else None)

    async def run(self, flow: Flow[T]) -> T:
        return await drive_async(flow, self.execute)

    async def execute(self, call: Call) -> Any:
        if isinstance(call, Pause):
            await asyncio.sleep(call.seconds)
            return None
        try:
            if self._pack is not None and isinstance(call, Script):
                return await self._evalsha(call, self._pack)
            return await self._bound(call)()
        except Exception as err:
            return _replied(call, err)

    async def _evalsha(self, call: Script, pack: _Pack) -> Any:
        """:meth:`SyncShell._evalsha` for asyncio, for the same reason: redis-py's asyncio
        ``execute_command`` (its retry wrapper, observability hooks, per-argument packing) was
        ~17 % of ``compactor serve``'s CPU on a compact or an append (bench_http, issue 42)."""
        script = self._script(call)
        packed = [pack(("EVALSHA", script.sha, len(call.keys), *call.keys, *call.args))]
        try:
            return await self._send(packed)
        except NoScriptError:  # a restarted or flushed server: load it, as redis-py does
            await self.redis.script_load(script.script)  # type: ignore[no-untyped-call]
            return await self._send(packed)

    async def _send(self, packed: list[bytes]) -> Any:
        pool = self.redis.connection_pool
        for attempt in (1, 2):
            conn = await pool.get_connection()
            try:
                # On a socket error or a cancel the connection disconnects itself (redis-py).
                await conn.send_packed_command(packed)
                return await conn.read_response()
            except redis.ConnectionError:
                if attempt == 2:
                    raise
            finally:
                await pool.release(conn)
        raise AssertionError("unreachable")  # pragma: no cover
