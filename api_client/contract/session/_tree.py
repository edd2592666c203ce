"""The session tree: ids, parent walks with a cycle guard, leaf, children, labels
(docs/rules.md "Tree, leaf and labels")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NoReturn, cast

from api_client.contract.errors import DanglingParentError, EntryNotFoundError, SessionCycleError
from api_client.contract.session._entries import Entry, LabelEntry

__all__ = ["SessionTree"]


@dataclass(frozen=True)
class SessionTree:
    """Index over entries in file order. ``leaf_id`` defaults to the last entry
    (docs/rules.md "Tree, leaf and labels")."""

    entries: Sequence[Entry]
    source: str = "<session>"
    by_id: dict[str, Entry] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # A later duplicate id replaces an earlier one (docs/rules.md "Context building").
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
        by_id = self.by_id
        path: list[Entry] = []
        current = by_id[entry_id]
        # No set of the ids seen: a walk longer than the entries is a cycle, which the guarded
        # walk then names.
        for _ in range(len(by_id)):
            path.append(current)
            parent = current.parent_id
            if parent is None:
                break
            found = by_id.get(parent)
            if found is None:
                if strict:
                    raise DanglingParentError(
                        f"entry {current.id} has parentId {parent!r}, which names no entry",
                        source=self.source,
                        line=current.line,
                    )
                break
            current = found
        else:
            self._raise_cycle(entry_id)
        path.reverse()
        return path

    def check_all(self) -> None:
        """Every entry's path resolves: no parent names a missing entry, no cycle (what a
        session must satisfy before it is stored; each entry is walked once)."""
        rooted: set[str] = set()
        for entry in self.entries:
            walked: list[str] = []
            current: Entry | None = entry
            while current is not None and current.id not in rooted:
                if len(walked) > len(self.by_id):
                    self._raise_cycle(entry.id)
                walked.append(current.id)
                parent = current.parent_id
                if parent is None:
                    break
                current = self.by_id.get(parent)
                if current is None:
                    raise DanglingParentError(
                        f"entry {walked[-1]} has parentId {parent!r}, which names no entry",
                        source=self.source, line=self.by_id[walked[-1]].line)
            rooted.update(walked)

    def _raise_cycle(self, entry_id: str) -> NoReturn:
        """The walk from ``entry_id`` with its guard: the error names the first repeated id."""
        seen: set[str] = set()
        current = self.by_id[entry_id]
        while current.id not in seen:
            seen.add(current.id)
            if current.parent_id == current.id:  # the shortest cycle (Q15)
                raise SessionCycleError(
                    f"parentId cycle: entry {current.id} is its own parent",
                    source=self.source,
                    line=current.line,
                )
            current = self.by_id[cast(str, current.parent_id)]
        raise SessionCycleError(
            f"parentId cycle through entry {current.id}",
            source=self.source,
            line=current.line,
        )

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
        """Deepest entry on both paths (docs/compaction.md "Branch summaries")."""
        on_a = {e.id for e in self.path_to(a)}
        for entry in reversed(self.path_to(b)):
            if entry.id in on_a:
                return entry.id
        return None
