"""The Redis key layout. Every key Compactor writes is named here, nowhere else.

All keys of one session share the hash tag ``{<session_id>}``, so every Lua script and
transaction on a session (including its jobs) touches a single Cluster slot. The default
tenant's sessions live under ``<p>:session:``; another tenant's under ``<p>:tenant:<t>:session:``
(same suffixes, same tag) and its event stream is ``<p>:tenant:<t>:events``,
so one Redis ACL pattern ``~<p>:tenant:<t>:*`` holds them (docs/tenants.md). Only the global
event stream and the jobs-due index live elsewhere: each is one key in a slot of its own, only
ever touched by single-key commands or scripts, never together with a session's keys. ``<p>``
is the configurable prefix (``COMPACTOR_KEY_PREFIX``, default ``compactor``).

The table of every key, its type and what it holds is docs/storage.md (one place to keep
in step with the names below).

A job id is ``<sid>:<token>`` (token = 16 hex digits), so the job's keys can be derived from the
id alone and stay in the session's slot; another tenant's ``<sid>`` is qualified, ``<t>~<sid>``
(``~`` is in neither a tenant name nor a session id). A session id is 1-256 characters of
``[A-Za-z0-9_.:-]`` and starts with a letter or digit (a UUID, ``copy-<uuid>``, ...): no ``/``,
``*``, braces, spaces or controls, so an id can never name a path (``../../etc``) or a key
pattern (``*``).

Every key starts with ``<p>:``, the broker's too: one ACL key pattern ``~<p>:*`` covers all that
Compactor, Celery and kombu use (docs/deploying.md "Redis ACL and TLS" names the channels too).

Every key of a session but its job records (and a large import's staging keys, an hour at most)
expires once the session has been idle for ``session_ttl_s``: each write refreshes them all
(:mod:`api_client.contract.retention`; ``lua/_retention.lua`` names them by suffix, a test
keeps it in step with :meth:`SessionKeys.all`).

Stream entries have the fields ``type`` (event type), ``job`` (job id) and ``data`` (the
:class:`~api_client.JobEvent` as JSON, camelCase).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from api_client.contract.errors import (
    ConfigurationError,
    InvalidIdError,
    JobNotFoundError,
    SessionNotFoundError,
)

__all__ = [
    "ANY_TENANT",
    "APPEND_REPLIES",
    "DEFAULT_TENANT",
    "INFLIGHT_SPECULATIVE",
    "JOB_ID_PATTERN",
    "JOB_KINDS",
    "LEGACY_SESSION_SUFFIXES",
    "QUOTA_FIELDS",
    "SESSION_ID_PATTERN",
    "USAGE_FIELDS",
    "JobKeys",
    "KeyLayout",
    "SessionKeys",
    "check_idempotency_key",
    "check_session_id",
    "check_tenant",
    "split_job_id",
    "split_tenant",
    "tenant_of_job",
]

# Kept here (not imported from _wire) so the layout has no pydantic dependency.
JOB_KINDS: tuple[str, ...] = ("compact", "prune", "branch_summary")
# Keys of a session that no version writes any more (``SessionKeys.effects``, ``effects_at``):
# deleted and measured with the session, refreshed by no retention (they expire on their TTL).
LEGACY_SESSION_SUFFIXES: tuple[str, ...] = ("effects", "effects:at")
# The single-flight slot of speculative compactions (a real compaction never coalesces into one).
INFLIGHT_SPECULATIVE = "speculative"
# Append replies kept per session for a retry (``appends``): a retry comes at once, so the last
# few dozen suffice, and a session's hash stays small (~50 bytes a reply of one entry).
APPEND_REPLIES = 64

# The tenant of a client made without one: its keys are the layout from before tenants existed.
DEFAULT_TENANT = "default"
# A layout for every tenant at once (the worker's, the operator's): ids say their tenant.
ANY_TENANT = None
# Between a tenant and the id it qualifies (``acme~s1``): in neither a tenant nor a session id.
TENANT_SEP = "~"

TENANT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,255}")
_QUALIFIED_ID = re.compile(r"(?:([a-z0-9][a-z0-9_-]{0,62})~)?([A-Za-z0-9][A-Za-z0-9_.:-]{0,255})")
_TOKEN = re.compile(r"[0-9a-f]{16}")
# The same as JSON Schema patterns: docs/openapi.json declares them on the path parameters.
SESSION_ID_PATTERN = f"^{_SESSION_ID.pattern}$"
JOB_ID_PATTERN = f"^{_QUALIFIED_ID.pattern}:{_TOKEN.pattern}$"
# The fields of a tenant's quota hash (``compactor tenant quota`` writes them), each overriding
# the setting of the same name for that tenant; 0 = no limit.
QUOTA_FIELDS: tuple[str, ...] = ("queued_jobs_max", "stored_bytes_max", "tokens_per_day",
                                 "usd_per_day", "weight", "max_running")
# The fields of a tenant's usage hash per day: applied work apart from speculative drafts.
USAGE_FIELDS: tuple[str, ...] = ("jobs", "input_tokens", "output_tokens", "usd", "draft_jobs",
                                 "draft_input_tokens", "draft_output_tokens", "draft_usd")
_IDEMPOTENCY_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_ID_PREFIX = re.compile(r"[A-Za-z0-9_.:-]{1,256}")


def check_session_id(session_id: object) -> str:
    """Return the id if it can name Redis keys, else raise :class:`InvalidIdError`."""
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        shown = repr(session_id) if len(repr(session_id)) <= 80 else repr(session_id)[:77] + "..."
        raise InvalidIdError(
            f"invalid session id {shown}: 1-256 characters of A-Z a-z 0-9 _ . : -, starting "
            "with a letter or digit"
        )
    return session_id


def _glob_escaped(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def check_tenant(tenant: object) -> str:
    """A tenant name: 1-63 characters of ``[a-z0-9_-]``, starting with a letter or digit (it
    becomes part of key names and of Redis ACL patterns)."""
    if not isinstance(tenant, str) or not TENANT_NAME.fullmatch(tenant):
        raise ConfigurationError(f"invalid tenant {tenant!r}: 1-63 characters of a-z 0-9 _ -, "
                                 "starting with a letter or digit")
    return tenant


def check_idempotency_key(key: object) -> str:
    """An append's idempotency key: 1-128 characters of ``[A-Za-z0-9_.:-]``."""
    if not isinstance(key, str) or not _IDEMPOTENCY_KEY.fullmatch(key):
        raise InvalidIdError(f"invalid idempotency key {key!r}: 1-128 characters of "
                             "A-Z a-z 0-9 _ . : -")
    return key


def split_job_id(job_id: object) -> tuple[str, str]:
    """``<sid>:<token>`` → (sid, token), the sid qualified by its tenant (``acme~s1``) unless
    the tenant is the default; :class:`InvalidIdError` for anything else."""
    if isinstance(job_id, str):
        sid, sep, token = job_id.rpartition(":")
        if sep and _TOKEN.fullmatch(token) and _QUALIFIED_ID.fullmatch(sid):
            return sid, token
    raise InvalidIdError(f"invalid job id {job_id!r}: expected '<session id>:<16 hex digits>'")


def tenant_of_job(job_id: str) -> str:
    """The tenant a job id names (``acme~s1:<token>`` → ``acme``; a plain one: the default)."""
    return split_tenant(split_job_id(job_id)[0])[0]


def split_tenant(qualified_id: str) -> tuple[str, str]:
    """``acme~s1`` → (``acme``, ``s1``); a plain id is the default tenant's."""
    tenant, sep, plain = qualified_id.rpartition(TENANT_SEP)
    return (tenant, plain) if sep else (DEFAULT_TENANT, plain)


@dataclass(frozen=True, slots=True)
class SessionKeys:
    header: str
    entries: str
    order: str
    leaf: str
    rev: str
    # The exactly-once markers of older versions (now the job record's ``effect``): no longer
    # written, still named so that deleting or measuring a session takes what they left, and a
    # redelivery of a job such a version committed reads it (LEGACY_SESSION_SUFFIXES).
    effects: str
    effects_at: str
    events: str
    inflight_prefix: str  # + kind
    draft: str
    pace: str  # observe's growth rate and draft time (when to start a draft)
    compactions: str
    token_counts: str  # cl100k counts of its texts, shared by the workers (a cache)
    rewrites: str  # +1 on every rewrite of stored lines (a stale prune plan is refused)
    rewriting: str  # the job applying a large prune in steps
    pruned: str  # prune watermark: the path up to this entry has nothing left to prune
    import_prefix: str  # + token + ":entries" / ":order": a large import's staging keys
    appends: str  # idempotency key → reply of the recent appends

    def inflight(self, kind: str) -> str:
        return self.inflight_prefix + kind

    def import_staging(self, token: str) -> tuple[str, str]:
        """The (entries, order) keys a large import writes before it is renamed into place."""
        return (f"{self.import_prefix}{token}:entries", f"{self.import_prefix}{token}:order")

    def data(self) -> tuple[str, str, str, str, str]:
        """The five keys every session script takes, in script order."""
        return (self.header, self.entries, self.order, self.leaf, self.rev)

    def all(self) -> tuple[str, ...]:
        """Every per-session key except job records (they expire on their own)."""
        return (
            self.header, self.entries, self.order, self.leaf, self.rev, self.effects,
            self.effects_at, self.events,
            *(self.inflight(k) for k in (*JOB_KINDS, INFLIGHT_SPECULATIVE)),
            self.draft, self.pace, self.compactions, self.token_counts, self.rewrites,
            self.rewriting, self.pruned, self.appends,
        )


@dataclass(frozen=True, slots=True)
class JobKeys:
    job_id: str
    session_id: str
    record: str
    lease: str
    session: SessionKeys


def _session_keys(root: str, session_id: str) -> SessionKeys:
    base = f"{root}{{{session_id}}}:"
    return SessionKeys(
        header=base + "header",
        entries=base + "entries",
        order=base + "order",
        leaf=base + "leaf",
        rev=base + "rev",
        effects=base + "effects",
        effects_at=base + "effects:at",
        events=base + "events",
        inflight_prefix=base + "inflight:",
        draft=base + "draft",
        pace=base + "pace",
        compactions=base + "compactions",
        token_counts=base + "tokens",
        rewrites=base + "rewrites",
        rewriting=base + "rewriting",
        pruned=base + "pruned",
        import_prefix=base + "import:",
        appends=base + "appends",
    )


class KeyLayout:
    """Names the keys of one tenant (or, with :data:`ANY_TENANT`, of every tenant: the ids
    then say their tenant). Cheap to build; holds no connection.

    A client's layout takes a session id as its user gives it (``s1``) or as its records and
    job ids show it (``acme~s1``, qualified by the tenant); an id of another tenant is not
    found here, whatever it names elsewhere. The default tenant's ids are never qualified and
    its keys are those from before tenants existed."""

    __slots__ = ("broker", "global_events", "jobs_due", "llm", "prefix", "tenant", "workers")

    def __init__(self, prefix: str = "compactor",
                 tenant: str | None = DEFAULT_TENANT) -> None:
        if not prefix or any(c in prefix for c in "{} \t\r\n"):
            raise ConfigurationError(f"invalid key prefix {prefix!r}: no braces or whitespace")
        self.prefix = prefix
        self.tenant = tenant if tenant is ANY_TENANT else check_tenant(tenant)
        # Each tenant's own stream of all its sessions' events (ANY_TENANT: the default's).
        self.global_events = self.events_of_tenant(tenant or DEFAULT_TENANT)
        self.jobs_due = f"{prefix}:jobs:due"
        # kombu's ``global_keyprefix`` (client, workers, Flower alike): the broker's keys and
        # channels under the prefix too, so one ACL pattern covers everything.
        self.broker = f"{prefix}:broker:"
        self.llm = f"{prefix}:llm:"  # the model circuit breaker's keys (worker.llm.cooldown)
        # zset: worker id → until when (Redis TIME, ms) its heartbeat counts (docs/recovery.md
        # "Worker liveness"); one key, no tenant's ACL pattern names it.
        self.workers = f"{prefix}:workers"

    def tenant_root(self, tenant: str) -> str:
        """``<p>:tenant:<t>:`` — every key of the tenant's own but the default's sessions."""
        return f"{self.prefix}:tenant:{tenant}:"

    # A tenant's own keys beside its sessions: ``<p>:tenants:{<t>}:<name>``. One hash tag per
    # tenant, so a script on them stays in one Cluster slot; apart from ``<p>:tenant:<t>:`` so
    # that a tenant's Redis ACL user can be given them read-only (its quota, its usage).
    def _tenant_key(self, tenant: str, name: str) -> str:
        return f"{self.prefix}:tenants:{{{tenant}}}:{name}"

    def tenant_quota(self, tenant: str) -> str:
        """hash: the tenant's quota overrides (fields as :data:`QUOTA_FIELDS`; absent: the
        settings' defaults)."""
        return self._tenant_key(tenant, "quota")

    def tenant_reserved(self, tenant: str) -> str:
        """hash: job id → ``<tokens> <until Unix ms> <owner>``, the model budget each job of
        the tenant holds (``api_client/contract/reservations.py``); ``_admit.lua`` names it
        from the quota key (``…:quota`` → ``…:reserved``)."""
        return self._tenant_key(tenant, "reserved")

    def tenant_queued(self, tenant: str) -> str:
        """zset: job id → its route's priority x 1e13 + when it was queued (Unix ms), for each
        queued job of the tenant (fair order and the ``queued_jobs`` quota; a job leaves it
        when a worker starts it or it ends, or after ``job_pending_ttl_s``)."""
        return self._tenant_key(tenant, "queued")

    def fair_index(self, queue: str, priority: int) -> tuple[str, str]:
        """(tags, messages) of a broker queue list's fair order (``_admit.lua`` place()): zset
        job id → tag, hash job id → its task message, for the jobs queued in it."""
        base = f"{self.prefix}:fair:{queue}:{priority}:"
        return base + "tags", base + "messages"

    def tenant_admitted(self, tenant: str) -> str:
        """hash: job id → ``<kind> <reason>`` as the workers admitted it from the tenant's inbox
        (a worker runs the job as admitted, whatever its record says later)."""
        return self._tenant_key(tenant, "admitted")

    def tenant_running(self, tenant: str) -> str:
        """zset: job id → until when (Unix ms) it may run, for each job of the tenant a worker
        runs while a ``max_running`` cap applies (``worker/store/tenant_slots``)."""
        return self._tenant_key(tenant, "running")

    def running_of_job(self, job_id: str) -> str:
        return self.tenant_running(tenant_of_job(job_id))

    def queued_of_job(self, job_id: str) -> str:
        """:meth:`tenant_queued` of the job's tenant (the worker's layout serves them all)."""
        return self.tenant_queued(tenant_of_job(job_id))

    def tenant_usage(self, tenant: str, day: str) -> str:
        """hash: the tenant's model spend on ``day`` (``YYYY-MM-DD``, UTC): fields as
        :data:`USAGE_FIELDS`."""
        return self._tenant_key(tenant, f"usage:{day}")

    def tenant_bytes(self, tenant: str) -> str:
        """hash: session id → bytes of its stored entry lines (the ``stored_bytes`` quota)."""
        return self._tenant_key(tenant, "bytes")

    def tenant_measured(self, tenant: str) -> str:
        """hash: session id → bytes its keys take in Redis as the workers measured them, ``*``
        → their sum (an inbox tenant's ``stored_bytes``: ``worker/store/inbox_bytes.py``)."""
        return self._tenant_key(tenant, "measured")

    @property
    def tenants(self) -> str:
        """set: every tenant that has spent model tokens (``compactor usage`` lists them)."""
        return f"{self.prefix}:tenant-names"

    def tenant_inbox(self, tenant: str) -> str:
        """zset (and channel): job id → Unix ms, the jobs a client on the tenant's own ACL user
        made (``tenant_inbox``), for the workers to admit; untrusted (docs/tenants.md)."""
        return self.tenant_root(tenant) + "inbox"

    def sessions_root(self, tenant: str) -> str:
        if tenant == DEFAULT_TENANT:
            return f"{self.prefix}:session:"
        return self.tenant_root(tenant) + "session:"

    def events_of_tenant(self, tenant: str) -> str:
        if tenant == DEFAULT_TENANT:
            return f"{self.prefix}:events"
        return self.tenant_root(tenant) + "events"

    def resolve(self, session_id: object) -> tuple[str, str]:
        """(tenant, plain id) of an id this layout may name; :class:`InvalidIdError` for an id
        that cannot name keys, :class:`SessionNotFoundError` for another tenant's."""
        match = _QUALIFIED_ID.fullmatch(session_id) if isinstance(session_id, str) else None
        if match is None:
            check_session_id(session_id)
            raise AssertionError("unreachable")  # pragma: no cover
        named, plain = match.group(1), match.group(2)
        if self.tenant is ANY_TENANT:
            return named or DEFAULT_TENANT, plain
        if named is None or (named == self.tenant != DEFAULT_TENANT):
            return self.tenant, plain
        raise SessionNotFoundError(f"Session {plain} not found")

    def qualified(self, session_id: str) -> str:
        """The id the records, events and job ids carry: ``<tenant>~<sid>`` (plain for the
        default tenant)."""
        tenant, plain = self.resolve(session_id)
        return plain if tenant == DEFAULT_TENANT else f"{tenant}{TENANT_SEP}{plain}"

    def session(self, session_id: str) -> SessionKeys:
        tenant, plain = self.resolve(session_id)
        return _session_keys(self.sessions_root(tenant), plain)

    def events_of(self, session_id: str) -> str:
        """The all-sessions event stream of the session's tenant."""
        return self.events_of_tenant(self.resolve(session_id)[0])

    def job_record_prefix(self, session_id: str) -> str:
        """``<p>:session:{<sid>}:job:`` — a record key is this plus the token."""
        tenant, plain = self.resolve(session_id)
        return f"{self.sessions_root(tenant)}{{{plain}}}:job:"

    def job(self, job_id: str) -> JobKeys:
        sid, token = split_job_id(job_id)
        try:
            record = self.job_record_prefix(sid) + token
        except SessionNotFoundError:
            raise JobNotFoundError(job_id) from None
        return JobKeys(job_id, self.qualified(sid), record, record + ":lease", self.session(sid))

    def new_job_id(self, session_id: str) -> str:
        return f"{self.qualified(session_id)}:{secrets.token_hex(8)}"

    def headers_match(self, id_prefix: str = "") -> str:
        """``SCAN MATCH`` pattern of the header keys of this tenant's sessions whose id starts
        with ``id_prefix`` (a header's presence is the session's existence); with
        :data:`ANY_TENANT`, of every tenant's."""
        if id_prefix and not _ID_PREFIX.fullmatch(id_prefix):
            raise InvalidIdError(f"invalid session id prefix {id_prefix!r}: up to 256 "
                                 "characters of A-Z a-z 0-9 _ . : -")
        # The key prefix may hold glob characters; a session id cannot.
        if self.tenant is ANY_TENANT:  # <p>:session:{..} and <p>:tenant:<t>:session:{..}
            return f"{_glob_escaped(self.prefix)}:*session:{{{id_prefix}*}}:header"
        return f"{_glob_escaped(self.sessions_root(self.tenant))}{{{id_prefix}*}}:header"

    def session_of_header(self, key: str) -> str | None:
        """The session id a header key names, qualified by its tenant with
        :data:`ANY_TENANT` (None: not a header key of this layout)."""
        tail = "}:header"
        for tenant in self._header_tenants(key):
            head = self.sessions_root(tenant) + "{"
            if key.startswith(head) and key.endswith(tail):
                sid = key[len(head):-len(tail)]
                if _SESSION_ID.fullmatch(sid):
                    own = self.tenant is not ANY_TENANT or tenant == DEFAULT_TENANT
                    return sid if own else f"{tenant}{TENANT_SEP}{sid}"
        return None

    def _header_tenants(self, key: str) -> list[str]:
        if self.tenant is not ANY_TENANT:
            return [self.tenant]
        named = key.removeprefix(f"{self.prefix}:tenant:").partition(":")[0]
        return [DEFAULT_TENANT, *([named] if TENANT_NAME.fullmatch(named) else [])]
