"""Worker settings: the runtime, model and hook knobs, with the client's settings (same Redis,
keys, TTLs) under ``settings.client``.

Environment variables use the prefix ``COMPACTOR_`` (``COMPACTOR_JOB_DEADLINE_S=120``); a
``.env`` file in the working directory is read too. The model layer's settings
(``COMPACTOR_MODELS``, ``COMPACTOR_LLM_*``) are inherited from
:class:`worker.llm.settings.LlmSettings` so ``build_summarizer(settings)`` takes these settings as
they are. The client's (``COMPACTOR_REDIS_URL``, ``COMPACTOR_KEY_PREFIX``, ...) are read from the
same environment into one :class:`~api_client.contract.settings.ClientSettings`,
``settings.client``: the worker reads the few it needs there, and hands that object to the
contract's code that takes a client's settings (there, as here, an empty variable counts as
unset: docker compose passes ``${VAR:-}`` through as ""). Hook settings keep their own prefix
(``COMPACTOR_HOOKS_*``) and live under ``settings.hooks``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from ipaddress import IPv4Address
from typing import Any, Literal

from pydantic import Field, IPvAnyAddress, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from api_client.contract.errors import ConfigurationError
from api_client.contract.keys import DEFAULT_TENANT, TENANT_NAME, KeyLayout
from api_client.contract.settings import ClientSettings
from worker.hooks.settings import HookSettings
from worker.llm.settings import LlmSettings

__all__ = ["CLIENT_FIELDS", "SETTING_NAMES", "Pool", "WorkerSettings", "check_startup",
           "client_settings"]

Pool = Literal["threads", "prefork"]
TokenizerName = Literal["tiktoken", "estimate"]


# The client's settings a worker may be given by name (``WorkerSettings(redis_url=...)``, the
# CLI's ``--redis-url``): they go to ``settings.client``.
CLIENT_FIELDS = frozenset(ClientSettings.model_fields)


def _hook_settings() -> HookSettings:
    # HookSettings has its own prefix; read the same .env as the worker.
    return HookSettings(_env_file=".env")  # type: ignore[call-arg]


def client_settings(**values: Any) -> ClientSettings:
    """The client's settings as a worker reads them: ``values`` over the environment and
    ``.env``, an empty variable counting as unset (as for every worker setting)."""
    return ClientSettings(_env_ignore_empty=True, **values)  # type: ignore[call-arg]


class WorkerSettings(LlmSettings):
    # Empty variables count as unset (docker compose passes ``${VAR:-}`` through as "").
    # hide_input_in_errors: an error would quote a rejected value, which may hold a secret.
    model_config = SettingsConfigDict(
        env_prefix="COMPACTOR_", env_file=".env", env_file_encoding="utf-8", extra="ignore",
        env_ignore_empty=True, hide_input_in_errors=True,
    )

    def __init__(self, **values: Any) -> None:
        # Client settings given by name build ``client`` (read from the environment otherwise);
        # a bad one raises the client's own ValidationError, located by the variable's name.
        given = {name: values.pop(name) for name in CLIENT_FIELDS & values.keys()}
        if "client" not in values:
            values["client"] = client_settings(**given)
        elif given:
            raise TypeError(f"give {sorted(given)} in client=, not beside it")
        super().__init__(**values)

    # -- deadlines and redelivery ---------------------------------------------------------------
    # The longest one job may run; checked between steps and through the summarizer's cancel
    # token (the threads pool ignores Celery time limits).
    job_deadline_s: float = Field(default=300.0, gt=0)
    # Redis transport: an unacked message is handed to another worker after this long. It must
    # exceed the job deadline, or a live worker's job would run twice (refused at start-up).
    visibility_timeout_s: float = Field(default=420.0, gt=0)
    # How often live workers look for messages of dead ones (kombu's restore sweep).
    unacked_restore_interval_s: float = Field(default=1.0, gt=0)
    # Job lease: renewed every third of it while the job runs; a dead worker's lease ends
    # after at most this long, so a redelivered job can be taken over (a delivery that finds
    # the lease still held looks again this much later). Short, so that a killed worker's job
    # is done within seconds (docs/recovery.md "Recovery figures").
    lease_ttl_s: float = Field(default=3.0, gt=0)
    # Takeover: every live worker sweeps the jobs-due index this often; a running job whose
    # lease ended is delivered again, a queued one past ``requeue_after_s`` is re-sent (see
    # worker/service/_sweeper.py). 0 disables the sweep (the visibility timeout stays).
    sweep_interval_s: float = Field(default=1.0, ge=0)
    # A job whose worker was lost during this many attempts ends failed instead of running
    # again (a job that kills its worker, e.g. by memory, must not take the fleet down).
    max_deliveries: int = Field(default=5, ge=1)
    # A commit refused because the session moved on re-plans on a fresh snapshot this often.
    stale_replans: int = Field(default=3, ge=0)

    # -- pool -----------------------------------------------------------------------------------
    pool: Pool = "threads"
    concurrency: int = Field(default=8, ge=1)
    # Redis down during a job: Celery retries the task this often, backing off exponentially.
    task_max_retries: int = Field(default=5, ge=0)
    task_retry_backoff_s: float = Field(default=1.0, gt=0)
    worker_name: str | None = None

    # -- planning -------------------------------------------------------------------------------
    tokenizer: TokenizerName = "tiktoken"
    # Branch summaries: the model's window when the candidate list does not name one.
    context_window: int = Field(default=128_000, gt=0)
    branch_reserve_tokens: int = Field(default=16_384, ge=0)
    # The fact ledger's block (tokens): unset = 10 % of the summary budget; 0 = measure only.
    fact_budget_tokens: int | None = Field(default=None, ge=0)
    # The most tokens one compaction may send to the model (the messages it summarizes, its
    # turn prefix and kept messages); over it the job fails before any hook or model call. A
    # longer input is summarized chunk by chunk, one sequential call per chunk (at a 200k
    # window ~180k tokens each): keep it within what the job deadline allows those calls.
    max_job_tokens: int = Field(default=8_000_000, ge=1)

    # -- observability --------------------------------------------------------------------------
    # /metrics, /livez and /readyz on this port; unset or 0: not served (docs/operations.md).
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    # Loopback by default: the metrics name models and queues. Containers set 0.0.0.0 (or ::).
    metrics_address: IPvAnyAddress = IPv4Address("127.0.0.1")
    # The tenants whose spend the metrics label by name (a JSON list); every other tenant's is
    # labelled "other", so that the series stay few however many tenants there are.
    metrics_tenants: list[str] = Field(default_factory=lambda: [DEFAULT_TENANT])

    # -- models ---------------------------------------------------------------------------------
    # Refuse to start without COMPACTOR_MODELS (deployments set it: the Kubernetes base does), so
    # a forgotten chain is not the no-LLM summarizer in silence; '[{"provider": "extractive"}]'
    # chooses that summarizer explicitly. Off by default: local runs and tests need no model.
    require_models: bool = False

    # The client's settings (the same COMPACTOR_ variables mean the same on both sides).
    client: ClientSettings = Field(default_factory=client_settings)
    hooks: HookSettings = Field(default_factory=_hook_settings)

    @field_validator("metrics_tenants")
    @classmethod
    def _tenant_names(cls, names: list[str]) -> list[str]:
        bad = [name for name in names if not TENANT_NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"not tenant names: {bad} (1-63 characters of a-z 0-9 _ -)")
        return names

    @model_validator(mode="after")
    def _cooldowns_under_the_prefix(self) -> WorkerSettings:
        # The model circuit breaker's keys sit under the key prefix like every other key (one
        # ACL pattern covers them), unless COMPACTOR_LLM_COOLDOWN_PREFIX puts them elsewhere.
        if "llm_cooldown_prefix" not in self.model_fields_set:
            self.llm_cooldown_prefix = KeyLayout(self.client.key_prefix).llm
        return self

    @property
    def metrics_enabled(self) -> bool:
        return bool(self.metrics_port)

    @property
    def worker_id(self) -> str:
        """Lease owner id: unique per process (a restarted worker never inherits a lease)."""
        return self.worker_name or f"{socket.gethostname()}:{os.getpid()}"


# Every worker setting by name, the client's included: ``COMPACTOR_<NAME>`` sets each (``client``
# groups the client's, it is no variable of its own).
SETTING_NAMES = (frozenset(WorkerSettings.model_fields) - {"client"}) | CLIENT_FIELDS


def check_startup(settings: WorkerSettings, environ: Mapping[str, str] | None = None, *,
                  check_port: bool = True) -> None:
    """Refuse settings a worker must not run with (raises :class:`ConfigurationError`): found at
    start, a bad model chain or a busy metrics port costs one line, not a failed job later."""
    if settings.require_models and not settings.models:
        raise ConfigurationError(
            "COMPACTOR_REQUIRE_MODELS is set and COMPACTOR_MODELS names no model: set your model "
            "chain (docs/configuration.md, \"Models\"), or "
            "COMPACTOR_MODELS='[{\"provider\": \"extractive\"}]' "
            "for the deterministic no-LLM summarizer")
    check_model_chain(settings, os.environ if environ is None else environ)
    if settings.metrics_enabled and check_port:
        check_port_free(str(settings.metrics_address), int(settings.metrics_port or 0))
    if settings.visibility_timeout_s <= settings.job_deadline_s:
        raise ConfigurationError(
            f"visibility timeout ({settings.visibility_timeout_s:g} s) must be longer than the job "
            f"deadline ({settings.job_deadline_s:g} s): a job still running when it expires would "
            "be delivered to a second worker. Raise COMPACTOR_VISIBILITY_TIMEOUT_S or lower "
            "COMPACTOR_JOB_DEADLINE_S."
        )


def check_model_chain(settings: WorkerSettings, environ: Mapping[str, str]) -> None:
    """Every candidate that names its key's variable finds it set (else its calls would fail
    with the provider's 401 at job time)."""
    for number, candidate in enumerate(settings.models, start=1):
        env = candidate.api_key_env
        if candidate.api_key is None and env and not environ.get(env):
            raise ConfigurationError(
                f"model {number} ({candidate.label}) reads its API key from ${env}, which is not "
                "set in the worker's environment")


def model_chain_text(settings: WorkerSettings) -> str:
    """The fallback chain by name (never a key), for the start-up log."""
    names = [c.label for c in settings.models]
    return " -> ".join(names) if names else "the deterministic summarizer (no COMPACTOR_MODELS)"


def check_port_free(address: str, port: int) -> None:
    """The metrics server can listen there (a busy port used to end the worker in a trace)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as err:
            raise ConfigurationError(
                f"metrics port {port} on {address} is not free ({err.strerror}); set "
                "COMPACTOR_METRICS_PORT to a free port, or 0 to serve no metrics") from err
