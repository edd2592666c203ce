"""Prompt templates and the assembly of every summary request
(docs/compaction.md "Summary prompts").

Templates are ``prompts/<name>.md``, written for Compactor. They use ``string.Template``
placeholders (``$name`` / ``${name}``; a literal dollar is ``$$``); trailing whitespace of a file
is not part of its template, nor is a leading ``<!-- ... -->`` header line. Installed wheels
carry them as ``worker/_prompts``; an editable install reads the repository's ``prompts/``.

A summary format (``agent.summaryFormat``, docs/compaction.md "Summary formats") has a folder of
its own, ``prompts/<format>/``: the agent's own prompts word for word, each file headed by the
agent version it follows. A format folder holds the prompts that format replaces; the short
summary and the context wrappers are Compactor's in every format.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from string import Template

from api_client.contract.agent_settings import SummaryFormat
from api_client.contract.errors import ConfigurationError
from worker.compaction.fileops import strip_file_operation_tags

__all__ = [
    "BRANCH_MAX_TOKENS",
    "CONVERSATION_OPEN",
    "CONVERSATION_OPENINGS",
    "Conversation",
    "PromptTemplateError",
    "agent_parts",
    "branch_context_intro",
    "branch_preamble",
    "build_branch_prompt",
    "build_history_prompt",
    "build_short_prompt",
    "build_turn_prefix_prompt",
    "compaction_context_intro",
    "history_max_tokens",
    "load_template",
    "render",
    "short_max_tokens",
    "system_prompt",
    "template_names",
    "turn_prefix_max_tokens",
    "with_branch_preamble",
]

BRANCH_MAX_TOKENS = 2048
_SHORT_CAP = 512
_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
_REPO_PROMPTS = Path(__file__).resolve().parents[2] / "prompts"
_HEADER_END = "-->\n"  # a template file may open with one ``<!-- ... -->`` line


class PromptTemplateError(ConfigurationError):
    """A prompt template is missing, malformed, or rendered with the wrong variables."""


# --- budgets (docs/compaction.md "Summary budgets"; products floored as JavaScript does) --


def history_max_tokens(reserve: int) -> int:
    return math.floor(0.8 * reserve)


def turn_prefix_max_tokens(reserve: int) -> int:
    return math.floor(0.5 * reserve)


def short_max_tokens(reserve: int) -> int:
    return min(_SHORT_CAP, math.floor(0.2 * reserve))


# --- loading and rendering ---------------------------------------------------------------


def _installed_root() -> Traversable:
    packaged = resources.files("worker") / "_prompts"
    return packaged if packaged.is_dir() else _REPO_PROMPTS


# Where the shipped templates lie, decided at import (the package does not move): finding it
# through importlib.resources for every template cost more than reading the file.
_INSTALLED = _installed_root()


def _root(summary_format: SummaryFormat | None = None) -> Traversable:
    return _INSTALLED if summary_format is None else _INSTALLED / summary_format


def template_names(summary_format: SummaryFormat | None = None) -> tuple[str, ...]:
    """Names (file stems) of every shipped template of a format (None: Compactor's), sorted."""
    root = _root(summary_format)
    if not root.is_dir():
        return ()
    return tuple(sorted(p.name[:-3] for p in root.iterdir() if p.name.endswith(".md")))


def _text(raw: str) -> str:
    """A template file's text without its header line and trailing whitespace."""
    if raw.startswith("<!--") and _HEADER_END in raw:
        raw = raw[raw.index(_HEADER_END) + len(_HEADER_END):]
    return raw.rstrip()


def load_template(name: str, summary_format: SummaryFormat | None = None) -> Template:
    root = _root(summary_format)
    # Read from disk on every render, found by its name (a template is a file
    # ``<name>.md``: the listing of template_names says the same, at a listing's cost).
    if not _NAME.fullmatch(name):
        raise PromptTemplateError(f"unknown prompt template {name!r} (in {root})")
    try:
        raw = (root / f"{name}.md").read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise PromptTemplateError(f"unknown prompt template {name!r} (in {root})") from None
    template = Template(_text(raw))
    if not template.is_valid():
        raise PromptTemplateError(f"prompt template {name!r} has a malformed placeholder")
    return template


def render(name: str, summary_format: SummaryFormat | None = None, **variables: str) -> str:
    """Render template ``name`` of ``summary_format`` (None: Compactor's); every variable it
    names must be given, and only those."""
    template = load_template(name, summary_format)
    wanted = set(template.get_identifiers())
    missing = sorted(wanted - variables.keys())
    unused = sorted(variables.keys() - wanted)
    if missing or unused:
        raise PromptTemplateError(
            f"prompt template {name!r}: missing variables {missing}, unused variables {unused}"
        )
    return template.substitute(variables)


# --- fixed texts ---------------------------------------------------------------------------


def system_prompt(summary_format: SummaryFormat | None = None) -> str:
    return render("system", summary_format)


def branch_preamble(summary_format: SummaryFormat | None = None) -> str:
    return render("branch-preamble", summary_format)


def with_branch_preamble(model_text: str, summary_format: SummaryFormat | None = None) -> str:
    """The stored branch summary before its tag block: preamble, blank line, text (Q10;
    pi's preamble ends with the same blank line)."""
    return branch_preamble(summary_format) + "\n\n" + model_text


def compaction_context_intro() -> str:
    return render("compaction-summary-context")


def branch_context_intro() -> str:
    return render("branch-summary-context")


# --- assembly (docs/compaction.md "Summary prompts") ---------------------------------


CONVERSATION_OPEN = "<conversation>\n"  # every summary prompt opens with the conversation
_CONVERSATION_CLOSE = "\n</conversation>\n\n"
# pi 1.6's turn prefix prompt opens with a heading instead (generateTurnPrefixSummary)
_PI16_PREFIX_OPEN = "# Conversation\n"
_PI16_PREFIX_CLOSE = "\n\n"
_PI16_INSTRUCTIONS = "# Instructions\n"
CONVERSATION_OPENINGS = (CONVERSATION_OPEN, _PI16_PREFIX_OPEN)


@dataclass(frozen=True)
class Conversation:
    """A serialized conversation as its parts and their separator: the text is
    ``separator.join(parts)``, never made on its own (see :func:`_joined`)."""

    parts: tuple[str, ...]
    separator: str

    @property
    def length(self) -> int:
        """The length of the conversation's text."""
        return sum(map(len, self.parts)) + len(self.separator) * max(0, len(self.parts) - 1)


# Each prompt is one join of its sections: the conversation (500 kB for large-session's history,
# 2 MB as a str once one character is beyond the BMP) is copied once. Adding the sections one
# by one copied it three or four times: 6-7 % of the instructions of a re-plan. Given as
# parts, it is joined straight into the prompt: its own text was one more 2 MB string to
# allocate (fresh pages each job), write and read again.
def _joined(conversation: str | Conversation, *sections: str,
            opening: str = CONVERSATION_OPEN, closing: str = _CONVERSATION_CLOSE) -> str:
    tail = "".join((closing, *sections))
    if isinstance(conversation, str) or len(conversation.parts) < 2:
        text = conversation if isinstance(conversation, str) else "".join(conversation.parts)
        return "".join((opening, text, tail))
    parts = conversation.parts
    return conversation.separator.join(
        (opening + parts[0], *parts[1:-1], parts[-1] + tail))


_TOOL_RESULT = "[Tool result]: "
_THINKING = "[Assistant thinking]: "
_PI_TOOL_RESULT_UNITS = 2000  # pi's TOOL_RESULT_MAX_CHARS, in UTF-16 code units as JS counts


def _utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _pi_tool_result(text: str) -> str:
    """pi's ``truncateForSummary``: the first 2 000 UTF-16 units (a character cut in two left
    out, as pi 1.6's ``sliceHead``) and how many units were dropped."""
    units = _utf16_units(text)
    if units <= _PI_TOOL_RESULT_UNITS:
        return text
    head = text.encode("utf-16-le")[:2 * _PI_TOOL_RESULT_UNITS].decode("utf-16-le", "ignore")
    return f"{head}\n\n[... {units - _PI_TOOL_RESULT_UNITS} more characters truncated]"


def agent_parts(parts: tuple[str, ...], summary_format: SummaryFormat | None) -> tuple[str, ...]:
    """A conversation's parts as the agent's ``serializeConversation`` writes them: a pi format
    cuts each tool result to 2 000 characters, and pi 1.6 leaves thinking out (Compactor's
    format keeps both whole)."""
    if summary_format is None:
        return parts
    drop_thinking = summary_format == "pi-1.6"
    return tuple(
        _TOOL_RESULT + _pi_tool_result(part[len(_TOOL_RESULT):])
        if part.startswith(_TOOL_RESULT) and len(part) > _PI_TOOL_RESULT_UNITS // 2 else part
        for part in parts if not (drop_thinking and part.startswith(_THINKING)))


def _previous_summary(summary: str) -> str:
    return "<previous-summary>\n" + summary + "\n</previous-summary>\n\n"


def _additional_context(lines: Iterable[str]) -> str:
    items = [f"- {line}" for line in lines]
    if not items:
        return ""
    return "<additional-context>\n" + "\n".join(items) + "\n</additional-context>\n\n"


def build_history_prompt(
    conversation: str | Conversation,
    *,
    previous_summary: str | None = None,
    custom_instructions: str | None = None,
    prompt_override: str | None = None,
    extra_context: Iterable[str] = (),
    summary_format: SummaryFormat | None = None,
) -> str:
    """The user message of the history summary. Empty strings count as "not given".

    ``previous_summary`` loses any trailing file-operation tags (Q20; idempotent, so a
    summary already stripped by the preparation is unchanged). A pi format lays the prompt out
    as pi's ``generateSummary`` does: conversation, previous summary, prompt, custom focus.
    """
    previous = strip_file_operation_tags(previous_summary) if previous_summary else ""
    base = render("summary-update" if previous else "summary-initial", summary_format)
    if prompt_override:
        base = prompt_override
    if custom_instructions:
        base += "\n\n" + _focus(custom_instructions, summary_format)
    return _joined(conversation, _previous_summary(previous) if previous else "",
                   _additional_context(extra_context), base)


def _focus(instructions: str, summary_format: SummaryFormat | None) -> str:
    return render("custom-instructions", summary_format, instructions=instructions)


def build_turn_prefix_prompt(conversation: str | Conversation, *,
                             previous_summary: str | None = None,
                             summary_format: SummaryFormat | None = None,
                             custom_instructions: str | None = None) -> str:
    """The user message of the split-turn prefix summary.

    Compactor's and pi 0.73's take no options; pi 1.6's is laid out under
    ``# Conversation`` / ``# Instructions`` headings and ends with the custom focus, as pi
    1.6's ``generateTurnPrefixSummary`` does. ``previous_summary`` is only set on the chunked
    path, when a prefix too large for the summarizer's window is summarised part by part.
    """
    previous = _previous_summary(previous_summary) if previous_summary else ""
    instructions = render("turn-prefix", summary_format)
    if summary_format != "pi-1.6":
        return _joined(conversation, previous, instructions)
    focus = "\n\n" + _focus(custom_instructions, summary_format) if custom_instructions else ""
    return _joined(conversation, previous, _PI16_INSTRUCTIONS, instructions, focus,
                   opening=_PI16_PREFIX_OPEN, closing=_PI16_PREFIX_CLOSE)


def build_short_prompt(
    conversation: str | Conversation, *, merged_summary: str, extra_context: Iterable[str] = ()
) -> str:
    """The user message of the short summary; ``merged_summary`` is the new summary, untagged."""
    previous = _previous_summary(merged_summary) if merged_summary else ""
    return _joined(conversation, previous, _additional_context(extra_context),
                   render("short-summary"))


def build_branch_prompt(conversation: str | Conversation, *,
                        custom_instructions: str | None = None,
                        summary_format: SummaryFormat | None = None) -> str:
    """The user message of a branch summary. Compactor's: custom instructions replace the
    prompt; a pi format's: they are the focus added after it, as pi's
    ``generateBranchSummary`` does without ``replaceInstructions``."""
    if summary_format is None:
        return _joined(conversation, custom_instructions or render("branch-summary"))
    focus = "\n\n" + _focus(custom_instructions, summary_format) if custom_instructions else ""
    return _joined(conversation, render("branch-summary", summary_format), focus)
