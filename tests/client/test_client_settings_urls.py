"""A URL the client cannot use is a one-line ConfigurationError at construction, not later."""

from __future__ import annotations

import pytest

from api_client import AsyncCompactionClient, ClientSettings, CompactionClient
from api_client.contract.errors import ConfigurationError
from api_client.contract.settings import load_settings


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("localhost:6379", "'localhost:6379' is not a redis/rediss/unix URL"),
        ("127.0.0.1", "is not a redis/rediss/unix URL"),
        ("http://localhost:6379", "is not a redis/rediss/unix URL"),
        ("amqp://guest@localhost//", "is not a redis/rediss/unix URL"),  # sessions need Redis
        ("redis://", "names no host"),
        ("redis://host:port/0", "has a port that is not a number"),
        ("", "is not a redis"),
    ],
)
def test_bad_redis_url(url: str, words: str) -> None:
    for make in (CompactionClient, AsyncCompactionClient):
        with pytest.raises(ConfigurationError) as caught:
            make(url)
        assert words in str(caught.value)
        assert "\n" not in str(caught.value)
        assert "redis_url" in str(caught.value)


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"broker_url": "localhost:5672"}, "broker_url: 'localhost:5672' is not a"),
        ({"broker_url": "kafka://k:9092"}, "is not a"),
        ({"key_prefix": "a b"}, "key_prefix"),
        ({"enqueue_timeout_s": 0}, "enqueue_timeout_s"),
    ],
)
def test_bad_settings(values: dict[str, object], words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        load_settings(**values)
    with pytest.raises(ConfigurationError, match=words):
        CompactionClient.from_env(**values)


def test_bad_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPACTOR_REDIS_URL", "localhost:6379")
    with pytest.raises(ConfigurationError, match="redis_url"):
        CompactionClient.from_env()


@pytest.mark.parametrize(
    "url",
    ["redis://localhost:6379/0", "rediss://:pw@h.example:6380/1", "unix:///tmp/redis.sock",
     "redis://[::1]:6379/0"],
)
def test_good_urls(url: str) -> None:
    client = CompactionClient(url)
    assert client.settings.redis_url == url
    client.close()
    assert ClientSettings(redis_url="redis://r:1/0", broker_url="amqp://g:g@h:5672/v")


def test_not_a_url() -> None:
    with pytest.raises(ConfigurationError, match="not int"):
        CompactionClient(6379)  # type: ignore[arg-type]
