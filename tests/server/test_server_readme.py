"""The README's shell examples run as written, in one bash (``set -euo pipefail``), with curl and
jq: "Run it yourself" starts a Redis, a worker and ``compactor serve`` in the background (its
ports and log folder swapped for free ones), generates and prints the token, and the blocks of
"The HTTP API" then run in that same shell against them. Each docs page's ``bash`` blocks that
call ``$COMPACTOR_URL`` run the same way, one shell per page, against a ``compactor serve``, a
Redis and a worker of this module's own. Each block's ``# <output>`` comment lines are checked
against what the block printed (ids, which differ from run to run, aside; ``<token>`` stands for
whatever the run generated: a token, a secret)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import RedisProcess, free_port, redis_server_binary
from runtime.runtime_support import running_worker, runtime_settings

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOKEN = "readme-token-0123456789abcdef"
BLOCK = re.compile(r"^```bash\n(.*?)^```$", re.S | re.M)
# Values that differ per run: generated entry ids, stream ids, job ids.
VOLATILE = re.compile(r'"[0-9a-f]{8}"|\d{13}-\d+|[\w.-]+:[0-9a-f]{16}')
# What "Run it yourself" names that a test must not share with the machine: its ports, /tmp.
README_REDIS_PORT, README_API_PORT = "6380", "8080"


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def readme_blocks() -> tuple[str, list[str]]:
    """"Run it yourself"'s one block, and the blocks of "The HTTP API" and "With oh-my-pi"."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    [start] = BLOCK.findall(section(text, "Run it yourself"))
    return start, [*BLOCK.findall(section(text, "The HTTP API")),
                   *BLOCK.findall(section(text, "With oh-my-pi"))]


def doc_blocks() -> dict[str, list[str]]:
    """Each docs page's bash blocks that call the API, by page."""
    pages = {}
    for page in sorted((REPO / "docs").glob("*.md")):
        runnable = [b for b in BLOCK.findall(page.read_text(encoding="utf-8"))
                    if "$COMPACTOR_URL" in b]
        if runnable:
            pages[page.name] = runnable
    return pages


def expected_lines(block: str) -> list[str]:
    """The output a block shows: its whole-line comments, each cut before a two-space gap (a
    note after it)."""
    return [re.split(r"\s{2,}", line[2:])[0].strip()
            for line in block.splitlines() if line.startswith("# ")]


def test_the_readme_and_docs_have_runnable_blocks() -> None:
    start, api_blocks = readme_blocks()
    assert "compactor worker" in start and "compactor serve" in start and "&\n" in start
    assert len(api_blocks) >= 3 and all("$COMPACTOR_URL" in b for b in api_blocks)
    assert "http-api.md" in doc_blocks()


def _tools() -> None:
    if not (shutil.which("curl") and shutil.which("jq")):
        if os.environ.get("CI"):
            pytest.fail("curl and jq are required in CI (.ci/run installs jq)")
        pytest.skip("curl or jq missing")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTOR_")}
    return env | extra


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    _tools()
    redis = RedisProcess(tmp_path_factory.mktemp("readme-api-redis"))
    redis.start()
    port = free_port()
    env = _clean_env(COMPACTOR_REDIS_URL=redis.url,
                     COMPACTOR_API_TOKENS=f'{{"{TOKEN}": "default"}}')
    server = subprocess.Popen([sys.executable, "-m", "worker", "serve", "--port", str(port),
                               "--log-level", "warning"], cwd=tmp_path_factory.mktemp("cwd"),
                              env=env, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        with running_worker(runtime_settings(redis.url, job_deadline_s=50.0)):
            deadline = time.monotonic() + 30
            while not _ready(url):
                assert server.poll() is None, server.stderr.read() if server.stderr else ""
                assert time.monotonic() < deadline, "compactor serve did not start"
                time.sleep(0.1)
            yield {"COMPACTOR_URL": url, "COMPACTOR_TOKEN": TOKEN}
    finally:
        server.terminate()
        server.wait(15)
        redis.stop()


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _shape(text: str) -> str:
    return VOLATILE.sub("<id>", text)


def _matches(printed: str, shown: str) -> bool:
    pattern = re.sub(r"<[a-z]+>", r"\\S+", re.escape(_shape(shown)))
    return re.fullmatch(pattern, _shape(printed)) is not None


def _check(blocks: list[str], done: subprocess.CompletedProcess[str]) -> None:
    printed = done.stdout.split("@@block ")[1:]
    failed = len(printed) - 1
    assert done.returncode == 0, (f"block {failed} failed:\n{blocks[failed]}\n"
                                  f"stdout: {printed[-1] if printed else ''}\n"
                                  f"stderr: {done.stderr}")
    for number, block in enumerate(blocks):
        out = [line.strip() for line in printed[number].splitlines()[1:] if line.strip()]
        shown = expected_lines(block)
        assert len(out) == len(shown) and all(map(_matches, out, shown)), (
            f"block {number} printed {out}, the page shows {shown}")


def _script(blocks: list[str]) -> str:
    lines = ["set -euo pipefail"]
    for number, block in enumerate(blocks):
        lines += [f"echo '@@block {number}'", block]
    return "\n".join(lines)


def _stop_group(group: int) -> None:
    """Stop what the script left running in the background (its own process group)."""
    for sig, patience in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(group, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline:
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


@pytest.mark.timeout(300)
def test_run_it_yourself_then_the_http_api_in_one_shell(tmp_path: Path) -> None:
    """The README's own set-up, nothing of the test's: its Redis, worker and server."""
    _tools()
    if not (REPO / ".venv" / "bin" / "activate").exists():
        if os.environ.get("CI"):
            pytest.fail("make install makes .venv: Run it yourself sources it")
        pytest.skip("no .venv in the checkout (make install)")
    start, api_blocks = readme_blocks()
    redis_port, api_port = str(free_port()), str(free_port())
    blocks = [block.replace(README_REDIS_PORT, redis_port).replace(README_API_PORT, api_port)
              .replace("/tmp/", f"{tmp_path}/") for block in (start, *api_blocks)]
    path = f"{Path(redis_server_binary()).parent}:{os.environ.get('PATH', '')}"
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    # Files, not pipes: the background processes keep what they inherit open after bash ends.
    with out.open("w") as stdout, err.open("w") as stderr:
        script = subprocess.Popen(["bash", "-c", _script(blocks)], cwd=REPO, stdout=stdout,
                                  stderr=stderr, env=_clean_env(PATH=path),
                                  start_new_session=True)
        try:
            script.wait(timeout=240)
        except subprocess.TimeoutExpired:
            pass  # reported below, with what the blocks printed and the logs
        finally:
            _stop_group(script.pid)
    logs = "\n".join(f"{log.name}: {log.read_text()[-2000:]}" for log in tmp_path.glob("*.log"))
    assert script.returncode is not None, f"the blocks did not end: {out.read_text()}\n{logs}"
    _check(blocks, subprocess.CompletedProcess(script.args, script.returncode, out.read_text(),
                                               err.read_text() + logs))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", sorted(doc_blocks()))
def test_a_docs_pages_curl_examples_run_in_one_shell(served: dict[str, str], page: str) -> None:
    blocks = doc_blocks()[page]
    done = subprocess.run(["bash", "-c", _script(blocks)], cwd=REPO, capture_output=True,
                          text=True, timeout=240, env={**_clean_env(), **served})
    _check(blocks, done)
