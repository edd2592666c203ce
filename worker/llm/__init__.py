"""The model layer: providers over httpx, and the router that owns retries and fallback.

The interface types live in ``worker.summary_requests`` (below both this layer and the pure
core, which never imports ``worker.llm``); ``worker.llm.errors`` is light (stdlib only); everything
that loads httpx, pydantic or redis is imported lazily from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from worker.llm.errors import AllCandidatesFailedError, ModelCallError, ModelCancelledError
from worker.summary_requests import (
    CancelToken,
    Spend,
    Summarizer,
    SummaryRequest,
    SummaryResult,
    Usage,
)

if TYPE_CHECKING:
    from worker.llm.build import build_deterministic, build_summarizer
    from worker.llm.router import JobSummarizer, Router
    from worker.llm.settings import LlmSettings, ModelCandidate

__all__ = [
    "AllCandidatesFailedError",
    "CancelToken",
    "JobSummarizer",
    "LlmSettings",
    "ModelCallError",
    "ModelCancelledError",
    "ModelCandidate",
    "Router",
    "Spend",
    "Summarizer",
    "SummaryRequest",
    "SummaryResult",
    "Usage",
    "build_deterministic",
    "build_summarizer",
]

_LAZY = {
    "build_deterministic": "worker.llm.build",
    "build_summarizer": "worker.llm.build",
    "JobSummarizer": "worker.llm.router",
    "Router": "worker.llm.router",
    "LlmSettings": "worker.llm.settings",
    "ModelCandidate": "worker.llm.settings",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'worker.llm' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
