"""Hook settings (env prefix ``COMPACTOR_HOOKS_``); the worker settings may embed them."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from api_client.contract.redaction import mask_url

__all__ = ["HookSettings"]

_NONE = ("", "false", "0", "no", "off", "none")


def _names(value: Any) -> Any:
    """A JSON list or a comma-separated string → a list of names (other values as given)."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


class HookSettings(BaseSettings):
    """Where hooks come from and how much each call may take.

    ``plugins`` accepts a JSON list or a comma-separated string of ``module:object`` paths
    (``module`` alone registers the module). ``entry_points`` names the installed plugins of the
    ``compactor.hooks`` entry-point group to load, the same way; none by default: a package
    installed next to the worker runs in it (with the API keys in reach) only when named here.
    """

    # hide_input_in_errors: a rejected webhook URL may carry a token
    model_config = SettingsConfigDict(env_prefix="COMPACTOR_HOOKS_", extra="ignore",
                                      hide_input_in_errors=True)

    plugins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    entry_points: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Deadline of each hook call: the call is ended then, not only abandoned (see runner.py).
    timeout_s: float = Field(default=10.0, gt=0)
    # Hook calls one worker process runs at once, late ones included (a plugin blocked in C
    # code cannot be ended until that code returns); a call finding none free waits for one
    # until its deadline, then is skipped and the default applies.
    max_calls: int = Field(default=16, ge=1)
    webhook_url: str | None = None
    webhook_secret: SecretStr | None = None
    # Wall-clock deadline of each webhook request, answer included (capped by timeout_s).
    webhook_timeout_s: float = Field(default=5.0, gt=0)
    # The answer is streamed and abandoned past this many (inflated) bytes: a failed hook.
    webhook_max_response_bytes: int = Field(default=1024 * 1024, ge=1024)

    @field_validator("plugins", mode="before")
    @classmethod
    def _split_plugins(cls, value: Any) -> Any:
        return _names(value)

    @field_validator("entry_points", mode="before")
    @classmethod
    def _entry_point_names(cls, value: Any) -> Any:
        if value is False or (isinstance(value, str) and value.strip().lower() in _NONE):
            return []
        if value is True or (isinstance(value, str) and value.strip().lower() == "true"):
            raise ValueError("name the entry points to load (COMPACTOR_HOOKS_ENTRY_POINTS="
                             "acme,other): installed plugins no longer load without being named")
        return _names(value)

    @field_validator("webhook_url", mode="before")
    @classmethod
    def _blank_url(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, mask_url(value) if name == "webhook_url" and value else value
