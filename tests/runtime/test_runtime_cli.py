"""The runtime commands of ``compactor`` against a real Redis and worker (in this process)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from api_client import CompactionClient
from worker.celery_app import CompactorCelery
from worker.cli import main

DEMO = Path(__file__).resolve().parents[2] / "worker" / "data" / "demo-session.jsonl"
RECORD_KEYS = {"jobId", "kind", "reason", "state", "enqueuedAt", "startedAt", "finishedAt",
               "attempts", "model", "usage", "costUsd", "error", "entry", "result", "fromDraft"}


@pytest.fixture
def cli(app: CompactorCelery, module_redis: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> Iterator[object]:
    for name in ("COMPACTOR_BROKER_URL", "COMPACTOR_RESULT_BACKEND", "COMPACTOR_KEY_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COMPACTOR_REDIS_URL", module_redis)

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    yield run


def _import(cli: object, session_id: str) -> str:
    code, out, _ = cli("session", "import", str(DEMO),  # type: ignore[operator]
                       "--session-id", session_id)
    assert code == 0
    return str(out)


def test_import_prints_the_bare_id_and_export_round_trips(cli: object) -> None:
    assert _import(cli, "cli-roundtrip") == "cli-roundtrip\n"
    code, out, _ = cli("session", "export", "cli-roundtrip")  # type: ignore[operator]
    original = DEMO.read_text(encoding="utf-8").splitlines()
    exported = out.splitlines()
    assert code == 0 and exported[1:] == original[1:]
    assert json.loads(exported[0])["id"] == "cli-roundtrip"


def test_compact_without_wait_prints_id_and_state(cli: object) -> None:
    _import(cli, "cli-nowait")
    code, out, _ = cli("compact", "cli-nowait", "--json")  # type: ignore[operator]
    payload = json.loads(out)
    assert code == 0 and set(payload) == {"jobId", "state", "fromDraft"}
    assert (payload["jobId"].startswith("cli-nowait:")
            and payload["state"] in ("queued", "running", "succeeded"))


def test_compact_wait_json_then_job_and_events(cli: object) -> None:
    _import(cli, "cli-wait")
    code, out, _ = cli("compact", "cli-wait", "--reason", "threshold",  # type: ignore[operator]
                       "--wait", "--json")
    payload = json.loads(out)
    assert code == 0 and set(payload) == RECORD_KEYS
    assert payload["state"] == "succeeded" and payload["entry"]["type"] == "compaction"
    assert (payload["attempts"] == 1 and payload["model"] == "extractive"
            and payload["error"] is None)
    assert payload["fromDraft"] is False
    assert (payload["kind"], payload["reason"]) == ("compact", "threshold")
    assert payload["enqueuedAt"] <= payload["startedAt"] <= payload["finishedAt"]
    assert payload["finishedAt"].endswith("Z") and payload["costUsd"] in (None, 0, 0.0)
    code, out, _ = cli("job", payload["jobId"], "--json")  # type: ignore[operator]
    assert code == 0 and json.loads(out) == payload
    code, out, _ = cli("job", payload["jobId"])  # type: ignore[operator]
    assert out.startswith(f"job {payload['jobId']}: succeeded (compact, threshold, attempts 1)\n")
    assert f"enqueued {payload['enqueuedAt']}, started {payload['startedAt']}" in out
    code, out, _ = cli("events", "--session", "cli-wait", "--json")  # type: ignore[operator]
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["type"] for e in events] == ["compaction_start", "session_compact", "compaction_end"]
    assert events[-1]["state"] == "succeeded" and events[-1]["jobId"] == payload["jobId"]
    code, out, _ = cli("cancel", payload["jobId"])  # type: ignore[operator]
    assert (code, out) == (0, f"{payload['jobId']} already succeeded: nothing to cancel\n")


def test_speculative_then_threshold_from_the_draft(cli: object) -> None:
    _import(cli, "cli-draft")
    code, out, _ = cli("compact", "cli-draft", "--reason", "speculative",  # type: ignore[operator]
                       "--wait", "--json")
    payload = json.loads(out)
    assert code == 0 and payload["state"] == "succeeded" and payload["entry"] is None
    assert payload["result"]["draft"] is True and payload["fromDraft"] is False
    code, out, _ = cli("compact", "cli-draft", "--reason", "threshold",  # type: ignore[operator]
                       "--json")
    payload = json.loads(out)
    assert code == 0 and payload == {"jobId": payload["jobId"], "state": "succeeded",
                                     "fromDraft": True}
    code, out, _ = cli("job", payload["jobId"])  # type: ignore[operator]
    assert code == 0 and "from draft: yes" in out


def test_compact_context_window_and_the_loop_guard(cli: object,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _import(cli, "cli-guard")
    code, out, _ = cli("compact", "cli-guard", "--reason", "threshold",  # type: ignore[operator]
                       "--context-window", str(16_384 + 100), "--wait", "--json")
    payload = json.loads(out)
    assert code == 0 and payload["result"]["ineffective"] is True  # a 100-token threshold
    monkeypatch.setenv("COMPACTOR_LOOP_GUARD_MAX", "1")  # this CLI's limit: already reached
    code, out, _ = cli("compact", "cli-guard", "--reason", "overflow",  # type: ignore[operator]
                       "--wait", "--json")
    payload = json.loads(out)
    assert code == 2 and payload["state"] == "failed"
    assert payload["result"]["loopGuard"] == {"count": 1, "limit": 1, "windowS": 600.0}
    assert "compaction loop: session cli-guard had 1" in payload["error"]
    code, out, _ = cli("compact", "cli-guard", "--context-window", "0")  # type: ignore[operator]
    assert code == 2


def test_prune_and_branch_summary(cli: object) -> None:
    _import(cli, "cli-branch")
    code, out, _ = cli("prune", "cli-branch", "--wait", "--json")  # type: ignore[operator]
    assert code == 0 and len(json.loads(out)["result"]["prunedEntryIds"]) == 2
    lines = [json.loads(x) for x in DEMO.read_text(encoding="utf-8").splitlines()[1:]]
    pandas_leaf = next(e["id"] for e in reversed(lines) if "importer_pandas" in json.dumps(e))
    code, out, _ = cli("branch-summary", "cli-branch", "--to",  # type: ignore[operator]
                       pandas_leaf, "--wait", "--json")
    payload = json.loads(out)
    assert code == 0 and payload["entry"]["type"] == "branch_summary"
    assert payload["entry"]["parentId"] == pandas_leaf


def test_failed_job_exits_2_with_the_record(cli: object) -> None:
    _import(cli, "cli-fail")
    # a missing branch target is refused at enqueue, before any job exists
    code, out, err = cli("branch-summary", "cli-fail", "--to",  # type: ignore[operator]
                         "nope0000", "--wait", "--json")
    assert (code, out) == (2, "") and err == "compactor: error: Entry nope0000 not found\n"
    # a job that fails in the worker: a second compaction right after the first
    assert cli("compact", "cli-fail", "--wait", "--json")[0] == 0  # type: ignore[operator]
    code, out, _ = cli("compact", "cli-fail", "--wait", "--json")  # type: ignore[operator]
    payload = json.loads(out)
    assert code == 2 and payload["state"] == "failed" and "Already compacted" in payload["error"]


def test_errors_are_one_line_and_exit_2(cli: object) -> None:
    code, out, err = cli("job", "cli-fail:0123456789abcdef")  # type: ignore[operator]
    assert (code, out) == (2, "") and err.count("\n") == 1 and err.startswith("compactor: error: ")
    code, _, err = cli("session", "import", "/does/not/exist.jsonl")  # type: ignore[operator]
    assert code == 2 and err.startswith("compactor: error: /does/not/exist.jsonl: cannot read file")
    code, _, err = cli("compact", "bad id with spaces")  # type: ignore[operator]
    assert code == 2 and "invalid session id" in err


def test_global_redis_url_wins_and_cancel_says_what_it_did(cli: object, redis_url: str) -> None:
    """``--redis-url`` names a Redis no worker consumes (COMPACTOR_REDIS_URL is the module's), so
    jobs stay queued until the test marks one running as a worker would."""
    from worker.store.job_lifecycle import JobStore

    at = ("--redis-url", redis_url)
    code, out, _ = cli(*at, "session", "import", str(DEMO),  # type: ignore[operator]
                       "--session-id", "cli-url")
    assert (code, out) == (0, "cli-url\n")
    code, _, err = cli("session", "export", "cli-url")  # type: ignore[operator]
    assert code == 2 and "cli-url" in err  # not in the environment's Redis
    queued = json.loads(
        cli(*at, "compact", "cli-url", "--json")[1])["jobId"]  # type: ignore[operator]
    assert cli(*at, "cancel", queued)[1] == (  # type: ignore[operator]
        f"cancelled {queued} (was queued)\n")
    assert cli(*at, "cancel", queued)[1] == (  # type: ignore[operator]
        f"{queued} already cancelled: nothing to cancel\n")

    running = json.loads(
        cli(*at, "compact", "cli-url", "--json")[1])["jobId"]  # type: ignore[operator]
    with CompactionClient(redis_url) as client:
        assert JobStore(client.redis, client.settings, client.layout).mark_running(running) == 1
        code, out, _ = cli(*at, "cancel", running, "--json")  # type: ignore[operator]
        assert json.loads(out) == {"jobId": running, "state": "running",
                                   "previousState": "running", "action": "requested"}
        assert client.jobs.get(running).cancel_requested
    assert cli(*at, "cancel", running)[1] == (  # type: ignore[operator]
        f"cancel requested for {running} (was running)\n")
    code, out, _ = cli(*at, "job", running, "--json")  # type: ignore[operator]
    record = json.loads(out)
    assert set(record) == RECORD_KEYS and (record["state"], record["kind"]) == (
        "running", "compact")
    assert record["reason"] == "manual" and record["startedAt"] and record["finishedAt"] is None


def test_global_redis_url_over_a_real_process(cli: object, redis_url: str,
                                              module_redis: str) -> None:
    import os
    import subprocess
    import sys

    at = ("--redis-url", redis_url)
    assert cli(*at, "session", "import", str(DEMO),  # type: ignore[operator]
               "--session-id", "cli-proc")[0] == 0
    job = json.loads(
        cli(*at, "compact", "cli-proc", "--json")[1])["jobId"]  # type: ignore[operator]
    env = {**os.environ, "COMPACTOR_REDIS_URL": module_redis}
    done = subprocess.run([sys.executable, "-m", "worker", *at, "cancel", job], env=env,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"cancelled {job} (was queued)\n", "")


def test_global_redis_url_after_the_command(cli: object, redis_url: str) -> None:
    code, out, _ = cli("session", "import", str(DEMO),  # type: ignore[operator]
                       "--session-id", "cli-after", "--redis-url", redis_url)
    assert (code, out) == (0, "cli-after\n")
    code, _, err = cli("session", "export", "cli-after")  # type: ignore[operator]
    assert code == 2 and "cli-after" in err  # stored in --redis-url's Redis, not the module's
    code, out, _ = cli("session", "export", "cli-after",  # type: ignore[operator]
                       f"--redis-url={redis_url}")
    assert code == 0 and out.splitlines()[1:] == DEMO.read_text().splitlines()[1:]


@pytest.mark.parametrize(("line", "problem"), [
    ('{"type":"message","id":"zz000001","parentId":"nothere1","timestamp":"2025-01-01T00:00:00Z",'
     '"message":{"role":"user","content":"x","timestamp":1}}', "names no entry"),
    ("this is not json", "not JSON"),
])
def test_import_refuses_what_it_cannot_use_naming_the_file_and_line(
        cli: object, tmp_path: Path, line: str, problem: str) -> None:
    lines = DEMO.read_text(encoding="utf-8").splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([*lines[:5], line, *lines[5:]]) + "\n", encoding="utf-8")
    code, out, err = cli("session", "import", str(broken),  # type: ignore[operator]
                         "--session-id", "cli-broken")
    assert (code, out) == (2, "") and err.startswith(f"compactor: error: {broken}:6: ")
    assert problem in err and err.count("\n") == 1
    code, _, err = cli("session", "export", "cli-broken")  # type: ignore[operator]
    assert code == 2 and "not found" in err  # nothing stored


def test_long_lists_are_cut_unless_full(cli: object) -> None:
    from worker.cli.runtime_commands import LIST_SHOWN, shortened

    ids = [f"e{i:07d}" for i in range(LIST_SHOWN + 25)]
    cut = shortened({"result": {"prunedEntryIds": ids, "tokensSaved": 9}})
    assert cut["result"]["prunedEntryIds"] == ids[:LIST_SHOWN]
    assert cut["result"]["prunedEntryIdsOmitted"] == 25 and cut["result"]["tokensSaved"] == 9
    assert shortened({"ids": ids}, full=True) == {"ids": ids}
    _import(cli, "cli-prune-list")
    code, out, _ = cli("prune", "cli-prune-list", "--wait", "--json")  # type: ignore[operator]
    assert code == 0
    pruned = json.loads(out)["result"].get("prunedEntryIds", [])
    assert len(pruned) <= LIST_SHOWN


def test_events_since_and_a_closed_pipe(cli: object, module_redis: str) -> None:
    import os
    import subprocess
    import sys

    _import(cli, "cli-since")
    assert cli("compact", "cli-since", "--wait", "--json")[0] == 0  # type: ignore[operator]
    code, out, _ = cli("events", "--session", "cli-since", "--json")  # type: ignore[operator]
    events = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(events) >= 2
    first = events[0]["streamId"]
    code, out, _ = cli("events", "--session", "cli-since", "--json",  # type: ignore[operator]
                       "--since", first)
    assert [json.loads(line)["streamId"] for line in out.splitlines()] == [
        e["streamId"] for e in events[1:]]
    env = {**os.environ, "COMPACTOR_REDIS_URL": module_redis}
    shell = f"{sys.executable} -m worker events --json | head -n 1"
    done = subprocess.run(["bash", "-o", "pipefail", "-c", shell], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "" and done.stdout.count("\n") == 1


def test_global_tenant_scopes_the_session_and_job_commands(cli: object) -> None:
    code, out, _ = cli("--tenant", "acme", "session", "import", str(DEMO),  # type: ignore[operator]
                       "--session-id", "cli-tenant")
    assert (code, out) == (0, "cli-tenant\n")
    code, out, _ = cli("compact", "cli-tenant", "--tenant", "acme", "--wait",  # type: ignore[operator]
                       "--json")
    job = json.loads(out)
    assert code == 0 and job["jobId"].startswith("acme~cli-tenant:")
    code, out, _ = cli("session", "list", "--tenant", "acme")  # type: ignore[operator]
    assert code == 0 and "cli-tenant" in out.split()
    code, out, _ = cli("session", "list")  # type: ignore[operator]
    assert "cli-tenant" not in out.split()  # the default tenant has no such session
    code, _, err = cli("job", job["jobId"])  # type: ignore[operator]
    assert code == 2 and "not found" in err
    code, _, err = cli("--tenant", "Not A Tenant", "session", "list")  # type: ignore[operator]
    assert code == 2 and "tenant" in err
