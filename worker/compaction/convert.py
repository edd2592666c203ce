"""Entry → message mappings and ``convertToLlm``: they live in the shared session model
(:mod:`api_client.session.convert`); planning imports them under these names."""

from api_client.session.convert import (
    PRUNED_PLACEHOLDER,
    compaction_summary_message,
    convert_message,
    convert_to_llm,
    for_branch,
    for_compaction,
    for_context,
    text_of_blocks,
    wrap_branch_summary,
    wrap_compaction_summary,
)

__all__ = [
    "PRUNED_PLACEHOLDER",
    "compaction_summary_message",
    "convert_message",
    "convert_to_llm",
    "for_branch",
    "for_compaction",
    "for_context",
    "text_of_blocks",
    "wrap_branch_summary",
    "wrap_compaction_summary",
]
