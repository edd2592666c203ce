"""The fact ledger end to end: a loopback model answering a fixed text, a real worker, the
client."""

from __future__ import annotations

import pytest
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import completions, new_session, runtime_settings

from api_client import CompactionClient
from api_client.contract.session.convert import convert_to_llm
from worker.compaction import (
    CompactionSettings,
    get_tokenizer,
    prepare_compaction,
    serialize_conversation,
)
from worker.compaction.facts import CLOSE, OPEN, estimate_tokens, extract_facts
from worker.settings import WorkerSettings


@pytest.fixture(scope="module")
def worker_settings(module_redis: str, model: ModelServer) -> WorkerSettings:
    return runtime_settings(module_redis, models=[model.candidate()])


def _norm(text: str) -> str:
    return " ".join(text.split())


def test_fixed_text_model_loses_no_fact(client: CompactionClient, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    snap = client.sessions.load(sid)
    path = snap.session.tree().path_to(snap.leaf_id)
    handle = client.compact(sid, reason="manual")
    entry = handle.wait(30)
    assert isinstance(entry, dict) and entry["summary"].startswith("## Goal\nLoopback summary of")
    prep = prepare_compaction(path, CompactionSettings(), get_tokenizer("tiktoken"))
    assert prep is not None and prep.first_kept_entry_id == entry["firstKeptEntryId"]
    facts = extract_facts([*prep.messages_to_summarize, *prep.turn_prefix_messages])
    haystack = _norm(entry["summary"] + "\n"
                     + serialize_conversation(convert_to_llm(prep.recent_messages)))
    found = [f for f in facts if _norm(f.text) in haystack]
    paths = [f for f in facts if f.kind == "paths"]
    assert len(facts) >= 10 and paths
    assert len(found) >= 0.95 * len(facts) and all(_norm(p.text) in haystack for p in paths)
    summary = entry["summary"]
    block = summary[summary.index(OPEN) - 2 : summary.index(CLOSE) + len(CLOSE)]
    assert estimate_tokens(block) <= 16_384 * 8 // 10 // 10  # 10 % of the history budget
    stats = entry["details"]["facts"]
    assert sum(s["total"] for s in stats.values()) == len(facts)
    assert sum(s["inSummary"] + s["appended"] for s in stats.values()) == len(found)
    (done,) = completions(client, sid, handle.id)
    assert done.result is not None and done.result["facts"] == stats
