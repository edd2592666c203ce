"""Settings of the model layer: the candidate list (``COMPACTOR_MODELS``) and the router tuning.

``LlmSettings`` is a pydantic-settings ``BaseSettings`` with the env prefix ``COMPACTOR_`` so the
worker's settings can subclass or embed it. ``COMPACTOR_MODELS`` is a JSON list of candidate
objects, primary first; unset or empty, the chain is the extractive (no-LLM) summarizer alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from api_client.contract.redaction import mask_url
from worker.llm.retry_policy import RetryPolicy
from worker.summary_requests import Usage

__all__ = ["DEFAULT_BASE_URLS", "DEFAULT_MAX_OUTPUT_TOKENS", "DEFAULT_MAX_RESPONSE_BYTES",
           "LlmSettings", "ModelCandidate", "ProviderName"]

ProviderName = Literal["openai", "anthropic", "remote", "extractive"]

# A summary of 13k tokens is ~60 kB of JSON: 4 MiB leaves room for reasoning fields and stays
# small beside a worker's memory with 8 jobs in flight.
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024

# The output limit of a candidate without max_output_tokens: a call's max_tokens is cut to it
# (a summary's default budget is 0.8 x reserve_tokens, 13 107 by default; docs/security.md).
DEFAULT_MAX_OUTPUT_TOKENS = 32_768

DEFAULT_BASE_URLS: dict[str, str] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}


class ModelCandidate(BaseModel):
    """One rung of the fallback chain."""

    # hide_input_in_errors: a rejected value may be a key or a URL with credentials
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    provider: ProviderName
    model: str = ""
    # Each provider's SDK convention: OpenAI-compatible includes the version path
    # (http://127.0.0.1:8080/v1); Anthropic is the host; remote is the full endpoint URL.
    base_url: str | None = None
    # Plain http to a host that is not loopback sends the key and the conversation in clear
    # text: refused at start unless this is set (a model server inside a private network).
    allow_http: bool = False
    api_key: SecretStr | None = None
    api_key_env: str | None = None  # name of the environment variable holding the key
    context_window: int | None = Field(default=None, gt=0)
    max_output_tokens: int | None = Field(default=None, gt=0)
    timeout_s: float = Field(default=120.0, gt=0)  # deadline of one attempt, body included
    reasoning: bool = False  # ask for high reasoning effort (when the request wants it)
    thinking_budget_tokens: int = Field(default=16_384, ge=1_024)  # Anthropic "high"
    # OpenAI-compatible servers disagree: OpenAI's reasoning models want max_completion_tokens,
    # many local servers only know max_tokens. "auto": the former for api.openai.com only.
    token_param: Literal["auto", "max_tokens", "max_completion_tokens"] = "auto"
    # Prices in USD per million tokens, for the cost metrics and the job record's costUsd.
    # Unset input/output prices count as 0; cache prices default to the input price.
    price_input_per_mtok: float | None = Field(default=None, ge=0)
    price_output_per_mtok: float | None = Field(default=None, ge=0)
    price_cache_read_per_mtok: float | None = Field(default=None, ge=0)
    price_cache_write_per_mtok: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _check(self) -> ModelCandidate:
        if self.provider in ("openai", "anthropic") and not self.model:
            raise ValueError(f"a {self.provider} candidate needs a model")
        if self.provider == "remote" and not self.base_url:
            raise ValueError("a remote candidate needs base_url (the endpoint URL)")
        if self.base_url is not None:
            parts = urlsplit(self.base_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError("base_url must be an http(s) URL with a host: "
                                 f"{mask_url(self.base_url)!r}")
        return self

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, mask_url(value) if name == "base_url" and value else value

    @property
    def label(self) -> str:
        return f"{self.provider}/{self.model}" if self.model else self.provider

    @property
    def resolved_base_url(self) -> str:
        return (self.base_url or DEFAULT_BASE_URLS.get(self.provider, "")).rstrip("/")

    def resolve_api_key(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The key itself, else the named variable's value; None when neither is set."""
        if self.api_key is not None:
            return self.api_key.get_secret_value() or None
        if self.api_key_env:
            return (os.environ if environ is None else environ).get(self.api_key_env) or None
        return None

    def cost_usd(self, usage: Usage) -> float:
        """What ``usage`` costs at this candidate's prices (0 when none are set)."""
        per_input = self.price_input_per_mtok or 0.0
        per_read, per_write = self.price_cache_read_per_mtok, self.price_cache_write_per_mtok
        per_read = per_input if per_read is None else per_read
        per_write = per_input if per_write is None else per_write
        total = (usage.input * per_input + usage.output * (self.price_output_per_mtok or 0.0)
                 + usage.cache_read * per_read + usage.cache_write * per_write)
        return total / 1_000_000

    @property
    def cooldown_key(self) -> str:
        # part of a Redis key name, which any SCAN lists: never the URL's credentials
        return f"{self.provider}|{self.model}|{mask_url(self.resolved_base_url)}"


class LlmSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="COMPACTOR_", extra="ignore",
                                      hide_input_in_errors=True)

    models: list[ModelCandidate] = Field(default_factory=list)

    # circuit breaker shared by all workers (Redis)
    llm_failure_threshold: int = Field(default=5, ge=1)  # failures within the window ...
    llm_failure_window_s: float = Field(default=60.0, gt=0)
    llm_cooldown_s: float = Field(default=60.0, gt=0)  # ... cool the candidate down this long
    llm_cooldown_prefix: str = "compactor:llm:"

    # retries (see worker.llm.retry_policy for the reasoning behind the defaults)
    llm_backoff_base_ms: int = Field(default=1_000, ge=0)
    llm_backoff_factor: float = Field(default=2.0, ge=1.0)
    llm_backoff_max_ms: int = Field(default=8_000, ge=0)
    llm_backoff_jitter: float = Field(default=0.2, ge=0.0, le=1.0)
    llm_max_wait_ms: int = Field(default=30_000, ge=0)
    llm_attempts_per_candidate: int = Field(default=3, ge=1)
    llm_attempt_budget: int = Field(default=20, ge=1)  # HTTP attempts per job

    llm_connect_timeout_s: float = Field(default=10.0, gt=0)
    # Bounds of a model's answer. Bytes: the body is streamed and abandoned past this many
    # (inflated) bytes.
    llm_max_response_bytes: int = Field(default=DEFAULT_MAX_RESPONSE_BYTES, ge=1024)
    # Tokens: a summary longer than slack × its output budget (by our tokenizer) is refused and
    # the next candidate tried. The slack covers the gap between our count and the model's own.
    llm_summary_slack: float = Field(default=1.5, ge=1.0)
    # "Header-Name: value" sent to the remote summarization endpoint
    # (docs/compaction.md "Remote summarization endpoint").
    remote_auth_header: SecretStr | None = None

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            base_delay_ms=self.llm_backoff_base_ms,
            factor=self.llm_backoff_factor,
            max_backoff_ms=self.llm_backoff_max_ms,
            jitter=self.llm_backoff_jitter,
            max_wait_ms=self.llm_max_wait_ms,
            attempts_per_candidate=self.llm_attempts_per_candidate,
            job_attempt_budget=self.llm_attempt_budget,
        )
