"""Secrets never leave: URLs with credentials masked in messages and reprs, provider texts
redacted, settings that print no password (issue 33, finding 5).

Before: a malformed ``--redis-url`` printed its password (``{value!r}`` in the validator, and
pydantic's ``input_value``), ``repr(WorkerSettings())`` and ``str()`` carried it, and so did
the Redis key of a candidate's cooldown (``resolved_base_url`` with its userinfo).
"""

from __future__ import annotations

import logging

import pytest
from pydantic import ValidationError

from api_client.contract.errors import ConfigurationError
from api_client.contract.redaction import mask_url, redact_secrets, remember_secret
from api_client.contract.settings import ClientSettings, load_settings
from worker.hooks import HookSettings
from worker.llm.errors import AuthenticationFailed
from worker.llm.settings import ModelCandidate
from worker.observability.log_redaction import install
from worker.settings import WorkerSettings

PW = "hunter2-Pa55word"


@pytest.mark.parametrize(("url", "masked"), [
    (f"redis://user:{PW}@host:6379/0", "redis://***@host:6379/0"),
    (f"redis://:{PW}@host:6379/0", "redis://***@host:6379/0"),
    (f"rediss://default:{PW}@h:x/0", "rediss://***@h:x/0"),
    ("redis://user:pa/ss#x@host/0", "redis://***@host/0"),  # a parser would split at / and #
    (f"amqp://guest:{PW}@rabbit:5672//", "amqp://***@rabbit:5672//"),
    ("redis://host:6379/0", "redis://host:6379/0"),
    ("http://host/p?who=a@b", "http://host/p?who=a@b"),
    ("not a url", "not a url"),
])
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked


@pytest.mark.parametrize(("text", "expected"), [
    ('{"authorization": "Bearer sk-proj-abcdefghijk123"}', '{"authorization": "Bearer ***"}'),
    ("Authorization: Bearer abcdefghijkl", "Authorization: Bearer ***"),
    ("authorization: Basic dXNlcjpwYXNz", "authorization: Basic ***"),
    ('{"x-api-key": "abcdefgh", "api_key":"zzz"}', '{"x-api-key": "***", "api_key":"***"}'),
    ("url?key=1&password=hunter2&x=1", "url?key=1&password=***&x=1"),
    ("key sk-ant-api03-abcdefghijklmnop used", "key *** used"),
    ("google AIzaSyA1234567890abcdefghijklmnopqrs", "google ***"),
    ("POST http://alice:pw@h:1/v1 ok", "POST http://***@h:1/v1 ok"),
    # ordinary words stay
    ("the basic idea; Bearer token required; authorization header missing",
     "the basic idea; Bearer token required; authorization header missing"),
    ("mail a@b.c, webhook_secret must be set", "mail a@b.c, webhook_secret must be set"),
])
def test_redact_secrets(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


def test_configured_secrets_are_masked_in_any_shape() -> None:
    remember_secret("plain-local-key-77")
    assert redact_secrets("echo: plain-local-key-77!") == "echo: ***!"
    remember_secret("abc")  # too short to mask without masking words
    assert redact_secrets("abc") == "abc"


def test_a_model_error_is_redacted_when_it_is_made() -> None:
    err = AuthenticationFailed("401: bad key Bearer sk-live-abcdefghijklmn for http://u:p@h/v1")
    assert str(err) == err.message == "401: bad key Bearer *** for http://***@h/v1"


def test_log_lines_lose_bearer_tokens_and_keys(caplog: pytest.LogCaptureFixture) -> None:
    install()
    caplog.set_level(logging.WARNING)
    logging.getLogger("worker.x").warning("provider said %s", "x-api-key: abcdefghij")
    assert caplog.records[-1].getMessage() == "provider said x-api-key: ***"


@pytest.mark.parametrize("load", [
    lambda url: load_settings(redis_url=url),
    lambda url: ClientSettings(redis_url=url),
    lambda url: WorkerSettings(redis_url=url),
])
def test_a_malformed_url_is_reported_without_its_password(load: object) -> None:
    with pytest.raises((ConfigurationError, ValidationError)) as refused:
        load(f"redis://user:{PW}@host:notaport/0")  # type: ignore[operator]
    text = str(refused.value)
    assert PW not in text
    assert "'redis://***@host:notaport/0' has a port that is not a number" in text


def test_settings_reprs_carry_no_password() -> None:
    settings = WorkerSettings(redis_url=f"redis://user:{PW}@h:6379/0",
                              broker_url=f"amqp://u:{PW}@rabbit//",
                              result_backend=f"redis://:{PW}@h:6379/1",
                              hooks=HookSettings(webhook_url=f"https://t:{PW}@hooks.example/x"),
                              models=[ModelCandidate(provider="openai", model="m",
                                                     base_url=f"https://u:{PW}@llm/v1")])
    for text in (repr(settings), str(settings), repr(settings.hooks), repr(settings.models[0])):
        assert PW not in text
    assert "redis_url='redis://***@h:6379/0'" in repr(settings)
    assert settings.client.redis_url == f"redis://user:{PW}@h:6379/0"  # the value itself is intact
    assert PW not in settings.models[0].cooldown_key  # part of a Redis key name


def test_a_refused_candidate_url_is_masked() -> None:
    with pytest.raises(ValidationError) as refused:
        ModelCandidate(provider="openai", model="m", base_url=f"ftp://u:{PW}@h/v1")
    assert PW not in str(refused.value) and "ftp://***@h/v1" in str(refused.value)
