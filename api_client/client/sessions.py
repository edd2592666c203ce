"""The session store over Redis (layout: :mod:`api_client.contract.keys`), sync and asyncio.

Each operation is one flow of :class:`_SessionCore` (the Redis calls it makes and how it reads
their replies); :class:`SessionStore` and :class:`AsyncSessionStore` only run it.

An append is bounded before it is sent (``max_entry_bytes``, ``max_append_bytes``,
``max_append_entries``) and carries an idempotency key: when its reply is lost (a timeout), the
flow sends it once more under the same key, and Redis answers with the first one's ids if it was
stored. A client thus never reports a failure for an append that happened, nor stores it twice.

Appends, imports and deletes keep the tenant's count of stored bytes and refuse what would take
it over its quota (:mod:`api_client.contract.stored_bytes`).
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, NoReturn

import redis
import redis.asyncio

from api_client.client.imports import check_header, import_flow, import_head, import_keys
from api_client.client.session_args import (
    DEFAULT_LIMITS,
    append_args,
    appended_bytes,
    import_args,
    new_session_header,
    parse_import,
)
from api_client.client.session_listing import AsyncSessionListing, SessionListing
from api_client.contract.errors import (
    AppendUnconfirmedError,
    BrokerUnavailableError,
    CompactorError,
    EntryExistsError,
    EntryNotFoundError,
    SessionExistsError,
    SessionFormatError,
    SessionNotFoundError,
)
from api_client.contract.keys import (
    APPEND_REPLIES,
    KeyLayout,
    SessionKeys,
    check_idempotency_key,
    check_session_id,
)
from api_client.contract.redis_flows import (
    AsyncShell,
    Flow,
    Pipeline,
    Rescue,
    Script,
    SyncShell,
    cmd,
)
from api_client.contract.session import IdFactory, dump_record, random_entry_id
from api_client.contract.settings import ClientSettings
from api_client.contract.snapshots import (
    LINE_BYTES,
    Snapshot,
    load_snapshot,
    read_lines,
    read_stored,
)
from api_client.contract.stored_bytes import StoredBytes

__all__ = ["AsyncSessionStore", "SessionStore", "Snapshot", "new_session_header"]


def script_error(err: redis.ResponseError, session_id: str) -> CompactorError | None:
    """Map a ``COMPACTOR_*`` error reply of our scripts to the typed error; None if foreign."""
    code, _, arg = str(err).partition(" ")
    if code == "COMPACTOR_NOSESSION":
        return SessionNotFoundError(f"Session {session_id} not found")
    if code == "COMPACTOR_NOENTRY":
        return EntryNotFoundError(arg)
    if code == "COMPACTOR_EXISTS":
        return EntryExistsError(arg)
    if code == "COMPACTOR_SESSION_EXISTS":
        return SessionExistsError(f"Session {session_id} already exists")
    if code == "COMPACTOR_NOID":
        return EntryExistsError("<8 random ids all taken>")
    return None


def export_text(session_id: str, replies: Sequence[Any]) -> str:
    header_text, order, stored = replies
    if header_text is None:
        raise SessionNotFoundError(f"Session {session_id} not found")
    return "\n".join([header_text, *(stored[i] for i in order if i in stored)]) + "\n"


def _rescue(session_id: str, counted: StoredBytes | None = None) -> Rescue:
    def rescue(err: redis.ResponseError) -> NoReturn:
        mapped = script_error(err, session_id)
        if mapped is None and counted is not None:
            mapped = counted.refusal(str(err))
        if mapped is None:
            raise err
        raise mapped from err
    return rescue


class _SessionCore:
    """Every session operation as a flow (:mod:`api_client.contract.redis_flows`)."""

    def __init__(self, layout: KeyLayout | None, settings: ClientSettings | None) -> None:
        self.settings = settings or DEFAULT_LIMITS
        self.layout = layout or KeyLayout(self.settings.key_prefix)

    def keys(self, session_id: str) -> SessionKeys:
        return self.layout.session(session_id)

    def counted(self, session_id: str) -> StoredBytes:
        """The session's count of stored bytes and its tenant's quota."""
        return StoredBytes.of(self.layout, session_id, cluster=self.settings.redis_cluster,
                              limit=self.settings.stored_bytes_max,
                              counted=not self.settings.tenant_inbox)

    def _script(self, name: str, session_id: str, keys: Sequence[str], args: Sequence[str],
                counted: StoredBytes | None = None) -> Script:
        return Script(name, keys, args, _rescue(session_id, counted))

    def _create(self, session_id: str | None, cwd: str, title: str | None) -> Flow[str]:
        sid = check_session_id(session_id if session_id is not None else str(uuid.uuid4()))
        k, counted = self.keys(sid), self.counted(sid)
        header = dump_record(new_session_header(sid, cwd, title))
        size = check_header(header, self.settings, f"the header of {sid}")
        head = import_head(False, header, "", 0, self.settings.session_ttl_s, size, counted)
        yield self._script("import", sid, import_keys(k, (), counted), head, counted)
        yield from counted.after("set", size)
        return sid

    def _append_many(self, session_id: str, items: Iterable[Mapping[str, Any]],
                     idempotency_key: str | None) -> Flow[list[str]]:
        return (yield from self._append(session_id, items, idempotency_key))[0]

    def _append(self, session_id: str, items: Iterable[Mapping[str, Any]],
                idempotency_key: str | None) -> Flow[tuple[list[str], int]]:
        """The new ids and the revision the append made (the script's reply: one round
        trip)."""
        batch = list(items)
        if not batch:
            return [], (yield from self._revision(session_id))
        source = f"append to {session_id}"
        key = (secrets.token_hex(16) if idempotency_key is None
               else check_idempotency_key(idempotency_key))
        args = [*append_args(batch, source, self.settings), key,
                str(self.settings.append_idempotency_ttl_s), str(APPEND_REPLIES),
                str(self.settings.session_ttl_s)]
        k, counted = self.keys(session_id), self.counted(session_id)
        yield from counted.check(appended_bytes(args))
        script = self._script("append", session_id,
                              (*k.data(), k.appends, *counted.script_keys()),
                              [*args, *counted.script_args()], counted)
        try:
            ids = yield script
        except BrokerUnavailableError:
            # The reply was lost (a timeout) or the request never got there: sent again under
            # the same key, it returns the first one's ids if that was stored, else stores it.
            try:
                ids = yield script
            except BrokerUnavailableError as err:
                raise AppendUnconfirmedError(
                    f"{source}: no reply ({err}); it may have been stored: the same append "
                    f"with idempotency_key={key!r} stores it at most once and returns its ids",
                    idempotency_key=key) from err
        # A reply kept for a retry has no count: the bytes were counted when it was stored.
        yield from counted.after("add", int(ids[len(batch) + 1]) if len(ids) > len(batch) + 1
                                 else 0)
        return [str(i) for i in ids[:len(batch)]], int(ids[len(batch)])

    def _navigate(self, session_id: str, entry_id: str | None) -> Flow[int]:
        k = self.keys(session_id)
        keys = (k.header, k.entries, k.leaf, k.rev)
        return int((yield self._script("navigate", session_id, keys,
                                       [entry_id or "", str(self.settings.session_ttl_s)])))

    def _load(self, session_id: str) -> Flow[Snapshot]:
        return (yield from load_snapshot(self.layout, session_id))

    def _revision(self, session_id: str) -> Flow[int]:
        return int((yield cmd("get", self.keys(session_id).rev)) or 0)

    def _import(self, text: str, session_id: str | None, replace: bool,
                new_id: IdFactory, source: str = "<import>") -> Flow[str]:
        # The first line is the header: one over the bound is refused before it is parsed.
        end = text.find("\n")
        check_header(text if end < 0 else text[:end], self.settings,
                     f"the header line of {source}")
        session, sid = parse_import(text, session_id, new_id, source)
        counted = self.counted(sid)
        args = import_args(session, sid, replace)
        check_header(args[1], self.settings, f"the header line of {source}")
        # A large session is written in bounded steps, then renamed into place at once.
        yield from import_flow(self.keys(sid), sid, args, _rescue(sid, counted),
                               self.settings.session_ttl_s, counted)
        return sid

    def _export(self, session_id: str) -> Flow[str]:
        stored = yield from read_stored(self.layout, session_id)  # bounded commands
        return export_text(session_id, [stored.header, stored.order, stored.lines])

    def _export_start(self, session_id: str) -> Flow[tuple[str, int]]:
        k = self.keys(session_id)
        header, length = yield Pipeline((cmd("get", k.header), cmd("llen", k.order)),
                                        transaction=False)
        if header is None:
            raise SessionNotFoundError(f"Session {session_id} not found")
        return header, int(length)

    def _export_page(self, session_id: str, header: str, at: int, count: int) -> Flow[str]:
        """Lines ``at`` .. ``at + count - 1`` of the order, each ending in a newline."""
        k = self.keys(session_id)
        now, ids = yield Pipeline((cmd("get", k.header), cmd("lrange", k.order, at,
                                                             at + count - 1)), transaction=False)
        if now != header:
            raise SessionFormatError("the session was replaced or deleted while it was sent",
                                     source=f"redis:{session_id}")
        lines = yield from read_lines(k.entries, ids)
        return "".join(f"{line}\n" for line in lines if line is not None)

    def _exists(self, session_id: str) -> Flow[bool]:
        return bool((yield cmd("exists", self.keys(session_id).header)))

    def _stored_size(self, session_id: str) -> Flow[int]:
        counted = self.counted(session_id)
        return int((yield cmd("hget", counted.key, counted.field)) or 0)

    def _delete(self, session_id: str) -> Flow[bool]:
        # UNLINK: a large session's values are freed by a background thread of Redis.
        unlink, counted = cmd("unlink", *self.keys(session_id).all()), self.counted(session_id)
        if counted.in_script:  # one MULTI: the count goes with the session
            removed, _ = yield Pipeline((unlink, counted.as_command("drop")))
        else:
            removed = yield unlink
            if counted.counted:
                yield counted.change("drop")
        return bool(removed)


class SessionStore(_SessionCore, SessionListing):
    """Sessions in Redis: create, append, navigate, load, import/export pi JSONL, list, delete.

    ``client`` must decode responses (see :func:`api_client.contract.redis_conn.make_redis`). A down
    server raises :class:`BrokerUnavailableError`; a missing session :class:`SessionNotFoundError`.
    """

    def __init__(self, client: redis.Redis[str], layout: KeyLayout | None = None,
                 settings: ClientSettings | None = None) -> None:
        super().__init__(layout, settings)
        self.redis = client
        self._io = SyncShell(client)

    def create(self, session_id: str | None = None, *, cwd: str = "",
               title: str | None = None) -> str:
        """Store a new empty v3 session; returns its id (a fresh UUID when not given)."""
        return self._io.run(self._create(session_id, cwd, title))

    def append(self, session_id: str, entry_or_message: Mapping[str, Any], *,
               idempotency_key: str | None = None) -> str:
        """Append one entry (or bare message) as a child of the leaf; returns its id."""
        return self.append_many(session_id, [entry_or_message],
                                idempotency_key=idempotency_key)[0]

    def append_many(self, session_id: str, items: Iterable[Mapping[str, Any]], *,
                    idempotency_key: str | None = None) -> list[str]:
        """Append a chain of entries atomically (one revision bump); returns their ids.

        ``idempotency_key`` (1-128 of ``[A-Za-z0-9_.:-]``; default: a fresh one per call): the
        same append under the same key within ``append_idempotency_ttl_s`` returns the first
        one's ids and stores nothing (what :class:`AppendUnconfirmedError` suggests)."""
        return self._io.run(self._append_many(session_id, items, idempotency_key))

    def navigate(self, session_id: str, entry_id: str | None) -> int:
        """Move the leaf to ``entry_id`` (None: reset). Returns the new revision."""
        return self._io.run(self._navigate(session_id, entry_id))

    def load(self, session_id: str) -> Snapshot:
        return self._io.run(self._load(session_id))

    def revision(self, session_id: str) -> int:
        return self._io.run(self._revision(session_id))

    def import_jsonl(self, text: str, session_id: str | None = None, *, replace: bool = False,
                     new_id: IdFactory = random_entry_id, source: str = "<import>") -> str:
        """Store a pi JSONL session (v1/v2 migrated to v3); leaf = last entry. Returns the id.

        ``session_id`` defaults to the header's id (and replaces it in the stored header). A
        session with an unusable line (not JSON, a dangling parent, a cycle) is refused whole
        with :class:`SessionFormatError` naming ``source`` and the line; nothing is stored.
        """
        return self._io.run(self._import(text, session_id, replace, new_id, source))

    def export_jsonl(self, session_id: str) -> str:
        """The stored session as v3 JSONL (header, then entries in stored order, byte-exact)."""
        return self._io.run(self._export(session_id))

    def exists(self, session_id: str) -> bool:
        return self._io.run(self._exists(session_id))

    def delete(self, session_id: str) -> bool:
        """Delete the session's keys (job records expire on their own). True if it existed."""
        return self._io.run(self._delete(session_id))


class AsyncSessionStore(_SessionCore, AsyncSessionListing):
    """Sessions in Redis from asyncio code; each method does what :class:`SessionStore`'s does."""

    def __init__(self, client: redis.asyncio.Redis[str], layout: KeyLayout | None = None,
                 settings: ClientSettings | None = None) -> None:
        super().__init__(layout, settings)
        self.redis = client
        self._io = AsyncShell(client)

    async def create(self, session_id: str | None = None, *, cwd: str = "",
                     title: str | None = None) -> str:
        return await self._io.run(self._create(session_id, cwd, title))

    async def append(self, session_id: str, entry_or_message: Mapping[str, Any], *,
                     idempotency_key: str | None = None) -> str:
        return (await self.append_many(session_id, [entry_or_message],
                                       idempotency_key=idempotency_key))[0]

    async def append_many(self, session_id: str, items: Iterable[Mapping[str, Any]], *,
                          idempotency_key: str | None = None) -> list[str]:
        return await self._io.run(self._append_many(session_id, items, idempotency_key))

    async def append_with_revision(self, session_id: str, items: Iterable[Mapping[str, Any]]
                                   ) -> tuple[list[str], int]:
        """:meth:`append_many` and the session's revision right after it, in one call."""
        return await self._io.run(self._append(session_id, items, None))

    async def navigate(self, session_id: str, entry_id: str | None) -> int:
        return await self._io.run(self._navigate(session_id, entry_id))

    async def load(self, session_id: str) -> Snapshot:
        return await self._io.run(self._load(session_id))

    async def revision(self, session_id: str) -> int:
        return await self._io.run(self._revision(session_id))

    async def import_jsonl(self, text: str, session_id: str | None = None, *,
                           replace: bool = False, new_id: IdFactory = random_entry_id,
                           source: str = "<import>") -> str:
        return await self._io.run(self._import(text, session_id, replace, new_id, source))

    async def export_jsonl(self, session_id: str) -> str:
        return await self._io.run(self._export(session_id))

    async def export_stream(self, session_id: str) -> AsyncIterator[str]:
        """:meth:`export_jsonl` in pieces of about half a MB, read as they are sent: memory
        stays flat in the session's size. :class:`SessionNotFoundError` here, before any piece;
        a session replaced while it is sent ends the pieces with :class:`SessionFormatError`
        (what went out is a part)."""
        header, length = await self._io.run(self._export_start(session_id))
        return self._export_pieces(session_id, header, length)

    async def _export_pieces(self, session_id: str, header: str,
                             length: int) -> AsyncIterator[str]:
        yield header + "\n"
        at, count = 0, 64
        while at < length:
            count = min(count, length - at)
            piece = await self._io.run(self._export_page(session_id, header, at, count))
            yield piece
            at += count
            count = max(16, min(4_096, LINE_BYTES * count // max(1, len(piece))))

    async def stored_size(self, session_id: str) -> int:
        """Bytes of the session's stored lines, as its tenant's ``stored_bytes`` count has it
        (0 for a session not counted)."""
        return await self._io.run(self._stored_size(session_id))

    async def exists(self, session_id: str) -> bool:
        return await self._io.run(self._exists(session_id))

    async def delete(self, session_id: str) -> bool:
        return await self._io.run(self._delete(session_id))
