"""``make pi`` leaves a runnable ``pi`` at the path the README names: the committed wrapper
``integrations/pi/bin/pi`` runs pi 1.6 on the Node 22 that ``make pi`` installed, with the
Compactor extension, whatever Node comes first on PATH (pi crashes on the machine's Node 20)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from helpers.ci import agent_installed
from helpers.pi_agent import EXTENSION, ensure_pi
from helpers.pi_model import StreamingModel

REPO = Path(__file__).resolve().parents[1]
WRAPPER = REPO / "integrations" / "pi" / "bin" / "pi"


@pytest.fixture(scope="module")
def installed() -> None:
    agent_installed(ensure_pi, "pi")


def _run(command: Path, path_first: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{path_first}:{os.environ.get('PATH', '')}"}
    return subprocess.run([str(command), "--version"], capture_output=True, text=True,
                          timeout=60, env=env, cwd=REPO.parent)


def test_the_readme_names_the_wrapper_and_make_pi_keeps_it_executable() -> None:
    assert "integrations/pi/bin/pi" in (REPO / "README.md").read_text(encoding="utf-8")
    assert os.access(WRAPPER, os.X_OK)
    assert EXTENSION.relative_to(REPO / "integrations" / "pi").as_posix() in WRAPPER.read_text()


@pytest.mark.usefixtures("installed")
def test_the_wrapper_runs_pi_1_6_with_the_machines_node_first_on_path() -> None:
    system_node = shutil.which("node")
    first = str(Path(system_node).parent) if system_node else "/usr/bin"
    done = _run(WRAPPER, first)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1.6.0"


@pytest.mark.usefixtures("installed")
def test_a_symlink_to_the_wrapper_on_path_runs_it(tmp_path: Path) -> None:
    link = tmp_path / "pi"
    link.symlink_to(WRAPPER)
    done = _run(link, str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1.6.0"


def _readme_json_blocks() -> tuple[dict[str, Any], dict[str, Any]]:
    """The README's pi settings: models.json, then settings.json."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("\n## With pi\n"):text.index("\n## With oh-my-pi\n")]
    models, settings = (json.loads(b) for b in re.findall(r"^```json\n(.*?)^```$", section,
                                                           re.S | re.M))
    return models, settings


@pytest.mark.usefixtures("installed")
def test_the_readmes_pi_settings_point_pi_at_a_model(tmp_path: Path) -> None:
    """pi, set up as the README shows (the server's address aside), answers a prompt from the
    OpenAI-compatible model those settings name."""
    models, settings = _readme_json_blocks()
    [(name, provider)] = models["providers"].items()
    assert settings["defaultProvider"] == name
    assert settings["defaultModel"] == provider["models"][0]["id"]
    key_variable = provider["apiKey"].removeprefix("$")
    model = StreamingModel(reply_chars=40)
    try:
        provider["baseUrl"] = model.base_url
        (tmp_path / "models.json").write_text(json.dumps(models), encoding="utf-8")
        (tmp_path / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTOR_")}
        env |= {"PI_CODING_AGENT_DIR": str(tmp_path), key_variable: "any-key"}
        done = subprocess.run([str(WRAPPER), "-p", "fix the importer"], capture_output=True,
                              text=True, timeout=120, env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip()
        assert [call.body["model"] for call in model.calls] == [provider["models"][0]["id"]]
    finally:
        model.close()
