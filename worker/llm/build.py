"""``build_summarizer``: settings -> a router over one shared HTTP client."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from api_client.contract.redaction import remember_secret
from worker.llm._http import make_client
from worker.llm.chunking import RequestCounter
from worker.llm.cooldown import CooldownStore, MemoryCooldownStore, RedisCooldownStore
from worker.llm.providers import (
    AnthropicProvider,
    ExtractiveProvider,
    HttpContext,
    OpenAIChatProvider,
    Provider,
    RemoteEndpointProvider,
)
from worker.llm.router import Router
from worker.llm.settings import LlmSettings, ModelCandidate
from worker.tokens import Tokenizer, get_tokenizer

if TYPE_CHECKING:
    import redis

__all__ = ["EXTRACTIVE", "build_deterministic", "build_providers", "build_summarizer"]

EXTRACTIVE = ModelCandidate(provider="extractive")


def build_providers(settings: LlmSettings, http: HttpContext,
                    environ: Mapping[str, str] | None = None) -> list[Provider]:
    """The chain exactly as listed; unset, the extractive summarizer alone."""
    env = os.environ if environ is None else environ
    auth = settings.remote_auth_header.get_secret_value() if settings.remote_auth_header else None
    remember_secret(auth)  # masked in every error text and log line of this process
    providers: list[Provider] = []
    for candidate in settings.models or [EXTRACTIVE]:
        key = candidate.resolve_api_key(env)
        remember_secret(key)
        if candidate.provider == "openai":
            providers.append(OpenAIChatProvider(candidate, http, key))
        elif candidate.provider == "anthropic":
            providers.append(AnthropicProvider(candidate, http, key))
        elif candidate.provider == "remote":
            providers.append(RemoteEndpointProvider(candidate, http, auth or key))
        else:
            providers.append(ExtractiveProvider(candidate))
    return providers


def _cooldown(settings: LlmSettings, redis_client: Any) -> CooldownStore:
    threshold, window_s, cooldown_s = (settings.llm_failure_threshold,
                                       settings.llm_failure_window_s, settings.llm_cooldown_s)
    if redis_client is None:
        return MemoryCooldownStore(threshold=threshold, window_s=window_s, cooldown_s=cooldown_s)
    return RedisCooldownStore(redis_client, threshold=threshold, window_s=window_s,
                              cooldown_s=cooldown_s, prefix=settings.llm_cooldown_prefix)


def build_summarizer(settings: LlmSettings | None = None,
                     redis_client: redis.Redis[Any] | None = None,
                     tokenizer: Tokenizer | None = None) -> Router:
    """The router for ``settings`` (``LlmSettings()`` from the environment when omitted).

    ``tokenizer``: the one the planner uses (``COMPACTOR_TOKENIZER``); cl100k when omitted.

    Raises ``InsecureEndpointError`` for a candidate on plain http off loopback without
    ``allow_http``. Call
    ``router.for_job()`` per job so its calls share one attempt budget; ``close()`` at shutdown.
    """
    settings = settings or LlmSettings()
    client = make_client()
    http = HttpContext(client, settings.llm_connect_timeout_s, settings.llm_max_response_bytes)
    try:
        providers = build_providers(settings, http)
    except Exception:
        client.close()
        raise
    return Router(providers, policy=settings.retry_policy(),
                  cooldown=_cooldown(settings, redis_client),
                  on_close=client.close,
                  counter=RequestCounter(tokenizer or get_tokenizer("tiktoken")),
                  summary_slack=settings.llm_summary_slack)


def build_deterministic(tokenizer: Tokenizer | None = None) -> Router:
    """The extractive summarizer alone (no HTTP, no cost): what an automatic compaction uses
    when its tenant is over the model budget (``COMPACTOR_OVER_BUDGET_SUMMARIZER``)."""
    return Router([ExtractiveProvider(EXTRACTIVE)],
                  counter=RequestCounter(tokenizer or get_tokenizer("tiktoken")))
