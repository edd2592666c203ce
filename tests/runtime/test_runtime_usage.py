"""Cost per tenant through a real Redis and worker (docs/tenants.md): a job's tokens and USD go
to its own tenant's day, drafts apart, on the record, the completion event, ``client.usage``,
``compactor usage`` and the metrics; over its model budget an automatic compaction summarises
without the model and a draft stops."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import CALLS_AT_ONCE, completions, new_session, runtime_settings
from runtime.test_runtime_metrics import metrics_worker, scrape, value, wait_for

from api_client import CompactionClient, JobFailedError, JobState
from api_client.contract.usage import USAGE_TTL_S, utc_day
from worker.celery_app import CompactorCelery
from worker.cli import main
from worker.settings import WorkerSettings

PRICES = {"price_input_per_mtok": 3.0, "price_output_per_mtok": 15.0}
Tenants = Callable[[], CompactionClient]


@pytest.fixture(scope="module")
def worker_settings(module_redis: str, model: ModelServer) -> WorkerSettings:
    return runtime_settings(module_redis, models=[model.candidate().model_copy(update=PRICES)])


@pytest.fixture
def tenant(app: CompactorCelery, module_redis: str,
           model: ModelServer) -> Iterator[Tenants]:
    """A client of a new tenant per call (the module's Redis keeps every day's spend)."""
    made: list[CompactionClient] = []

    def make() -> CompactionClient:
        made.append(CompactionClient(module_redis, tenant=f"t{uuid.uuid4().hex[:10]}"))
        return made[-1]

    yield make
    model.release()
    for client in made:
        client.close()


def _usd(input_tokens: int, output_tokens: int) -> float:
    return (input_tokens * 3.0 + output_tokens * 15.0) / 1e6


def _usage_key(client: CompactionClient) -> str:
    return client.layout.tenant_usage(client.settings.tenant, utc_day(time.time()))


def test_a_job_adds_its_spend_to_its_own_tenant_only(tenant: Tenants, demo_text: str) -> None:
    acme, globex = tenant(), tenant()
    sid = new_session(acme, demo_text)
    handle = acme.compact(sid, reason="manual")
    handle.wait(30)
    record = handle.record()
    assert record.usage is not None and record.usage.input > 0
    assert record.cost_usd == pytest.approx(_usd(record.usage.input, record.usage.output))
    assert record.tenant == acme.settings.tenant and record.draft_cost_usd is None
    [end] = completions(acme, sid, handle.id)
    assert end.cost_usd == record.cost_usd and end.tenant == acme.settings.tenant
    [today] = acme.usage(1)
    assert (today.tenant, today.day) == (acme.settings.tenant, utc_day(time.time()))
    assert (today.jobs, today.input_tokens, today.output_tokens) == (
        1, record.usage.input, record.usage.output)
    assert today.usd == pytest.approx(record.cost_usd)
    assert (today.draft_jobs, today.draft_input_tokens, today.draft_usd) == (0, 0, 0.0)
    assert [d.spent_tokens for d in globex.usage(3)] == [0, 0, 0]
    spenders = acme.redis.smembers(acme.layout.tenants)
    assert acme.settings.tenant in spenders and globex.settings.tenant not in spenders
    assert USAGE_TTL_S - 60 < acme.redis.ttl(_usage_key(acme)) <= USAGE_TTL_S


def test_a_drafts_spend_is_counted_apart(tenant: Tenants, demo_text: str) -> None:
    client = tenant()
    sid = new_session(client, demo_text)
    draft = client.compact(sid, reason="speculative")
    draft.wait(30)
    record = draft.record()
    assert record.usage is not None and record.cost_usd
    assert record.draft_cost_usd == record.cost_usd
    [today] = client.usage(1)
    assert (today.jobs, today.input_tokens, today.usd) == (0, 0, 0.0)
    assert (today.draft_jobs, today.draft_input_tokens, today.draft_output_tokens) == (
        1, record.usage.input, record.usage.output)
    assert today.draft_usd == pytest.approx(record.cost_usd)
    # The compaction applied from the draft says what its draft cost; it called no model.
    applied = client.compact(sid, reason="threshold")
    assert applied.from_draft
    assert applied.record().draft_cost_usd == pytest.approx(record.cost_usd)
    assert client.usage(1) == [today]


def test_compactor_usage_shows_each_tenants_days(tenant: Tenants, demo_text: str,
                                                module_redis: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    spender, idle = tenant(), tenant()
    spender.compact(new_session(spender, demo_text), reason="manual").wait(30)
    [today] = spender.usage(1)

    def usage(*argv: str) -> tuple[int, str]:
        code = main(["--redis-url", module_redis, "usage", *argv])
        return code, capsys.readouterr().out

    code, out = usage("--tenant", spender.settings.tenant, "--days", "3", "--json")
    assert code == 0
    assert json.loads(out) == {"days": 3, "usage": [today.model_dump(by_alias=True)]}
    code, out = usage("--json")
    shown = {d["tenant"]: d for d in json.loads(out)["usage"]}
    assert shown[spender.settings.tenant]["inputTokens"] == today.input_tokens
    assert idle.settings.tenant not in shown  # spent nothing: not listed
    code, out = usage("--tenant", spender.settings.tenant)
    header, row = out.splitlines()
    assert header.split()[:3] == ["tenant", "day", "jobs"]
    assert row.split()[:5] == [spender.settings.tenant, today.day, "1", str(today.input_tokens),
                               str(today.output_tokens)]
    assert usage("--tenant", idle.settings.tenant) == (0, "no model spend in the last 7 day(s)\n")
    assert main(["--redis-url", module_redis, "usage", "--days", "0"]) == 2


def test_over_budget_an_automatic_compaction_summarises_without_the_model(
        tenant: Tenants, model: ModelServer, demo_text: str) -> None:
    client = tenant()
    client.compact(new_session(client, demo_text), reason="manual").wait(30)
    [spent] = client.usage(1)
    client.redis.hset(client.layout.tenant_quota(client.settings.tenant), "tokens_per_day", 1)
    sid, asked = new_session(client, demo_text), model.requests
    handle = client.compact(sid, reason="threshold")
    entry = handle.wait(30)
    assert isinstance(entry, dict) and "Loopback summary" not in entry["summary"]
    record = handle.record()
    note = {"summarizer": "deterministic", "quota": "tokens_per_day", "limit": 1,
            "value": spent.spent_tokens}
    assert (record.state, record.model) == (JobState.SUCCEEDED, "extractive")
    assert record.result is not None and record.result["overBudget"] == note
    [end] = completions(client, sid, handle.id)
    assert end.model == "extractive" and end.result is not None
    assert end.result["overBudget"] == note
    assert model.requests == asked and record.cost_usd is None
    assert client.usage(1) == [spent]


def test_a_draft_stops_at_its_share_of_the_budget(tenant: Tenants, model: ModelServer,
                                                 demo_text: str) -> None:
    busy, client = tenant(), tenant()
    blocking = [new_session(busy, demo_text) for _ in range(2)]
    sid = new_session(client, demo_text)
    held = model.held
    model.stall_next(2 * CALLS_AT_ONCE)  # both worker threads wait on the model
    blockers = [busy.compact(s, reason="manual") for s in blocking]
    wait_for(lambda: model.held - held == 2 * CALLS_AT_ONCE, 60)
    draft = client.compact(sid, reason="speculative")  # admitted: nothing spent yet
    # Meanwhile the tenant spent 8 of its 10 tokens: drafts stop at 80 %.
    client.redis.hset(client.layout.tenant_quota(client.settings.tenant), "tokens_per_day", 10)
    client.redis.hset(_usage_key(client), "input_tokens", 8)
    model.release()
    for handle in blockers:
        handle.wait(30)
    with pytest.raises(JobFailedError, match="tokens_per_day quota: 8 of 8"):
        draft.wait(30)
    record = draft.record()
    assert record.usage is None and record.model is None and record.cost_usd is None
    assert client.redis.get(client.layout.session(sid).draft) is None
    [today] = client.usage(1)
    assert (today.input_tokens, today.draft_jobs, today.draft_input_tokens) == (8, 0, 0)


def test_the_metrics_label_named_tenants_and_others(own_redis: Any, model: ModelServer,
                                                   demo_text: str, tmp_path: Path) -> None:
    chain = [{"provider": "openai", "model": "loop", "base_url": model.base_url,
              "api_key": "k", **PRICES}]
    env = {"COMPACTOR_MODELS": json.dumps(chain), "COMPACTOR_METRICS_TENANTS": '["acme"]'}
    with CompactionClient(own_redis.url, tenant="acme") as acme, \
            CompactionClient(own_redis.url, tenant="globex") as globex, \
            metrics_worker(own_redis.url, tmp_path, **env) as port:
        acme.compact(new_session(acme, demo_text), reason="manual").wait(60)
        globex.compact(new_session(globex, demo_text), reason="manual").wait(60)
        acme.compact(new_session(acme, demo_text), reason="speculative").wait(60)
        [mine], [theirs] = acme.usage(1), globex.usage(1)
        wait_for(lambda: value(scrape(port), "compactor_tenant_tokens_total", tenant="acme",
                               kind="draft", direction="input") > 0, 20)
        samples = scrape(port)

    def tokens(tenant: str, kind: str, direction: str) -> float:
        return value(samples, "compactor_tenant_tokens_total", tenant=tenant, kind=kind,
                     direction=direction)

    assert tokens("acme", "applied", "input") == mine.input_tokens > 0
    assert tokens("acme", "applied", "output") == mine.output_tokens
    assert tokens("acme", "draft", "input") == mine.draft_input_tokens > 0
    assert tokens("other", "applied", "input") == theirs.input_tokens > 0
    assert value(samples, "compactor_tenant_cost_usd_total", tenant="acme",
                 kind="applied") == pytest.approx(mine.usd)
    assert value(samples, "compactor_tenant_cost_usd_total", tenant="other",
                 kind="applied") == pytest.approx(theirs.usd)
    assert not [labels for _, labels in samples if ("tenant", "globex") in labels]
