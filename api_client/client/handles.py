"""Job handles: wait for a job's completion event without polling, cancel it, read its record.

``wait`` blocks in Redis (``XREAD BLOCK`` on the session's event stream, from the stream id that
was current when the job was enqueued) until the job's completion event arrives, so it wakes as
soon as the worker's ``finish`` commits, and costs nothing while it waits. Written once
(:meth:`_HandleCore._wait`); the sync and asyncio handles only run it.

A Redis outage shorter than the wait's timeout is ridden out: the read is tried again with a
short backoff (from the same stream id, so no event is missed; the record is read once Redis is
back in case the stream did not survive). Without a timeout, an outage longer than
:data:`OUTAGE_LIMIT_S` raises :class:`BrokerUnavailableError`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeAlias

from api_client.client.jobs import JobFlows
from api_client.client.orchestration import JobRef
from api_client.contract.errors import (
    BrokerUnavailableError,
    CompactionLoopError,
    JobCancelledError,
    JobFailedError,
    JobTimeoutError,
)
from api_client.contract.job_enums import JobKind, JobState
from api_client.contract.job_events import decode_event, fill_entries
from api_client.contract.job_records import get_record
from api_client.contract.redis_flows import Call, Command, Flow, Pause, cmd
from api_client.contract.wire import JobEvent, JobRecord, PruneResult, job_error_text

if TYPE_CHECKING:
    from api_client.client.transport import AsyncTransport, SyncTransport

__all__ = ["OUTAGE_LIMIT_S", "AsyncJobHandle", "JobHandle", "JobResult", "ObserveResult"]

# How long ``wait(timeout=None)`` tries to reach Redis again before it gives up.
OUTAGE_LIMIT_S = 60.0
_RECONNECT_FIRST_S = 0.1
_RECONNECT_CAP_S = 1.0

# compact / branch_summary: the entry written (a branch summary with nothing to summarise only
# moves the leaf: None); prune: a PruneResult; summarize: its result ({"summary": ...}).
JobResult: TypeAlias = dict[str, Any] | PruneResult | None


def outcome(kind: JobKind, job_id: str, state: JobState, entry: dict[str, Any] | None,
            result: dict[str, Any] | None, error: str | None) -> JobResult:
    """The value ``wait`` returns for a finished job, or the typed error it raises."""
    if state is JobState.FAILED and result and isinstance(result.get("loopGuard"), dict):
        guard = result["loopGuard"]
        raise CompactionLoopError(error or job_error_text(kind, state), job_id=job_id,
                                  count=int(guard.get("count", 0)),
                                  limit=int(guard.get("limit", 0)),
                                  window_s=float(guard.get("windowS", 0.0)))
    if state is JobState.FAILED:
        raise JobFailedError(error or job_error_text(kind, state), job_id=job_id)
    if state is JobState.CANCELLED:
        raise JobCancelledError(error or job_error_text(kind, state), job_id=job_id)
    if kind is JobKind.PRUNE:
        return PruneResult.model_validate(result or {})
    if kind is JobKind.SUMMARIZE:
        return result  # {"summary": ...}: a summarize job writes no entry
    return entry


def from_event(event: JobEvent) -> JobResult:
    assert event.state is not None
    return outcome(event.kind, event.job_id, event.state, event.entry, event.result, event.error)


def from_record(record: JobRecord) -> JobResult:
    return outcome(record.kind, record.id, record.state, record.entry, record.result, record.error)


def completion_in(reply: Any, job_id: str) -> tuple[str | None, JobEvent | None]:
    """(last stream id seen, this job's completion event if the batch holds it)."""
    last: str | None = None
    for stream_id, fields in (reply[0][1] if reply else ()):
        last = stream_id
        if isinstance(fields, Mapping) and fields.get("job") == job_id and fields.get("data"):
            event = decode_event(stream_id, fields)
            if event.terminal:
                return last, event
    return last, None


def _block_ms(deadline: float | None) -> int | None:
    """BLOCK argument for the next read: 0 = forever, None = time is up."""
    if deadline is None:
        return 0
    remaining = deadline - time.monotonic()
    return max(1, int(remaining * 1000)) if remaining > 0 else None


class _Outage:
    """Backoff between tries while Redis is unreachable, bounded by the wait's deadline."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.since: float | None = None
        self.delay = _RECONNECT_FIRST_S

    def pause(self, err: BrokerUnavailableError) -> Pause:
        """The sleep before the next try; raises ``err`` when the outage outlasts the wait."""
        now = time.monotonic()
        self.since = self.since or now
        limit = self.deadline if self.deadline is not None else self.since + OUTAGE_LIMIT_S
        if now + self.delay >= limit:
            raise err
        delay, self.delay = self.delay, min(self.delay * 2, _RECONNECT_CAP_S)
        return Pause(delay)

    def recovered(self) -> bool:
        """True once, on the first good reply after an outage."""
        was, self.since, self.delay = self.since, None, _RECONNECT_FIRST_S
        return was is not None

    def call(self, call: Call) -> Flow[Any]:
        """``call``, tried again (after a pause) while Redis is unreachable."""
        while True:
            try:
                return (yield call)
            except BrokerUnavailableError as err:
                yield self.pause(err)

    def flow(self, make: Any) -> Flow[Any]:
        """A whole sub-flow (``make()`` builds it), started again while Redis is unreachable."""
        while True:
            try:
                return (yield from make())
            except BrokerUnavailableError as err:
                yield self.pause(err)


def _timeout(job_id: str, timeout: float | None) -> JobTimeoutError:
    return JobTimeoutError(f"job {job_id} did not finish within {timeout} s (it may still finish)",
                           job_id=job_id)


class _HandleCore:
    def __init__(self, transport: Any, job: JobRef) -> None:
        self.id = job.job_id
        self.session_id = job.session_id
        self.kind = job.kind
        self.coalesced = job.coalesced
        self.upgraded = job.upgraded
        # Finished on the spot by applying a speculative draft (api_client.client.draft_apply).
        self.from_draft = job.from_draft
        self._since = job.since
        self._transport = transport
        self._jobs = JobFlows(transport.settings, transport.layout)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.kind.value} {self.id} coalesced={self.coalesced}>"

    def _wait(self, timeout: float | None) -> Flow[JobResult]:
        layout = self._jobs.layout
        read = partial(get_record, layout, self.id)
        deadline = None if timeout is None else time.monotonic() + timeout
        stream = layout.session(self.session_id).events
        outage = _Outage(deadline)
        since = self._since
        if since is None:
            # Read the stream's tail first: a completion after it is then surely in the stream.
            last = yield from outage.call(cmd("xrevrange", stream, count=1))
            since = str(last[0][0]) if last else "0-0"
            record = yield from outage.flow(read)
            if record.state.terminal:
                return from_record(record)
        while (block := _block_ms(deadline)) is not None:
            try:
                reply = yield Command("xread", ({stream: since},),
                                      {"count": 100, "block": block}, blocking=True)
            except BrokerUnavailableError as err:
                yield outage.pause(err)
                continue
            if outage.recovered():
                record = yield from outage.flow(read)
                if record.state.terminal:
                    return from_record(record)  # the stream may not have survived the outage
            last_seen, event = completion_in(reply, self.id)
            if event is not None:
                [event] = yield from outage.flow(partial(fill_entries, layout, [event]))
                result = from_event(event)
                if result is None and self.kind is JobKind.COMPACT:
                    # A worker that finished with only result_entry_id left the entry on the record.
                    return (yield from read()).entry
                return result
            since = last_seen or since
        # The event may be trimmed: the record still knows.
        record = yield from _Outage(time.monotonic() + 1.0).flow(read)
        if record.state.terminal:
            return from_record(record)
        raise _timeout(self.id, timeout)


class JobHandle(_HandleCore):
    """A job just enqueued (or looked up with :meth:`CompactionClient.job`): its ids and the
    client's transport."""

    def __init__(self, transport: SyncTransport, job: JobRef) -> None:
        super().__init__(transport, job)
        self._transport: SyncTransport = transport

    def record(self) -> JobRecord:
        return self._transport.run(get_record(self._jobs.layout, self.id))

    def cancel(self) -> JobState:
        """Cancel (queued: at once; running: the worker stops at its next check)."""
        return self._transport.run(self._jobs.cancel_flow(self.id))

    def wait(self, timeout: float | None = None) -> JobResult:
        """Block until the job ends; return its result (see :data:`JobResult`).

        Raises :class:`JobFailedError` (with the job's error text), :class:`JobCancelledError`,
        or :class:`JobTimeoutError` after ``timeout`` seconds (None: wait for ever).
        """
        return self._transport.run(self._wait(timeout))


class AsyncJobHandle(_HandleCore):
    """:class:`JobHandle` for asyncio: the same operations, awaited."""

    def __init__(self, transport: AsyncTransport, job: JobRef) -> None:
        super().__init__(transport, job)
        self._transport: AsyncTransport = transport

    async def record(self) -> JobRecord:
        return await self._transport.run(get_record(self._jobs.layout, self.id))

    async def cancel(self) -> JobState:
        return await self._transport.run(self._jobs.cancel_flow(self.id))

    async def wait(self, timeout: float | None = None) -> JobResult:
        return await self._transport.run(self._wait(timeout))


@dataclass(frozen=True, slots=True)
class ObserveResult:
    """What :meth:`CompactionClient.observe` did. ``action``: ``none`` (below the band, or a
    valid draft is ready), ``precompute`` (a speculative job enqueued or in flight: ``handle``)
    or ``compact`` (``handle``; ``from_draft`` when a draft made it finish at once)."""

    action: str
    handle: JobHandle | AsyncJobHandle | None = None
    from_draft: bool = False
    draft_ready: bool = False
