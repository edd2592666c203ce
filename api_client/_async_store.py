"""The asyncio twin of :class:`api_client.session_store.SessionStore` (same scripts, same encoding)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import redis
import redis.asyncio

from api_client.keys import KeyLayout, SessionKeys, check_session_id
from api_client.redis_conn import REDIS_DOWN, check_decoding, lua, unavailable
from api_client.session import IdFactory, dump_record, random_entry_id
from api_client.session_store import (
    Snapshot,
    append_args,
    build_snapshot,
    export_text,
    import_args,
    new_session_header,
    parse_import,
    script_error,
)

__all__ = ["AsyncSessionStore"]

T = TypeVar("T")


class AsyncSessionStore:
    """Sessions in Redis from asyncio code. Methods mirror :class:`SessionStore`."""

    def __init__(self, client: redis.asyncio.Redis[str], layout: KeyLayout | None = None) -> None:
        check_decoding(client)
        self.redis = client
        self.layout = layout or KeyLayout()
        self._append = client.register_script(lua("append"))
        self._navigate = client.register_script(lua("navigate"))
        self._import = client.register_script(lua("import"))

    def keys(self, session_id: str) -> SessionKeys:
        return self.layout.session(session_id)

    async def create(self, session_id: str | None = None, *, cwd: str = "",
                     title: str | None = None) -> str:
        sid = check_session_id(session_id if session_id is not None else str(uuid.uuid4()))
        k = self.keys(sid)
        header = new_session_header(sid, cwd, title)
        await self._run(self._import, sid, (*k.data(), k.effects), ["0", dump_record(header), ""])
        return sid

    async def append(self, session_id: str, entry_or_message: Mapping[str, Any]) -> str:
        return (await self.append_many(session_id, [entry_or_message]))[0]

    async def append_many(self, session_id: str, items: Iterable[Mapping[str, Any]]) -> list[str]:
        batch = list(items)
        if not batch:
            return []
        args = append_args(batch, f"append to {session_id}")
        ids = await self._run(self._append, session_id, self.keys(session_id).data(), args)
        return [str(i) for i in ids[:-1]]

    async def navigate(self, session_id: str, entry_id: str | None) -> int:
        k = self.keys(session_id)
        keys = (k.header, k.entries, k.leaf, k.rev)
        return int(await self._run(self._navigate, session_id, keys, [entry_id or ""]))

    async def load(self, session_id: str) -> Snapshot:
        k = self.keys(session_id)
        pipe = self.redis.pipeline(transaction=True)
        pipe.get(k.header).get(k.rev).get(k.leaf).lrange(k.order, 0, -1).hgetall(k.entries)
        return build_snapshot(session_id, await self._call(pipe.execute))

    async def revision(self, session_id: str) -> int:
        return int(await self._call(lambda: self.redis.get(self.keys(session_id).rev)) or 0)

    async def import_jsonl(self, text: str, session_id: str | None = None, *,
                           replace: bool = False, new_id: IdFactory = random_entry_id) -> str:
        session, sid = parse_import(text, session_id, new_id)
        k = self.keys(sid)
        await self._run(self._import, sid, (*k.data(), k.effects),
                        import_args(session, sid, replace))
        return sid

    async def export_jsonl(self, session_id: str) -> str:
        k = self.keys(session_id)
        pipe = self.redis.pipeline(transaction=True)
        pipe.get(k.header).lrange(k.order, 0, -1).hgetall(k.entries)
        return export_text(session_id, await self._call(pipe.execute))

    async def exists(self, session_id: str) -> bool:
        return bool(await self._call(lambda: self.redis.exists(self.keys(session_id).header)))

    async def delete(self, session_id: str) -> bool:
        keys = self.keys(session_id)
        return bool(await self._call(lambda: self.redis.delete(*keys.all())))

    async def _run(self, script: Any, session_id: str, keys: Sequence[str],
                   args: Sequence[str]) -> Any:
        try:
            return await script(keys=list(keys), args=list(args))
        except redis.ResponseError as err:
            mapped = script_error(err, session_id)
            if mapped is None:
                raise
            raise mapped from err
        except REDIS_DOWN as err:
            raise unavailable(err) from err

    async def _call(self, fn: Callable[[], Awaitable[T]]) -> T:
        try:
            return await fn()
        except REDIS_DOWN as err:
            raise unavailable(err) from err
