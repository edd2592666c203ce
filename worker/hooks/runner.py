"""Dispatch of the five hook events with the rules of docs/hooks.md.

pluggy's own call loop runs the last-registered implementation first and stops at the first
non-None result only with ``firstresult``; the reference agent's rules differ, so the runner walks
the implementations itself: in load order, each call in a thread with a deadline, a raising or
late hook logged and skipped, a ``cancel`` stopping a ``before`` event at once, otherwise the last
result that carries something winning.

A call past its deadline (or of a cancelled job) is *ended*, not only abandoned: its thread
gets ``HookCallEnded`` raised into it (``PyThreadState_SetAsyncExc``), which stops Python code
at its next instruction; a ``BaseException``, so a plugin's ``except Exception`` does not swallow
it. Python cannot interrupt a thread blocked inside one C call (``time.sleep(3600)``, a socket
read without a timeout): such a call ends when that C call returns, and until then it holds
one of the ``max_calls`` slots. Every call needs a slot, so late calls never pile up threads:
with all slots held, a call waits for one until its own deadline and is then skipped.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pluggy

from api_client.contract.session import Entry, parse_entry
from worker.hooks._frozen import freeze, freeze_dataclass, freeze_entry
from worker.hooks.result_checks import validate_branch_summary, validate_compaction
from worker.hooks.results import (
    BeforeCompactResult,
    BeforeTreeResult,
    CompactingResult,
    normalise_before_compact,
    normalise_before_tree,
    normalise_compacting,
)
from worker.hooks.specs import CancelSignal, TreePreparation

if TYPE_CHECKING:
    from pluggy import HookImpl

    from worker.compaction import Preparation

__all__ = ["HookCallEnded", "HookRunner", "tree_preparation"]

log = logging.getLogger("worker.hooks")
R = TypeVar("R")
_POLL_S = 0.05


class _Stop(Exception):
    """The job was cancelled while hooks were being dispatched."""


class HookCallEnded(BaseException):
    """Raised inside a hook call's thread to end it (deadline passed or job cancelled)."""


class HookRunner:
    """Calls the loaded hooks; with no plugins every method is a cheap no-op returning None."""

    def __init__(
        self, manager: pluggy.PluginManager | None = None, *, timeout_s: float = 10.0,
        max_calls: int = 16,
    ) -> None:
        self.manager = manager
        self.timeout_s = timeout_s
        self.calls = _CallPool(max_calls)

    # -- introspection -------------------------------------------------------------------------
    def implementations(self, event: str) -> list[HookImpl]:
        """The implementations of ``event`` in call order: tryfirst, then load order, trylast."""
        if self.manager is None:
            return []
        impls = getattr(self.manager.hook, event).get_hookimpls()
        first = [impl for impl in impls if impl.tryfirst]
        normal = [impl for impl in impls if not impl.tryfirst and not impl.trylast]
        # pluggy inserts trylast implementations at the front, newest first.
        last = [impl for impl in reversed(impls) if impl.trylast]
        return first + normal + last

    def has_hooks(self, event: str) -> bool:
        return bool(self.implementations(event))

    # -- events --------------------------------------------------------------------------------
    def before_compact(
        self,
        preparation: Preparation,
        branch_entries: Sequence[Entry],
        custom_instructions: str | None,
        cancel: CancelSignal | None,
        *,
        session_id: str | None = None,
    ) -> BeforeCompactResult | None:
        """docs/rules.md "Manual compaction": a hook compaction comes back validated against the
        path."""
        impls = self.implementations("session_before_compact")
        if not impls:
            return None
        kwargs = {
            "preparation": freeze_dataclass(preparation),
            "branch_entries": tuple(freeze_entry(entry) for entry in branch_entries),
            "custom_instructions": custom_instructions,
            "signal": cancel,
            "session_id": session_id,
        }
        found = self._decide(
            "session_before_compact", impls, kwargs, cancel, normalise_before_compact
        )
        if found is None:
            return None
        result, plugin = found
        if result.cancel or result.compaction is None:
            return BeforeCompactResult(cancel=True) if result.cancel else None
        return BeforeCompactResult(
            compaction=validate_compaction(result.compaction, branch_entries, plugin=plugin)
        )

    def compacting(
        self,
        session_id: str | None,
        messages: Sequence[Mapping[str, Any]],
        *,
        cancel: CancelSignal | None = None,
    ) -> CompactingResult | None:
        """The reference's ``session.compacting``: the last result that carries something wins."""
        impls = self.implementations("session_compacting")
        if not impls:
            return None
        kwargs = {"session_id": session_id, "messages": freeze(list(messages)), "signal": cancel}
        found = self._decide("session_compacting", impls, kwargs, cancel, normalise_compacting)
        return None if found is None else found[0]

    def compact_done(
        self, entry: Mapping[str, Any], from_extension: bool, *, session_id: str | None = None
    ) -> None:
        """Notification after commit; results and errors of hooks are ignored."""
        kwargs = {"compaction_entry": freeze(entry), "from_extension": from_extension,
                  "session_id": session_id}
        self._notify("session_compact", kwargs)

    def before_tree(
        self,
        preparation: Mapping[str, Any] | TreePreparation,
        cancel: CancelSignal | None,
        *,
        session_id: str | None = None,
    ) -> BeforeTreeResult | None:
        """docs/compaction.md "Branch navigation": a summary is returned (validated) only if one was
        asked for."""
        impls = self.implementations("session_before_tree")
        if not impls:
            return None
        plan = tree_preparation(preparation)
        kwargs = {"preparation": plan, "signal": cancel, "session_id": session_id}
        found = self._decide("session_before_tree", impls, kwargs, cancel, normalise_before_tree)
        if found is None:
            return None
        result, plugin = found
        if result.cancel:
            return BeforeTreeResult(cancel=True)
        if result.summary is None or not plan.user_wants_summary:
            return None
        return BeforeTreeResult(summary=validate_branch_summary(result.summary, plugin=plugin))

    def tree_done(
        self,
        new_leaf_id: str | None,
        old_leaf_id: str | None,
        summary_entry: Mapping[str, Any] | None,
        from_extension: bool | None,
        *,
        session_id: str | None = None,
    ) -> None:
        kwargs = {
            "new_leaf_id": new_leaf_id,
            "old_leaf_id": old_leaf_id,
            "summary_entry": freeze(summary_entry),
            "from_extension": from_extension,
            "session_id": session_id,
        }
        self._notify("session_tree", kwargs)

    # -- dispatch ------------------------------------------------------------------------------
    def _decide(
        self,
        event: str,
        impls: list[HookImpl],
        kwargs: dict[str, Any],
        cancel: CancelSignal | None,
        normalise: Callable[[Any, str | None], R | None],
    ) -> tuple[R, str] | None:
        """Run ``impls`` in order; a cancel result stops at once, else the last answer wins."""
        winner: tuple[R, str] | None = None
        for impl in impls:
            try:
                ok, value = self._call(event, impl, kwargs, cancel)
            except _Stop:
                log.info("job cancelled: %s dispatch stopped before %s", event, impl.plugin_name)
                return None
            if not ok:
                continue
            result = normalise(value, impl.plugin_name)
            if result is None:
                continue
            winner = (result, impl.plugin_name)
            if getattr(result, "cancel", False):
                break
        return winner

    def _notify(self, event: str, kwargs: dict[str, Any]) -> None:
        # The entry is committed already: a cancelled job still tells every listener.
        for impl in self.implementations(event):
            self._call(event, impl, kwargs, None)

    def _call(
        self, event: str, impl: HookImpl, kwargs: dict[str, Any], cancel: CancelSignal | None
    ) -> tuple[bool, Any]:
        """(True, result) or (False, None) for a hook that raised, ran past its deadline or
        found no free slot before it."""
        if cancel is not None and cancel.is_cancelled():
            raise _Stop
        deadline = time.monotonic() + self.timeout_s
        name = f"{event}:{impl.plugin_name}"
        slot = self.calls.reserve(deadline, cancel)
        if slot is None:
            if cancel is not None and cancel.is_cancelled():
                raise _Stop
            log.warning("hook %s of %s skipped: all %d hook call slots are held by calls that "
                        "have not ended (COMPACTOR_HOOKS_MAX_CALLS); the default applies",
                        event, impl.plugin_name, self.calls.size)
            return False, None
        call = _HookCall(impl, [kwargs[arg] for arg in impl.argnames], name, self.calls, slot)
        while not call.done.wait(min(_POLL_S, max(0.0, deadline - time.monotonic()))):
            if cancel is not None and cancel.is_cancelled():
                call.end()
                raise _Stop
            if time.monotonic() >= deadline:
                call.end()
                log.warning("hook %s of %s exceeded %.3gs (COMPACTOR_HOOKS_TIMEOUT_S); ended, "
                            "the default applies", event, impl.plugin_name, self.timeout_s)
                return False, None
        if call.error is not None:
            log.warning("hook %s of %s raised %s: %s; skipped, the default applies", event,
                        impl.plugin_name, type(call.error).__name__, call.error,
                        exc_info=call.error)
            return False, None
        return True, call.result


class _CallPool:
    """Slots for hook calls: a call holds one from its start until its thread has ended.

    A slot is an object in a set, given back with ``set.discard`` (one C call, idempotent):
    a late ``HookCallEnded`` landing while a thread gives its slot back can make it repeat the
    step, never lose or double it. A full pool is polled, as the call loop is."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.live: set[object] = set()
        self._lock = threading.Lock()

    def reserve(self, deadline: float, cancel: CancelSignal | None) -> object | None:
        while True:
            with self._lock:
                if len(self.live) < self.size:
                    slot = object()
                    self.live.add(slot)
                    return slot
            left = deadline - time.monotonic()
            if left <= 0 or (cancel is not None and cancel.is_cancelled()):
                return None
            time.sleep(min(_POLL_S, left))


class _HookCall:
    """One hook call in a daemon thread, holding ``slot`` of ``pool`` until the thread ends."""

    def __init__(self, impl: HookImpl, args: list[Any], name: str, pool: _CallPool,
                 slot: object) -> None:
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self._impl = impl
        self._args = args
        self._live, self._slot = pool.live, slot
        self._lock = threading.Lock()
        self._finished = False  # set under _lock before the thread leaves: end() checks it
        self._ended = False
        self._thread = threading.Thread(target=self._run, name=f"hook-{name}", daemon=True)
        self._thread.start()

    def end(self) -> None:
        """Raise ``HookCallEnded`` in the call's thread (once), unless it has finished."""
        with self._lock:
            # Under the lock: a thread not finished is alive, so its id is not yet reused.
            if self._finished or self._ended or self._thread.ident is None:
                return
            self._ended = True
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread.ident),
                                                       ctypes.py_object(HookCallEnded))

    def _run(self) -> None:
        try:
            try:
                self.result = self._impl.function(*self._args)
            except BaseException as err:  # a hook must never take the worker down
                self.error = err
            finally:
                self._finish()
        except HookCallEnded:  # end() came as the call returned and landed in _finish: redo it
            self._finish()

    def _finish(self) -> None:
        """Every step idempotent, so a repeat after an interruption is harmless."""
        with self._lock:
            self._finished = True
        self._live.discard(self._slot)
        self.done.set()


def tree_preparation(value: Mapping[str, Any] | TreePreparation) -> TreePreparation:
    """The read-only tree plan from the service's dict (the keys of docs/hooks.md "The five events")
    or as given."""
    if isinstance(value, TreePreparation):
        entries: Sequence[Any] = value.entries_to_summarize
        plan = value
    else:
        entries = value.get("entriesToSummarize") or ()
        plan = TreePreparation(
            target_id=str(value["targetId"]),
            old_leaf_id=value.get("oldLeafId"),
            common_ancestor_id=value.get("commonAncestorId"),
            entries_to_summarize=(),
            user_wants_summary=bool(value.get("userWantsSummary")),
        )
    frozen = tuple(
        freeze_entry(item if isinstance(item, Entry) else parse_entry(dict(item)))
        for item in entries
    )
    return TreePreparation(
        target_id=plan.target_id,
        old_leaf_id=plan.old_leaf_id,
        common_ancestor_id=plan.common_ancestor_id,
        entries_to_summarize=frozen,
        user_wants_summary=plan.user_wants_summary,
    )
