"""Token counting: a leaf that the planner (``worker.compaction``) and the model layer
(``worker.llm``) both import, and that imports neither (tests/test_purity.py pins it).

A worker builds one tokenizer (``get_tokenizer``, with a ``TokenCache``) and hands it to both
layers, so every job shares its token cache and its per-message counts (``counts_of``). Beside
it: ``jsjson`` (JSON and lengths as the reference agent computes them, which the counts and the
planner's serialisation follow) and ``memo`` (per-object results kept across jobs).
"""

from worker.tokens.bpe import choose_counter, cl100k_counter
from worker.tokens.cache import TokenCache
from worker.tokens.counting import (
    IMAGE_CHARS,
    PRIME_MIN_CHARS,
    EstimateTokenizer,
    JobTokenizer,
    MessageText,
    TiktokenTokenizer,
    Tokenizer,
    TokenizerName,
    ceil4,
    counts_of,
    get_tokenizer,
    message_text,
    token_counts,
    total_tokens,
    worth_priming,
)
from worker.tokens.pieces import SEGMENT_MIN_CHARS

__all__ = [
    "IMAGE_CHARS",
    "PRIME_MIN_CHARS",
    "SEGMENT_MIN_CHARS",
    "EstimateTokenizer",
    "JobTokenizer",
    "MessageText",
    "TiktokenTokenizer",
    "TokenCache",
    "Tokenizer",
    "TokenizerName",
    "ceil4",
    "choose_counter",
    "cl100k_counter",
    "counts_of",
    "get_tokenizer",
    "message_text",
    "token_counts",
    "total_tokens",
    "worth_priming",
]
