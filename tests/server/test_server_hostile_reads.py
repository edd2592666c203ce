"""A tenant's large session read over HTTP keeps the server's memory flat (issue 39 M3):
``compactor serve`` as its own process against a real Redis, its peak RSS (``VmHWM``) read from
/proc before and after.

Before: ``GET …/jsonl`` built the whole export as one string and one body, ``GET
/v1/sessions/{id}`` and ``/context`` parsed the whole session into one JSON document: four
parallel GETs of a 100 MB session took the API to 765 MB RSS (~5x the data per request).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import free_port
from server.server_support import TOKEN

from api_client import ClientSettings, CompactionClient

REPO = Path(__file__).resolve().parents[2]
MB = 1 << 20
ENTRIES, ENTRY_TEXT = 1_600, 24_000  # ~38 MB of lines
pytestmark = pytest.mark.integration


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _session_text(sid: str) -> str:
    lines = [json.dumps({"type": "session", "version": 3, "id": sid,
                         "timestamp": "2025-03-14T09:00:00.000Z", "cwd": "/repo"})]
    parent = None
    for n in range(ENTRIES):
        entry_id = f"{n:08x}"
        lines.append(json.dumps({
            "type": "message", "id": entry_id, "parentId": parent,
            "timestamp": "2025-03-14T09:00:01.000Z",
            "message": {"role": "user", "content": [{"type": "text",
                                                     "text": f"{n} " + "x" * ENTRY_TEXT}],
                        "timestamp": 1}}, separators=(",", ":")))
        parent = entry_id
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def served(module_redis: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    env = {**os.environ, "COMPACTOR_API_TOKENS": f'{{"{TOKEN}": "default"}}',
           "COMPACTOR_REDIS_URL": module_redis, "COMPACTOR_API_MAX_READ_BYTES": str(8 * MB)}
    proc = subprocess.Popen([sys.executable, "-m", "api_client.server", "--port", str(port),
                             "--log-level", "warning"], cwd=REPO, env=env, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + "/readyz", timeout=5).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "serve did not start"
        time.sleep(0.05)
    yield url, proc
    proc.terminate()
    proc.wait(15)


@pytest.fixture(scope="module")
def big(module_redis: str) -> Iterator[tuple[str, str]]:
    """A ~38 MB session (id, its export as the client reads it)."""
    sid = f"big-{uuid.uuid4().hex[:8]}"
    with CompactionClient(ClientSettings(redis_url=module_redis)) as client:
        client.sessions.import_jsonl(_session_text(sid), sid)
        yield sid, client.sessions.export_jsonl(sid)


def _digest_of_stream(url: str, path: str) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    with httpx.stream("GET", url + path, headers={"Authorization": f"Bearer {TOKEN}"},
                      timeout=120) as response:
        assert response.status_code == 200, response.read()
        for chunk in response.iter_bytes():
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def test_a_large_export_is_streamed_in_flat_memory(
        served: tuple[str, subprocess.Popen[str]], big: tuple[str, str]) -> None:
    url, proc = served
    sid, expected = big
    _digest_of_stream(url, f"/v1/sessions/{sid}/jsonl")  # warm: imports, pools, buffers
    before = _peak_rss(proc.pid)
    results: list[tuple[int, str]] = []
    readers = [threading.Thread(target=lambda: results.append(
        _digest_of_stream(url, f"/v1/sessions/{sid}/jsonl"))) for _ in range(3)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(300)
    growth = _peak_rss(proc.pid) - before
    print(f"peak RSS growth for 3 parallel exports: {growth / MB:.1f} MB")
    wanted = (len(expected.encode()), hashlib.sha256(expected.encode()).hexdigest())
    assert results == [wanted] * 3  # byte-exact, every time
    # Three parallel reads of a 38 MB session: the peak grows by a few pieces, not by sessions.
    assert growth < 12 * MB, f"peak RSS grew {growth / MB:.1f} MB for {wanted[0] / MB:.0f} MB"


def test_json_reads_of_a_large_session_are_refused_before_it_is_read(
        served: tuple[str, subprocess.Popen[str]], big: tuple[str, str]) -> None:
    url, proc = served
    sid, _ = big
    auth = {"Authorization": f"Bearer {TOKEN}"}
    before = _peak_rss(proc.pid)
    for path in (f"/v1/sessions/{sid}", f"/v1/sessions/{sid}/context"):
        refused = httpx.get(url + path, headers=auth, timeout=60)
        assert refused.status_code == 413, refused.text[:300]
        body = refused.json()
        assert body["code"] == "read_too_large" and body["limit"] == 8 * MB
        assert body["value"] > 30 * MB and "/jsonl" in body["detail"]
    assert _peak_rss(proc.pid) - before < 8 * MB
    small = httpx.post(url + "/v1/sessions", headers=auth, json={}).json()["sessionId"]
    assert httpx.get(f"{url}/v1/sessions/{small}", headers=auth).status_code == 200
    missing = httpx.get(f"{url}/v1/sessions/nope-{uuid.uuid4().hex[:6]}/jsonl", headers=auth)
    assert missing.status_code == 404 and missing.json()["code"] == "session_not_found"
