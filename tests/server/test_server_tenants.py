"""Each bearer token is bound to one tenant: over HTTP a tenant reads, changes, compacts and
observes its own sessions and jobs only; another tenant's ids are simply not found (404)."""

from __future__ import annotations

from datetime import UTC, datetime

import redis
from server.server_support import ACME, DEMO, GLOBEX, TOKEN, tenant_http


def test_a_token_sees_only_its_tenant(tenant_api: str) -> None:
    with tenant_http(tenant_api, ACME) as acme, tenant_http(tenant_api, GLOBEX) as globex, \
            tenant_http(tenant_api, TOKEN) as default:
        created = acme.put("/v1/sessions/shared-id/jsonl", content=DEMO,
                           headers={"Content-Type": "application/x-ndjson"})
        assert created.status_code == 201, created.text
        job = acme.post("/v1/sessions/shared-id/compact", json={"reason": "manual"})
        assert job.status_code == 202, job.text
        job_id = job.json()["jobId"]
        assert job_id.startswith("acme~shared-id:")
        done = acme.get(f"/v1/jobs/{job_id}", params={"wait": 20})
        assert done.json()["state"] == "succeeded", done.text
        for other in (globex, default):
            for method, path in (("GET", "/v1/sessions/shared-id"),
                                 ("GET", "/v1/sessions/shared-id/context"),
                                 ("POST", "/v1/sessions/shared-id/compact"),
                                 ("DELETE", "/v1/sessions/shared-id"),
                                 ("GET", f"/v1/jobs/{job_id}"),
                                 ("POST", f"/v1/jobs/{job_id}/cancel")):
                answer = other.request(method, path, json={} if method == "POST" else None)
                assert answer.status_code == 404, (method, path, answer.text)
        # The same id in another tenant is another session.
        again = globex.put("/v1/sessions/shared-id/jsonl", content=DEMO,
                           headers={"Content-Type": "application/x-ndjson"})
        assert again.status_code == 201
        assert globex.delete("/v1/sessions/shared-id").status_code == 204
        assert acme.get("/v1/sessions/shared-id").status_code == 200


def test_over_a_quota_is_429_with_what_and_when(tenant_api: str, module_redis: str) -> None:
    raw: redis.Redis[str] = redis.Redis.from_url(module_redis, decode_responses=True)
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    raw.hset("compactor:tenants:{globex}:quota", "tokens_per_day", "1000")
    raw.hset(f"compactor:tenants:{{globex}}:usage:{day}", "output_tokens", "1500")
    with tenant_http(tenant_api, GLOBEX) as globex, tenant_http(tenant_api, ACME) as acme:
        for client in (globex, acme):
            put = client.put("/v1/sessions/budget/jsonl", content=DEMO,
                             headers={"Content-Type": "application/x-ndjson"})
            assert put.status_code == 201, put.text
        refused = globex.post("/v1/sessions/budget/compact", json={"reason": "manual"})
        assert refused.status_code == 429, refused.text
        assert refused.headers["content-type"].startswith("application/problem+json")
        body = refused.json()
        assert (body["code"], body["quota"], body["limit"], body["value"]) == (
            "quota_exceeded", "tokens_per_day", 1000, 1500)
        assert body["resetsAt"].endswith("T00:00:00Z")
        # Another tenant's budget is its own.
        assert acme.post("/v1/sessions/budget/compact",
                         json={"reason": "manual"}).status_code == 202
    raw.close()
