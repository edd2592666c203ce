"""The deterministic, no-LLM summarizer: the sections of docs/compaction.md "Summary formats" read
off the conversation itself.

It is the offline default and the floor of a fallback chain, so its output is bounded (every
list and line is capped) whatever the input size, and it never fails on odd messages.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from worker.llm.errors import ModelCallError
from worker.llm.providers._conversation_facts import (
    Facts,
    clip,
    collect_facts,
    dedup,
    first_line,
    parse_sections,
)
from worker.llm.providers.base import Reply
from worker.llm.settings import ModelCandidate
from worker.summary_requests import CancelToken, SummaryRequest, Usage

__all__ = ["ExtractiveProvider", "extractive_summary"]

_LINE = 240
_FILES_LINE = 4000  # the file lists (20 paths at most) are not cut at the usual line length
_VERBATIM = 2000
_CAPS = {"Early Progress": 25, "Goal": 8, "Constraints & Preferences": 8, "Progress/Done": 25,
         "Progress/In Progress": 5, "Progress/Blocked": 6, "Next Steps": 5, "Critical Context": 16}
_DEFAULT_CAP = 20
_ORDER = ("Goal", "Constraints & Preferences", "Progress", "Progress/Done", "Progress/In Progress",
          "Progress/Blocked", "Key Decisions", "Next Steps", "Critical Context", "Additional Notes")
_CONSTRAINT = re.compile(r"\b(must|must not|never|always|don't|do not|avoid|prefer|without|only)\b",
                         re.I)
_TAGS = re.compile(r"<(read-files|modified-files)>.*?</\1>", re.DOTALL)
_NUMBERED = re.compile(r"^\d+\.\s*")
_PENDING = "- Pending request (verbatim):"
_OTHER_MESSAGES = "- Other user messages:"
_REPLACED = ("- Files modified:", "- Files read:", "- Last assistant note:")
# Every request, command and error is kept while they fit: this many characters at least, or
# 2 × max_tokens characters (half the output budget), shared 35/45/20.
_FACT_FLOOR = 6_000
_FACT_SHARE = {"Goal": 0.35, "Progress/Done": 0.45, "Progress/Blocked": 0.2}
_FILE_STEP = tuple(f"- {done}`{tool}` " for done in ("[x] ", "")
                   for tool in ("read", "write", "edit"))


class ExtractiveProvider:
    uses_http = False

    def __init__(self, candidate: ModelCandidate) -> None:
        self.candidate = candidate

    def problem(self) -> ModelCallError | None:
        return None

    def output_reserve(self, max_tokens: int, request: SummaryRequest) -> int:
        return 0

    def complete(self, request: SummaryRequest, max_tokens: int,
                 cancel: CancelToken | None) -> Reply:
        return Reply(extractive_summary(request), Usage())


def extractive_summary(request: SummaryRequest) -> str:
    facts = collect_facts(request.conversation)
    modified = dedup([*request.modified_files, *facts.modified])
    read = [p for p in dedup([*request.read_files, *facts.read]) if p not in modified]
    if request.purpose == "short":
        return _short(facts, request.previous_summary, modified)
    if request.purpose == "turn_prefix":
        return _turn_prefix(facts, read, modified, max(_FACT_FLOOR, 2 * request.max_tokens))
    previous = [*facts.embedded_summaries,
                *([request.previous_summary] if request.previous_summary else [])]
    sections = _merge(previous, _new_sections(facts, read, modified),
                      max(_FACT_FLOOR, 2 * request.max_tokens))
    if request.purpose == "branch":
        return _render_branch(sections)
    return _render(sections)


# --- sections of the current conversation ---------------------------------------------------
def _new_sections(facts: Facts, read: Sequence[str],
                  modified: Sequence[str]) -> dict[str, list[str]]:
    open_request = facts.open_request
    sections: dict[str, list[str]] = {
        "Goal": [f"- {first_line(r, _LINE)}" for r in _work_requests(facts.requests)],
        "Constraints & Preferences": [f"- {clip(s, _LINE)}" for s in _constraints(facts.requests)],
        "Progress/Done": [f"- [x] {clip(s.describe(), _LINE)}" for s in facts.steps],
        "Progress/In Progress": ([f"- [ ] {first_line(open_request, _LINE)}"] if open_request
                                 else []),
        "Progress/Blocked": [f"- {clip(e, _LINE)}" for e in facts.errors],
        "Next Steps": _next_steps(facts),
        "Critical Context": _critical(facts, read, modified),
    }
    return sections


def _work_requests(requests: Sequence[str]) -> list[str]:
    """Every request that states work (the Goal lists them all, oldest first)."""
    return [r for r in requests if not r.lstrip().startswith("/") and len(r.split()) >= 4]


def _goals(requests: Sequence[str]) -> list[str]:
    """Requests that state work: not slash commands, not one-word replies ("ok", "ls")."""
    goals = [r for r in requests if not r.lstrip().startswith("/") and len(r.split()) >= 4]
    return goals or list(requests[:1])


def _constraints(requests: Iterable[str]) -> list[str]:
    found = []
    for request in requests:
        for sentence in re.split(r"(?<=[.!?])\s+|\n+", request):
            if _CONSTRAINT.search(sentence) and len(sentence.strip()) > 3:
                found.append(sentence.strip())
    return found


def _next_steps(facts: Facts) -> list[str]:
    if facts.open_request:
        return [f"1. Continue with: {first_line(facts.open_request, _LINE)}"]
    if facts.pending_question:
        return [f"1. Wait for the user's answer to: {first_line(facts.pending_question, _LINE)}"]
    return []


def _critical(facts: Facts, read: Sequence[str], modified: Sequence[str]) -> list[str]:
    lines = []
    if modified:
        lines.append(f"- Files modified: {_file_list(modified)}")
    if read:
        lines.append(f"- Files read: {_file_list(read)}")
    if facts.last_assistant_text:
        lines.append(f"- Last assistant note: {first_line(facts.last_assistant_text, _LINE)}")
    work = set(_work_requests(facts.requests))
    others = dedup([first_line(r, 120) for r in facts.requests if r not in work])
    if others:  # short replies and slash commands: one line, every one of them
        lines.append(f"{_OTHER_MESSAGES} " + " · ".join(f"`{o}`" for o in others))
    pending = facts.open_request or facts.pending_question
    if pending:
        lines.append(_PENDING)
        lines.extend(f"> {line}" for line in clip(pending, _VERBATIM).splitlines())
    return lines


def _file_list(paths: Sequence[str], limit: int = 20) -> str:
    shown = ", ".join(f"`{p}`" for p in paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


# --- merging with earlier summaries ---------------------------------------------------------
def _merge(previous: Sequence[str], new: dict[str, list[str]],
           fact_chars: int) -> dict[str, list[str]]:
    merged: dict[str, list[str]] = {}
    for text in previous:
        _merge_one(merged, parse_sections(_TAGS.sub("", text)), has_new_requests=True)
    _merge_one(merged, new, has_new_requests=bool(new["Goal"]))
    return {key: _bounded(key, lines, int(fact_chars * _FACT_SHARE[key])) if key in _FACT_SHARE
            else _cap(key, lines) for key, lines in merged.items()}


def _bounded(key: str, lines: list[str], chars: int) -> list[str]:
    """All lines while they fit in ``chars``; else file steps (their paths are in the file
    lists), then the oldest lines go first, and a marker says how many."""
    lines = [clip(ln, _LINE) for ln in dedup(lines)]
    if sum(len(ln) + 1 for ln in lines) <= chars:
        return lines
    order = sorted(range(len(lines)), key=lambda i: (not lines[i].startswith(_FILE_STEP), i))
    dropped: set[int] = set()
    size = sum(len(ln) + 1 for ln in lines) + 40  # room for the marker
    for i in order:
        if size <= chars:
            break
        dropped.add(i)
        size -= len(lines[i]) + 1
    marker = "- [x] …" if key == "Progress/Done" else "- …"
    return [f"{marker} ({len(dropped)} earlier items omitted)",
            *(ln for i, ln in enumerate(lines) if i not in dropped)]


def _merge_one(into: dict[str, list[str]], new: dict[str, list[str]], *,
               has_new_requests: bool) -> None:
    if has_new_requests:  # what was in progress before a newer request is taken as done
        moved = [line.replace("- [ ]", "- [x]", 1) for line in into.pop("Progress/In Progress", [])]
        into["Progress/Done"] = [*into.get("Progress/Done", []), *moved]
    into["Critical Context"] = _stale_context_dropped(into.get("Critical Context", []),
                                                      new.get("Critical Context", []),
                                                      drop_pending=has_new_requests)
    for key, lines in new.items():
        into[key] = dedup([*into.get(key, []), *lines])


def _stale_context_dropped(old: list[str], fresh: list[str], *, drop_pending: bool) -> list[str]:
    """Newer file lists and notes replace older ones; a newer request replaces the pending one."""
    stale = {ln.partition(":")[0] for ln in fresh if ln.startswith(_REPLACED)}
    drop_pending = drop_pending or _PENDING in fresh

    def keep(line: str) -> bool:
        if drop_pending and (line == _PENDING or line.startswith("> ")):
            return False
        return not (line.startswith(_REPLACED) and line.partition(":")[0] in stale)

    return [line for line in old if keep(line)]


def _cap(key: str, lines: list[str]) -> list[str]:
    if key == "Next Steps":
        lines = [f"{i}. {_NUMBERED.sub('', line)}"
                 for i, line in enumerate(dedup(lines)[-_CAPS[key]:], 1)]
    limit = _CAPS.get(key, _DEFAULT_CAP)
    if key == "Critical Context":  # the verbatim request is kept whole; other lines are capped
        quoted = [ln for ln in lines if ln.startswith("> ") or ln == _PENDING]
        long_lines = (*_REPLACED[:2], _OTHER_MESSAGES)
        other = [clip(ln, _FILES_LINE if ln.startswith(long_lines) else _LINE)
                 for ln in lines if ln not in quoted]
        return [*other[-limit:], *quoted]
    lines = [clip(ln, _LINE) for ln in lines]
    if len(lines) <= limit:
        return lines
    if key == "Goal":  # the first goals set the task; the latest ones say where it went
        return [*lines[:3], *lines[-(limit - 3):]]
    omitted = len(lines) - limit + 1
    marker = "- [x] …" if key == "Progress/Done" else "- …"
    return [f"{marker} ({omitted} earlier items omitted)", *lines[-(limit - 1):]]


# --- rendering ------------------------------------------------------------------------------
def _render(sections: dict[str, list[str]],
            placeholder: Callable[[str], list[str]] | None = None) -> str:
    keys = [*_ORDER, *(k for k in sections if k not in _ORDER)]
    out: list[str] = []
    for key in keys:
        top, _, sub = key.partition("/")
        lines = sections.get(key) or (placeholder(key) if placeholder else [])
        if not sub and not lines and not any(sections.get(f"{key}/{s}")
                                             for s in ("Done", "In Progress", "Blocked")):
            continue
        if sub and not lines:
            continue
        out.append(f"### {sub}" if sub else f"## {top}")
        out.extend(lines)
        out.append("")
    return "\n".join(out).strip() or "## Goal\n- (no requests in this part of the conversation)"


def _render_branch(sections: dict[str, list[str]]) -> str:
    """The branch summary's exact format: every section present, an explicit marker when empty."""
    fixed = {k: v for k, v in sections.items() if k in _ORDER[:8]}

    def placeholder(key: str) -> list[str]:
        return {
            "Goal": ["- (none recorded)"],
            "Constraints & Preferences": ["- (none)"],
            "Progress/Done": ["- (none)"],
            "Progress/In Progress": ["- (none)"],
            "Progress/Blocked": ["- (none)"],
            "Key Decisions": ["- (none recorded)"],
            "Next Steps": ["1. (none recorded)"],
        }.get(key, [])

    return _render(fixed, placeholder)


def _turn_prefix(facts: Facts, read: Sequence[str], modified: Sequence[str],
                 fact_chars: int) -> str:
    request = facts.requests[0] if facts.requests else "(the turn began without a user request)"
    lines = ["## Original Request", clip(request, _VERBATIM), "", "## Early Progress"]
    steps = [f"- {clip(s.describe(), _LINE)}" for s in facts.steps]
    lines.extend(_bounded("Early Progress", steps, fact_chars // 2) or ["- (no tool calls yet)"])
    lines += ["", "## Context for Suffix"]
    context = [ln for ln in _critical(facts, read, modified)
               if not ln.startswith("> ") and ln != _PENDING]
    errors = [f"- Error seen: {clip(e, _LINE)}" for e in facts.errors]
    context += _bounded("Errors", errors, fact_chars // 5)
    lines.extend(context or ["- (nothing beyond the request)"])
    return "\n".join(lines)


def _short(facts: Facts, merged_summary: str | None, modified: Sequence[str]) -> str:
    goals = parse_sections(merged_summary).get("Goal", []) if merged_summary else []
    goal = goals[0].lstrip("-* ").strip() if goals else ""
    if not goal and facts.requests:
        goal = _goals(facts.requests)[0]
    goal = _first_sentence(goal).rstrip(" .?!:;…") or "the requested task"
    sentences = [f"I worked on: {goal}."]
    if modified:
        more = f" and {len(modified) - 3} more files" if len(modified) > 3 else ""
        sentences.append(f"I changed {', '.join(modified[:3])}{more}.")
    else:
        sentences.append("I made no file changes.")
    return " ".join(sentences).replace("?", ".")


def _first_sentence(text: str) -> str:
    line = first_line(text, 400)
    found = re.search(r"[.!?](\s|$)", line)
    return clip(line[: found.start() + 1] if found else line, 160)
