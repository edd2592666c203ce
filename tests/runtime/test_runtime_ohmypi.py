"""oh-my-pi end to end with auth on (docs/oh-my-pi.md): the real oh-my-pi 18.2 on Bun from npm
(``make omp``), in RPC mode against a loopback OpenAI-compatible model, its
``compaction.remoteEndpoint`` the summarize URL of a token of tenant ``omp`` on a token-protected
``compactor serve`` (a child process) with a real worker. A recording proxy in front of the
server keeps every byte oh-my-pi sent it.

- A threshold compaction and a manual one are summarized by Compactor's worker, billed to the
  tenant of the URL's token, and the model provider's key never reaches Compactor (oh-my-pi
  sends no Authorization header to a summarize URL at all).
- With a wrong secret the server answers 401 and oh-my-pi compacts by itself (its next method,
  with its own model), as it does when its endpoint refuses.
- With no worker alive the server answers 424 ``no_worker`` at once and oh-my-pi, with its
  default retry settings, compacts by itself no later than oh-my-pi alone would (+ 3 s); it
  waited 300 s, its remote timeout, before.

Skipped only when oh-my-pi is missing and npm's registry is unreachable (failing when ``CI``
is set).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from runtime.runtime_support import runtime_settings

from api_client.server.summarize_url import summarize_url, url_secret
from helpers.ci import agent_installed
from helpers.omp_agent import (
    OmpModel,
    OmpRpc,
    RecordingProxy,
    ensure_omp,
    write_omp_agent_dir,
)
from helpers.serve_process import TOKEN, ServeProcess
from worker.celery_app import CompactorCelery
from worker.cli.demo import embedded_redis
from worker.llm import ModelCandidate
from worker.settings import WorkerSettings

pytestmark = pytest.mark.integration

# oh-my-pi's system prompt is ~2 300 tokens; a turn adds ~2 000 (a 4 000-character prompt and
# answer): the threshold falls ~1 000 tokens after the fourth turn, far from both sides of it.
WINDOW, THRESHOLD, KEEP = 16_000, 11_500, 3_000
PROMPT = "Look at the importer again and tell me what the parser does. " * 66
OMP_TOKEN = "omp-tenant-token-0123456789"
PROVIDER_KEY = "sk-provider-key-of-the-user-" + os.urandom(6).hex()
COMPACTOR_SUMMARY = "(Compactor summary)"  # in every summary the worker's model writes


@pytest.fixture(scope="module")
def omp_bin() -> Path:
    return agent_installed(ensure_omp, "oh-my-pi")


@pytest.fixture(scope="module")
def llm() -> Iterator[OmpModel]:
    server = OmpModel(latency_s=0.01, reply_chars=4000)
    yield server
    server.close()


@pytest.fixture(scope="module")
def worker_settings(module_redis: str, llm: OmpModel) -> WorkerSettings:
    candidate = ModelCandidate(provider="openai", model="loop", base_url=llm.base_url,
                               api_key=SecretStr("the-workers-own-key"), context_window=WINDOW)
    return runtime_settings(module_redis, models=[candidate])


@pytest.fixture(scope="module")
def serve(module_redis: str, app: CompactorCelery,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    server = ServeProcess(module_redis, tmp_path_factory.mktemp("serve") / "serve.log", "info",
                          COMPACTOR_API_TOKENS=json.dumps({TOKEN: "default", OMP_TOKEN: "omp"}))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def proxy(serve: ServeProcess) -> Iterator[RecordingProxy]:
    recorder = RecordingProxy(serve.port)
    yield recorder
    recorder.close()


def start_omp(omp_bin: Path, llm: OmpModel, endpoint: str | None, folder: Path,
              compaction_key: str | None = None, retries: bool = False) -> OmpRpc:
    agent = write_omp_agent_dir(folder / "agent", model_url=llm.base_url,
                                provider_key=PROVIDER_KEY, remote_endpoint=endpoint,
                                context_window=WINDOW, threshold_tokens=THRESHOLD,
                                keep_recent_tokens=KEEP, compaction_key=compaction_key,
                                retries=retries)
    return OmpRpc(omp_bin, agent, folder / "work")


def spent(serve: ServeProcess, token: str) -> int:
    """The tokens the tenant of ``token`` spent today (``GET /v1/usage``)."""
    answer = httpx.get(serve.url + "/v1/usage", params={"days": 1}, timeout=30,
                       headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    return sum(v for day in answer.json()["days"] for k, v in day.items()
               if k.endswith("Tokens") and isinstance(v, int))


def cross_threshold(omp: OmpRpc, llm: OmpModel) -> tuple[int, list[dict[str, Any]]]:
    """Turns until oh-my-pi compacts at its threshold; (the index of that turn's records, the
    ``auto_compaction_end`` records up to the one with a result)."""
    for _ in range(12):
        mark = omp.prompt(PROMPT)
        turn = llm.of("pi")[-1]
        if omp.events("auto_compaction_start", mark) or (
                turn.prompt_tokens + turn.completion_tokens > THRESHOLD):
            omp.wait_for(lambda r: r.get("type") == "auto_compaction_end"
                         and r.get("result") is not None, mark)
            return mark, omp.events("auto_compaction_end", mark)
    raise AssertionError("oh-my-pi did not reach its threshold")


def threshold_stall(omp: OmpRpc, llm: OmpModel) -> tuple[float, list[dict[str, Any]]]:
    """(seconds from oh-my-pi's ``auto_compaction_start`` to its ``auto_compaction_end`` with a
    result, the ``auto_compaction_end`` records) of its threshold compaction."""
    mark, ends = cross_threshold(omp, llm)
    start = omp.events("auto_compaction_start", mark)[0]
    return ends[-1]["_at"] - start["_at"], ends


def summarize_posts(proxy: RecordingProxy) -> int:
    return proxy.sent().count(b"POST /v1/summarize/")


def test_threshold_and_manual_compactions_go_through_compactor(
        omp_bin: Path, llm: OmpModel, serve: ServeProcess, proxy: RecordingProxy,
        tmp_path: Path) -> None:
    omp_before, default_before = spent(serve, OMP_TOKEN), spent(serve, TOKEN)
    worker_calls = len(llm.of("compactor"))
    omp = start_omp(omp_bin, llm, summarize_url(proxy.url, OMP_TOKEN), tmp_path)
    try:
        # -- threshold
        _, ends = cross_threshold(omp, llm)
        assert [e["action"] for e in ends] == ["remote"], ends
        assert COMPACTOR_SUMMARY in ends[0]["result"]["summary"]
        at_threshold = summarize_posts(proxy)
        assert at_threshold >= 1
        # -- manual, two turns later
        omp.prompt(PROMPT)
        omp.prompt(PROMPT)
        manual = omp.compact()
        assert manual["success"], manual
        assert COMPACTOR_SUMMARY in manual["data"]["summary"]
        assert summarize_posts(proxy) > at_threshold
    finally:
        omp.close()
    # Every summary oh-my-pi asked for was one job of the worker, billed to tenant omp only.
    assert len(llm.of("compactor")) - worker_calls == summarize_posts(proxy)
    assert spent(serve, OMP_TOKEN) > omp_before
    assert spent(serve, TOKEN) == default_before
    # The provider's key never reached Compactor: oh-my-pi sends a summarize URL no
    # Authorization header; it went to the model only.
    sent = proxy.sent()
    assert PROVIDER_KEY.encode() not in sent and b"\r\nauthorization:" not in sent.lower()
    # The server's access log (level info) has each request, its secret redacted.
    log = serve.log.read_text(encoding="utf-8", errors="replace")
    assert PROVIDER_KEY not in log and url_secret(OMP_TOKEN) not in log
    assert log.count('"POST /v1/summarize/<redacted> HTTP/1.1" 200') == summarize_posts(proxy)


def test_a_wrong_secret_makes_omp_compact_by_itself(
        omp_bin: Path, llm: OmpModel, serve: ServeProcess, proxy: RecordingProxy,
        tmp_path: Path) -> None:
    omp_before, default_before = spent(serve, OMP_TOKEN), spent(serve, TOKEN)
    refused_before = proxy.answered().count(b"HTTP/1.1 401")
    wrong = proxy.url + "/v1/summarize/" + url_secret("a-token-this-server-never-had")
    omp = start_omp(omp_bin, llm, wrong, tmp_path)
    try:
        # -- manual, after three turns: the 401 fails oh-my-pi's remote method, another compacts
        for _ in range(3):
            omp.prompt(PROMPT)
        manual = omp.compact()
        assert manual["success"], manual.get("error")
        assert COMPACTOR_SUMMARY not in manual["data"]["summary"]
        # -- threshold: the remote method fails ("requires usable credentials"); oh-my-pi's
        # next method, with its own model, compacts
        _, ends = cross_threshold(omp, llm)
        assert ends[0]["action"] == "remote" and "credentials" in ends[0]["errorMessage"]
        assert ends[-1]["action"] != "remote" and ends[-1]["result"]["summary"]
        assert COMPACTOR_SUMMARY not in ends[-1]["result"]["summary"]
    finally:
        omp.close()
    assert proxy.answered().count(b"HTTP/1.1 401") - refused_before >= 2
    assert spent(serve, OMP_TOKEN) == omp_before and spent(serve, TOKEN) == default_before
    assert PROVIDER_KEY.encode() not in proxy.sent()


def test_chat_completions_would_hand_compactor_the_provider_key(
        omp_bin: Path, llm: OmpModel, serve: ServeProcess, proxy: RecordingProxy,
        tmp_path: Path) -> None:
    """Why docs/oh-my-pi.md says not to point oh-my-pi at ``/v1/chat/completions``: oh-my-pi
    sends that URL the key of the model it summarizes with. A Compactor token as the key of the
    model's ``compactionModel`` entry is sent first, but an attempt refused (a revoked or
    mistyped token: 401) is tried again at the same URL with the next model's key, the
    provider's. Compactor refuses it and logs no header, yet the key has left for it."""
    omp = start_omp(omp_bin, llm, proxy.url + "/v1/chat/completions", tmp_path,
                    compaction_key="a-compactor-token-it-does-not-know")
    try:
        for _ in range(3):
            omp.prompt(PROMPT)
        omp.compact()  # succeeds or not: what matters is what it sent on the way
    finally:
        omp.close()
    sent = proxy.sent()
    assert b"Bearer a-compactor-token-it-does-not-know" in sent
    assert f"Bearer {PROVIDER_KEY}".encode() in sent
    assert PROVIDER_KEY not in serve.log.read_text(encoding="utf-8", errors="replace")


def test_no_worker_makes_omp_compact_by_itself_as_soon_as_alone(
        omp_bin: Path, llm: OmpModel, tmp_path: Path) -> None:
    """``compactor serve`` up, its Redis with no worker: the summarize URL answers 424
    ``no_worker`` at once, a status oh-my-pi does not retry (its default retry settings here),
    and its next method compacts with its own model; the stall at the threshold is oh-my-pi
    alone's (no remote endpoint) within 3 s. Before: 300 s, oh-my-pi's remote timeout."""
    alone = start_omp(omp_bin, llm, None, tmp_path / "alone", retries=True)
    try:
        stall_alone, ends = threshold_stall(alone, llm)
        assert ends[-1]["result"]["summary"] and COMPACTOR_SUMMARY not in str(ends)
    finally:
        alone.close()
    with embedded_redis() as no_worker_redis:
        serve = ServeProcess(no_worker_redis, tmp_path / "serve.log", "info",
                             COMPACTOR_API_TOKENS=json.dumps({OMP_TOKEN: "omp"}))
        serve.start()
        omp = start_omp(omp_bin, llm, summarize_url(serve.url, OMP_TOKEN), tmp_path / "omp",
                        retries=True)
        try:
            stall, ends = threshold_stall(omp, llm)
        finally:
            omp.close()
            serve.stop()
        log = serve.log.read_text(encoding="utf-8", errors="replace")
    print(f"\noh-my-pi threshold stall: alone {stall_alone * 1000:.0f} ms, with Compactor and "
          f"no worker {stall * 1000:.0f} ms")
    # The remote method failed on the 424 (no retry: one request), another method compacted.
    assert ends[0]["action"] == "remote" and "424" in ends[0]["errorMessage"], ends
    assert ends[-1]["result"]["summary"] and COMPACTOR_SUMMARY not in str(ends[-1])
    assert log.count('"POST /v1/summarize/<redacted> HTTP/1.1" 424') == 1, log[-2000:]
    assert stall < stall_alone + 3.0, (stall, stall_alone)
