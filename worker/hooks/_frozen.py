"""Deep read-only views of JSON values for hook inputs, and the way back to plain JSON."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypeVar, cast

from api_client.contract.session import Entry

__all__ = ["freeze", "freeze_dataclass", "freeze_entry", "thaw"]

T = TypeVar("T")


def freeze(value: Any) -> Any:
    """dict → MappingProxyType, list/tuple → tuple, recursively; anything else as it is."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: freeze(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(item) for item in value)
    if isinstance(value, Entry):
        return freeze_entry(value)
    return value


def freeze_entry(entry: Entry) -> Entry:
    """A copy of the entry (same typed class) whose JSON cannot be changed."""
    return type(entry)(raw=cast(dict[str, Any], freeze(entry.raw)), line=entry.line)


def freeze_dataclass(value: T) -> T:
    """A copy of a dataclass instance whose container fields are frozen deeply."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    changes = {
        field.name: freeze(getattr(value, field.name))
        for field in dataclasses.fields(value)
        if field.init and isinstance(getattr(value, field.name), (Mapping, list, tuple))
    }
    return dataclasses.replace(value, **changes)


def thaw(value: Any) -> Any:
    """The plain JSON form (dict / list) of a value that may hold frozen views or entries."""
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(item) for item in value]
    if isinstance(value, Entry):
        return thaw(value.raw)
    return value
