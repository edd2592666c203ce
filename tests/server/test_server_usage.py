"""``GET /v1/usage``: the model spend of the token's tenant per UTC day, and of no other tenant,
after a real job on a real worker."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server.server_support import TOKEN, running_api, server_settings

from api_client import CompactionClient
from api_client.contract.usage import utc_day
from worker.app import CompactorCelery

ACME, GLOBEX = TOKEN + "-acme", TOKEN + "-globex"
DEMO = (Path(__file__).resolve().parents[2] / "worker" / "data" / "demo-session.jsonl").read_text(
    encoding="utf-8")


@pytest.fixture(scope="module")
def tenant_api(module_redis: str, worker: CompactorCelery) -> Iterator[str]:
    tokens = {TOKEN: "default", ACME: "acme", GLOBEX: "globex"}
    with running_api(module_redis, server_settings(tokens, api_max_wait_s=20.0)) as url:
        yield url


def _http(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def test_usage_is_the_tokens_own_tenants(tenant_api: str, module_redis: str) -> None:
    with _http(tenant_api, ACME) as acme, _http(tenant_api, GLOBEX) as globex:
        created = acme.put("/v1/sessions/billed/jsonl", content=DEMO,
                           headers={"Content-Type": "application/x-ndjson"})
        assert created.status_code == 201, created.text
        job_id = acme.post("/v1/sessions/billed/compact", json={"reason": "manual"}).json()["jobId"]
        done = acme.get(f"/v1/jobs/{job_id}", params={"wait": 20}).json()
        assert done["state"] == "succeeded", done

        mine = acme.get("/v1/usage", params={"days": 2})
        assert mine.status_code == 200, mine.text
        body = mine.json()
        assert body["tenant"] == "acme" and len(body["days"]) == 2
        today = body["days"][0]
        assert today["day"] == utc_day(time.time()) and today["jobs"] == 1
        assert today["inputTokens"] == done["usage"]["input"] > 0
        assert today["outputTokens"] == done["usage"]["output"]
        assert today["draftJobs"] == 0 and body["days"][1]["jobs"] == 0
        with CompactionClient(module_redis, tenant="acme") as client:
            assert body["days"] == [d.model_dump(by_alias=True) for d in client.usage(2)]

        theirs = globex.get("/v1/usage").json()
        assert theirs["tenant"] == "globex" and len(theirs["days"]) == 7  # the default
        assert all(d["jobs"] == d["inputTokens"] == d["draftJobs"] == 0 for d in theirs["days"])
        refused = acme.get("/v1/usage", params={"days": 0})
        assert refused.status_code == 422 and refused.json()["code"] == "validation_error"
