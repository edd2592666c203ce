"""Pure compaction planning: no Redis, no HTTP, no clock, no environment.

Everything here works on the session model of :mod:`api_client.contract.session` and is
deterministic.
"""

from typing import Any

from api_client.contract.session.context import (
    ContextMessage,
    SessionContext,
    build_session_context,
    context_messages,
)
from api_client.contract.session.convert import (
    convert_to_llm,
    for_branch,
    for_compaction,
    for_context,
)
from worker.compaction.branch import (
    DEFAULT_CONTEXT_WINDOW,
    BranchCollection,
    BranchPreparation,
    branch_budget,
    branch_destination,
    collect_entries_for_branch_summary,
    prepare_branch_entries,
)
from worker.compaction.caches import PlanCaches
from worker.compaction.cutpoint import (
    CutPoint,
    find_cut_point,
    find_turn_start_index,
    find_valid_cut_points,
)
from worker.compaction.prepare import (
    CompactionSettings,
    Preparation,
    context_tokens,
    last_assistant_usage,
    no_plan_reason,
    older_tool_results,
    planned_messages,
    prepare_compaction,
    prime_counts,
    prompt_tokens,
)
from worker.compaction.prune import PrunePlan, apply_prune, plan_prune
from worker.compaction.serialize import serialize_conversation
from worker.tokens import Tokenizer, get_tokenizer

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "BranchCollection",
    "BranchOutcome",
    "BranchPreparation",
    "CompactionOutcome",
    "CompactionSettings",
    "ContextMessage",
    "CutPoint",
    "PlanCaches",
    "Preparation",
    "PrunePlan",
    "SessionContext",
    "SummarizationError",
    "Tokenizer",
    "apply_prune",
    "branch_budget",
    "branch_destination",
    "build_session_context",
    "collect_entries_for_branch_summary",
    "compact",
    "context_messages",
    "context_tokens",
    "convert_to_llm",
    "find_cut_point",
    "find_turn_start_index",
    "find_valid_cut_points",
    "for_branch",
    "for_compaction",
    "for_context",
    "get_tokenizer",
    "last_assistant_usage",
    "no_plan_reason",
    "older_tool_results",
    "plan_prune",
    "planned_messages",
    "prepare_branch_entries",
    "prepare_compaction",
    "prime_counts",
    "prompt_tokens",
    "serialize_conversation",
    "summarize_branch",
]

_SUMMARIZE_NAMES = {"BranchOutcome", "CompactionOutcome", "SummarizationError", "compact",
                    "summarize_branch"}


def __getattr__(name: str) -> Any:
    # The summarisation flow pulls in the model-layer types; planning alone does not need them.
    if name in _SUMMARIZE_NAMES:
        from worker.compaction import summarize

        return getattr(summarize, name)
    raise AttributeError(name)
