"""Redis connections with the request path's timeouts.

redis-py 8 retries a failed connection 10 times with backoff by default, which alone breaks a
2 s budget; every client made here retries once, at once (enough for a pooled connection the
server closed) and fails fast when the server is down.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.exceptions import OutOfMemoryError  # type: ignore[attr-defined]  # stubs predate it
from redis.retry import Retry

from api_client.contract.errors import (
    BrokerUnavailableError,
    CompactorError,
    ConfigurationError,
    RedisAuthenticationError,
    StorageFullError,
    StorageReadOnlyError,
)
from api_client.contract.redaction import redact_userinfo

if TYPE_CHECKING:
    from api_client.contract.settings import ClientSettings

__all__ = [
    "STORAGE_FULL", "check_decoding", "make_async_redis", "make_redis", "redis_db", "refusal",
    "same_redis", "storage_full", "unavailable",
]

# What a dead or unreachable server raises (redis-py's TimeoutError subclasses RedisError).
REDIS_DOWN: tuple[type[BaseException], ...] = (
    redis.ConnectionError, redis.TimeoutError, OSError,
)
# What a full Redis (maxmemory, noeviction) answers to a write, raw or already typed.
STORAGE_FULL: tuple[type[BaseException], ...] = (OutOfMemoryError, StorageFullError)


def _options(settings: ClientSettings, blocking: bool) -> dict[str, Any]:
    return {
        "decode_responses": True,
        "socket_connect_timeout": settings.connect_timeout_s,
        # Blocking reads (XREAD BLOCK) may wait longer than any command timeout.
        "socket_timeout": None if blocking else settings.socket_timeout_s,
        # One immediate retry on a dropped connection; a timed-out command is not re-sent
        # (it may have run, and the request path has no time for a second wait).
        "retry": Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
        "health_check_interval": 0,
    }


def redis_db(url: str) -> int:
    """The database number of a redis:// URL (path ``/<n>`` or ``?db=<n>``; default 0)."""
    parts = urlsplit(url)
    path = parts.path.strip("/")
    if path.isdigit():
        return int(path)
    for pair in parts.query.split("&"):
        key, _, value = pair.partition("=")
        if key == "db" and value.isdigit():
            return int(value)
    return 0


def same_redis(sessions_url: str, broker_url: str) -> bool:
    """True when the broker is the sessions' Redis (same server and database)."""
    a, b = urlsplit(sessions_url), urlsplit(broker_url)
    if b.scheme not in ("redis", "rediss", "unix") or a.scheme != b.scheme:
        return False
    return ((a.hostname, a.port or 6379, a.path if a.scheme == "unix" else "")
            == (b.hostname, b.port or 6379, b.path if b.scheme == "unix" else "")
            and redis_db(sessions_url) == redis_db(broker_url))


def make_redis(settings: ClientSettings, *, blocking: bool = False,
               url: str | None = None) -> redis.Redis[str]:
    """A client for ``url`` (default: the sessions' Redis) with the request path's timeouts; for
    the sessions' Redis a ``RedisCluster`` (same command API) when ``redis_cluster`` is set."""
    if url is None and settings.redis_cluster:
        from redis.cluster import RedisCluster

        cluster: Any = RedisCluster.from_url(settings.redis_url, **_options(settings, blocking))
        return cast("redis.Redis[str]", cluster)
    return redis.Redis.from_url(url or settings.redis_url, **_options(settings, blocking))


def make_async_redis(settings: ClientSettings, *, blocking: bool = False,
                     url: str | None = None) -> redis.asyncio.Redis[str]:
    options = _options(settings, blocking)
    options["retry"] = redis.asyncio.retry.Retry(
        NoBackoff(), 1, supported_errors=(redis.ConnectionError,)
    )
    if url is None and settings.redis_cluster:
        from redis.asyncio.cluster import RedisCluster

        options.pop("health_check_interval")
        cluster: Any = RedisCluster.from_url(settings.redis_url, **options)
        return cast("redis.asyncio.Redis[str]", cluster)
    if blocking:  # one connection per blocking reader, as many as there are readers
        return redis.asyncio.Redis.from_url(url or settings.redis_url, **options)
    # A pool that waits for a free connection (up to the request budget) instead of failing.
    pool: Any = redis.asyncio.BlockingConnectionPool.from_url(
        url or settings.redis_url, max_connections=settings.redis_pool_size,
        timeout=settings.redis_pool_timeout_s, **options)
    client = cast("redis.asyncio.Redis[str]", redis.asyncio.Redis(connection_pool=pool))
    client.auto_close_connection_pool = True  # aclose() closes the pool it made
    return client


def check_decoding(client: redis.Redis[Any] | redis.asyncio.Redis[Any]) -> None:
    """The stores read ``str`` replies: refuse a client built without ``decode_responses``."""
    if not client.get_encoder().decode_responses:  # type: ignore[no-untyped-call,union-attr]
        raise ConfigurationError("the Redis client must be created with decode_responses=True")


def refusal(err: BaseException) -> CompactorError | None:
    """The typed error for a reply that is no outage: Redis refused the credentials, is a
    read-only replica, has no such database, or is not Redis at all. None for anything else."""
    if not isinstance(err, redis.RedisError):
        return None
    text = str(err)
    if isinstance(err, redis.AuthenticationError) or text.startswith(("WRONGPASS", "NOAUTH")):
        return RedisAuthenticationError(
            f"Redis refused the credentials of the URL ({redact_userinfo(text)}): check the "
            "user and password")
    if isinstance(err, redis.ReadOnlyError) or text.startswith("READONLY"):
        return StorageReadOnlyError(
            "Redis is a read-only replica: the write was refused and changed nothing; point "
            "the URL at the primary")
    if isinstance(err, redis.exceptions.NoPermissionError) or "NOPERM" in text:
        return ConfigurationError(
            f"Redis refused the command for the URL's user ({redact_userinfo(text)}): its ACL "
            "does not cover these keys (a tenant's user covers its own tenant only: "
            "docs/tenants.md)")
    if "DB index is out of range" in text:
        return ConfigurationError(f"Redis has no such database ({text}): check the URL's /<db>")
    if isinstance(err, redis.InvalidResponse):
        return ConfigurationError(f"the URL does not name a Redis server ({text})")
    return None


def unavailable(err: BaseException, what: str = "Redis") -> BrokerUnavailableError:
    return BrokerUnavailableError(f"{what} unavailable: {err}")


def storage_full(err: BaseException, what: str = "the write") -> StorageFullError:
    """The typed error for Redis's ``OOM command not allowed`` reply (a refused command or
    script writes nothing: Redis checks memory before the first write). An error already typed
    keeps its text unless ``what`` names the write more precisely."""
    if isinstance(err, StorageFullError) and what == "the write":
        return err
    return StorageFullError(f"Redis is out of memory (maxmemory reached, noeviction): {what} "
                            "was refused and changed nothing; free memory or raise maxmemory")
