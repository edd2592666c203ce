"""One reader per server process for every long poll and event stream (docs/http-api.md
"Many waiters").

A worker writes each job event to its session's stream and a copy to its tenant's global
stream. The process's :class:`Fanout` holds ONE blocking ``XREAD`` on the global streams of
the tenants it serves (a fixed set of keys), on one connection of its own, and hands what it
reads to every waiter of the process:

- a long poll (``GET /v1/jobs/{id}?wait=``) registers for its job's end, then reads the record;
  the end of the job (its terminal event in the global stream) wakes it, and it reads the
  record again;
- an event stream (SSE, ``follow=true``) is a :class:`Follower` of one stream key (a session's
  events, or the tenant's global stream) from a stream id. An event the reader sees for that key
  makes the fanout read the key from the lowest position of its followers (one plain ``XREAD``
  without ``BLOCK``, on the fanout's own small pool) and give each follower what lies after its
  own position, in stream order. Registering reads once too, so what came before is sent.

So waiters cost no Redis connection each: the process uses one blocking connection and a few
pooled ones, whatever their number. Past ``COMPACTOR_API_WAITERS_MAX`` waiters in the process a
new one is refused (:class:`TooManyWaiters`: 429 ``too_many_waiters`` with ``Retry-After``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi.responses import JSONResponse

from api_client.contract.errors import BrokerUnavailableError, InvalidRequestError
from api_client.contract.job_events import decode_event, fill_entries
from api_client.contract.keys import ANY_TENANT, KeyLayout
from api_client.contract.redis_conn import make_async_redis
from api_client.contract.redis_flows import AsyncShell
from api_client.contract.settings import ClientSettings
from api_client.contract.wire import JobEvent
from api_client.server.problems import MEDIA_TYPE, problem_body

__all__ = ["WAITERS_CODE", "Fanout", "Follower", "TooManyWaiters", "stream_position",
           "waiters_refused"]

log = logging.getLogger("api_client.server")

WAITERS_CODE = "too_many_waiters"
_READ_COUNT = 500  # entries one read takes from a stream
_RETRY_S = 1.0  # pause after a failed read before the next one
_StreamId = tuple[int, int]
_STREAM_ID = re.compile(r"\d+(-\d+)?")


class TooManyWaiters(Exception):
    """The process holds ``COMPACTOR_API_WAITERS_MAX`` waiters already."""

    retry_after_s = 1


def stream_position(stream_id: str) -> _StreamId:
    """``"<ms>-<seq>"`` as a pair that orders as the stream does."""
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


@dataclass(eq=False)
class Follower:
    """One event stream's place in a stream: the events after ``position`` come into
    ``queue`` in stream order."""

    key: str
    position: _StreamId
    queue: asyncio.Queue[JobEvent] = field(default_factory=asyncio.Queue)


class Fanout:
    """The process's reader (see the module). :meth:`start` in the server's event loop."""

    def __init__(self, settings: ClientSettings, layouts: Iterable[KeyLayout],
                 waiters_max: int) -> None:
        self.layouts: Mapping[str, KeyLayout] = {lay.global_events: lay for lay in layouts}
        self.waiters_max = waiters_max
        self.waiters = 0
        self._settings = settings
        # One connection for the blocking read; a few for the reads that follow a ring.
        self._blocking = make_async_redis(settings, blocking=True)
        self._reads = make_async_redis(settings.model_copy(update={"redis_pool_size": 4}))
        # The entries the events name, read back for the followers (job_events.fill_entries).
        self._entries = AsyncShell(self._reads)
        self._sessions = KeyLayout(settings.key_prefix, ANY_TENANT)
        self._jobs: dict[str, set[asyncio.Future[None]]] = {}
        self._followers: dict[str, set[Follower]] = {}
        self._fetching: dict[str, asyncio.Task[None]] = {}
        self._dirty: set[str] = set()
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="fanout")

    async def aclose(self) -> None:
        for task in [self._task, *self._fetching.values()]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        await self._blocking.aclose()  # type: ignore[attr-defined]
        await self._reads.aclose()  # type: ignore[attr-defined]

    # -- waiters ---------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def job_end(self, job_id: str) -> AsyncIterator[asyncio.Future[None]]:
        """A future done when an end of ``job_id`` is seen after this call (read the record
        inside the block: an end before it is there)."""
        self._admit()
        ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        try:
            await self._wait_ready()
            self._jobs.setdefault(job_id, set()).add(ended)
            yield ended
        finally:
            self.waiters -= 1
            futures = self._jobs.get(job_id)
            if futures is not None:
                futures.discard(ended)
                if not futures:
                    del self._jobs[job_id]

    async def follow(self, key: str, since: str | None) -> Follower:
        """A follower of ``key`` from ``since`` (``start``, ``now`` or a stream id; None: now).
        Raises :class:`TooManyWaiters`, or InvalidRequestError for a bad ``since``.
        :meth:`unfollow` it when done."""
        start = _start(since)
        self._admit()
        try:
            await self._wait_ready()
            if start is None:
                last = await self._reads.xrevrange(key, count=1)
                start = str(last[0][0]) if last else "0-0"
        except BaseException:
            self.waiters -= 1
            raise
        follower = Follower(key, stream_position(str(start)))
        self._followers.setdefault(key, set()).add(follower)
        self._ring(key)  # what is there after its position
        return follower

    def unfollow(self, follower: Follower) -> None:
        followers = self._followers.get(follower.key)
        if followers is not None and follower in followers:
            followers.discard(follower)
            self.waiters -= 1
            if not followers:
                del self._followers[follower.key]

    def _admit(self) -> None:
        if self.waiters_max and self.waiters >= self.waiters_max:
            raise TooManyWaiters(f"this server process holds {self.waiters} waiting requests "
                                 f"(COMPACTOR_API_WAITERS_MAX): retry, or ask another one")
        self.waiters += 1

    async def _wait_ready(self) -> None:
        if self._ready.is_set():
            return
        try:
            await asyncio.wait_for(self._ready.wait(), self._settings.enqueue_timeout_s)
        except TimeoutError:
            raise BrokerUnavailableError("the event reader cannot reach Redis") from None

    # -- the reader ------------------------------------------------------------------------

    async def _run(self) -> None:
        cursors: dict[str, str] = {}
        while True:
            try:
                if not cursors:
                    cursors = await self._tails()
                    self._ready.set()
                reply = await self._blocking.xread(cursors, count=_READ_COUNT,  # type: ignore[arg-type]
                                                   block=int(_RETRY_S * 30_000))
            except asyncio.CancelledError:
                raise
            except Exception as err:  # Redis away: the waiters' own timeouts still hold
                log.warning("event reader: %s", err)
                await asyncio.sleep(_RETRY_S)
                continue
            if not reply:  # a quiet while: read every followed stream once more, so an event
                for key in list(self._followers):  # whose global copy was lost still gets out
                    self._ring(key)
            for key, entries in reply or ():
                if entries:
                    cursors[key] = str(entries[-1][0])
                    self._dispatch(key, entries)

    async def _tails(self) -> dict[str, str]:
        """Each global stream's last id: the reader's start (never ``$``, which would lose
        what comes between two reads)."""
        tails = {}
        for key in self.layouts:
            last = await self._reads.xrevrange(key, count=1)
            tails[key] = str(last[0][0]) if last else "0-0"
        return tails

    def _dispatch(self, global_key: str, entries: list[Any]) -> None:
        if global_key in self._followers:
            self._ring(global_key)
        if not (self._jobs or self._followers):
            return
        layout = self.layouts[global_key]
        for stream_id, fields in entries:
            if not fields or "data" not in fields:
                continue
            waiting = self._jobs.get(fields.get("job", ""))
            if not (waiting or self._followers):
                continue
            event = decode_event(str(stream_id), fields)
            if waiting and event.terminal:
                for ended in waiting:
                    if not ended.done():
                        ended.set_result(None)
            key = layout.session(event.session_id).events
            if key in self._followers:
                self._ring(key)

    def _ring(self, key: str) -> None:
        """Read ``key`` for its followers (once more if a read is under way already)."""
        if key in self._fetching:
            self._dirty.add(key)
            return
        self._fetching[key] = asyncio.get_running_loop().create_task(self._fetch(key))

    async def _fetch(self, key: str) -> None:
        try:
            while (followers := self._followers.get(key)) is not None:
                self._dirty.discard(key)
                lowest = min(f.position for f in followers)
                try:
                    reply = await self._reads.xread({key: f"{lowest[0]}-{lowest[1]}"},
                                                    count=_READ_COUNT)
                    entries = reply[0][1] if reply else []
                    # A pending entry trimmed from the stream comes back without fields.
                    events = await self._entries.run(fill_entries(self._sessions, [
                        decode_event(str(sid), fields) for sid, fields in entries if fields]))
                except Exception as err:  # Redis away: read again after a pause
                    log.warning("event reader: %s", err)
                    await asyncio.sleep(_RETRY_S)
                    continue
                _deliver(events, self._followers.get(key, set()))
                if len(entries) < _READ_COUNT and key not in self._dirty:
                    return
        finally:
            del self._fetching[key]
            self._dirty.discard(key)


def _start(since: str | None) -> str | None:
    """The stream id after which ``since`` begins (None: the stream's last, i.e. ``now``)."""
    if since in (None, "now", "$"):
        return None
    if since == "start":
        return "0-0"
    if not _STREAM_ID.fullmatch(str(since)):
        raise InvalidRequestError(
            f"since={since!r}: 'start', 'now' or a stream id such as '1700000000000-0'")
    return since


def _deliver(events: list[JobEvent], followers: set[Follower]) -> None:
    for event in events:
        at = stream_position(str(event.stream_id))
        for follower in followers:
            if at > follower.position:
                follower.position = at
                follower.queue.put_nowait(event)


def waiters_refused(err: TooManyWaiters) -> JSONResponse:
    """429 ``too_many_waiters`` with ``Retry-After`` (problem+json)."""
    return JSONResponse(problem_body(429, WAITERS_CODE, str(err)), status_code=429,
                        media_type=MEDIA_TYPE,
                        headers={"Retry-After": str(TooManyWaiters.retry_after_s)})
