"""Every Lua script of the project, in one folder (``api_client/contract/lua``), read by this one
loader: the contract's (the job's end, retention, stored bytes), the client's (append, enqueue,
drafts...) and the worker's (leases, commits, heartbeats...). The worker imports this module; the
contract never imports the worker (a script is only text).

Redis scripts cannot import: a script whose first line reads ``-- include: _walk _retention``
gets those helpers (``_walk.lua``, ``_retention.lua``: a helper's name starts with ``_`` and it
is never run alone) prepended, in that order. Each script's header names its KEYS and ARGV.

Every script runs by EVALSHA, the text sent only when Redis lacks it: :func:`register` (sync
client) and :func:`register_async` (asyncio client) give redis-py's script object, which loads
the script again on NOSCRIPT; :func:`queue` puts one into a pipeline or MULTI, loaded before
the pipeline runs (a NOSCRIPT inside a MULTI could not be recovered), at the price of a
``SCRIPT EXISTS`` round trip per pipeline (a batch of many calls: the inbox measures). The
exceptions go by EVAL with their text (:func:`eval_args`), routed by their first key like any
command: a Redis Cluster pipeline, which cannot load a script (redis-py queues EVALSHA there and
leaves NOSCRIPT to the caller), a flow's MULTI, and the retention refresh that rides along with
nearly every write of a job (``retention.retain_in``: one round trip more on each would cost
more than the text).

Keys. Every key a script touches comes in KEYS, or is derived by this one rule (docs/storage.md
"Redis layout"): a derived key is the name of a key the script got in KEYS, cut after its hash
tag (``<...>{<tag>}:``), and a suffix that ``api_client/contract/keys.py`` names for that
family: a session's (``header``, ``entries``, ``events``, ... as ``SessionKeys``) from any key
of the session (``_retention.lua``'s ``retain``, ``retain_keys``), a tenant's (``bytes``,
``reserved`` as ``KeyLayout.tenant_*``) from its quota key (``_admit.lua``). A derived key so
carries the hash tag of the key it comes from: the script stays on one slot of a Redis Cluster.
A script that derives keys says which in its header. The one exception: a script run by a
tenant's own Redis user gets in ARGV the keys that user may only read (the tenant's quota and
usage) or only write (the jobs-due index, the broker's list), in ``admit.lua`` and
``_enqueue.lua``, as Redis checks a script's declared keys for reading and writing both; each
command is still checked against the caller's ACL. And ``start_job.lua`` (a worker's, never on a
Cluster) names the fair index's two keys of the job's queue list from the record it reads in
the same step (``KeyLayout.fair_index`` of its queue and priority: unknown before).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis
    import redis.asyncio
    from redis.commands.core import AsyncScript, Script

__all__ = ["CONTRACT_SCRIPTS", "eval_args", "lua", "queue", "register", "register_async",
           "script_names"]

CONTRACT_SCRIPTS = "api_client.contract"  # the package whose ``lua`` folder holds the scripts
_INCLUDE = "-- include: "


def _folder() -> Traversable:
    return files(CONTRACT_SCRIPTS) / "lua"


@cache
def lua(name: str, package: str = CONTRACT_SCRIPTS) -> str:
    """The text of ``lua/<name>.lua``, with its includes in front. (``package`` is ignored:
    there is one folder; redis_flows' ``Script.package`` still passes it.)"""
    del package
    text = (_folder() / f"{name}.lua").read_text(encoding="utf-8")
    first = text.split("\n", 1)[0]
    if first.startswith(_INCLUDE):
        helpers = "\n".join(lua(n) for n in first[len(_INCLUDE):].split())
        return helpers + "\n" + text
    return text


def register(client: redis.Redis[str], name: str) -> Script:
    """redis-py's script object for ``lua/<name>.lua`` on ``client`` (EVALSHA; the script is
    loaded again when Redis answers NOSCRIPT)."""
    return client.register_script(lua(name))


def register_async(client: redis.asyncio.Redis[str], name: str) -> AsyncScript:
    """:func:`register` for an asyncio client (plain or Cluster)."""
    return client.register_script(lua(name))


def queue(pipe: Any, name: str, keys: Sequence[str], args: Sequence[Any] = ()) -> None:
    """Queue ``lua/<name>.lua`` in a redis-py pipeline or MULTI (sync or asyncio, plain or
    Cluster) so that no NOSCRIPT can come back inside it: EVALSHA, the script loaded before the
    pipeline runs (redis-py's ``SCRIPT EXISTS``, then ``SCRIPT LOAD`` if Redis lacks it); on a
    Cluster pipeline, which cannot load scripts, EVAL with the text (module doc)."""
    from redis.asyncio.client import Pipeline as AsyncPipeline
    from redis.client import Pipeline

    if isinstance(pipe, Pipeline | AsyncPipeline):  # a Cluster pipeline is neither
        script: Any = pipe.register_script(lua(name))
        pipe.scripts.add(script)
        pipe.evalsha(script.sha, len(keys), *keys, *args)
    else:
        pipe.execute_command(*eval_args(name, keys, args))


def eval_args(name: str, keys: Sequence[str], args: Sequence[Any] = ()) -> tuple[Any, ...]:
    """``EVAL`` of ``lua/<name>.lua`` as a command's arguments (``execute_command``), for a MULTI
    that cannot load a script first: a flow's pipeline, a Cluster pipeline (module doc)."""
    return ("EVAL", lua(name), len(keys), *keys, *args)


def script_names() -> list[str]:
    """The runnable scripts (helpers, named ``_x``, are only included)."""
    return sorted(p.name[:-4] for p in _folder().iterdir()
                  if p.name.endswith(".lua") and not p.name.startswith("_"))
