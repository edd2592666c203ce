"""One loader for every Lua script (api_client/contract/lua_scripts.py): every script runs by
EVALSHA, loaded again when Redis lacks it, in a pipeline and a MULTI too (a NOSCRIPT inside a
MULTI could not be recovered), except the loader's EVAL-by-text cases (the retention refresh
beside a job's writes); no module EVALs a script's text but the loader."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import redis
import redis.asyncio

from api_client.contract.keys import KeyLayout
from api_client.contract.lua_scripts import eval_args, lua, queue, register_async

REPO = Path(__file__).resolve().parents[2]
SESSION = "compactor:session:{s1}"


def test_a_script_in_a_multi_is_loaded_before_it_runs(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    for _ in range(2):  # the second time after a flush: Redis lacks the script again
        client.script_flush()
        pipe = client.pipeline(transaction=True)
        pipe.set(SESSION, "y")
        queue(pipe, "retain", [SESSION], ["600"])
        assert [c[0][:2] for c in pipe.command_stack][1:] == [
            ("EVALSHA", client.script_load(lua("retain")))]
        client.script_flush()
        assert pipe.execute() == [True, 1]  # loaded before the MULTI: no NOSCRIPT in it


def test_the_retention_refresh_in_a_multi_costs_no_load_round_trip(redis_url: str) -> None:
    from api_client.contract.retention import retain_in

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.script_flush()  # Redis lacks the script: the refresh still runs, inside the MULTI
    pipe = client.pipeline(transaction=True)
    pipe.set(SESSION, "y")
    retain_in(pipe, SESSION, 600)
    assert not pipe.scripts  # nothing for redis-py to SCRIPT EXISTS before the MULTI
    assert [c[0][:2] for c in pipe.command_stack][1:] == [("EVAL", lua("retain"))]
    assert pipe.execute() == [True, 1]


def test_an_asyncio_script_is_loaded_again_on_noscript(redis_url: str) -> None:
    async def read() -> list[int]:
        client = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
        try:
            await client.script_flush()
            workers = register_async(client, "workers_read")
            reply: list[int] = await workers(keys=["compactor:workers"], args=[""])
            return reply
        finally:
            await client.aclose()

    assert asyncio.run(read()) == [0, 0]


def test_eval_by_text_is_the_loaders_alone() -> None:
    assert eval_args("retain", [SESSION], ["1"])[:4] == ("EVAL", lua("retain"), 1, SESSION)
    by_text = re.compile(r"\.eval\(|[\"']EVAL[\"']")
    found = [f"{path.relative_to(REPO)}" for folder in ("api_client", "worker")
             for path in sorted((REPO / folder).rglob("*.py"))
             if path.name != "lua_scripts.py" and by_text.search(path.read_text())]
    assert found == []


def _derived(key: str, suffix: str) -> str:
    """The loader's one rule for a key not in KEYS: a KEYS key cut after its hash tag, and a
    suffix (lua_scripts.py, "Keys")."""
    match = re.match(r"^(.*?}:)", key)
    assert match is not None, key
    return match.group(1) + suffix


def test_every_derived_key_follows_the_one_rule() -> None:
    for layout in (KeyLayout("compactor"), KeyLayout("compactor", "acme")):
        quota = layout.tenant_quota("acme")  # _admit.lua: the quota key's siblings
        assert _derived(quota, "bytes") == layout.tenant_bytes("acme")
        assert _derived(quota, "reserved") == layout.tenant_reserved("acme")
        session = layout.session("s1")  # _retention.lua: any key of the session's
        for key in session.all():
            assert _derived(session.header, key.split("}:", 1)[1]) == key
    text = lua("_retention")
    assert "string.match(session_key, '^(.-}:)')" in text  # the rule, as the helper applies it
