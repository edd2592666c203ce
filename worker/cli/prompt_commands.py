"""``compactor inspect prompt``: the exact system and user prompt a summary call would send."""

from __future__ import annotations

import argparse
from typing import Any

from api_client.contract.errors import PlanError
from worker.cli.session_files import HELP, emit, leaf_path, load_file
from worker.compaction import (
    CompactionSettings,
    collect_entries_for_branch_summary,
    convert_to_llm,
    get_tokenizer,
    no_plan_reason,
    prepare_branch_entries,
    prepare_compaction,
)
from worker.compaction.branch import DEFAULT_CONTEXT_WINDOW, branch_budget
from worker.compaction.summarize import (
    RequestOptions,
    branch_request,
    history_request,
    options_for,
    short_request,
    turn_prefix_request,
)
from worker.summary_requests import SummaryRequest

__all__ = ["register"]

# The short summary's input holds the new merged summary, which only the model can produce.
MERGED_PLACEHOLDER = "<merged summary from the history call>"


def _compaction_request(args: argparse.Namespace) -> SummaryRequest:
    session = load_file(args.file)
    path = leaf_path(session, args.leaf)
    prep = prepare_compaction(path,
                              CompactionSettings(args.keep_recent_tokens, args.reserve_tokens),
                              get_tokenizer(args.tokenizer))
    if prep is None:
        raise PlanError(f"{args.file}: no compaction plan ({no_plan_reason(path)})")
    opts = options_for(prep, custom_instructions=args.instructions)
    if args.kind == "history":
        return history_request(convert_to_llm(prep.messages_to_summarize), prep.previous_summary,
                               opts)
    if args.kind == "turn-prefix":
        if not prep.is_split_turn or not prep.turn_prefix_messages:
            raise PlanError(f"{args.file}: the plan does not split a turn, so there is no "
                            "turn-prefix call")
        return turn_prefix_request(convert_to_llm(prep.turn_prefix_messages), opts)
    return short_request(convert_to_llm(prep.recent_messages), MERGED_PLACEHOLDER, opts)


def _branch_request(args: argparse.Namespace) -> SummaryRequest:
    if not args.to:
        raise PlanError("--kind branch needs --to TARGET")
    session = load_file(args.file)
    tree = session.tree()
    old_leaf = leaf_path(session, args.leaf)[-1].id
    tree.get(args.to)
    collection = collect_entries_for_branch_summary(tree, old_leaf, args.to)
    budget = branch_budget(args.context_window, args.reserve_tokens)
    prep = prepare_branch_entries(collection.entries, budget, get_tokenizer(args.tokenizer))
    opts = RequestOptions(args.instructions, None, (), args.reserve_tokens, prep.read_files,
                          prep.modified_files)
    return branch_request(convert_to_llm(prep.messages), opts)


def _prompt(args: argparse.Namespace) -> int:
    request = _branch_request(args) if args.kind == "branch" else _compaction_request(args)
    payload = {"kind": args.kind, "system": request.system_prompt, "prompt": request.prompt,
               "maxTokens": request.max_tokens, "reasoning": request.reasoning}
    readable = (f"=== system ===\n{request.system_prompt}\n"
                f"=== user (max {request.max_tokens} tokens) ===\n{request.prompt}")
    return emit(args, payload, readable)


def register(sub: Any) -> None:
    prompt = sub.add_parser("prompt", help="print the exact prompts a summary call would send")
    prompt.add_argument("file", metavar="FILE", help=HELP["file"])
    prompt.add_argument("--kind", choices=("history", "turn-prefix", "short", "branch"),
                        required=True,
                        help="which summary call: history, turn-prefix (split turn), short, or "
                             "branch (needs --to)")
    prompt.add_argument("--to", default=None, metavar="TARGET", help="branch target (kind branch)")
    prompt.add_argument("--leaf", "--from", dest="leaf", default=None,
                        help="leaf (default: last entry)")
    prompt.add_argument("--instructions", default=None, help="custom instructions")
    prompt.add_argument("--keep-recent-tokens", type=int, default=20_000,
                        help=HELP["keep_recent_tokens"])
    prompt.add_argument("--reserve-tokens", type=int, default=16_384, help=HELP["reserve_tokens"])
    prompt.add_argument("--context-window", type=int, default=DEFAULT_CONTEXT_WINDOW,
                        help=HELP["context_window"])
    prompt.add_argument("--tokenizer", choices=("estimate", "tiktoken"), default="tiktoken",
                        help=HELP["tokenizer"])
    prompt.add_argument("--json", action="store_true", help=HELP["json"])
    prompt.set_defaults(handler=_prompt)
