"""In-memory implementations of the service's ports (worker.service.ports), for unit tests.

These are fakes of Compactor's own Protocols, not of Redis: each keeps what a job would read and
records what it wrote, and can be scripted (commit outcomes, lease answers, a cancel flag) to
reach every outcome the service maps. The Redis implementations are tested in tests/runtime.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from api_client.contract.job_enums import CompactReason, JobKind, JobState
from api_client.contract.session import Entry, JsonObject, Session, parse_entry
from api_client.contract.snapshots import Snapshot
from api_client.contract.wire import JobEvent, JobRecord
from helpers.sessions import assistant, chain, chars, session, user
from worker.compaction import Preparation
from worker.hooks import BeforeCompactResult, BeforeTreeResult, CompactingResult, TreePreparation
from worker.service.ports import Runtime
from worker.settings import WorkerSettings
from worker.store import CommitOutcome, CommitStatus
from worker.store.leases import LeaseOutcome
from worker.store.paths import FirstRead, PathSnapshot, Reach
from worker.summary_requests import CancelToken, SummaryRequest, SummaryResult, Usage
from worker.tokens import get_tokenizer

SESSION_ID = "s1"
JOB_ID = f"{SESSION_ID}:00000000000000aa"


def conversation(turns: int = 4) -> list[Entry]:
    """``turns`` user/assistant pairs of 100 estimate tokens per message: e0 … e<2·turns-1>."""
    items = [m for i in range(turns)
             for m in (user(f"q{i} " + chars(396)), assistant(f"a{i} " + chars(396)))]
    return chain(*items)


class FakeSessions:
    def __init__(self, entries: list[Entry]) -> None:
        self.session: Session = session(entries)
        self.leaf: str | None = entries[-1].id if entries else None
        self.revision = 1
        self.loads = 0
        self.fail_with: BaseException | None = None
        self.parsed_chars = 0  # what a snapshot reports as new to the process (priming)...
        self.stored_chars = 0  # ... of how much stored JSON
        self.rewrites = 0  # the rewrites counter and prune watermark a path read reports
        self.pruned_through: str | None = None
        self.firsts: list[FirstRead | None] = []

    def load(self, session_id: str) -> Snapshot:
        assert session_id == SESSION_ID
        self.loads += 1
        if self.fail_with is not None:
            raise self.fail_with
        return Snapshot(self.session, self.revision, self.leaf, self.parsed_chars,
                        self.stored_chars)

    def load_path(self, session_id: str, reach: Reach,
                  first: FirstRead | None = None) -> PathSnapshot:
        """The shortest end of the leaf's path that ``reach`` accepts (the whole path else);
        ``firsts`` keeps what each call got of the job's start's read."""
        self.firsts.append(first)
        snap = self.load(session_id)
        path = snap.session.tree().path_to(snap.leaf_id)
        start = max(0, len(path) - 1)
        while start > 0 and not reach(path[start:], self.pruned_through):
            start -= 1
        return PathSnapshot(path[start:], start == 0, snap.revision, snap.leaf_id, self.rewrites,
                            self.pruned_through, snap.parsed_chars, snap.stored_chars)

    def add(self, raw: JsonObject) -> None:
        self.session = Session(self.session.header, [*self.session.entries, parse_entry(raw)])
        self.leaf = str(raw["id"])
        self.revision += 1


class FakeCommits:
    """Commits apply to ``sessions``; ``script`` gives the status of the next commits in order
    (then committed). ``duplicate`` plays an earlier delivery that committed the same entry."""

    def __init__(self, sessions: FakeSessions, script: Sequence[CommitStatus] = ()) -> None:
        self.sessions = sessions
        self.script = list(script)
        self.effects: dict[str, str] = {}
        self.calls: list[str] = []
        self._ids = (f"c{n}" for n in itertools.count(1))

    def effect(self, job_id: str) -> str | None:
        return self.effects.get(job_id)

    def entry(self, session_id: str, entry_id: str) -> JsonObject | None:
        found = self.sessions.session.tree().by_id.get(entry_id)
        return dict(found.raw) if found is not None else None

    def _outcome(self, job_id: str, entry: Mapping[str, Any] | None) -> CommitOutcome:
        status = self.script.pop(0) if self.script else CommitStatus.COMMITTED
        if status not in (CommitStatus.COMMITTED, CommitStatus.DUPLICATE):
            return CommitOutcome(status, None, self.sessions.revision, None)
        if entry is None:
            self.effects[job_id] = ""
            return CommitOutcome(status, None, self.sessions.revision, None)
        raw = {**entry, "id": next(self._ids), "parentId": self.sessions.leaf}
        self.sessions.add(raw)
        self.effects[job_id] = str(raw["id"])
        if status is CommitStatus.DUPLICATE:  # an earlier delivery wrote it: the id, no line
            return CommitOutcome(status, str(raw["id"]), self.sessions.revision, None)
        return CommitOutcome(status, str(raw["id"]), self.sessions.revision, raw)

    def append_entry(self, job_id: str, snapshot_leaf: str | None, entry: Mapping[str, Any],
                     result: Mapping[str, Any]) -> CommitOutcome:
        self.calls.append("append_entry")
        return self._outcome(job_id, entry)

    def branch(self, job_id: str, snapshot_leaf: str | None, destination: str | None,
               entry: Mapping[str, Any] | None, result: Mapping[str, Any]) -> CommitOutcome:
        self.calls.append("branch")
        if self.script and self.script[0] is not CommitStatus.COMMITTED:
            return self._outcome(job_id, entry)
        self.sessions.leaf = destination  # the entry (if any) is written under the destination
        return self._outcome(job_id, entry)

    def rewrite(self, job_id: str, rewrites: Sequence[tuple[str, str]],
                result: Mapping[str, Any] | None, *, rewrites_seen: int,
                snapshot_leaf: str | None = None,
                pruned_through: str | None = None) -> CommitOutcome:
        self.calls.append("rewrite")
        return CommitOutcome(self.script.pop(0) if self.script else CommitStatus.COMMITTED)


@dataclass
class FakeJobs:
    record: JobRecord
    lease: LeaseOutcome = LeaseOutcome.ACQUIRED
    renew: bool = True
    reacquire: LeaseOutcome = LeaseOutcome.ACQUIRED
    running: bool = True  # False: mark_running finds the job finished
    cancel_requested: bool = False
    published: list[JobEvent] = field(default_factory=list)
    ttl_set: list[bool] = field(default_factory=list)  # publish()'s flag, event by event
    finished: list[tuple[JobState, JobEvent | None, dict[str, Any]]] = field(default_factory=list)
    released: int = 0
    acquired: int = 0
    ends_in_one_step: bool = False  # True: one Redis (JobRecords.ends_in_one_step)
    # The loop guard's sorted set: job id → commit time (worker.store.compaction_counter in Redis).
    compactions: dict[str, float] = field(default_factory=dict)

    def acquire_lease(self, job_id: str, worker_id: str, ttl_s: float) -> LeaseOutcome:
        """``lease`` for the delivery's first call, ``reacquire`` for the heartbeat's."""
        self.acquired += 1
        return self.lease if self.acquired == 1 else self.reacquire

    def renew_lease(self, job_id: str, worker_id: str, ttl_s: float) -> bool:
        return self.renew

    def release_lease(self, job_id: str, worker_id: str) -> bool:
        self.released += 1
        return True

    def lease_holder(self, job_id: str) -> str | None:
        return None  # a held lease is another worker's (never this process's)

    def is_cancel_requested(self, job_id: str) -> bool:
        return self.cancel_requested

    def mark_running(self, job_id: str, attempt: int | None = None) -> int | None:
        if not self.running:
            return None
        self.record = self.record.model_copy(update={"state": JobState.RUNNING,
                                                     "attempts": self.record.attempts + 1})
        return self.record.attempts

    def start(self, job_id: str) -> JobRecord | None:
        return None if self.mark_running(job_id) is None else self.record

    def get(self, job_id: str) -> JobRecord:
        return self.record

    def publish(self, event: JobEvent, *, ttl_set: bool = False) -> str:
        self.published.append(event)
        self.ttl_set.append(ttl_set)
        return str(len(self.published))

    def finish(self, job_id: str, state: JobState | str, *, event: JobEvent | None = None,
               record: JobRecord | None = None, **result: Any) -> bool:
        self.finished.append((JobState(state), event, result))
        return True

    def recent_compactions(self, session_id: str, now: float, window_s: float) -> int:
        self.compactions = {j: t for j, t in self.compactions.items() if t >= now - window_s}
        return len(self.compactions)

    def count_compaction(self, session_id: str, job_id: str, now: float, window_s: float) -> None:
        self.compactions[job_id] = now

    @property
    def event_types(self) -> list[str]:
        return [str(e.type) for e in self.published]


@dataclass
class FakeHooks:
    before_compact_result: BeforeCompactResult | None = None
    before_tree_result: BeforeTreeResult | None = None
    notified: list[str] = field(default_factory=list)

    def has_hooks(self, event: str) -> bool:
        return event == "session_before_compact" and self.before_compact_result is not None

    def before_compact(self, preparation: Preparation, branch_entries: Sequence[Entry],
                       custom_instructions: str | None, cancel: Any, *,
                       session_id: str | None = None) -> BeforeCompactResult | None:
        return self.before_compact_result

    def compacting(self, session_id: str | None, messages: Sequence[Mapping[str, Any]], *,
                   cancel: Any = None) -> CompactingResult | None:
        return None

    def compact_done(self, entry: Mapping[str, Any], from_extension: bool, *,
                     session_id: str | None = None) -> None:
        self.notified.append("compact_done")

    def before_tree(self, preparation: Mapping[str, Any] | TreePreparation, cancel: Any, *,
                    session_id: str | None = None) -> BeforeTreeResult | None:
        return self.before_tree_result

    def tree_done(self, new_leaf_id: str | None, old_leaf_id: str | None,
                  summary_entry: Mapping[str, Any] | None, from_extension: bool | None, *,
                  session_id: str | None = None) -> None:
        self.notified.append("tree_done")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.wall = 1_767_225_600.0
        self.lock = threading.Lock()

    def monotonic(self) -> float:
        with self.lock:
            return self.now

    def time(self) -> float:
        return self.wall

    def sleep(self, seconds: float) -> None:
        """A wait on the job's clock passes at once (``ride_out``'s backoff)."""
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds

    def advance_wall(self, seconds: float) -> None:
        """Wall time only (the loop guard's window), not the job's deadline clock."""
        with self.lock:
            self.wall += seconds


# What the fake summarizer does per call: return a text, raise, or act first.
Behaviour = Callable[[SummaryRequest, CancelToken | None], str]


class FakeSummarizer:
    def __init__(self, behaviour: Behaviour | None = None) -> None:
        self.behaviour = behaviour
        self.requests: list[SummaryRequest] = []
        self._lock = threading.Lock()

    def summarize(self, request: SummaryRequest,
                  cancel: CancelToken | None = None) -> SummaryResult:
        with self._lock:
            self.requests.append(request)
        text = (self.behaviour(request, cancel) if self.behaviour
                else f"summary of {request.purpose}")
        return SummaryResult(text, "model-a", "openai", Usage(10, 2), 1)


@dataclass
class World:
    """One runtime of fakes; ``rt`` is what ``run_job`` gets."""

    sessions: FakeSessions
    commits: FakeCommits
    jobs: FakeJobs
    hooks: FakeHooks
    summarizer: FakeSummarizer
    clock: FakeClock
    rt: Runtime


def world(*, kind: JobKind = JobKind.COMPACT,
          reason: CompactReason | None = CompactReason.THRESHOLD,
          entries: list[Entry] | None = None, script: Sequence[CommitStatus] = (),
          behaviour: Behaviour | None = None, target_id: str | None = None,
          **settings: Any) -> World:
    sessions = FakeSessions(conversation() if entries is None else entries)
    commits = FakeCommits(sessions, script)
    record = JobRecord(id=JOB_ID, kind=kind, session_id=SESSION_ID, reason=reason,
                       target_id=target_id, state=JobState.QUEUED)
    jobs, hooks, clock = FakeJobs(record), FakeHooks(), FakeClock()
    summarizer = FakeSummarizer(behaviour)
    options = {"keep_recent_tokens": 150, "tokenizer": "estimate", "worker_name": "w1", **settings}
    rt = Runtime(settings=WorkerSettings(**options), sessions=sessions, jobs=jobs, commits=commits,
                 tokenizer=get_tokenizer(options["tokenizer"]), hooks=hooks,
                 new_summarizer=lambda: summarizer, clock=clock)
    return World(sessions, commits, jobs, hooks, summarizer, clock, rt)
