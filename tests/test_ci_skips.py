"""CI checks what it claims: a test that can skip here (a tool or service missing) fails instead
when ``CI`` is set (``helpers.ci.missing``, or its own ``os.environ.get("CI")`` guard beside the
skip). Read from the test sources, so a new skip without the guard is caught here."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ci

TESTS = Path(__file__).resolve().parent
# Skips that are not about a missing tool: they run (or not) the same way in CI.
NOT_ABOUT_TOOLS = {
    ("test_readme.py", "signatures of the parts; its owner keeps its references"),
}
SKIPS = {"skip", "importorskip", "skipif"}


def _skip_name(node: ast.AST) -> str | None:
    """``skip``/``importorskip``/``skipif`` for ``pytest.skip(...)``, ``pytest.mark.skipif``..."""
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute) and target.attr in SKIPS:
        return target.attr
    return None


def _skips_without_a_ci_guard(path: Path, root: Path = TESTS) -> list[str]:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    found: list[str] = []

    def visit(node: ast.AST, scope: ast.AST | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else scope
            if scope is None and isinstance(child, ast.stmt) and node is tree:
                inner = child  # module level: the top-level statement is the scope
            name = _skip_name(child)
            if name is not None:
                text = ast.get_source_segment(source, inner) if inner is not None else ""
                reason = next((a.value for a in getattr(child, "args", [])
                               if isinstance(a, ast.Constant) and isinstance(a.value, str)), "")
                guarded = text is not None and ('"CI"' in text or "in_ci()" in text)
                if not guarded and (path.name, reason) not in NOT_ABOUT_TOOLS:
                    found.append(f"{path.relative_to(root)}:{child.lineno} {name}")
            if isinstance(child, ast.Call) and name is not None:
                for arg in [*child.args, *child.keywords]:
                    visit(arg, inner)
            else:
                visit(child, inner)

    visit(tree, None)
    return found


def test_every_skip_fails_in_ci_instead() -> None:
    unguarded = [hit for path in sorted(TESTS.rglob("*.py")) if path.name != Path(__file__).name
                 for hit in _skips_without_a_ci_guard(path)]
    assert unguarded == []


def test_the_audit_finds_an_unguarded_skip(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text('import pytest, shutil\n\n\ndef test_x() -> None:\n'
                      '    if shutil.which("nothing") is None:\n'
                      '        pytest.skip("no tool")\n\n\n'
                      '@pytest.mark.skipif(True, reason="never")\ndef test_y() -> None:\n'
                      '    pass\n')
    assert _skips_without_a_ci_guard(sample, tmp_path) == ["test_sample.py:6 skip",
                                                           "test_sample.py:9 skipif"]


@pytest.mark.parametrize("ci_value", ["", "true"])
def test_missing_skips_here_and_fails_in_ci(tmp_path: Path, ci_value: str) -> None:
    (tmp_path / "test_tool.py").write_text(
        "from helpers.ci import missing\n\n\ndef test_tool() -> None:\n"
        "    missing('no such tool')\n")
    env = {**os.environ, "CI": ci_value, "PYTHONPATH": str(TESTS)}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                          str(tmp_path / "test_tool.py")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    if ci_value:
        assert run.returncode == 1 and "1 failed" in run.stdout
        assert "no such tool (required in CI" in run.stdout
    else:
        assert run.returncode == 0 and "1 skipped" in run.stdout, run.stdout
    assert ci.in_ci() == bool(os.environ.get("CI"))
