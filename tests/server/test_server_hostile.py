"""A hostile tenant or web page against the HTTP API (issue 39: M4, L1-L5), over real sockets.

Before: with ``--insecure-no-auth`` a page on ``attacker.example`` (DNS rebinding) read
``/v1/events`` and a cross-site form POST got 202 on ``/prune``; no request rate limit (one
tenant's 64-connection flood took another's p95 from 10 ms to 1.5 s); SSE streams past the
Redis pool got 200 then a dropped connection; 1 100 half-sent request heads held the server's
descriptors for ever; ``/readyz`` and 503 bodies named the Redis host and port; a token sent as
``?access_token=`` was written to the access log verbatim.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from conftest import free_port
from server.server_support import ACME, TOKEN, running_api, server_settings, tenant_http

from api_client import ClientSettings
from api_client.server.asgi import create_app
from api_client.server.guards import TenantGuards, TokenBuckets, loopback_host
from api_client.server.summarize_url import redact
from helpers.waits import wait_until
from worker.celery_app import CompactorCelery

REPO = Path(__file__).resolve().parents[2]
PROBLEM = "application/problem+json"
SECRET = "query-secret-0123456789abcdef"
pytestmark = pytest.mark.integration


def _problem(response: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body: dict[str, object] = response.json()
    assert body["code"] == code
    return body


# --- M4: --insecure-no-auth stays local -------------------------------------------------------
@pytest.fixture(scope="module")
def open_api(module_redis: str, worker: CompactorCelery) -> Iterator[str]:
    with running_api(module_redis, server_settings({})) as url:
        yield url


def test_loopback_names() -> None:
    for host in ("localhost", "localhost:8080", "127.0.0.1", "127.0.0.1:1", "[::1]",
                 "[::1]:8080", "LOCALHOST"):
        assert loopback_host(host), host
    for host in ("attacker.example", "attacker.example:8080", "127.0.0.1.nip.io", "0.0.0.0",
                 "[::1].evil", "10.0.0.1:80", "", "localhost:x"):
        assert not loopback_host(host), host


def test_insecure_mode_answers_loopback_hosts_only(open_api: str) -> None:
    port = open_api.rsplit(":", 1)[1]
    with httpx.Client(base_url=open_api, timeout=30) as http:
        for host in ("attacker.example", f"attacker.example:{port}", "192.168.1.5"):
            got = http.get("/v1/events", params={"since": "start", "follow": "false"},
                           headers={"Host": host})
            _problem(got, 421, "host_not_allowed")
            _problem(http.get("/v1/sessions/x/jsonl", headers={"Host": host}), 421,
                     "host_not_allowed")
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost"):
            got = http.get("/v1/events", params={"follow": "false"}, headers={"Host": host})
            assert got.status_code == 200, got.text


def test_insecure_mode_refuses_a_cross_site_state_change(open_api: str) -> None:
    name = f"s-{uuid.uuid4().hex[:10]}"
    with httpx.Client(base_url=open_api, timeout=30) as http:
        assert http.post("/v1/sessions", json={"sessionId": name}).status_code == 201
        form = http.post(f"/v1/sessions/{name}/prune", content=b"a=1",
                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        _problem(form, 415, "unsupported_media_type")
        text = http.post(f"/v1/sessions/{name}/prune", content=b"{}",
                         headers={"Content-Type": "text/plain;charset=UTF-8"})
        _problem(text, 415, "unsupported_media_type")
        for headers in ({"Origin": "http://attacker.example"},
                        {"Sec-Fetch-Site": "cross-site"}):
            _problem(http.post(f"/v1/sessions/{name}/prune", json={}, headers=headers), 403,
                     "cross_origin")
            _problem(http.delete(f"/v1/sessions/{name}", headers=headers), 403, "cross_origin")
        assert http.get(f"/v1/sessions/{name}").status_code == 200  # nothing happened
        local = http.post(f"/v1/sessions/{name}/prune", json={},
                          headers={"Origin": open_api})
        assert local.status_code == 202, local.text


def test_with_tokens_any_host_is_served(api: str) -> None:
    got = httpx.get(f"{api}/v1/sessions/nope", headers={"Host": "api.example.com",
                                                        "Authorization": f"Bearer {TOKEN}"})
    assert got.status_code == 404  # the token is the credential: the Host check is off


# --- L2: per-tenant request rate ----------------------------------------------------------------
def test_token_bucket() -> None:
    now = [0.0]
    buckets = TokenBuckets(rate=2.0, burst=3, clock=lambda: now[0])
    assert [buckets.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("a") == pytest.approx(0.5)
    assert buckets.take("b") == 0.0  # another tenant's bucket is full
    now[0] = 0.5
    assert buckets.take("a") == 0.0
    assert TokenBuckets(rate=0, burst=1).take("a") == 0.0  # 0: no limit


def test_a_tenant_over_its_rate_gets_429_and_the_others_do_not(
        module_redis: str, worker: CompactorCelery) -> None:
    settings = server_settings({TOKEN: "default", ACME: "acme"}, api_rate_per_s=0.01,
                               api_rate_burst=3)
    with running_api(module_redis, settings) as url, tenant_http(url, TOKEN) as flood, \
            tenant_http(url, ACME) as other:
        answers = [flood.get("/v1/sessions/nope") for _ in range(5)]
        assert [a.status_code for a in answers[:3]] == [404, 404, 404]
        limited = _problem(answers[4], 429, "rate_limited")
        assert int(answers[4].headers["retry-after"]) >= 1 and "RATE_PER_S" in str(
            limited["detail"])
        assert other.get("/v1/sessions/nope").status_code == 404
        assert httpx.get(url + "/readyz").status_code == 200  # probes are not counted


# --- L1: open streams per tenant ----------------------------------------------------------------
def test_a_stream_past_the_cap_is_429_before_any_header(
        module_redis: str, worker: CompactorCelery) -> None:
    settings = server_settings({TOKEN: "default", ACME: "acme"}, api_sse_streams_max=2,
                               api_sse_keepalive_s=0.3)
    with running_api(module_redis, settings) as url, tenant_http(url, TOKEN) as http, \
            tenant_http(url, ACME) as other, ExitStack() as streams:
        readers = []  # held: a reader dropped closes its stream
        for _ in range(2):
            opened = streams.enter_context(http.stream("GET", "/v1/events"))
            assert opened.status_code == 200
            readers.append(opened.iter_bytes())
            assert next(readers[-1]).startswith(b": connected")
        over = http.get("/v1/events")
        _problem(over, 429, "too_many_streams")
        assert int(over.headers["retry-after"]) >= 1
        assert http.get("/v1/sessions/nope").status_code == 404  # other requests still go
        with other.stream("GET", "/v1/events") as theirs:
            assert theirs.status_code == 200
        streams.close()  # the two hang up: their slots come back
        deadline = time.monotonic() + 30
        while (status := http.get("/v1/events", params={"follow": "false"}).status_code) != 200:
            assert status == 429 and time.monotonic() < deadline
            time.sleep(0.05)


# --- L3, L4, L5: the server as `compactor serve` runs it --------------------------------------
@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, subprocess.Popen[str], int]]:
    """``python -m api_client.server`` (uvicorn with the serve options) and a Redis port
    nothing listens on; yields the base URL, the process and that port."""
    port, dead_redis = free_port(), free_port()
    env = {**os.environ, "COMPACTOR_API_TOKENS": f'{{"{TOKEN}": "default"}}',
           "COMPACTOR_REDIS_URL": f"redis://127.0.0.1:{dead_redis}/0",
           "COMPACTOR_API_HEADER_TIMEOUT_S": "1", "COMPACTOR_API_BODY_TIMEOUT_S": "2",
           "COMPACTOR_CONNECT_TIMEOUT_S": "0.5"}
    proc = subprocess.Popen([sys.executable, "-m", "api_client.server", "--port", str(port)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url + "/livez", timeout=5)
            break
        except httpx.TransportError:
            assert proc.poll() is None and time.monotonic() < deadline, "serve did not start"
            time.sleep(0.05)
    yield url, proc, dead_redis
    if proc.poll() is None:
        proc.terminate()
        proc.wait(15)


def _log(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.terminate()
    out, _ = proc.communicate(timeout=15)
    return out


def _closed_by_server(sock: socket.socket) -> bool:
    """Reads until the server closes (b"" or a reset); False when nothing came in 20 s."""
    sock.settimeout(20)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def test_a_half_sent_head_or_body_is_closed(served: tuple[str, subprocess.Popen[str], int]
                                             ) -> None:
    url, _, _ = served
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as head:
        head.sendall(b"GET /livez HTTP/1.1\r\nHost: localhost\r\nX-A: ")
        assert _closed_by_server(head)
    with socket.create_connection(("127.0.0.1", port)) as body:
        body.sendall(b"PUT /v1/sessions/x/jsonl HTTP/1.1\r\nHost: localhost\r\n"
                     b"Authorization: Bearer " + TOKEN.encode() +
                     b"\r\nContent-Length: 100\r\n\r\n{")
        assert _closed_by_server(body)
    with socket.create_connection(("127.0.0.1", port)) as big:
        big.sendall(b"GET /livez HTTP/1.1\r\nHost: localhost\r\nX-A: " + b"a" * 40_000)
        big.settimeout(20)
        assert big.recv(64).startswith(b"HTTP/1.1 400")
    assert httpx.get(url + "/livez").status_code == 200


def test_503_bodies_name_no_host_or_port(served: tuple[str, subprocess.Popen[str], int]
                                         ) -> None:
    url, _, dead_redis = served
    ready = httpx.get(url + "/readyz", timeout=30)
    _problem(ready, 503, "broker_unavailable")
    read = httpx.get(url + "/v1/sessions/x", headers={"Authorization": f"Bearer {TOKEN}"},
                     timeout=30)
    _problem(read, 503, "broker_unavailable")
    for response in (ready, read):
        assert "127.0.0.1" not in response.text and str(dead_redis) not in response.text


def test_a_query_string_token_is_redacted_in_the_access_log(
        served: tuple[str, subprocess.Popen[str], int]) -> None:
    url, proc, _ = served
    for query in (f"access_token={SECRET}", f"a=1&access_token={SECRET}&b=2",
                  f"token={SECRET}", f"api_key={SECRET}"):
        assert httpx.get(f"{url}/v1/events?{query}", timeout=30).status_code == 401
    log = _log(proc)
    assert "access_token=<redacted>" in log and "a=1&access_token=<redacted>&b=2" in log
    assert SECRET not in log


def test_redact() -> None:
    assert redact(f"/v1/events?access_token={SECRET}") == "/v1/events?access_token=<redacted>"
    assert redact(f"/v1/x?since=start&Access_Token={SECRET}#") == \
        "/v1/x?since=start&Access_Token=<redacted>"
    assert redact("/v1/events?since=start") == "/v1/events?since=start"
    assert redact(f"/v1/summarize/{SECRET}?x=1") == "/v1/summarize/<redacted>"


def _guards(app: object) -> TenantGuards:
    """The app's TenantGuards (Starlette builds its middleware stack on the first request)."""
    layer = getattr(app, "middleware_stack", None)
    while layer is not None and not isinstance(layer, TenantGuards):
        layer = getattr(layer, "app", None)
    assert isinstance(layer, TenantGuards)
    return layer


def test_an_over_rate_request_is_paused_outside_the_in_flight_count(
        module_redis: str, worker: CompactorCelery) -> None:
    """Before: a request over its tenant's rate was 429 at once, so a flood that retries at
    once (64 connections) made thousands of 429s a second and the event loop was theirs
    (another tenant's p95 10 ms alone, 155 ms under it; 58 ms with no limit at all). Now its
    429 comes after COMPACTOR_API_RATE_PAUSE_S, each connection of the flood is paced to one
    request per pause, and a paused request holds no place of COMPACTOR_API_INFLIGHT_MAX."""
    settings = server_settings({TOKEN: "default", ACME: "acme"}, api_rate_per_s=0.01,
                               api_rate_burst=1, api_inflight_max=2, api_rate_pause_s=3.0)
    app = create_app(settings, ClientSettings(redis_url=module_redis))
    with running_api(module_redis, app=app) as url, tenant_http(url, TOKEN) as flood, \
            tenant_http(url, ACME) as other:
        assert flood.get("/v1/sessions/nope").status_code == 404  # the bucket's one token
        answers: list[tuple[float, httpx.Response]] = []

        def over() -> None:
            started = time.monotonic()
            with tenant_http(url, TOKEN) as own:
                answer = own.get("/v1/sessions/nope")
            answers.append((time.monotonic() - started, answer))

        threads = [threading.Thread(target=over) for _ in range(3)]
        for thread in threads:
            thread.start()
        guards = _guards(app)
        wait_until(lambda: guards.paused == 3, what="three paused requests")
        started = time.monotonic()
        assert other.get("/v1/sessions/nope").status_code == 404  # not 429 overloaded
        assert time.monotonic() - started < 2.0
        for thread in threads:
            thread.join(30)
        assert len(answers) == 3
        for took, answer in answers:
            _problem(answer, 429, "rate_limited")
            assert took >= 2.9, took
        assert guards.paused == 0
