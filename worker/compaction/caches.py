"""What planning keeps from one job to the next, when its caller passes it in.

Planning keeps nothing itself: a worker builds one :class:`PlanCaches` per process (the
composition root, ``worker.service.composition``) and hands it to every job; the CLI and the
tests plan without one. Kept per message object (``worker.tokens.memo``: the entry cache hands
out the same objects for unchanged entries): a re-plan of a session seen before renders the prompt
text of its new messages only, counts only their facts, and its prompt is counted by its new
parts (``TiktokenTokenizer.count_joined`` needs the same part objects).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from api_client.contract.session import Message
from worker.compaction.fact_fold import FactFold
from worker.tokens.memo import IdentityMemo, PrefixFolds

__all__ = ["PlanCaches"]


@dataclass(frozen=True)
class PlanCaches:
    # The facts of a session's summarised messages, continued as it grows (``facts``).
    fact_folds: PrefixFolds[Message, FactFold] = field(default_factory=PrefixFolds)
    # An LLM message's serialized parts (``serialize``).
    parts: IdentityMemo[Mapping[str, Any], tuple[str, ...]] = field(default_factory=IdentityMemo)
