"""bench/bench_pi.py's records and figures: each compaction's stall, origin and cut against
pi's own preparation (the probe's record), and the table of ratios against pi alone."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from _report import Report

from helpers.pi_model import message_text

__all__ = ["KEEP", "RESERVE", "WINDOW", "Case", "Compaction", "Conversation", "Results",
           "compactions", "summarize", "tokens_from"]

WINDOW, RESERVE, KEEP = 32_000, 4_000, 3_000  # pi's compaction settings in every case


@dataclass(frozen=True)
class Case:
    name: str
    turn_s: float
    summary_s: float
    worker: bool
    compactions: int
    extension_env: tuple[tuple[str, str], ...] = ()  # the extension's settings for this case


@dataclass
class Compaction:
    reason: str
    stall_ms: float
    kept: str  # the entry's firstKeptEntryId
    pi_cut: str | None  # pi's own preparation's (the probe's; None for pi alone)
    # entries from pi's cut to the entry's (negative: Compactor kept more), None without a probe
    cut_offset: int | None
    kept_tokens: int  # characters / 4 of the messages kept
    pi_kept_tokens: int | None  # the same from pi's own cut
    split_turn: bool | None
    from_compactor: bool
    from_draft: bool


@dataclass
class Conversation:
    side: str  # "alone" | "compactor"
    turns: int
    compactions: list[Compaction] = field(default_factory=list)
    summary_tokens: int = 0


Results = dict[tuple[str, str], list[tuple[Conversation, Conversation]]]


def compactions(starts: list[dict[str, Any]], ends: list[dict[str, Any]],
                session: list[dict[str, Any]], probes: list[dict[str, Any]]) -> list[Compaction]:
    """Each compaction's stall (pi's events), origin and cut (its entry against the probe's
    record of pi's own preparation, in order)."""
    ids = [str(e.get("id")) for e in session]
    entries = [e for e in session if e.get("type") == "compaction"]
    found = []
    for i, (start, end) in enumerate(zip(starts, ends, strict=True)):
        assert end.get("result") and not end.get("aborted"), end
        origin: dict[str, Any] = (entries[i].get("details") or {}).get("compactor") or {}
        probe = probes[i] if i < len(probes) else {}
        kept, pi_cut = str(entries[i]["firstKeptEntryId"]), probe.get("firstKeptEntryId")
        at = ids.index(str(entries[i]["id"]))
        found.append(Compaction(
            str(end.get("reason") or start.get("reason") or "?"),
            (end["at"] - start["at"]) * 1000, kept, pi_cut,
            ids.index(kept) - ids.index(pi_cut) if pi_cut in ids else None,
            tokens_from(session, ids.index(kept), at),
            tokens_from(session, ids.index(pi_cut), at) if pi_cut in ids else None,
            probe.get("isSplitTurn"), bool(origin), bool(origin.get("fromDraft"))))
    return found


def tokens_from(session: list[dict[str, Any]], first: int, end: int) -> int:
    """pi's estimate (characters / 4) of the messages kept: from ``first`` to ``end``."""
    return sum(len(message_text(e.get("message") or {})) for e in session[first:end]
               if e.get("type") == "message") // 4


def summarize(report: Report, results: Results, cases: list[Case], runs: int,
              timeout: float | None) -> None:
    table = [row(report, label, next(c for c in cases if c.name == name), pairs, runs)
             for (label, name), pairs in results.items()]
    for line in table:
        print(f"  pi {line['pi']:<5} {line['case']:<13} alone {line['alone_ms']:>6} ms  "
              f"compactor {line['compactor_ms']:>6} ms (max {line['compactor_max_ms']:>6}) "
              f"x{line['ratio'] or 0:.2f}  by Compactor {line['by_compactor']}/"
              f"{line['compactions']} (drafts {line['from_draft']}), cut matches "
              f"{line['cut_matches']}/{line['by_compactor']}\n"
              f"      entries from pi's cut {line['cut_offsets']}, tokens kept against pi's "
              f"{line['kept_tokens']}", flush=True)
    report.note(window=WINDOW, reserve=RESERVE, keep_recent=KEEP, runs=runs,
                no_worker_timeout_s=timeout, table=table,
                conversations={f"pi{k[0]}_{k[1]}": [[vars(a) | {"compactions": [
                    vars(c) for c in a.compactions]} for a in pair] for pair in v]
                    for k, v in results.items()})
    report.write()


def row(report: Report, label: str, case: Case,
        pairs: list[tuple[Conversation, Conversation]], runs: int) -> dict[str, Any]:
    """One case's figures: the medians' ratio, the worst stall, whose compactions and cuts
    (a cut counts where Compactor answered: pi's built-in makes pi's cut by definition)."""
    median = statistics.median
    alone = [c for a, _ in pairs for c in a.compactions]
    served = [c for _, s in pairs for c in s.compactions]
    base = f"pi{label}_{case.name}"
    report.baseline(f"{base}_alone", median(c.stall_ms for c in alone), "ms",
                    f"pi {label} alone, turns {case.turn_s:g} s, summaries "
                    f"{case.summary_s:g} s ({len(alone)} compactions)")
    by_compactor = [c for c in served if c.from_compactor]
    matched = sum(c.kept == c.pi_cut for c in by_compactor)
    drafts = sum(c.from_draft for c in served)
    goal = "<= 1.0" if case.worker else "<= alone + 2 s"
    ratio = report.figure(
        f"{base}_compactor", median(c.stall_ms for c in served), "ms",
        against=f"{base}_alone", goal=goal,
        what=f"pi {label} with Compactor ({len(by_compactor)} of {len(served)} by Compactor, "
             f"{drafts} from a draft; cut matches {matched}/{len(by_compactor)})")
    worst = report.figure(f"{base}_compactor_max", max(c.stall_ms for c in served), "ms",
                          against=f"{base}_alone", goal=goal, what="the longest stall")
    return {"pi": label, "case": case.name, "runs": runs, "compactions": len(served),
            "alone_ms": round(median(c.stall_ms for c in alone)),
            "compactor_ms": round(median(c.stall_ms for c in served)),
            "compactor_max_ms": round(max(c.stall_ms for c in served)), "ratio": ratio,
            "ratio_max": worst, "by_compactor": len(by_compactor), "from_draft": drafts,
            "cut_matches": matched, "cut_offsets": [c.cut_offset for c in by_compactor],
            "kept_tokens": [[c.kept_tokens, c.pi_kept_tokens] for c in by_compactor],
            "turns": [[a.turns, s.turns] for a, s in pairs],  # alone, with Compactor
            "summary_tokens": [[a.summary_tokens, s.summary_tokens] for a, s in pairs],
            "alone_stalls_ms": [round(c.stall_ms) for c in alone],
            "compactor_stalls_ms": [round(c.stall_ms) for c in served]}
