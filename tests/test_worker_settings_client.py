"""The worker's settings hold the client's (``settings.client``), read from the same variables:
one variable sets the same thing on both sides, and to a worker an empty one counts as unset
(docker compose passes ``${VAR:-}`` through as "")."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from api_client.contract.settings import ClientSettings
from worker.settings import CLIENT_FIELDS, SETTING_NAMES, WorkerSettings


@pytest.fixture(autouse=True)
def _no_dotenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no .env of the working tree


def test_the_client_settings_come_from_the_same_variables(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPACTOR_REDIS_URL", "redis://db.example:6380/2")
    monkeypatch.setenv("COMPACTOR_KEY_PREFIX", "fleet")
    monkeypatch.setenv("COMPACTOR_JOB_TTL_S", "77")
    monkeypatch.setenv("COMPACTOR_JOB_DEADLINE_S", "12")
    settings = WorkerSettings()
    assert isinstance(settings.client, ClientSettings)
    assert (settings.client.redis_url, settings.client.key_prefix, settings.client.job_ttl_s) == (
        "redis://db.example:6380/2", "fleet", 77)
    assert settings.job_deadline_s == 12
    assert settings.llm_cooldown_prefix == "fleet:llm:"  # under the client's key prefix
    assert settings.client.model_dump() == ClientSettings().model_dump()  # as a client reads them
    assert not hasattr(settings, "redis_url")  # the client's are not the worker's own


def test_an_empty_variable_counts_as_unset_for_the_client_settings_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KEY_PREFIX", "REDIS_URL", "JOB_TTL_S", "JOB_DEADLINE_S"):
        monkeypatch.setenv(f"COMPACTOR_{name}", "")
    settings = WorkerSettings()
    assert (settings.client.key_prefix, settings.client.redis_url, settings.client.job_ttl_s) == (
        "compactor", "redis://127.0.0.1:6379/0", 86_400)
    assert settings.job_deadline_s == 300.0
    with pytest.raises(ValidationError):  # a client alone still refuses the empty prefix
        ClientSettings()


def test_client_settings_given_by_name_go_to_the_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPACTOR_KEY_PREFIX", "fleet")
    settings = WorkerSettings(redis_url="redis://h:1/0", tenant="acme", job_deadline_s=9)
    assert (settings.client.redis_url, settings.client.tenant, settings.client.key_prefix) == (
        "redis://h:1/0", "acme", "fleet")
    assert settings.job_deadline_s == 9
    with pytest.raises(ValidationError, match="key_prefix"):
        WorkerSettings(key_prefix="a b")
    given = ClientSettings(key_prefix="other")
    assert WorkerSettings(client=given).client is given
    with pytest.raises(TypeError):
        WorkerSettings(client=given, key_prefix="x")


def test_every_variable_names_a_setting() -> None:
    assert set(ClientSettings.model_fields) == CLIENT_FIELDS
    assert {"redis_url", "key_prefix", "job_deadline_s", "models", "hooks"} <= SETTING_NAMES
    assert "client" not in SETTING_NAMES
