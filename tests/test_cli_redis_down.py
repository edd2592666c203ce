"""With Redis down, every command that reads or writes Redis says so in one line and exits 2
(``usage`` without ``--tenant`` printed a 51-line traceback: its tenant list was a raw read)."""

from __future__ import annotations

import pytest
from conftest import free_port

from worker.cli import main

COMMANDS = [
    ["usage"], ["usage", "--tenant", "acme"], ["session", "list"], ["compact", "s-1"],
    ["job", "s-1:0123456789abcdef"], ["events", "--since", "start"], ["tenant", "show", "acme"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_redis_down_is_one_line_and_exit_2(argv: list[str], monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("COMPACTOR_BROKER_URL", "COMPACTOR_RESULT_BACKEND", "COMPACTOR_TENANT"):
        monkeypatch.delenv(name, raising=False)
    down = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    assert main(["--redis-url", down, *argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("compactor: error: Redis unavailable: ") and err.count("\n") == 1, err
