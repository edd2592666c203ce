"""Every Lua script of the project, in one folder (``api_client/contract/lua``), read by this one
loader: the contract's (the job's end, retention, stored bytes), the client's (append, enqueue,
drafts...) and the worker's (leases, commits, heartbeats...). The worker imports this module; the
contract never imports the worker (a script is only text).

Redis scripts cannot import: a script whose first line reads ``-- include: _walk _retention``
gets those helpers (``_walk.lua``, ``_retention.lua``: a helper's name starts with ``_`` and it
is never run alone) prepended, in that order. Each script's header names its KEYS and ARGV.
:func:`register` is how the worker's stores get a script (EVALSHA, loaded again on NOSCRIPT).
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis
    from redis.commands.core import Script

__all__ = ["CONTRACT_SCRIPTS", "lua", "register", "script_names"]

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


def script_names() -> list[str]:
    """The runnable scripts (helpers, named ``_x``, are only included)."""
    return sorted(p.name[:-4] for p in _folder().iterdir()
                  if p.name.endswith(".lua") and not p.name.startswith("_"))
