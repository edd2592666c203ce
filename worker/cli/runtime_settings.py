"""The settings the runtime commands (and ``worker`` / ``flower``) run with: the environment's,
with the global ``--redis-url`` over ``COMPACTOR_REDIS_URL``; invalid ones are one typed error."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from api_client.contract.errors import ConfigurationError

if TYPE_CHECKING:
    from worker.settings import WorkerSettings

__all__ = ["load_settings"]


def load_settings(args: argparse.Namespace) -> WorkerSettings:
    """The environment's settings, with the global ``--redis-url`` over ``COMPACTOR_REDIS_URL``
    and ``--tenant`` over ``COMPACTOR_TENANT``."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from worker.settings import WorkerSettings

    overrides = {name: getattr(args, name) for name in ("redis_url", "tenant")
                 if getattr(args, name, None)}
    try:
        return WorkerSettings(**overrides)
    except SettingsError as err:  # a variable that is not valid JSON where JSON is expected
        raise ConfigurationError(f"invalid settings: {err}") from None
    except ValidationError as err:
        problems = "; ".join(
            ": ".join(filter(None, (".".join(map(str, e["loc"])), e["msg"]))) for e in err.errors())
        raise ConfigurationError(f"invalid settings: {problems}") from None
