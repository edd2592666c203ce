"""Dispatch rules (docs/hooks.md "Dispatch rules (as in the reference agent)") over plugins
registered in a real pluggy manager."""

from __future__ import annotations

import operator
import threading
import time
from types import MappingProxyType
from typing import Any

import pytest
from hooks.hookkit import Token, runner_with

from api_client.contract.session import Entry
from worker.compaction import Preparation
from worker.hooks import (
    BeforeCompactResult,
    BeforeTreeResult,
    CompactingResult,
    HookBranchSummary,
    HookCompaction,
    HookValidationError,
    TreePreparation,
    hookimpl,
)

COMP_A = {"summary": "A", "firstKeptEntryId": "u2", "tokensBefore": 10}
COMP_B = HookCompaction(summary="B", first_kept_entry_id="a1", tokens_before=20)


def _answer(spec: Any) -> Any:
    if spec == "raise":
        raise RuntimeError("hook failed")
    if callable(spec):
        return spec()
    return spec


class Before:
    """Answers ``spec`` to both before events and records that it was called."""

    def __init__(self, name: str, spec: Any, calls: list[str]) -> None:
        self.name, self.spec, self.calls = name, spec, calls

    @hookimpl
    def session_before_compact(self) -> Any:
        self.calls.append(self.name)
        return _answer(self.spec)

    @hookimpl
    def session_before_tree(self) -> Any:
        self.calls.append(self.name)
        return _answer(self.spec)

    @hookimpl
    def session_compacting(self) -> Any:
        self.calls.append(self.name)
        return _answer(self.spec)


def _run_before_compact(specs: list[Any], path: list[Entry],
                        prep: Preparation) -> tuple[Any, list[str]]:
    calls: list[str] = []
    runner = runner_with(*(Before(f"h{i}", spec, calls) for i, spec in enumerate(specs)))
    return runner.before_compact(prep, path, None, None), calls


CANCEL = {"cancel": True}


@pytest.mark.parametrize(
    ("specs", "cancel", "summary", "called"),
    [
        ([], False, None, []),
        ([None], False, None, ["h0"]),
        ([{}], False, None, ["h0"]),
        ([CANCEL], True, None, ["h0"]),
        ([BeforeCompactResult(cancel=True)], True, None, ["h0"]),
        ([{"compaction": COMP_A}], False, "A", ["h0"]),
        ([BeforeCompactResult(compaction=COMP_B)], False, "B", ["h0"]),
        ([{"compaction": COMP_A}, BeforeCompactResult(compaction=COMP_B)], False, "B",
         ["h0", "h1"]),
        ([{"compaction": COMP_A}, None], False, "A", ["h0", "h1"]),
        ([{"compaction": COMP_A}, {"cancel": False}], False, "A", ["h0", "h1"]),
        ([CANCEL, {"compaction": COMP_A}], True, None, ["h0"]),
        ([{"compaction": COMP_A}, CANCEL, {"compaction": COMP_B}], True, None, ["h0", "h1"]),
        (["raise", {"compaction": COMP_A}], False, "A", ["h0", "h1"]),
        ([{"compaction": COMP_A}, "raise"], False, "A", ["h0", "h1"]),
        (["raise"], False, None, ["h0"]),
    ],
    ids=["none", "no-answer", "empty-dict", "cancel-dict", "cancel-typed", "dict", "typed",
         "last-wins", "none-keeps", "cancel-false-keeps", "cancel-stops", "cancel-mid",
         "raise-skipped", "raise-after", "raise-only"],
)
def test_before_compact_rules(specs: list[Any], cancel: bool, summary: str | None,
                              called: list[str], path: list[Entry],
                              preparation: Preparation) -> None:
    result, calls = _run_before_compact(specs, path, preparation)
    assert calls == called
    if not cancel and summary is None:
        assert result is None
        return
    assert result is not None
    assert result.cancel is cancel
    if summary is None:
        assert result.compaction is None
    else:
        assert result.compaction is not None
        assert result.compaction["summary"] == summary
        assert result.compaction["fromExtension"] is True


def test_hook_compaction_comes_back_as_validated_json(path: list[Entry],
                                                      preparation: Preparation) -> None:
    typed = HookCompaction(summary="S", first_kept_entry_id="a1", tokens_before=7,
                           short_summary="s",
                           details={"readFiles": ["x"]}, preserve_data={"k": [1]})
    result, _ = _run_before_compact([BeforeCompactResult(compaction=typed)], path, preparation)
    assert result.compaction == {
        "summary": "S", "shortSummary": "s", "firstKeptEntryId": "a1", "tokensBefore": 7,
        "details": {"readFiles": ["x"]}, "preserveData": {"k": [1]}, "fromExtension": True,
    }


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ({"compaction": {**COMP_A, "firstKeptEntryId": "t1"}}, "tool result"),
        ({"compaction": {**COMP_A, "firstKeptEntryId": "zz"}}, "not on the session path"),
        ({"compaction": {**COMP_A, "summary": " "}}, "summary must be non-empty"),
        ({"compaction": {**COMP_A, "tokensBefore": -1}}, "tokensBefore"),
        ({"cancel": "yes"}, "cancel must be true or false"),
        ({"compaction": "text"}, "compaction must be an object"),
        (["cancel"], "expected None"),
    ],
)
def test_invalid_before_compact_answer_fails_the_job(answer: Any, problem: str, path: list[Entry],
                                                     preparation: Preparation) -> None:
    with pytest.raises(HookValidationError, match=problem) as caught:
        _run_before_compact([answer], path, preparation)
    assert caught.value.plugin == "h0"
    assert caught.value.event == "session_before_compact"


@pytest.mark.parametrize(
    ("specs", "expected", "called"),
    [
        ([], None, []),
        ([{"context": ["c1"]}], CompactingResult(context=["c1"]), ["h0"]),
        ([{"context": ["c1"]}, {"prompt": "P"}], CompactingResult(prompt="P"), ["h0", "h1"]),
        ([{"context": ["c1"]}, None], CompactingResult(context=["c1"]), ["h0", "h1"]),
        ([{"context": ["c1"]}, {"context": [], "prompt": ""}], CompactingResult(context=["c1"]),
         ["h0", "h1"]),
        ([{"preserveData": {"a": 1}}, "raise"], CompactingResult(preserve_data={"a": 1}),
         ["h0", "h1"]),
        ([CompactingResult(context=["x"], prompt="P", preserve_data={"b": 2})],
         CompactingResult(context=["x"], prompt="P", preserve_data={"b": 2}), ["h0"]),
        ([{"context": ["c"], "prompt": "P", "preserveData": {"z": True}}],
         CompactingResult(context=["c"], prompt="P", preserve_data={"z": True}), ["h0"]),
        # Not a before event: a cancel key means nothing here.
        ([{"cancel": True}, {"prompt": "P"}], CompactingResult(prompt="P"), ["h0", "h1"]),
    ],
    ids=["none", "context", "last-wins-whole", "none-keeps", "empty-keeps", "raise-skipped",
         "typed", "dict-all-keys", "no-cancel"],
)
def test_compacting_rules(specs: list[Any], expected: CompactingResult | None,
                          called: list[str]) -> None:
    calls: list[str] = []
    runner = runner_with(*(Before(f"h{i}", spec, calls) for i, spec in enumerate(specs)))
    assert runner.compacting("s1", [{"role": "user", "content": "hi"}]) == expected
    assert calls == called


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ({"context": "one line"}, "context must be a list"),
        ({"context": [1]}, "context must be a list"),
        ({"prompt": 3}, "prompt must be a string"),
        ({"preserveData": [1]}, "preserveData must be an object"),
    ],
)
def test_invalid_compacting_answer_fails(answer: Any, problem: str) -> None:
    runner = runner_with(Before("h0", answer, []))
    with pytest.raises(HookValidationError, match=problem):
        runner.compacting("s1", [])


def _tree_plan(wants: bool) -> dict[str, Any]:
    return {"targetId": "u1", "oldLeafId": "a2", "commonAncestorId": "u1",
            "entriesToSummarize": [], "userWantsSummary": wants}


SUMMARY = {"summary": {"summary": "went elsewhere", "details": {"readFiles": []}}}


@pytest.mark.parametrize(
    ("specs", "wants", "cancel", "summary", "called"),
    [
        ([], True, False, None, []),
        ([{"cancel": True}, SUMMARY], True, True, None, ["h0"]),
        ([BeforeTreeResult(cancel=True)], False, True, None, ["h0"]),
        ([SUMMARY], True, False, "went elsewhere", ["h0"]),
        ([BeforeTreeResult(summary=HookBranchSummary("typed"))], True, False, "typed", ["h0"]),
        ([SUMMARY], False, False, None, ["h0"]),  # used only when a summary was asked for
        ([SUMMARY, {"summary": {"summary": "later"}}], True, False, "later", ["h0", "h1"]),
        (["raise", SUMMARY], True, False, "went elsewhere", ["h0", "h1"]),
        ([SUMMARY, {"cancel": True}], True, True, None, ["h0", "h1"]),
    ],
    ids=["none", "cancel-stops", "cancel-typed", "dict", "typed", "not-asked", "last-wins",
         "raise-skipped", "cancel-last"],
)
def test_before_tree_rules(specs: list[Any], wants: bool, cancel: bool, summary: str | None,
                           called: list[str]) -> None:
    calls: list[str] = []
    runner = runner_with(*(Before(f"h{i}", spec, calls) for i, spec in enumerate(specs)))
    result = runner.before_tree(_tree_plan(wants), None)
    assert calls == called
    if not cancel and summary is None:
        assert result is None
        return
    assert result is not None and result.cancel is cancel
    if summary is not None:
        assert result.summary is not None
        assert result.summary["summary"] == summary
        assert result.summary["fromExtension"] is True


def test_invalid_tree_summary_fails_only_when_asked_for() -> None:
    runner = runner_with(Before("h0", {"summary": {"summary": ""}}, []))
    assert runner.before_tree(_tree_plan(False), None) is None
    with pytest.raises(HookValidationError, match="summary must be non-empty"):
        runner.before_tree(_tree_plan(True), None)


class Listener:
    def __init__(self, name: str, seen: list[tuple[str, Any]], fail: bool = False) -> None:
        self.name, self.seen, self.fail = name, seen, fail

    @hookimpl
    def session_compact(self, compaction_entry: Any, from_extension: bool) -> Any:
        self.seen.append((self.name, (compaction_entry["id"], from_extension)))
        if self.fail:
            raise RuntimeError("listener failed")
        return {"cancel": True}  # ignored: a notification has no result

    @hookimpl
    def session_tree(self, new_leaf_id: str | None, old_leaf_id: str | None,
                     summary_entry: Any, from_extension: bool | None) -> None:
        self.seen.append((self.name, (new_leaf_id, old_leaf_id, summary_entry, from_extension)))
        if self.fail:
            raise RuntimeError("listener failed")


def test_notifications_reach_every_listener_even_after_a_failure() -> None:
    seen: list[tuple[str, Any]] = []
    runner = runner_with(Listener("a", seen, fail=True), Listener("b", seen))
    runner.compact_done({"id": "c9", "type": "compaction"}, True)
    runner.tree_done("n1", "o1", None, None)
    assert seen == [("a", ("c9", True)), ("b", ("c9", True)),
                    ("a", ("n1", "o1", None, None)), ("b", ("n1", "o1", None, None))]


class Mutator:
    """Tries to change every input; records which attempts went through."""

    def __init__(self) -> None:
        self.changed: list[str] = []

    def _try(self, label: str, action: Any) -> None:
        try:
            action()
        except (TypeError, AttributeError):  # FrozenInstanceError is an AttributeError
            return
        self.changed.append(label)

    @hookimpl
    def session_before_compact(self, preparation: Preparation, branch_entries: Any) -> None:
        self._try("message", lambda: operator.setitem(preparation.messages_to_summarize[0],
                                                      "content", "x"))
        self._try("entry", lambda: operator.setitem(branch_entries[0].raw, "id", "x"))
        self._try("nested", lambda: branch_entries[1].raw["message"]["content"].append({}))
        self._try("path", lambda: branch_entries.append(None))
        self._try("plan", lambda: setattr(preparation, "first_kept_entry_id", "x"))

    @hookimpl
    def session_compact(self, compaction_entry: Any) -> None:
        self._try("written entry", lambda: operator.setitem(compaction_entry, "summary", "x"))


def test_inputs_are_read_only(path: list[Entry], preparation: Preparation) -> None:
    mutator = Mutator()
    runner = runner_with(mutator)
    entry = {"id": "c9", "summary": "S"}
    runner.before_compact(preparation, path, None, None)
    runner.compact_done(entry, False)
    assert mutator.changed == []
    assert path[0].raw["id"] == "u1" and entry["summary"] == "S"
    assert preparation.messages_to_summarize[0]["content"] == "fix the importer"


class Subsets:
    def __init__(self) -> None:
        self.got: dict[str, Any] = {}

    @hookimpl
    def session_before_compact(self, custom_instructions: str | None,
                               session_id: str | None) -> None:
        self.got["before_compact"] = (custom_instructions, session_id)

    @hookimpl
    def session_compacting(self, messages: Any) -> None:
        self.got["compacting"] = messages

    @hookimpl
    def session_compact(self) -> None:
        self.got["compact"] = ()

    @hookimpl
    def session_before_tree(self, preparation: TreePreparation, signal: Any) -> None:
        self.got["before_tree"] = (preparation, signal)


def test_implementations_take_any_subset_of_arguments(path: list[Entry],
                                                      preparation: Preparation) -> None:
    hook = Subsets()
    runner = runner_with(hook)
    token = Token()
    runner.before_compact(preparation, path, "focus on tests", None, session_id="s7")
    runner.compacting("s7", [{"role": "user", "content": "x"}])
    runner.compact_done({"id": "c1"}, False)
    runner.before_tree({**_tree_plan(True), "entriesToSummarize": path[3:]}, token)
    assert hook.got["before_compact"] == ("focus on tests", "s7")
    assert hook.got["compacting"] == (MappingProxyType({"role": "user", "content": "x"}),)
    assert hook.got["compact"] == ()
    plan, signal = hook.got["before_tree"]
    assert signal is token
    assert (plan.target_id, plan.old_leaf_id, plan.common_ancestor_id, plan.user_wants_summary) == (
        "u1", "a2", "u1", True)
    assert [entry.id for entry in plan.entries_to_summarize] == ["u2", "a2"]


class Ordered:
    def __init__(self, name: str, calls: list[str]) -> None:
        self.name, self.calls = name, calls

    @hookimpl
    def session_compacting(self) -> None:
        self.calls.append(self.name)


class First(Ordered):
    @hookimpl(tryfirst=True)
    def session_compacting(self) -> None:
        self.calls.append(self.name)


class Last(Ordered):
    @hookimpl(trylast=True)
    def session_compacting(self) -> None:
        self.calls.append(self.name)


def test_load_order_with_tryfirst_and_trylast() -> None:
    calls: list[str] = []
    runner = runner_with(Last("l1", calls), Ordered("n1", calls), First("f1", calls),
                         Ordered("n2", calls), Last("l2", calls), First("f2", calls))
    runner.compacting("s", [])
    assert calls == ["f1", "f2", "n1", "n2", "l1", "l2"]


class Slow:
    """Sleeps until released (or 5 s), then answers."""

    def __init__(self, release: threading.Event, answer: Any) -> None:
        self.release, self.answer = release, answer

    @hookimpl
    def session_before_compact(self) -> Any:
        self.release.wait(5)
        return self.answer

    @hookimpl
    def session_compacting(self) -> Any:
        self.release.wait(5)
        return self.answer


def test_slow_hook_is_timed_out_and_skipped(path: list[Entry], preparation: Preparation,
                                            caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()
    calls: list[str] = []
    runner = runner_with(Before("h0", {"compaction": COMP_A}, calls),
                         Slow(release, {"cancel": True}),
                         timeout_s=0.3)
    started = time.monotonic()
    try:
        result = runner.before_compact(preparation, path, None, None)
    finally:
        release.set()
    assert time.monotonic() - started < 2.0
    assert result is not None and not result.cancel  # the late cancel never counted
    assert result.compaction is not None and result.compaction["summary"] == "A"
    assert "exceeded" in caplog.text


def test_cancelled_job_stops_dispatch(path: list[Entry], preparation: Preparation) -> None:
    token = Token()
    calls: list[str] = []

    def cancel_then_answer() -> Any:
        token.cancelled = True
        return {"compaction": COMP_A}

    runner = runner_with(Before("h0", cancel_then_answer, calls), Before("h1", CANCEL, calls))
    assert runner.before_compact(preparation, path, None, token) is None
    assert calls == ["h0"]
    assert runner.compacting("s", [], cancel=token) is None
    assert calls == ["h0"]


def test_cancel_while_waiting_on_a_slow_hook(path: list[Entry], preparation: Preparation) -> None:
    token = Token()
    release = threading.Event()
    runner = runner_with(Slow(release, {"prompt": "P"}), timeout_s=10)
    threading.Timer(0.2, lambda: setattr(token, "cancelled", True)).start()
    started = time.monotonic()
    try:
        assert runner.compacting("s", [], cancel=token) is None
    finally:
        release.set()
    assert time.monotonic() - started < 2.0


def test_runner_without_plugins_is_a_no_op(path: list[Entry], preparation: Preparation) -> None:
    from worker.hooks import HookRunner

    runner = HookRunner()
    assert runner.before_compact(preparation, path, None, None) is None
    assert runner.compacting("s", []) is None
    assert runner.before_tree(_tree_plan(True), None) is None
    runner.compact_done({"id": "x"}, False)
    runner.tree_done(None, None, None, None)
    assert not runner.has_hooks("session_compact")
