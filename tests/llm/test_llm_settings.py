"""COMPACTOR_MODELS and the router tuning from the environment; the offline default."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from llm.llm_fakes import make_request
from pydantic import ValidationError
from pydantic_settings import SettingsError

from worker.llm import LlmSettings, ModelCandidate, build_summarizer
from worker.llm.cooldown import MemoryCooldownStore
from worker.llm.providers import AnthropicProvider, ExtractiveProvider, OpenAIChatProvider
from worker.llm.retry_policy import RetryPolicy


def test_unset_models_mean_the_extractive_summarizer_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COMPACTOR_MODELS", raising=False)
    router = build_summarizer()
    assert [type(p) for p in router.providers] == [ExtractiveProvider]
    result = router.summarize(
        make_request([{"role": "user", "content": "Write the release notes for v2"}]))
    assert (result.provider, result.attempts) == ("extractive", 0)
    assert "Write the release notes for v2" in result.text
    router.close()


def test_models_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    models = [
        {"provider": "openai", "model": "qwen", "base_url": "http://127.0.0.1:8080/v1",
         "context_window": 32768, "max_output_tokens": 4096, "timeout_s": 30, "reasoning": True},
        {"provider": "anthropic", "model": "claude-x", "api_key_env": "MY_ANTHROPIC_KEY"},
        {"provider": "extractive"},
    ]
    monkeypatch.setenv("COMPACTOR_MODELS", json.dumps(models))
    monkeypatch.setenv("MY_ANTHROPIC_KEY", "sk-ant-secret")
    monkeypatch.setenv("COMPACTOR_LLM_BACKOFF_BASE_MS", "250")
    monkeypatch.setenv("COMPACTOR_LLM_ATTEMPT_BUDGET", "7")
    settings = LlmSettings()
    assert [m.label for m in settings.models] == ["openai/qwen", "anthropic/claude-x", "extractive"]
    assert settings.models[0].context_window == 32768 and settings.models[0].reasoning is True
    assert settings.models[1].resolved_base_url == "https://api.anthropic.com"
    assert settings.models[1].resolve_api_key() == "sk-ant-secret"
    assert settings.retry_policy() == RetryPolicy(base_delay_ms=250, job_attempt_budget=7)
    router = build_summarizer(settings)
    assert [type(p) for p in router.providers] == [OpenAIChatProvider, AnthropicProvider,
                                                   ExtractiveProvider]
    assert isinstance(router.cooldown, MemoryCooldownStore)  # no Redis given
    router.close()


def test_secrets_are_not_shown() -> None:
    candidate = ModelCandidate(provider="openai", model="m", api_key="sk-very-secret")
    assert ("sk-very-secret" not in repr(candidate)
            and "sk-very-secret" not in str(candidate.model_dump()))
    assert candidate.resolve_api_key() == "sk-very-secret"
    settings = LlmSettings(remote_auth_header="Authorization: Bearer hunter2")
    assert "hunter2" not in repr(settings)


@pytest.mark.parametrize(
    "spec",
    [
        {"provider": "openai"},  # no model
        {"provider": "anthropic", "model": ""},
        {"provider": "remote"},  # no endpoint
        {"provider": "gemini", "model": "x"},
        {"provider": "openai", "model": "m", "context_window": 0},
        {"provider": "openai", "model": "m", "timeout_s": 0},
        {"provider": "openai", "model": "m", "temperature": 0.2},  # unknown keys are refused
        {"provider": "openai", "model": "m", "base_url": "127.0.0.1:8080/v1"},  # no scheme
        {"provider": "remote", "base_url": "file:///tmp/x"},
    ],
)
def test_invalid_candidates(spec: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ModelCandidate.model_validate(spec)


def test_invalid_models_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPACTOR_MODELS", "[{not json")
    with pytest.raises(SettingsError, match="models"):
        LlmSettings()


def test_importing_the_interface_loads_no_http_or_settings_stack() -> None:
    code = ("import sys, worker.llm, worker.summary_requests, worker.llm.errors; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'httpx', 'httpcore', 'redis', 'pydantic', 'celery'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
