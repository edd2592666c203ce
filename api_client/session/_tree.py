"""The session tree: ids, parent walks with a cycle guard, leaf, children, labels (SPEC §1.4)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from api_client.errors import DanglingParentError, EntryNotFoundError, SessionCycleError
from api_client.session._entries import Entry, LabelEntry

__all__ = ["SessionTree"]


@dataclass(frozen=True)
class SessionTree:
    """Index over entries in file order. ``leaf_id`` defaults to the last entry (SPEC §1.4)."""

    entries: Sequence[Entry]
    source: str = "<session>"
    by_id: dict[str, Entry] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # A later duplicate id replaces an earlier one (SPEC §4 step 1).
        object.__setattr__(self, "by_id", {e.id: e for e in self.entries if e.id})

    @property
    def leaf_id(self) -> str | None:
        return self.entries[-1].id if self.entries else None

    def get(self, entry_id: str) -> Entry:
        try:
            return self.by_id[entry_id]
        except KeyError:
            raise EntryNotFoundError(entry_id) from None

    def path_to(self, entry_id: str | None, *, strict: bool = True) -> list[Entry]:
        """Root-first path ending at ``entry_id``; [] for None or an unknown id.

        A cycle always raises (Q15). A parent that names no entry raises when ``strict``
        (Compactor's commands), and otherwise ends the walk as the reference agent does.
        """
        if not entry_id or entry_id not in self.by_id:
            return []
        path: list[Entry] = []
        seen: set[str] = set()
        current: Entry | None = self.by_id[entry_id]
        while current is not None:
            if current.id in seen:
                raise SessionCycleError(
                    f"parentId cycle through entry {current.id}",
                    source=self.source,
                    line=current.line,
                )
            seen.add(current.id)
            path.append(current)
            parent = current.parent_id
            if parent is None:
                break
            if parent == current.id:  # the shortest cycle (Q15)
                raise SessionCycleError(
                    f"parentId cycle: entry {current.id} is its own parent",
                    source=self.source,
                    line=current.line,
                )
            current = self.by_id.get(parent)
            if current is None and strict:
                child = path[-1]
                raise DanglingParentError(
                    f"entry {child.id} has parentId {parent!r}, which names no entry",
                    source=self.source,
                    line=child.line,
                )
        path.reverse()
        return path

    def children(self, entry_id: str | None) -> list[Entry]:
        """Children sorted by timestamp (stable for ties); ``None`` lists the roots."""
        found = [
            e
            for e in self.entries
            if (e.parent_id if e.parent_id in self.by_id and e.parent_id != e.id else None)
            == entry_id
        ]
        return sorted(found, key=lambda e: e.timestamp_ms)

    def labels(self) -> dict[str, str]:
        """Label map rebuilt from every label entry in file order; the last write wins."""
        result: dict[str, str] = {}
        for entry in self.entries:
            if isinstance(entry, LabelEntry):
                if entry.label:
                    result[entry.target_id] = entry.label
                else:
                    result.pop(entry.target_id, None)
        return result

    def common_ancestor(self, a: str | None, b: str | None) -> str | None:
        """Deepest entry on both paths (SPEC §11.1 step 2)."""
        on_a = {e.id for e in self.path_to(a)}
        for entry in reversed(self.path_to(b)):
            if entry.id in on_a:
                return entry.id
        return None
