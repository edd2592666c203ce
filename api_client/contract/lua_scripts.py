"""The packaged Lua scripts: the contract's own (``api_client/contract/lua``: the job's end and
the path-walk helpers both sides run) and, by package, the client's (``api_client/client/lua``).

Redis scripts cannot import: a script whose first line reads ``-- include: _walk`` gets
``_walk.lua`` prepended, taken from the script's own package or else from the contract's. The
worker's commit scripts prepend the same helpers (``lua("_walk")``), so there is one copy.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

__all__ = ["CLIENT_SCRIPTS", "CONTRACT_SCRIPTS", "lua", "script_names"]

CONTRACT_SCRIPTS = "api_client.contract"
# Named here, not imported: the contract never loads the client's Python code.
CLIENT_SCRIPTS = "api_client.client"
_INCLUDE = "-- include: "


def _text(name: str, package: str) -> str:
    path = files(package) / "lua" / f"{name}.lua"
    if not path.is_file() and package != CONTRACT_SCRIPTS:
        path = files(CONTRACT_SCRIPTS) / "lua" / f"{name}.lua"
    return path.read_text(encoding="utf-8")


@cache
def lua(name: str, package: str = CONTRACT_SCRIPTS) -> str:
    """The text of ``<package>/lua/<name>.lua``, with its includes in front."""
    text = _text(name, package)
    first = text.split("\n", 1)[0]
    if first.startswith(_INCLUDE):
        helpers = "\n".join(lua(n, package) for n in first[len(_INCLUDE):].split())
        return helpers + "\n" + text
    return text


def script_names(package: str) -> list[str]:
    """The runnable scripts of ``package`` (helpers, named ``_x``, are only included)."""
    return sorted(p.name[:-4] for p in (files(package) / "lua").iterdir()
                  if p.name.endswith(".lua") and not p.name.startswith("_"))
