"""The compaction settings of the session's agent, carried by one request (docs/compaction.md).

A compact or branch-summary request may say how the agent itself would compact (pi's
``compaction.*`` and ``branchSummary.*`` settings, model overrides applied): the worker plans
with what it says and falls back to its own settings field by field where it says nothing.
Unknown fields are refused (``extra="forbid"``): a setting the worker does not know is never
silently dropped. Re-exported by :mod:`api_client.contract.wire` and :mod:`api_client`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "MAX_AGENT_TOKENS", "AgentSettings", "JsonInt", "SummaryFormat", "TokenizerName",
    "plan_key",
]

MAX_AGENT_TOKENS = 10_000_000

# "estimate": pi's chars/4 estimate plus the last reported usage; "tiktoken": the worker's.
TokenizerName = Literal["estimate", "tiktoken"]
# The agent version whose summary prompts and headings to follow; absent: Compactor's own.
SummaryFormat = Literal["pi-1.6", "pi-0.73"]



def _integral(value: object) -> object:
    """JSON has one number type: ``536.0`` is the integer 536 (JSON Schema says so too);
    ``536.5``, ``"536"`` and ``true`` stay refused (strict)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# A JSON integer as docs/openapi.json's "type": "integer" says: 5 or 5.0, not true or "5".
JsonInt = Annotated[int, Field(strict=True), BeforeValidator(_integral)]
_Tokens = Annotated[JsonInt, Field(gt=0, le=MAX_AGENT_TOKENS)]


class AgentSettings(BaseModel):
    """How the agent compacts: every field optional, ``None`` = the worker's own setting."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True,
    )

    reserve_tokens: _Tokens | None = None
    keep_recent_tokens: _Tokens | None = None
    tokenizer: TokenizerName | None = None
    summary_format: SummaryFormat | None = None
    summary_max_tokens: _Tokens | None = None
    turn_prefix_max_tokens: _Tokens | None = None
    branch_reserve_tokens: _Tokens | None = None

    def to_wire(self) -> dict[str, Any]:
        """JSON-ready dict with camelCase keys; fields the request did not set dropped."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def plan_key(agent: AgentSettings | None) -> str:
    """The settings a plan was made with, as one canonical string ('' = the worker's own
    throughout): a draft carries it, and applies only to a request with the same key."""
    wire = {} if agent is None else agent.to_wire()
    return json.dumps(wire, sort_keys=True, separators=(",", ":")) if wire else ""
