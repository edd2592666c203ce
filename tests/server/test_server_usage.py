"""``GET /v1/usage``: the model spend of the token's tenant per UTC day, and of no other tenant,
after a real job on a real worker."""

from __future__ import annotations

import time

from server.server_support import ACME, DEMO, GLOBEX, tenant_http

from api_client import CompactionClient
from api_client.contract.usage import utc_day


def test_usage_is_the_tokens_own_tenants(tenant_api: str, module_redis: str) -> None:
    with tenant_http(tenant_api, ACME) as acme, tenant_http(tenant_api, GLOBEX) as globex:
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
