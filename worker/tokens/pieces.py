"""Where a text may be cut so that the cl100k counts of the pieces sum to the count of the
whole: the token cache then keys the pieces, and a prompt that embeds a message's text shares
its middle piece with the message (``worker.tokens.counting``)."""

from __future__ import annotations

import re

__all__ = ["SEGMENT_MIN_CHARS", "count_pieces", "segments"]

# Shorter texts are one cache entry. Longer ones are cut: a cut costs a digest and a tiktoken
# call (a few microseconds), less than tokenizing a few hundred characters twice.
SEGMENT_MIN_CHARS = 256

# A newline, then "[" or "<": cl100k's pattern always cuts between the two (neither is a space,
# letter or digit, and no pre-token starts with a newline and goes on). "[" starts the
# serialized conversation's lines, "<" the prompt templates' tags around it.
_LINE_START = re.compile(r"\n[\[<]")


def segments(text: str) -> list[str]:
    """``text`` cut before every line that starts with ``[`` or ``<`` (see
    ``TiktokenTokenizer``): the conversation's last part and the template line after it,
    ``</conversation>``, fall into separate segments, as they do when the part is counted
    alone.

    One scan for the line starts, then slices: quicker than splitting on each literal and putting
    the marks back, or a zero-width ``re.split`` (the pieces are the same, table test against
    it).
    """
    pieces: list[str] = []
    start = 0
    for found in _LINE_START.finditer(text):
        cut = found.start() + 1
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def count_pieces(text: str) -> list[str]:
    """``text`` cut into pieces whose cl100k counts sum to the count of ``text``.

    First :func:`segments`, then each long segment at its first and last *word boundary*: an
    ASCII letter or digit followed by punctuation or a newline (:data:`_WORD_END`). No
    pre-token of cl100k's pattern runs on from a letter into a non-letter, or from a digit
    into a non-digit (letters and digits end their match there), so the pattern cuts at such
    a boundary whatever comes before or after. Spaces and ``]`` do not count as the second
    character: the serialized conversation's labels (``[Tool result]: ``) then hold no
    boundary, and ``X`` and ``"[Tool result]: " + X + "\\n\\n"`` get the same middle piece.
    Newlines at the very end are not looked at, for the same reason.
    """
    pieces: list[str] = []
    for segment in segments(text):
        if len(segment) <= SEGMENT_MIN_CHARS:
            pieces.append(segment)
        else:
            pieces.extend(_word_cuts(segment))
    return pieces


# An ASCII letter or digit, then a character that is surely neither a letter nor (after a
# digit) a digit in any Unicode table: cl100k's pattern always cuts between the two. The match
# is the second character, the cut before it: re scans for a pattern's rare first character
# in C, where a pattern that starts with [A-Za-z0-9] tries its lookahead at every letter (a
# long message of plain words, which has no cut, cost more to scan than to count).
_PUNCT = r"[\n\t.,;:(){}=\"'/\\<>|+*&!?#$%^~`_\[-]"
_WORD_END = re.compile(_PUNCT + "(?<=[A-Za-z0-9]" + _PUNCT + ")")
_TAIL_WINDOW = 64  # characters searched from the end for the last boundary, then 4x more


def _word_cuts(text: str) -> list[str]:
    end = len(text.rstrip("\n"))
    found = _WORD_END.search(text, 0, end)
    if found is None:
        return [text]
    first = found.start()
    last = _last_word_end(text, first, end)
    if last <= first:
        return [text[:first], text[first:]]
    return [text[:first], text[first:last], text[last:]]


def _last_word_end(text: str, first: int, end: int) -> int:
    window = _TAIL_WINDOW
    while True:
        start = max(first, end - window)
        last = first
        # From start + 1: the letter of a cut at start lies before the window.
        for found in _WORD_END.finditer(text, start + 1, end):
            last = found.start()
        if last > first or start == first:
            return last
        window *= 4
