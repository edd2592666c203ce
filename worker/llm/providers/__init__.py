"""Model providers: OpenAI-compatible chat, Anthropic Messages, the remote endpoint, extractive."""

from __future__ import annotations

from worker.llm.providers.anthropic import AnthropicProvider
from worker.llm.providers.base import HttpContext, Provider, Reply
from worker.llm.providers.extractive import ExtractiveProvider, extractive_summary
from worker.llm.providers.openai import OpenAIChatProvider
from worker.llm.providers.remote import RemoteEndpointProvider

__all__ = [
    "AnthropicProvider",
    "ExtractiveProvider",
    "HttpContext",
    "OpenAIChatProvider",
    "Provider",
    "RemoteEndpointProvider",
    "Reply",
    "extractive_summary",
]
