"""``PUT /v1/sessions/{id}/leaf``: the pi extension's mirror places each entry under its own
parent, which is not the leaf after pi navigated the tree or Compactor appended an entry of its
own (tests/server/conftest.py: the API over real sockets, a real Redis)."""

from __future__ import annotations

import uuid

import httpx


def entry(entry_id: str, text: str) -> dict[str, object]:
    return {"type": "message", "id": entry_id, "timestamp": "2026-01-01T00:00:00.000Z",
            "message": {"role": "user", "content": text, "timestamp": 1}}


def test_the_next_append_goes_under_the_leaf_set(http: httpx.Client) -> None:
    sid = f"s-{uuid.uuid4().hex[:10]}"
    assert http.post("/v1/sessions", json={"sessionId": sid}).status_code == 201
    http.post(f"/v1/sessions/{sid}/entries",
              json={"entries": [entry("a", "one"), entry("b", "two")]}).raise_for_status()

    moved = http.put(f"/v1/sessions/{sid}/leaf", json={"leafId": "a"})
    assert moved.status_code == 200 and moved.json()["leafId"] == "a"
    http.post(f"/v1/sessions/{sid}/entries", json={"entries": [entry("c", "three")]})
    parents = {e["id"]: e["parentId"] for e in http.get(f"/v1/sessions/{sid}").json()["entries"]}
    assert parents == {"a": None, "b": "a", "c": "a"}

    http.put(f"/v1/sessions/{sid}/leaf", json={"leafId": None}).raise_for_status()
    http.post(f"/v1/sessions/{sid}/entries", json={"entries": [entry("r", "a new root")]})
    view = http.get(f"/v1/sessions/{sid}").json()
    assert view["leafId"] == "r" and view["entries"][-1]["parentId"] is None

    unknown = http.put(f"/v1/sessions/{sid}/leaf", json={"leafId": "nope"})
    assert unknown.status_code == 404 and unknown.json()["code"] == "entry_not_found"
    missing = http.put("/v1/sessions/no-such/leaf", json={"leafId": "a"})
    assert missing.status_code == 404 and missing.json()["code"] == "session_not_found"
