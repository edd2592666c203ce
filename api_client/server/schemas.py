"""The HTTP API's request and response bodies (camelCase on the wire, like the contract's wire
models; the chat-completions pair keeps OpenAI's snake_case). FastAPI validates requests with
them and writes them into ``/openapi.json``, so the document cannot drift from the code."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from api_client import AgentSettings, DayUsage, JobState
from api_client.contract.agent_settings import JsonInt

__all__ = [
    "AppendEntries", "Appended", "BranchSummaryRequest", "CancelResult", "ChatCompletion",
    "ChatCompletionRequest", "CompactRequest", "ContextView", "CreateSession", "JobAccepted",
    "JobApplied", "LeafMoved", "ProblemBody", "SessionCreated", "SessionView", "SetLeaf",
    "SummarizeRequest", "Summary", "UsageReport",
]

JsonObject = dict[str, Any]


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class CreateSession(_Camel):
    cwd: str = ""
    title: str | None = None
    session_id: str | None = Field(default=None, description="default: a new UUID")


class SessionCreated(_Camel):
    session_id: str


class SessionView(_Camel):
    session_id: str
    revision: int
    leaf_id: str | None
    entries: list[JsonObject] = Field(description="every entry, in file order, as stored")


class ContextView(_Camel):
    session_id: str
    revision: int
    leaf_id: str | None
    messages: list[JsonObject] = Field(description="what the model sees next (user, assistant, "
                                                   "toolResult), summaries in their wrappers")


class AppendEntries(_Camel):
    entries: list[JsonObject] = Field(description="pi entries (with their own ids, or without: "
                                                  "then new ones) or bare messages, appended as "
                                                  "a chain under the leaf, atomically")


class Appended(_Camel):
    entry_ids: list[str]
    revision: int


class SetLeaf(_Camel):
    leaf_id: str | None = Field(description="the entry the next append goes under; null: the "
                                            "next append starts a new root")


class LeafMoved(_Camel):
    leaf_id: str | None
    revision: int


_AGENT = ("the agent's own compaction settings (docs/compaction.md): the worker plans with "
          "them and falls back to its own only where a field is absent; an unknown field is "
          "a 400 invalid_request")


class CompactRequest(_Camel):
    reason: Literal["manual", "threshold", "overflow", "speculative"] = "manual"
    instructions: str | None = None
    context_window: JsonInt | None = Field(default=None, gt=0)
    agent: AgentSettings | None = Field(default=None, description=_AGENT)


class BranchSummaryRequest(_Camel):
    target_id: str
    instructions: str | None = None
    agent: AgentSettings | None = Field(default=None, description=_AGENT)


class JobAccepted(_Camel):
    job_id: str
    coalesced: bool = Field(default=False, description="an equal job was queued or running")


class JobApplied(_Camel):
    job_id: str
    entry: JsonObject = Field(description="the compaction entry, appended from a draft")
    from_draft: bool = True


class CancelResult(_Camel):
    job_id: str
    state: JobState = Field(
        description="cancelled; running (the worker stops at its next check); or how the job "
                    "had ended already")


class SummarizeRequest(_Camel):
    system_prompt: str = ""
    prompt: str
    max_tokens: JsonInt | None = Field(default=None, gt=0)


class Summary(_Camel):
    summary: str
    short_summary: str | None = None


class UsageReport(_Camel):
    tenant: str = Field(description="the tenant of the request's token")
    days: list[DayUsage] = Field(
        description="per UTC day, today first, days without spend included: jobs, input tokens "
                    "(cache reads and writes included), output tokens and USD at the models' "
                    "prices; speculative drafts apart (draft*)")


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: str
    content: str | list[JsonObject] | None = None


class ChatCompletionRequest(BaseModel):
    """OpenAI's chat-completions body; system messages become the system prompt, the others
    the prompt (their text, one after the other)."""

    model_config = ConfigDict(extra="ignore")
    messages: list[ChatMessage] = Field(min_length=1)
    model: str | None = None
    max_tokens: JsonInt | None = Field(default=None, gt=0)
    max_completion_tokens: JsonInt | None = Field(default=None, gt=0)
    stream: bool = Field(default=False, strict=True)  # 0 or "false" is not a boolean


class ChatChoiceMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int = 0
    message: ChatChoiceMessage
    finish_reason: str = "stop"


class ChatUsage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: ChatUsage


class ProblemBody(BaseModel):
    """RFC 9457 problem details; ``code`` is stable, ``detail`` is for people."""

    model_config = ConfigDict(extra="allow")
    type: str
    title: str
    status: int
    detail: str
    code: str
