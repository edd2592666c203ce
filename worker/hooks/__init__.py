"""The reference agent's hook contract (docs/hooks.md "The five events") in the workers, with
pluggy, and over HTTP.

Plugins mark functions with :data:`hookimpl` and are loaded from the entry-point group
``compactor.hooks`` or from ``module:object`` paths in :class:`HookSettings`; the service calls
the events through the :class:`HookRunner` that :func:`load_hook_runner` returns.
"""

from worker.hooks.errors import HookError, HookLoadError, HookValidationError
from worker.hooks.loading import ENTRY_POINT_GROUP, load_hook_runner
from worker.hooks.result_checks import validate_branch_summary, validate_compaction
from worker.hooks.results import (
    BeforeCompactResult,
    BeforeTreeResult,
    CompactingResult,
    HookBranchSummary,
    HookCompaction,
)
from worker.hooks.runner import HookRunner
from worker.hooks.settings import HookSettings
from worker.hooks.specs import (
    EVENTS,
    PROJECT_NAME,
    CancelSignal,
    TreePreparation,
    hookimpl,
    hookspec,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "EVENTS",
    "PROJECT_NAME",
    "BeforeCompactResult",
    "BeforeTreeResult",
    "CancelSignal",
    "CompactingResult",
    "HookBranchSummary",
    "HookCompaction",
    "HookError",
    "HookLoadError",
    "HookRunner",
    "HookSettings",
    "HookValidationError",
    "TreePreparation",
    "hookimpl",
    "hookspec",
    "load_hook_runner",
    "validate_branch_summary",
    "validate_compaction",
]
