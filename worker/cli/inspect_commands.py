"""``compactor inspect context|plan|prune|branch|prompt FILE``: planning decisions, explained."""

from __future__ import annotations

import argparse
from typing import Any

from worker.cli.session_files import HELP, emit, leaf_path, load_file
from worker.compaction import (
    CompactionSettings,
    build_session_context,
    collect_entries_for_branch_summary,
    get_tokenizer,
    no_plan_reason,
    plan_prune,
    prepare_branch_entries,
    prepare_compaction,
)
from worker.compaction.branch import DEFAULT_CONTEXT_WINDOW, branch_budget

__all__ = ["register"]


def _context(args: argparse.Namespace) -> int:
    session = load_file(args.file)
    leaf_path(session, args.leaf)  # validates the leaf and the parent walk
    context = build_session_context(session.tree(), args.leaf or session.tree().leaf_id)
    messages = [{"role": m.message.get("role"), "entryId": m.entry_id} for m in context.messages]
    payload = {
        "messages": messages,
        "thinkingLevel": context.thinking_level,
        "models": context.models,
        "mode": context.mode,
    }
    readable = "\n".join(f"{m['entryId']}  {m['role']}" for m in messages)
    return emit(args, payload, f"{readable}\nthinkingLevel: {context.thinking_level}\n"
                               f"models: {context.models}\nmode: {context.mode}")


def _plan(args: argparse.Namespace) -> int:
    session = load_file(args.file)
    path = leaf_path(session, args.leaf)
    settings = CompactionSettings(args.keep_recent_tokens, args.reserve_tokens)
    prep = prepare_compaction(path, settings, get_tokenizer(args.tokenizer))
    if prep is None:
        return emit(args, {"plan": None, "reason": no_plan_reason(path)})
    return emit(args, {
        "firstKeptEntryId": prep.first_kept_entry_id,
        "firstKeptEntryIndex": prep.first_kept_entry_index,
        "turnStartIndex": prep.turn_start_index,
        "isSplitTurn": prep.is_split_turn,
        "tokensBefore": prep.tokens_before,
        "keepRecentTokens": prep.keep_recent_tokens,
        "summarizeEntryIds": list(prep.summarize_entry_ids),
        "turnPrefixEntryIds": list(prep.turn_prefix_entry_ids),
        "keptEntryIds": list(prep.kept_entry_ids),
        "hasPreviousSummary": prep.previous_summary is not None,
        "readFiles": list(prep.read_files),
        "modifiedFiles": list(prep.modified_files),
    })


def _prune(args: argparse.Namespace) -> int:
    path = leaf_path(load_file(args.file), args.leaf)
    plan = plan_prune(path, get_tokenizer(args.tokenizer))
    return emit(args, {"prunedCount": plan.pruned_count, "tokensSaved": plan.tokens_saved,
                       "prunedEntryIds": list(plan.pruned_entry_ids)})


def _branch(args: argparse.Namespace) -> int:
    session = load_file(args.file)
    tree = session.tree()
    old_leaf = leaf_path(session, args.from_leaf)[-1].id if tree.entries else None
    tree.get(args.to)
    tree.path_to(args.to)  # validates the target's parent walk
    collection = collect_entries_for_branch_summary(tree, old_leaf, args.to)
    budget = branch_budget(args.context_window, args.reserve_tokens)
    prep = prepare_branch_entries(collection.entries, budget, get_tokenizer(args.tokenizer))
    return emit(args, {
        "commonAncestorId": collection.common_ancestor_id,
        "collectedEntryIds": [e.id for e in collection.entries],
        "includedEntryIds": list(prep.included_entry_ids),
        "totalTokens": prep.total_tokens,
        "readFiles": list(prep.read_files),
        "modifiedFiles": list(prep.modified_files),
    })


def _add_common(parser: argparse.ArgumentParser, *, leaf: bool = True,
                tokenizer: bool = True) -> None:
    parser.add_argument("file", metavar="FILE", help=HELP["file"])
    if leaf:
        parser.add_argument("--leaf", default=None,
                            help="entry id to treat as the leaf (default: last entry)")
    if tokenizer:
        parser.add_argument("--tokenizer", choices=("estimate", "tiktoken"), default="tiktoken",
                            help=HELP["tokenizer"])
    parser.add_argument("--json", action="store_true", help=HELP["json"])


def register(commands: Any) -> Any:
    """Add ``inspect`` and its views; returns its subcommands (``inspect prompt`` joins them)."""
    inspect = commands.add_parser("inspect", help="explain planning decisions for a session file")
    sub = inspect.add_subparsers(dest="inspect_command", required=True, metavar="WHAT")
    context = sub.add_parser("context", help="the messages the model would see at the leaf")
    _add_common(context, tokenizer=False)
    context.set_defaults(handler=_context)
    plan = sub.add_parser("plan", help="where a compaction would cut and what it would summarise")
    _add_common(plan)
    plan.add_argument("--keep-recent-tokens", type=int, default=20_000,
                      help=HELP["keep_recent_tokens"])
    plan.add_argument("--reserve-tokens", type=int, default=16_384, help=HELP["reserve_tokens"])
    plan.set_defaults(handler=_plan)
    prune = sub.add_parser("prune", help="which old tool outputs a prune pass would drop "
                                         "(file unchanged)")
    _add_common(prune)
    prune.set_defaults(handler=_prune)
    branch = sub.add_parser("branch", help="what a summary of the branch left for TARGET "
                                           "would read")
    _add_common(branch, leaf=False)
    branch.add_argument("--to", required=True, metavar="TARGET", help="entry id navigated to")
    branch.add_argument("--from", dest="from_leaf", default=None, metavar="LEAF",
                        help="leaf being left (default: last entry)")
    branch.add_argument("--context-window", type=int, default=DEFAULT_CONTEXT_WINDOW,
                        help=HELP["context_window"])
    branch.add_argument("--reserve-tokens", type=int, default=16_384, help=HELP["reserve_tokens"])
    branch.set_defaults(handler=_branch)
    return sub



