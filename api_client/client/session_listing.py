"""Listing the stored sessions: ``sessions.list()``, sync and asyncio.

A page is one ``SCAN`` of the header keys (``MATCH <p>:session:{<prefix>*}:header``, ``COUNT``):
bounded, whatever the size of the database, and never blocking Redis as ``KEYS`` would. SCAN's
guarantees hold: a session stored for the whole walk is listed at least once (a page may
repeat an id another page had, and a page may be empty while the cursor is not 0); a session
created or deleted during the walk may or may not be.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from api_client.contract.errors import InvalidRequestError
from api_client.contract.keys import KeyLayout
from api_client.contract.redis_flows import AsyncShell, Flow, SyncShell, cmd
from api_client.contract.settings import ClientSettings

__all__ = ["AsyncSessionListing", "SessionListing", "SessionPage", "list_flow"]

# Keys SCAN looks at per page: a page costs Redis well under a millisecond, and a million keys
# take a thousand pages.
DEFAULT_COUNT = 1_000


@dataclass(frozen=True, slots=True)
class SessionPage:
    """One page of :meth:`SessionStore.list`: the ids found and the cursor to go on from
    (``0``: the walk is complete)."""

    session_ids: builtins.list[str]
    cursor: int

    @property
    def done(self) -> bool:
        return self.cursor == 0


def list_flow(layout: KeyLayout, settings: ClientSettings, cursor: int, prefix: str,
              count: int) -> Flow[SessionPage]:
    if settings.redis_cluster:
        # One cursor cannot walk several primaries; SCAN each node with headers_match().
        raise InvalidRequestError("sessions.list() needs a single Redis, not a Cluster: SCAN "
                                  f"each primary with MATCH {layout.headers_match(prefix)}")
    if isinstance(cursor, bool) or not isinstance(cursor, int) or cursor < 0:
        raise InvalidRequestError(f"cursor must be an int >= 0 (0 = from the start), "
                                  f"not {cursor!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
        raise InvalidRequestError(f"count must be a positive int, not {count!r}")
    reply: tuple[Any, builtins.list[str]] = yield cmd(
        "scan", cursor, match=layout.headers_match(prefix), count=count)
    following, keys = reply
    ids = [sid for sid in map(layout.session_of_header, keys) if sid is not None]
    return SessionPage(builtins.list(dict.fromkeys(ids)), int(following))


class SessionListing:
    """``list()`` and ``iter_ids()`` of :class:`~api_client.client.sessions.SessionStore`."""

    layout: KeyLayout
    settings: ClientSettings
    _io: SyncShell

    def list(self, cursor: int = 0, *, prefix: str = "",
             count: int = DEFAULT_COUNT) -> SessionPage:
        """One page of stored session ids whose id starts with ``prefix``: one ``SCAN`` of
        about ``count`` keys from ``cursor`` (0: the start). Go on with ``page.cursor`` until
        it is 0; a page may be empty before that. Not on a Redis Cluster."""
        return self._io.run(list_flow(self.layout, self.settings, cursor, prefix, count))

    def iter_ids(self, *, prefix: str = "", count: int = DEFAULT_COUNT) -> Iterator[str]:
        """Every stored session id starting with ``prefix``, page by page. Not de-duplicated
        across pages (memory stays bounded): an id may come twice if Redis resizes its table
        during the walk."""
        cursor = 0
        while True:
            page = self.list(cursor, prefix=prefix, count=count)
            yield from page.session_ids
            if page.done:
                return
            cursor = page.cursor


class AsyncSessionListing:
    """``list()`` and ``iter_ids()`` of :class:`~api_client.client.sessions.AsyncSessionStore`."""

    layout: KeyLayout
    settings: ClientSettings
    _io: AsyncShell

    async def list(self, cursor: int = 0, *, prefix: str = "",
                   count: int = DEFAULT_COUNT) -> SessionPage:
        return await self._io.run(list_flow(self.layout, self.settings, cursor, prefix, count))

    async def iter_ids(self, *, prefix: str = "",
                       count: int = DEFAULT_COUNT) -> AsyncIterator[str]:
        cursor = 0
        while True:
            page = await self.list(cursor, prefix=prefix, count=count)
            for sid in page.session_ids:
                yield sid
            if page.done:
                return
            cursor = page.cursor
