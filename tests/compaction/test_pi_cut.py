"""Issue 38 item 2: the cut is pi's cut. For the same session state and the same agent settings,
Compactor's plan and the real pi's own ``prepareCompaction`` (pi 1.6.0 and 0.73.1 from npm,
run by ``tests/helpers/pi_prepare_probe.mjs`` under Node 22) agree on ``firstKeptEntryId``,
the split-turn flag, the summarised entries and the split turn's prefix.

States: every assistant message of generated sessions (tool calls and results, thinking, bash
executions, custom messages, model changes, labels, overflow errors, earlier compactions,
branch summaries) and of the reference sessions (read in place from ../shared/fixtures/pi),
with pi's default settings and non-default ones. Skipped without pi or the reference
sessions, failed instead when ``CI`` is set.
"""

from __future__ import annotations

import os
from collections import Counter
from functools import cache

import pytest

from api_client import AgentSettings
from api_client.contract.session import load_session
from helpers.pi_cut import (
    NODE,
    PI_PACKAGES,
    Cut,
    State,
    compactor_cut,
    generated_session,
    pi_cuts,
    states_of,
    v3,
)

# (keepRecentTokens, reserveTokens): pi's defaults, the (window 32 000), one between.
SETTINGS = [(20_000, 16_384), (3_000, 4_000), (8_000, 8_000)]
SEEDS = range(10)


def _require_pi(version: str) -> None:
    missing = [str(p) for p in (NODE, PI_PACKAGES[version]) if not p.exists()]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"pi or Node 22 is not installed (CI must have them): {missing}")
        pytest.skip(f"pi or Node 22 is not installed: {missing}")


@cache
def generated_states() -> tuple[State, ...]:
    states: list[State] = []
    for seed in SEEDS:
        text = generated_session(seed, 36, compactions=seed % 3, branches=(seed + 1) % 2,
                                 big=seed % 4 == 0)
        states += states_of(f"gen{seed}", text, every=2)
    return tuple(states)


@cache
def reference_states(fixtures: str) -> tuple[State, ...]:
    states: list[State] = []
    for name in ("before-compaction", "large-session"):
        text = (os.path.join(fixtures, f"{name}.jsonl"))
        with open(text, encoding="utf-8") as f:
            states += states_of(name, v3(f.read(), name), every=9)
    return tuple(states)


def _compare(version: str, states: tuple[State, ...], keep: int, reserve: int,
             ) -> tuple[int, list[str], list[Cut | None]]:
    agent = AgentSettings(keep_recent_tokens=keep, reserve_tokens=reserve,
                          tokenizer="estimate", summary_format=version)  # type: ignore[arg-type]
    theirs = pi_cuts(version, states, keep, reserve)
    differ = []
    for state, cut in zip(states, theirs, strict=True):
        ours = compactor_cut(state, agent)
        if ours != cut:
            differ.append(f"{state.name}: pi {cut} compactor {ours}")
    print(f"{version} keep={keep} reserve={reserve}: "
          f"{len(states) - len(differ)}/{len(states)} cuts match")
    return len(states) - len(differ), differ, theirs


def _coverage(states: tuple[State, ...], cuts: list[Cut | None]) -> Counter[str]:
    """What the states exercise: each reason, earlier compactions, split turns, tool pairs
    around the cut, branch summaries on the path."""
    seen: Counter[str] = Counter()
    trees = {text: load_session(text).tree() for text in {s.jsonl for s in states}}
    for state, cut in zip(states, cuts, strict=True):
        seen[state.reason] += 1
        path = trees[state.jsonl].path_to(state.leaf_id)
        kinds = {e.raw.get("type") for e in path}
        seen["after a compaction"] += "compaction" in kinds
        seen["branch summary"] += "branch_summary" in kinds
        if cut is not None:
            seen["split turn"] += cut.is_split_turn
            at = next(i for i, e in enumerate(path) if e.id == cut.first_kept_entry_id)
            calls = any("toolCall" in str(e.raw.get("message", {}).get("content"))
                        for e in path[at:])
            seen["tool pairs kept"] += calls
    return seen


@pytest.mark.parametrize(("keep", "reserve"), SETTINGS)
@pytest.mark.parametrize("version", sorted(PI_PACKAGES))
def test_generated_sessions_cut_where_pi_cuts(version: str, keep: int, reserve: int) -> None:
    _require_pi(version)
    states = generated_states()
    matched, differ, cuts = _compare(version, states, keep, reserve)
    assert not differ, "\n".join(differ[:10])
    assert matched == len(states) > 300
    if keep != 3_000:
        return
    seen = _coverage(states, cuts)
    for what in ("threshold", "overflow", "manual", "after a compaction", "branch summary",
                 "split turn", "tool pairs kept"):
        assert seen[what] > 0, (what, seen)


@pytest.mark.fixtures
@pytest.mark.parametrize(("keep", "reserve"), SETTINGS[:2])
@pytest.mark.parametrize("version", sorted(PI_PACKAGES))
def test_reference_sessions_cut_where_pi_cuts(pi_dir: object, version: str, keep: int,
                                              reserve: int) -> None:
    _require_pi(version)
    states = reference_states(str(pi_dir))
    matched, differ, _ = _compare(version, states, keep, reserve)
    assert not differ, "\n".join(differ[:10])
    assert matched == len(states) > 100
