"""Hook errors: all derive from :class:`api_client.contract.errors.HookError`."""

from __future__ import annotations

from api_client.contract.errors import HookError

__all__ = ["HookError", "HookLoadError", "HookValidationError"]


class HookLoadError(HookError):
    """A configured hook cannot be loaded; the worker must refuse to start."""


class HookValidationError(HookError):
    """A hook returned a result that cannot be used; the job fails, the session is unchanged."""

    def __init__(self, event: str, problem: str, *, plugin: str | None = None) -> None:
        self.event = event
        self.problem = problem
        self.plugin = plugin
        who = f" from {plugin}" if plugin else ""
        super().__init__(f"invalid {event} result{who}: {problem}")
