"""Layering: the pure core and the client load no I/O libraries they must not."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

CHECK = ("import sys, importlib; importlib.import_module({module!r}); "
         "print(sorted(m for m in {banned!r} if m in sys.modules))")


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


ROOT = Path(__file__).resolve().parents[1]


def _private_api_client_imports(path: Path, root: Path = ROOT) -> list[str]:
    """``api_client`` modules (or names) with a leading underscore that ``path`` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if parts[0] == "api_client" and any(p.startswith("_") for p in parts[1:]):
                found.append(f"{path.relative_to(root)}:{node.lineno} {module}")
    return found


def test_worker_imports_only_the_public_contract_of_api_client() -> None:
    offenders = [hit for path in sorted((ROOT / "worker").rglob("*.py"))
                 for hit in _private_api_client_imports(path)]
    assert offenders == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from api_client._wire import JobKind\n", ["x.py:1 api_client._wire.JobKind"]),
        ("import api_client._keys\n", ["x.py:1 api_client._keys"]),
        ("from api_client import _client\n", ["x.py:1 api_client._client"]),
        ("from api_client.session import _tree\n", ["x.py:1 api_client.session._tree"]),
        ("from api_client.wire import JobKind\nimport api_client.errors\n", []),
        ("from worker._x import y\nfrom . import _z\n", []),
    ],
)
def test_private_import_finder(tmp_path: Path, source: str, expected: list[str]) -> None:
    # The checker itself must see every spelling of a private import (and only those).
    (tmp_path / "x.py").write_text(source, encoding="utf-8")
    assert _private_api_client_imports(tmp_path / "x.py", tmp_path) == expected


WORKER_ONLY = {"acquire_lease", "renew_lease", "release_lease", "mark_running",
               "is_cancel_requested", "EventPublisher", "LeaseOutcome", "Leases"}


def test_the_workers_job_lifecycle_is_not_in_api_client() -> None:
    """Leases, ``running`` and progress publishing live in worker/store, with their scripts."""
    scripts = sorted(p.name for p in (ROOT / "api_client").rglob("*.lua"))
    assert [s for s in scripts if s.startswith("lease_") or s == "running.lua"] == []
    defined = {node.name for path in (ROOT / "api_client").rglob("*.py")
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    assert defined & WORKER_ONLY == set()
    lifecycle = {p.name for p in (ROOT / "worker" / "store").glob("*.lua")}
    assert {"lease_acquire.lua", "lease_renew.lua", "lease_release.lua", "running.lua"} <= lifecycle
    # One copy of each script: none stands in both packages.
    assert set(scripts) & lifecycle == set()


# --- static layering: which worker packages may import which (every import statement counts,
# lazy ones inside functions and TYPE_CHECKING ones included) ---------------------------------
LEAVES = ["worker/tokens", "worker/jsjson.py", "worker/summarizer_types.py", "worker/memo.py"]


def _imported_modules(source: Path) -> list[str]:
    tree = ast.parse(source.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from worker.cli import file_commands`` imports worker.cli.file_commands too
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return names


def _sources(area: str) -> list[Path]:
    target = ROOT / area
    return [target] if target.is_file() else sorted(target.rglob("*.py"))


def _offending(area: str, banned: tuple[str, ...]) -> list[str]:
    return [f"{path.relative_to(ROOT)}: {name}"
            for path in _sources(area) for name in _imported_modules(path)
            if any(name == b or name.startswith(b + ".") for b in banned)]


@pytest.mark.parametrize(
    ("area", "banned"),
    [
        ("worker/llm", ("worker.compaction",)),
        ("worker/compaction", ("worker.llm",)),
        *[(leaf, ("worker.compaction", "worker.llm", "worker.service", "worker.store"))
          for leaf in LEAVES],
    ],
)
def test_layers_do_not_import(area: str, banned: tuple[str, ...]) -> None:
    assert _sources(area), f"{area} has no sources (moved?)"
    assert _offending(area, banned) == []


def test_the_layer_check_sees_lazy_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from worker.llm import router\n    import worker.compaction\n")
    assert _imported_modules(module) == ["worker.llm", "worker.llm.router", "worker.compaction"]


@pytest.mark.parametrize("module", ["worker.tokens", "worker.llm.chunking"])
def test_the_token_leaf_loads_neither_layer_above_it(module: str) -> None:
    banned = ["worker.compaction", "httpx", "redis", "celery"] if module == "worker.llm.chunking" \
        else ["worker.compaction", "worker.llm", "httpx", "redis", "celery", "tiktoken"]
    out = subprocess.run([sys.executable, "-c", CHECK.format(module=module, banned=banned)],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.strip() == "[]"


def test_no_two_private_modules_share_a_name() -> None:
    # Public modules may mirror a concern per package (settings, errors, jobs: api_client's and
    # worker/store's); a private one names an implementation, and two of them with one name
    # (worker/cli/_runtime.py and worker/service/_runtime.py) read as one module.
    names = [p.stem for top in ("worker", "api_client") for p in (ROOT / top).rglob("_*.py")
             if p.stem not in ("__init__", "__main__")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_the_cli_and_the_service_share_no_module_name() -> None:
    cli = {p.stem for p in (ROOT / "worker" / "cli").glob("*.py")} - {"__init__"}
    service = {p.stem for p in (ROOT / "worker" / "service").glob("*.py")} - {"__init__"}
    assert cli & service == set()


def test_cli_command_modules_are_registered_in_one_place() -> None:
    """Only worker/cli/__init__.py imports the command modules; they share session_files."""
    commands = {"worker.cli.file_commands", "worker.cli.inspect_commands",
                "worker.cli.prompt_commands", "worker.cli.runtime_commands",
                "worker.cli.celery_commands"}
    for path in (ROOT / "worker" / "cli").glob("*.py"):
        if path.name != "__init__.py":
            assert not commands & set(_imported_modules(path)), path.name
    init = (ROOT / "worker" / "cli" / "__init__.py").read_text(encoding="utf-8")
    assert all(f"{name.rpartition('.')[2]}.register(" in init for name in commands)
