"""Layering: the pure core and the client load no I/O libraries they must not."""

import subprocess
import sys

import pytest

CHECK = "import sys, importlib; importlib.import_module({module!r}); print(sorted(m for m in {banned!r} if m in sys.modules))"


@pytest.mark.parametrize(
    ("module", "banned"),
    [
        ("worker.compaction", ["redis", "celery", "httpx", "kombu"]),
        ("worker.compaction.summarize", ["redis", "celery", "httpx", "kombu"]),
        ("api_client.session", ["redis", "celery", "httpx", "kombu", "worker", "tiktoken"]),
        ("api_client", ["worker", "tiktoken", "httpx"]),
    ],
)
def test_import_does_not_load(module: str, banned: list[str]) -> None:
    out = subprocess.run([sys.executable, "-c", CHECK.format(module=module, banned=banned)],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.strip() == "[]"
