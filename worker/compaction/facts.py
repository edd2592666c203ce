"""The fact ledger: what a summary must not lose, checked after it is written.

From the messages a compaction (or branch summary) summarises, facts are read off
deterministically: file paths, commands run, tool errors, the user's requests and the identifiers
the user named. After the summary is written, each fact is looked up verbatim (whitespace runs
count as one space) in the summary and the kept messages; the lost ones are appended as one
``<session-facts>`` block (docs/fact-ledger.md), within a token budget. The block is stripped
from a previous summary before reuse, like the file-operation tags (Q20), and its facts are
carried into the next ledger as the oldest candidates.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from api_client.contract.session import Message
from api_client.contract.session.convert import text_of_blocks
from worker.compaction.fact_fold import Fact, FactFold, Key, fold_more
from worker.compaction.substrings import Containment, Patterns, default_search
from worker.tokens.jsjson import js_len
from worker.tokens.memo import PrefixFolds

__all__ = [
    "FACT_KINDS",
    "Fact",
    "LedgerResult",
    "apply_ledger",
    "command_head",
    "default_fact_budget",
    "extract_facts",
    "parse_fact_block",
    "strip_fact_block",
]

FACT_KINDS = ("paths", "commands", "errors", "requests", "identifiers")
_LABEL = {"paths": "path", "commands": "command", "errors": "error", "requests": "request",
          "identifiers": "identifier"}
_KIND_OF_LABEL = {label: kind for kind, label in _LABEL.items()}
# When the budget must choose: paths and errors first, then identifiers, requests, commands.
_RANK = {"paths": 0, "errors": 1, "identifiers": 2, "requests": 3, "commands": 3}
OPEN, CLOSE = "<session-facts>", "</session-facts>"
_HEAD = 100  # an error line is at most this many characters
_COMMAND_HEAD = 64
_REQUEST_HEAD = 48
# Programs that only read: their command fact is what they looked for (the words before the first
# path); the file they read is its own path fact, so the block does not carry it twice.
_READ_ONLY = frozenset({"cat", "head", "tail", "less", "grep", "rg", "ag", "find", "fd", "ls",
                        "tree", "wc", "awk", "stat", "file", "du", "cut", "sort", "uniq", "nl",
                        "sed"})
_PATH_TOOL_KEYS = ("path", "file_path", "filePath")
_EXT = ("py|pyi|js|mjs|cjs|ts|tsx|jsx|json|jsonl|md|toml|ya?ml|txt|sh|rs|go|c|h|cc|cpp|hpp|java|kt"
        "|rb|php|lua|sql|html|css|scss|cfg|ini|lock|env|xml|csv|log|ipynb")
_PATH_WORD = re.compile(
    rf"(?:~/|\.{{1,2}}/|/)?(?:[\w@+.-]+/)*[\w@+-][\w@+.-]*(?:/|\.(?:{_EXT}))?|(?:~|/)"
)
_CD_PREFIX = re.compile(r"^cd\s+(\S+)\s*&&\s*")
_PLUMBING = re.compile(r"\s(?:\||2>&1|2>/dev/null|>>?|;)\s?")
_URL = re.compile(r"https?://[^\s<>()\"'`\]\[]+")
_ISSUE = re.compile(r"(?<![\w&#/])#\d{1,7}\b")


def _norm(text: str) -> str:
    return " ".join(text.split())


def _head(text: str, limit: int = _HEAD) -> str:
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    return _norm(line)[:limit].rstrip()


def _cut_at_word(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, at a space when one is in its second half."""
    if len(text) <= limit:
        return text
    cut = text[: limit + 1].rsplit(" ", 1)[0]
    return (cut if len(cut) > limit // 2 else text[:limit]).rstrip()


def estimate_tokens(text: str) -> int:
    return math.ceil(js_len(text) / 4)


def _cleaned(kind: str, text: str) -> str:
    """A fact's text as the ledger keeps it ("" drops it)."""
    text = text.strip()
    if kind in ("paths", "identifiers"):  # quoting and sentence punctuation are not part of it
        text = text.strip("'\"`.,;:()[]{}<>")
    return text


class _Recorder:
    """The facts one message names, in order, before the ledger normalizes and counts them."""

    def __init__(self) -> None:
        self.found: list[tuple[str, str]] = []

    def add(self, kind: str, text: str) -> None:
        self.found.append((kind, text))

    def paths_in(self, text: str) -> None:
        self.found += [("paths", path) for path in _paths_of(text)]


def _message_facts(message: Message) -> tuple[Key, ...]:
    """The (kind, cleaned text) facts ``message`` names, in order."""
    recorder = _Recorder()
    _one(recorder, message)
    return tuple((kind, text) for kind, raw in recorder.found if (text := _cleaned(kind, raw)))


def _paths_of(text: str) -> tuple[str, ...]:
    """Whole shell words that name files: with a slash or a known extension, a letter, no URL."""
    text = text.split("<<", 1)[0][:2000]  # a heredoc's body is content, not a path
    return tuple(path for word in _shell_words(text) if (path := _path_word(word)))


def _path_word(word: str) -> str | None:
    """The path a shell word names (``file.py:12:3`` names ``file.py``), or None."""
    word = re.sub(r":\d+(?::\d+)?$", "", word.strip(".:"))
    if ("/" in word or re.search(rf"\.(?:{_EXT})$", word)) and _is_path(word):
        return word
    return None


# A word (quoted parts, escapes, plain characters) or a comment: "#" outside quotes, anywhere, to
# the end of the line (as shlex in POSIX mode reads it).
_SHELL_WORD = re.compile(r"""#[^\n]*|(?:'[^']*'|"(?:\\.|[^"\\])*"|\\.|[^\s'"();<>|&\\#])+""")
_QUOTED = re.compile(r"""'([^']*)'|"((?:\\.|[^"\\])*)"|\\(.)""")


def _unquote(match: re.Match[str]) -> str:
    single, double, escaped = match.groups()
    if single is not None:
        return single
    if double is not None:
        return re.sub(r'\\(["\\$`])', r"\1", double)
    return escaped


def _shell_words(text: str) -> list[str]:
    """The words a POSIX shell would see (quotes removed, ``();<>|&`` separate), by one regex
    (shlex, pure Python, cost most of a cold plan). Quoted arguments stay whole: a sed
    expression or commit message is not a path. An unbalanced quote separates words."""
    words = (_QUOTED.sub(_unquote, w) for w in _SHELL_WORD.findall(text) if w[0] != "#")
    return [w for w in words if w]


def _is_path(word: str) -> bool:
    if word.startswith("/dev/") or re.fullmatch(r"[sy]/[^/]*/[^/]*/\w*", word):
        return False  # a device, or a sed expression
    return (_PATH_WORD.fullmatch(word) is not None and "//" not in word and not word.startswith("-")
            and re.search(r"[A-Za-z]", word) is not None and len(word) > 2)


def command_head(command: str) -> str:
    """A command as the ledger keeps it: its first line without a leading ``cd DIR &&`` and
    without output plumbing (pipes, redirections), whitespace collapsed; a read-only program
    (``grep``, ``cat``, ``sed`` without ``-i``, ...) up to its first path; at most 64 characters,
    cut at a word. Always a verbatim prefix of the normalized line."""
    line = _norm(next((ln for ln in command.splitlines() if ln.strip()), ""))
    line = _CD_PREFIX.sub("", line)
    line = _PLUMBING.split(line, 1)[0]
    return _cut_at_word(_before_first_path(line), _COMMAND_HEAD)


def _before_first_path(line: str) -> str:
    words = [w for w in _SHELL_WORD.finditer(line) if w.group()[0] != "#"]
    if not words or words[0].group() not in _READ_ONLY:
        return line
    if words[0].group() == "sed" and any(w.group().startswith("-i") for w in words):
        return line  # sed -i changes the file: the whole edit is the fact
    for word in words[1:]:
        text = word.group()  # a quoted word is a pattern here, not the file read
        if text[0] not in "'\"-" and _path_word(text):
            return line[: word.start()].rstrip()
    return line


def _tool_call(found: _Recorder, block: dict[str, object]) -> None:
    arguments = block.get("arguments")
    if not isinstance(arguments, dict):
        return
    for key in _PATH_TOOL_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and value.strip():
            found.add("paths", value)
    command = arguments.get("command")
    if isinstance(command, str) and command.strip():
        found.add("commands", command_head(command))
        found.paths_in(command)


def _user_request(found: _Recorder, text: str) -> None:
    if not text.strip():
        return
    found.add("requests", _cut_at_word(_head(text), _REQUEST_HEAD))
    for url in _URL.findall(text):
        found.add("identifiers", url.rstrip(".,;:!?"))
    for number in _ISSUE.findall(text):
        found.add("identifiers", number)


def _one(found: _Recorder, message: Message) -> None:
    role = message.get("role")
    content = message.get("content")
    if role == "user":
        _user_request(found, text_of_blocks(content))
    elif role == "assistant" and isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "toolCall":
                _tool_call(found, block)
    elif role == "toolResult" and message.get("isError"):
        text = text_of_blocks(content)
        found.add("errors", _head(text))
        found.paths_in("\n".join(text.strip().splitlines()[:3]))
    elif role == "bashExecution" and isinstance(message.get("command"), str):
        found.add("commands", command_head(str(message["command"])))
        found.paths_in(str(message["command"]))


def extract_facts(messages: Iterable[Message], carried: Sequence[Key] = (), *,
                  folds: PrefixFolds[Message, FactFold] | None = None) -> list[Fact]:
    """The distinct facts of ``messages`` (oldest first); ``carried`` ones count as oldest.
    Without the paths that lie inside a longer one: found wherever the longer one is.

    ``folds``: the worker's (``PlanCaches.fact_folds``): continued from the last fold of the
    same first message and ``carried``, a re-plan counts only the messages new since."""
    cleaned = tuple((kind, text) for kind, raw in carried if (text := _cleaned(kind, raw)))

    def more(state: FactFold | None, rest: Sequence[Message], offset: int) -> FactFold:
        return fold_more(state, cleaned, enumerate(map(_message_facts, rest), start=offset))

    folded = (more(None, list(messages), 0) if folds is None
              else folds.fold(cleaned, list(messages), more))
    return list(folded.listed)


# --- the block -------------------------------------------------------------------------------
def strip_fact_block(summary: str) -> str:
    """``summary`` without a trailing ``<session-facts>`` block (and the blank line before it)."""
    if not summary.endswith(CLOSE) or OPEN not in summary:
        return summary
    text = summary[: summary.rindex(OPEN)]
    return text[:-2] if text.endswith("\n\n") else text


def parse_fact_block(summary: str) -> list[tuple[str, str]]:
    """The ``(kind, text)`` facts of a trailing block; the 'not kept' note is not a fact.

    Reads the sectioned layout (``paths:`` then ``- text`` lines) and the one-line layout of
    earlier versions (``path: text``), so summaries stored before an upgrade keep their facts.
    """
    if not summary.endswith(CLOSE) or OPEN not in summary:
        return []
    body = summary[summary.rindex(OPEN) + len(OPEN) : -len(CLOSE)]
    facts: list[tuple[str, str]] = []
    section = None
    for line in body.split("\n"):
        if line.endswith(":") and line[:-1] in FACT_KINDS:
            section = line[:-1]
        elif line.startswith("- ") and section and line[2:].strip():
            facts.append((section, line[2:].strip()))
        else:
            label, sep, text = line.partition(": ")
            if sep and label in _KIND_OF_LABEL and text.strip():
                facts.append((_KIND_OF_LABEL[label], text.strip()))
    return facts


def _priority(fact: Fact) -> tuple[int, int, int]:
    return (_RANK[fact.kind], -min(fact.count, 3), -fact.last)


def _omitted_note(left_out: Sequence[Fact]) -> str:
    counts = {k: sum(1 for f in left_out if f.kind == k) for k in FACT_KINDS}
    parts = [f"{n} {_LABEL[k]}{'s' if n != 1 else ''}" for k, n in counts.items() if n]
    return f"(not kept, no room: {', '.join(parts)})"


def _render(chosen: Sequence[Fact], left_out: Sequence[Fact]) -> str:
    lines: list[str] = []
    for kind in FACT_KINDS:
        of_kind = [f for f in chosen if f.kind == kind]
        if of_kind:
            lines += [f"{kind}:", *(f"- {f.text}" for f in of_kind)]
    if left_out:
        lines.append(_omitted_note(left_out))
    return "\n\n" + "\n".join([OPEN, *lines, CLOSE]) if lines else ""


# The ledger's lookups: one pass over the text when the fast extra is installed.
SEARCH = default_search()
_NOTE_ROOM = 140  # characters kept free for the "not kept" note
_HEADERS = sum(len(kind) + 2 for kind in FACT_KINDS)


def _choose(facts: Sequence[Fact], texts: Sequence[str], lost: Sequence[int],
            within: Containment, budget: int) -> tuple[list[Fact], list[Fact], list[Fact]]:
    """(facts given a line, facts found inside those lines, facts left out), of the ``lost``
    ones (indexes into ``facts``, their normalized ``texts``; ``within``: what lies inside
    what among them). "ls" is found in the line "ls -la": a fact inside a chosen one needs no
    line of its own.
    """
    # estimate: 4 chars a token; a header line per kind, "- " and a newline per fact
    room = 4 * budget - len(OPEN) - len(CLOSE) - 4 - _NOTE_ROOM - _HEADERS
    chosen: dict[int, None] = {}  # in the order given a line (a dict: ``in`` is a lookup)
    covered: list[Fact] = []
    left_out: list[int] = []
    used = 0
    lines = ""  # the chosen facts' texts, a line each (a normalized text holds no newline)
    for i in sorted(lost, key=lambda i: _priority(facts[i])):
        if texts[i] in lines:
            covered.append(facts[i])
            continue
        cost = js_len(facts[i].text) + 3
        if used + cost > room:
            left_out.append(i)
            continue
        inside = within.inside(i, chosen.keys())
        if inside:
            for j in inside:
                del chosen[j]
            covered += [facts[j] for j in inside]
            used -= sum(js_len(facts[j].text) + 3 for j in inside)
            lines = _lines(texts, chosen)
        chosen[i] = None
        lines += "\n" + texts[i]
        used += cost
    while chosen and estimate_tokens(_render([facts[j] for j in chosen],
                                             [facts[j] for j in left_out])) > budget:
        left_out.append(chosen.popitem()[0])  # the last given a line
    lines = _lines(texts, chosen)
    covered += [facts[j] for j in left_out if texts[j] in lines]
    return ([facts[j] for j in chosen], covered,
            [facts[j] for j in left_out if texts[j] not in lines])


def _lines(texts: Sequence[str], chosen: Iterable[int]) -> str:
    return "".join("\n" + texts[j] for j in chosen)


@dataclass(frozen=True)
class LedgerResult:
    block: str  # "" or "\n\n<session-facts>…</session-facts>"
    stats: dict[str, dict[str, int]]  # kind -> {total, inSummary, appended, dropped}


def apply_ledger(facts: Sequence[Fact], found_in: str, budget: int, *,
                 append: bool = True,
                 found_in_normalized: str | Callable[[], str] = "") -> LedgerResult:
    """Check ``facts`` against ``found_in`` (summary + kept text); the block of the lost ones.

    ``found_in_normalized``: more text to look in, already whitespace-normalized (the kept
    messages), or what builds it: called only when a fact is not in ``found_in`` alone.
    ``appended`` counts the facts findable in the block: those given a line and those inside
    another fact's line.
    """
    texts = [_norm(f.text) for f in facts]
    patterns = SEARCH.patterns(texts)  # one automaton for both lookups
    found = _found(patterns, len(texts), _norm(found_in), found_in_normalized)
    lost = [i for i in range(len(facts)) if i not in found]
    writing = append and budget > 0
    chosen, covered, left_out = (
        _choose(facts, texts, lost, patterns.containment(lost), budget) if writing
        else ([], [], [facts[i] for i in lost]))
    total = Counter(f.kind for f in facts)  # one pass each, not one per kind
    appended = Counter(f.kind for f in (*chosen, *covered))
    dropped = Counter(f.kind for f in left_out)
    stats = {kind: {"total": total[kind], "inSummary": total[kind] - appended[kind] - dropped[kind],
                    "appended": appended[kind], "dropped": dropped[kind]} for kind in FACT_KINDS}
    block = _render(chosen, left_out) if writing else ""
    return LedgerResult(block if estimate_tokens(block) <= budget else "", stats)


def _found(patterns: Patterns, count: int, summary: str,
           more: str | Callable[[], str]) -> set[int]:
    """The facts found in ``summary + " " + more``. The kept messages' text is built (and
    searched) only when the summary lacks a fact: a fact in the summary is in the joined text
    too, and building it is most of a ledger's work (a whole kept conversation normalized)."""
    if not count:
        return set()
    if callable(more):
        found = patterns.occurring(summary)
        if len(found) == count:
            return found
        more = more()
    return patterns.occurring(f"{summary} {more}")


def default_fact_budget(summary_budget: int) -> int:
    """10 % of the summary's own token budget."""
    return summary_budget // 10
