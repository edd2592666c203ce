"""Hook settings (env prefix ``COMPACTOR_HOOKS_``); the worker settings may embed them."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

__all__ = ["HookSettings"]


class HookSettings(BaseSettings):
    """Where hooks come from and how long each may take.

    ``plugins`` accepts a JSON list or a comma-separated string of ``module:object`` paths
    (``module`` alone registers the module). ``timeout_s`` bounds every single hook call.
    """

    model_config = SettingsConfigDict(env_prefix="COMPACTOR_HOOKS_", extra="ignore")

    plugins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    entry_points: bool = True
    timeout_s: float = Field(default=10.0, gt=0)
    webhook_url: str | None = None
    webhook_secret: SecretStr | None = None
    webhook_timeout_s: float = Field(default=5.0, gt=0)

    @field_validator("plugins", mode="before")
    @classmethod
    def _split_plugins(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                import json

                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("webhook_url", mode="before")
    @classmethod
    def _blank_url(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value
