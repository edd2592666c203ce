"""Flower tells the truth: a real Flower process reads a real worker's task events and reports
each job's end (failed → FAILURE, cancelled → REVOKED, waiting on a lease → RETRY, done →
SUCCESS), and a failed job's message is acked, not redelivered."""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from llm.llm_fakes import FAST, FakeLLMServer, error, hang, openai
from runtime.conftest import REPO
from runtime.runtime_support import DELIVERIES, new_session, runtime_settings

from api_client import CompactionClient, JobCancelledError, JobFailedError
from api_client.contract.routing import TASK_COMPACT
from worker.celery_app import CompactorCelery
from worker.llm import ModelCandidate
from worker.settings import WorkerSettings

pytestmark = pytest.mark.integration

MODEL = "flower-model"
AUTH = "ops:flower-test"
UNAUTHORIZED = {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}


class Flower:
    """``compactor flower`` as a subprocess, and its HTTP API."""

    def __init__(self, redis_url: str) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTOR_", "FLOWER_"))}
        env.update({"COMPACTOR_REDIS_URL": redis_url, "FLOWER_BASIC_AUTH": AUTH,
                    "COMPACTOR_HOOKS_ENTRY_POINTS": "false"})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "worker", "flower", f"--port={self.port}", "--logging=warning"],
            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def get(self, path: str) -> Any:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", headers={
            "Authorization": "Basic " + base64.b64encode(AUTH.encode()).decode()})
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())

    def answers(self) -> bool:
        """Flower's API answers (a Flower that exited fails here, with its stderr)."""
        if self.proc.poll() is not None:
            _, err = self.proc.communicate()
            raise RuntimeError(f"flower exited {self.proc.returncode}: {err.decode()[-2000:]}")
        return self.get("/api/workers") is not None

    def task(self, task_id: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.get("/api/tasks").get(task_id)
        return found

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def eventually(probe: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = probe()
        except (OSError, urllib.error.URLError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or probe}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def model_server() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def worker_settings(module_redis: str, model_server: FakeLLMServer) -> WorkerSettings:
    candidate = ModelCandidate.model_validate(openai(model_server, MODEL, api_key="sk-test"))
    # The default lease (3 s): a shorter one can expire while a loaded machine stalls its
    # renewal, and the sweep sends the running job again (under a CPU hog, the cancelled job's
    # task then never reached a final state in Flower).
    return runtime_settings(module_redis, models=[candidate], lease_ttl_s=3.0, **FAST)


@pytest.fixture(scope="module")
def flower(module_redis: str, app: CompactorCelery, demo_text: str,
           client_for: Callable[[str], CompactionClient]) -> Iterator[Flower]:
    """Flower, up and receiving events: it has seen a job the worker finished after its start."""
    server = Flower(module_redis)
    client = client_for(module_redis)
    try:
        eventually(server.answers, 90, what="Flower's API")

        def a_job_seen() -> bool:
            handle = client.compact(new_session(client, demo_text), reason="manual")
            handle.wait(30)
            return eventually(lambda: server.task(handle.id), 3, "a task") is not None

        eventually(lambda: _quietly(a_job_seen), 60, "Flower to see a job")
        yield server
    finally:
        server.close()


def _quietly(probe: Callable[[], bool]) -> bool:
    try:
        return probe()
    except AssertionError:
        return False


@pytest.fixture
def client(flower: Flower, client: CompactionClient,
           model_server: FakeLLMServer) -> CompactionClient:
    model_server.scripts.clear()
    return client


def final_state(flower: Flower, task_id: str, states: set[str]) -> dict[str, Any]:
    task: dict[str, Any] = eventually(
        lambda: (t := flower.task(task_id)) and t["state"] in states and t, 30,
        f"task {task_id} in {states}")
    return task


def test_a_job_whose_only_model_answers_401_is_failure_with_the_jobs_error(
        app: CompactorCelery, flower: Flower, client: CompactionClient, model_server: FakeLLMServer,
        demo_text: str, caplog: pytest.LogCaptureFixture) -> None:
    model_server.script(MODEL, error(401, UNAUTHORIZED))
    with caplog.at_level(logging.INFO, logger="celery.app.trace"):
        handle = client.compact(new_session(client, demo_text), reason="manual")
        with pytest.raises(JobFailedError) as failed:
            handle.wait(30)
        DELIVERIES.wait(handle.id)
    # The worker log says what Flower says, in one line (an expected failure has no traceback).
    [line] = [r for r in caplog.records if handle.id in r.getMessage()]
    assert line.getMessage().endswith(f"raised expected: {JobFailedError(str(failed.value))!r}")
    assert line.exc_info is None
    task = final_state(flower, handle.id, {"FAILURE", "SUCCESS"})
    assert task["state"] == "FAILURE"
    assert task["exception"] == repr(JobFailedError(str(failed.value)))
    assert task["runtime"] is not None and task["runtime"] > 0  # Celery sends none on failure
    assert task["kwargs"] == "{'reason': 'manual'}"
    assert "401" in str(failed.value)
    # Acked on failure: nothing is left unacked for a redelivery, and it ran once.
    state, raised = DELIVERIES.wait(handle.id)
    assert state == "FAILURE" and isinstance(raised, JobFailedError)
    assert client.redis.hlen(client.layout.broker + "unacked") == 0
    time.sleep(1.5)  # a redelivery (or a retry) would have started by now
    assert client.jobs.get(handle.id).attempts == 1
    assert flower.task(handle.id)["state"] == "FAILURE"  # type: ignore[index]


def test_a_job_cancelled_mid_call_is_revoked(
        flower: Flower, client: CompactionClient, model_server: FakeLLMServer,
        demo_text: str) -> None:
    model_server.script(MODEL, hang(), hang(), hang())
    calls = len(model_server.seen)
    handle = client.compact(new_session(client, demo_text), reason="manual")
    eventually(lambda: len(model_server.seen) > calls, 30, "the model call")
    unacked = client.layout.broker + "unacked"  # kombu's, under the broker's key prefix
    assert client.redis.hlen(unacked) == 1  # the running job's message, until it ends
    handle.cancel()
    with pytest.raises(JobCancelledError):
        handle.wait(30)
    task = final_state(flower, handle.id, {"REVOKED", "FAILURE", "SUCCESS"})
    assert task["state"] == "REVOKED"
    assert task["runtime"] is not None and task["runtime"] > 0
    assert "'cause': 'cancelled'" not in str(task["result"])  # a revoked task has no result
    # The REVOKED event and the ack of the message are separate steps: the ack follows.
    eventually(lambda: client.redis.hlen(unacked) == 0, 10, "the cancelled job's ack")


def test_a_job_waiting_for_another_workers_lease_is_retry_then_success(
        app: CompactorCelery, flower: Flower, client: CompactionClient, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    job = client.jobs.enqueue(sid, "compact", reason="manual").job_id
    lease = client.layout.job(job).lease
    client.redis.set(lease, "other-worker", px=60_000)
    app.send_task(TASK_COMPACT, args=[job], queue="compactor.compact", task_id=job)
    final_state(flower, job, {"RETRY"})
    # Longer than Celery's default of 3 retries: the delivery keeps waiting for the lease (a
    # retry a lease period later), it does not give up as a FAILURE while the other worker runs.
    eventually(lambda: DELIVERIES.count(job, "RETRY") >= 5, 90, "five retries")
    assert DELIVERIES.count(job, "FAILURE") == 0
    client.redis.delete(lease)
    task = final_state(flower, job, {"SUCCESS", "FAILURE"})
    assert task["state"] == "SUCCESS"
    assert client.jobs.get(job).state.value == "succeeded"


def test_a_message_for_a_job_without_a_record_is_failure(
        app: CompactorCelery, flower: Flower, client: CompactionClient) -> None:
    job = "s-gone:0123456789abcdef"
    app.send_task(TASK_COMPACT, args=[job], queue="compactor.compact", task_id=job)
    task = final_state(flower, job, {"FAILURE", "SUCCESS"})
    assert task["state"] == "FAILURE" and task["exception"].startswith("JobNotFoundError(")


def test_a_successful_job_is_success(flower: Flower, client: CompactionClient,
                                     demo_text: str) -> None:
    handle = client.compact(new_session(client, demo_text), reason="manual")
    entry = handle.wait(30)
    task = final_state(flower, handle.id, {"SUCCESS", "FAILURE"})
    assert task["state"] == "SUCCESS"
    assert f"'entryId': '{entry['id']}'" in task["result"]  # type: ignore[index]
    # The task page names the request and who answered it.
    assert "'reason': 'manual'" in task["result"] and f"'model': 'openai/{MODEL}'" in task[
        "result"]
    assert task["kwargs"] == "{'reason': 'manual'}"


def test_the_broker_tab_reads_the_queues(flower: Flower) -> None:
    # It said "'redis' broker is not supported": Flower saw the worker's transport class name.
    queues = eventually(lambda: flower.get("/api/queues/length").get("active_queues"), 30,
                        "the queue lengths")
    assert {q["name"] for q in queues} >= {"compactor.compact", "compactor.urgent"}
