"""A draft of an earlier state, extended to the current one, has the agent's cut of the current
state (docs/instant-compaction.md, "The validity rule"): over consecutive states of generated
sessions (tool calls, thinking, bash executions, custom messages, model changes, earlier
compactions, branch summaries), a draft planned with pi's cut on one state is either exact for
the next (committed as it is), or its extension keeps from the entry the plan of the next state
keeps from, splits the same turn and summarises the rest of its span; it is never a base only
where it cannot be (compacted since). The plan of a state is pi's own preparation of it
(tests/compaction/test_pi_cut.py)."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import pytest

from api_client import AgentSettings
from api_client.contract.session import load_session
from helpers.pi_cut import generated_session
from worker.compaction import CompactionSettings, prepare_compaction
from worker.compaction.extension import (
    draft_base,
    draft_is_exact,
    prepare_extension,
    same_cut,
)
from worker.compaction.summarize import SPLIT_TURN_SEPARATOR
from worker.service._job_context import agent_compaction_settings, job_tokenizer
from worker.tokens import JobTokenizer, get_tokenizer


@pytest.mark.parametrize("version", ["pi-1.6", "pi-0.73"])
@pytest.mark.parametrize("keep", [3_000, 8_000])
def test_a_drafts_extension_has_the_agents_cut_of_the_next_state(version: str,
                                                                 keep: int) -> None:
    agent = AgentSettings(reserve_tokens=4_000, keep_recent_tokens=keep, tokenizer="estimate",
                          summary_format=version)  # type: ignore[arg-type]
    settings = agent_compaction_settings(CompactionSettings(), agent)
    tokenizer = JobTokenizer(job_tokenizer(get_tokenizer("tiktoken"), agent))
    seen: Counter[str] = Counter()
    for seed in range(10):
        text = generated_session(seed, 36, compactions=seed % 3, branches=(seed + 1) % 2,
                                 big=seed % 4 == 0)
        session = load_session(text, source=f"gen{seed}")
        tree = session.tree()
        leaves = [e.id for e in session.entries if e.raw.get("type") == "message"
                  and e.raw["message"]["role"] == "assistant"
                  and e.raw["message"].get("stopReason") == "stop"]
        for then_leaf, now_leaf in pairwise(leaves):
            then_path, path = tree.path_to(then_leaf), tree.path_to(now_leaf)
            if [e.id for e in path[:len(then_path)]] != [e.id for e in then_path]:
                continue  # a branch summary in between: the draft is off the path
            planned = prepare_compaction(then_path, settings, tokenizer, version=version)
            own = prepare_compaction(path, settings, tokenizer, version=version)
            if planned is None or own is None:
                continue
            summary = "history" + (SPLIT_TURN_SEPARATOR + "prefix" if planned.is_split_turn
                                   else "")
            draft = {"jobId": "d", "snapshotLeafId": then_leaf, "entry": {
                "summary": summary, "firstKeptEntryId": planned.first_kept_entry_id,
                "tokensBefore": 1}}
            if draft_is_exact(path, draft, settings, tokenizer, version):
                seen["exact"] += 1
                continue
            extended = prepare_extension(path, draft, settings, tokenizer, version)
            if extended is None:
                assert draft_base(path, draft) is None, (seed, then_leaf, now_leaf)
                seen["no base"] += 1
                continue
            prep, _ = extended
            assert same_cut(prep, own), (seed, then_leaf, now_leaf)
            new = prep.summarize_entry_ids
            assert not new or own.summarize_entry_ids[-len(new):] == new
            seen["prefix only" if not new else "extended"] += 1
    assert seen["exact"] and seen["extended"] and seen["prefix only"], seen
