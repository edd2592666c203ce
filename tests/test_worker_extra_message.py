"""Without the worker extra, ``compactor`` says in one line how to install it in a way that
works: from the checkout (``pip install -e '.[worker]'``), never a package name no registry
has (``compactor[worker]``). The thin install test runs the real case; this one is fast."""

from __future__ import annotations

import importlib.util
import shlex
from importlib.machinery import ModuleSpec

import pytest

from worker import cli


def test_the_missing_extra_message_names_an_install_that_works(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    real = importlib.util.find_spec

    def without_celery(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name == "celery" else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", without_celery)
    assert cli.main(["demo"]) == cli.EXIT_USAGE
    [line] = capsys.readouterr().err.splitlines()
    assert "(no celery)" in line
    command = shlex.split(line[line.index("pip install"):])
    assert command == ["pip", "install", "-e", ".[worker]"]
    assert "compactor[worker]" not in line
