"""``buildSessionContext`` (docs/rules.md "Context building"): the messages a leaf sends to the
model, before conversion,
and :func:`llm_context`, the same after ``convertToLlm`` (docs/rules.md "Conversion for the model"):
what a platform sends."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from api_client.contract.session._entries import (
    CompactionEntry,
    Entry,
    Message,
    MessageEntry,
    ModeChangeEntry,
    ModelChangeEntry,
    ThinkingLevelChangeEntry,
    TtsrInjectionEntry,
)
from api_client.contract.session._tree import SessionTree
from api_client.contract.session.convert import (
    compaction_summary_message,
    convert_to_llm,
    for_context,
)

__all__ = ["ContextMessage", "LlmContext", "SessionContext", "build_session_context",
           "context_messages", "last_compaction_index", "llm_context"]


@dataclass(frozen=True, slots=True)
class ContextMessage:
    message: Message
    entry_id: str  # the entry that produced the message


@dataclass(frozen=True)
class SessionContext:
    messages: tuple[ContextMessage, ...] = ()
    thinking_level: str = "off"
    models: dict[str, str] = field(default_factory=dict)
    injected_ttsr_rules: tuple[str, ...] = ()
    mode: str = "none"
    mode_data: Any = None


_UNSET: Any = object()


def _settings_of(path: Sequence[Entry]) -> tuple[str, dict[str, str], tuple[str, ...], str, Any]:
    thinking, models, rules, mode, mode_data = "off", {}, {}, "none", None
    for entry in path:
        if isinstance(entry, ThinkingLevelChangeEntry):
            thinking = entry.thinking_level
        elif isinstance(entry, ModelChangeEntry) and entry.model:
            models[entry.role] = entry.model
        elif isinstance(entry, MessageEntry) and entry.role == "assistant":
            message = entry.message
            models["default"] = f"{message.get('provider')}/{message.get('model')}"
        elif isinstance(entry, TtsrInjectionEntry):
            rules.update(dict.fromkeys(entry.injected_rules))
        elif isinstance(entry, ModeChangeEntry):
            mode, mode_data = entry.mode, entry.data
    return thinking, models, tuple(rules), mode, mode_data


def last_compaction_index(path: Sequence[Entry]) -> int:
    """The index of the last compaction entry on ``path``, -1 when it has none. Walked from
    the end (after a commit the compaction is the last entry), in a plain loop: the
    ``max`` over a generator of every index it replaced cost three times as much a step."""
    for index in range(len(path) - 1, -1, -1):
        if isinstance(path[index], CompactionEntry):
            return index
    return -1


def context_messages(path: Sequence[Entry]) -> list[ContextMessage]:
    """The context's messages of a root→leaf ``path`` in hand (:func:`build_session_context`'s
    ``messages``, without a tree to build or the settings to collect)."""
    last = last_compaction_index(path)
    if last < 0:
        return [ContextMessage(m, e.id) for e in path if (m := for_context(e)) is not None]
    compaction = path[last]
    assert isinstance(compaction, CompactionEntry)
    out = [ContextMessage(compaction_summary_message(compaction), compaction.id)]
    kept = compaction.first_kept_entry_id
    first = next((i for i in range(last) if path[i].id == kept), last)
    out += [ContextMessage(m, entry.id) for entry in path[first:last]
            if not isinstance(entry, CompactionEntry) and (m := for_context(entry)) is not None]
    out += [ContextMessage(m, e.id) for e in path[last + 1 :] if (m := for_context(e)) is not None]
    return out


def build_session_context(tree: SessionTree, leaf_id: str | None = _UNSET, *,
                          strict: bool = True) -> SessionContext:
    """Context for ``leaf_id``; an explicit ``None`` gives the empty context, unset the last
    entry."""
    if leaf_id is None or not tree.entries:
        return SessionContext()
    if leaf_id is _UNSET or leaf_id not in tree.by_id:
        leaf_id = tree.entries[-1].id
    path = tree.path_to(leaf_id, strict=strict)
    thinking, models, rules, mode, mode_data = _settings_of(path)
    return SessionContext(tuple(context_messages(path)), thinking, models, rules, mode, mode_data)


@dataclass(frozen=True)
class LlmContext:
    """The model-ready context of one leaf.

    ``messages`` hold only the roles ``user``, ``assistant`` and ``toolResult``: summaries come
    wrapped in the reference's context texts, bash/python runs as user text, pruned tool
    results as their placeholder. ``session`` is the same context before conversion, each
    message with the id of the entry it came from.
    """

    messages: list[Message]
    session: SessionContext
    leaf_id: str | None
    revision: int = 0

    @property
    def thinking_level(self) -> str:
        return self.session.thinking_level

    @property
    def models(self) -> dict[str, str]:
        return self.session.models


def llm_context(tree: SessionTree, leaf_id: str | None, *, revision: int = 0) -> LlmContext:
    """Context of ``leaf_id`` (None: a reset leaf, the empty context), converted for a model."""
    built = build_session_context(tree, leaf_id)
    return LlmContext(convert_to_llm(m.message for m in built.messages), built, leaf_id,
                      revision)
