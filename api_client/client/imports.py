"""Importing a whole session: a small one in one script call, a large one in bounded steps.

Redis runs one command at a time, so a 30 MB import sent as one ``EVALSHA`` (40 000 arguments)
kept every other client of the shard waiting for it. A large import first writes its entries
and order to staging keys of its own (``<p>:session:{<sid>}:import:<t>:*``, expiring after
:data:`STAGING_TTL_S`), each step a bounded ``HSET`` and ``RPUSH``; then ``import.lua`` checks
that every staged entry is there and renames the staging keys into place, so the session still
changes at once: a reader sees the old session or the new one, never a part. A client that dies
half-way leaves staging keys that expire; the session is untouched.

The session's count of stored bytes (:mod:`api_client.contract.stored_bytes`) becomes the
imported lines' bytes, its header line's included (a header over ``max_header_bytes`` is refused
first); an import over the tenant's ``stored_bytes`` quota stores nothing. A large
one is checked before its first step too, so that a refused import does not write its steps.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Sequence
from typing import NoReturn

import redis

from api_client.contract.errors import HeaderTooLargeError, SessionFormatError
from api_client.contract.keys import SessionKeys
from api_client.contract.redis_flows import Flow, Pipeline, Rescue, Script, cmd
from api_client.contract.retention import capped_ttl
from api_client.contract.settings import ClientSettings
from api_client.contract.stored_bytes import StoredBytes, utf8_len

__all__ = ["INLINE_BYTES", "STAGING_TTL_S", "STEP_BYTES", "check_header", "import_flow",
           "import_keys"]

INLINE_BYTES = 256 << 10  # an import up to this much JSON goes in the script call itself
STEP_BYTES = 256 << 10  # JSON per staging step, about (a page is at least one entry)
STEP_ENTRIES = 500
STAGING_TTL_S = 3_600  # an import slower than this finds its staged entries gone


def check_header(header: str, settings: ClientSettings, what: str) -> int:
    """The bytes of a session's header line; :class:`HeaderTooLargeError` over
    ``max_header_bytes`` (nothing is stored)."""
    size = utf8_len(header)
    if size > settings.max_header_bytes:
        raise HeaderTooLargeError(what, setting="max_header_bytes",
                                  limit=settings.max_header_bytes, value=size)
    return size


def import_keys(k: SessionKeys, staging: tuple[str, ...] = (),
                counted: StoredBytes | None = None) -> tuple[str, ...]:
    """KEYS of ``import.lua``: the staging keys (a small import: two of the session's stand in)
    and, on a single Redis, the tenant's bytes hash."""
    tenant = counted.script_keys() if counted is not None else ()
    return (*k.data(), k.effects, k.effects_at, k.rewrites, k.rewriting, k.pruned,
            *(staging or (k.entries, k.order)), *tenant)


def import_head(replace: bool, header: str, leaf: str, staged: int, retention_s: int,
                lines_bytes: int, counted: StoredBytes) -> list[str]:
    """ARGV of ``import.lua`` before its (id, line) pairs."""
    return ["1" if replace else "0", header, leaf, str(staged), str(retention_s),
            str(lines_bytes), *counted.script_args()]


def _pages(pairs: Sequence[str]) -> Iterator[list[str]]:
    """``pairs`` (id, line, id, line, ...) in pages of about :data:`STEP_BYTES`."""
    page: list[str] = []
    size = 0
    for at in range(0, len(pairs), 2):
        page += pairs[at:at + 2]
        size += len(pairs[at + 1])
        if size >= STEP_BYTES or len(page) >= 2 * STEP_ENTRIES:
            yield page
            page, size = [], 0
    if page:
        yield page


def _incomplete(rescue: Rescue, session_id: str) -> Rescue:
    def handle(err: redis.ResponseError) -> NoReturn:
        if str(err).startswith("COMPACTOR_IMPORT_INCOMPLETE"):
            raise SessionFormatError(f"the import's staged entries expired ({STAGING_TTL_S} s) "
                                     "or were changed before it finished; nothing was stored",
                                     source=f"import {session_id}") from err
        rescue(err)
        raise err  # a rescue that returned: not an error it knows

    return handle


def import_flow(k: SessionKeys, session_id: str, args: Sequence[str], rescue: Rescue,
                retention_s: int, counted: StoredBytes) -> Flow[int]:
    """Run ``import.lua`` for ``args`` (replace, header, leaf, then id, line, ...); returns
    the session's new revision. ``retention_s``: the session's idle expiry (0 = none);
    ``counted``: the session's count of stored bytes and its quota."""
    replace, header, leaf, pairs = args[0] == "1", args[1], args[2], list(args[3:])
    lines_bytes = utf8_len(header) + sum(map(utf8_len, pairs[1::2]))  # the header counts too
    small = sum(map(len, pairs[1::2])) <= INLINE_BYTES
    yield from counted.check(lines_bytes, replaces=True, early=not small)
    if small:
        head = import_head(replace, header, leaf, 0, retention_s, lines_bytes, counted)
        revision = int((yield Script("import", import_keys(k, (), counted), [*head, *pairs],
                                     rescue)))
        yield from counted.after("set", lines_bytes)
        return revision
    staging = k.import_staging(secrets.token_hex(8))
    entries, order = staging
    ttl = capped_ttl(STAGING_TTL_S, retention_s)  # no key of the session outlives the retention
    for page in _pages(pairs):
        yield Pipeline((cmd("hset", entries, mapping=dict(zip(page[::2], page[1::2],
                                                               strict=True))),
                        cmd("rpush", order, *page[::2]),
                        cmd("expire", entries, ttl), cmd("expire", order, ttl)),
                       transaction=False)
    head = import_head(replace, header, leaf, len(pairs) // 2, retention_s, lines_bytes, counted)
    revision = int((yield Script("import", import_keys(k, staging, counted), head,
                                 _incomplete(rescue, session_id))))
    yield from counted.after("set", lines_bytes)
    return revision
