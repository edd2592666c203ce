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
        ("api_client.contract.session",
         ["redis", "celery", "httpx", "kombu", "worker", "tiktoken"]),
        ("api_client", ["worker", "tiktoken", "httpx", "celery", "kombu"]),
        # The thin client on a Redis broker: no Celery, kombu, tokenizer or HTTP library.
        ("api_client.client.sync_client", ["worker", "tiktoken", "httpx", "celery", "kombu"]),
        ("api_client.client.async_client", ["worker", "tiktoken", "httpx", "celery", "kombu"]),
        # The HTTP API: FastAPI over the asyncio client, nothing of the worker's.
        ("api_client.server.asgi", ["worker", "tiktoken", "httpx", "celery", "kombu"]),
        # The CLI registers ``serve`` without loading the web framework.
        ("worker.cli", ["fastapi", "starlette", "uvicorn"]),
    ],
)
def test_import_does_not_load(module: str, banned: list[str]) -> None:
    out = subprocess.run([sys.executable, "-c", CHECK.format(module=module, banned=banned)],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.strip() == "[]"


ROOT = Path(__file__).resolve().parents[1]
# The worker's job path sees only the contract; the CLI and the demo drive Compactor as a
# platform does, through the public client API (``from api_client import CompactionClient``).
PLATFORM_SIDE = ("worker/cli/",)


def _api_client_imports(path: Path, root: Path = ROOT) -> list[tuple[str, str]]:
    """(``file:line``, module or name) for every ``api_client`` import in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        where = f"{path.relative_to(root)}:{node.lineno}"
        found += [(where, m) for m in modules if m.split(".")[0] == "api_client"]
    return found


def _private_api_client_imports(path: Path, root: Path = ROOT) -> list[str]:
    """``api_client`` modules (or names) with a leading underscore that ``path`` imports."""
    return [f"{where} {module}" for where, module in _api_client_imports(path, root)
            if any(p.startswith("_") for p in module.split(".")[1:])]


def _worker_sources(platform_side: bool = False) -> list[Path]:
    return [p for p in sorted((ROOT / "worker").rglob("*.py"))
            if platform_side or not str(p.relative_to(ROOT)).startswith(PLATFORM_SIDE)]


def test_worker_imports_only_the_public_contract_of_api_client() -> None:
    offenders = [hit for path in _worker_sources(platform_side=True)
                 for hit in _private_api_client_imports(path)]
    assert offenders == []


def test_the_workers_job_path_imports_the_contract_and_nothing_else_of_api_client() -> None:
    offenders = [f"{where} {module}" for path in _worker_sources()
                 for where, module in _api_client_imports(path)
                 if not module.startswith("api_client.contract.")]
    assert offenders == []


@pytest.mark.parametrize(("package", "banned"), [
    ("api_client", ("worker",)),
    ("api_client/contract", ("api_client.client", "worker")),
])
def test_the_client_never_imports_the_worker_nor_the_contract_the_client(
        package: str, banned: tuple[str, ...]) -> None:
    assert _offending(package, banned) == []


def test_the_http_api_uses_the_public_client_and_the_contract_only() -> None:
    """api_client/server is a platform of the client: ``from api_client import ...``, the
    contract and its own modules; never the client's insides, never the worker."""
    offenders = [f"{where} {module}" for path in sorted((ROOT / "api_client" / "server")
                                                        .rglob("*.py"))
                 for where, module in _api_client_imports(path)
                 if module.count(".") > 1 and not module.startswith(
                     ("api_client.contract.", "api_client.server."))]
    assert offenders == []
    assert _offending("api_client/server", ("worker", "api_client.client")) == []


def _class_bases(path: Path) -> list[tuple[str, str]]:
    """(class, the module its base was imported from) for each base named by an import."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    origin = {alias.asname or alias.name: node.module for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}
    return [(node.name, origin[base.id]) for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef) for base in node.bases
            if isinstance(base, ast.Name) and base.id in origin]


# One exception root for both sides, and the worker's settings extend the client's.
ALLOWED_BASES = ("api_client.contract.errors", "api_client.contract.settings")


def test_no_worker_class_subclasses_a_client_class_settings_aside() -> None:
    """The worker's store composes contract code; errors and settings extend the contract's."""
    offenders = [f"{path.relative_to(ROOT)}: {cls}({module})" for path in _worker_sources()
                 for cls, module in _class_bases(path)
                 if module.startswith("api_client") and module not in ALLOWED_BASES]
    assert offenders == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from api_client._wire import JobKind\n", ["x.py:1 api_client._wire.JobKind"]),
        ("import api_client._keys\n", ["x.py:1 api_client._keys"]),
        ("from api_client import _client\n", ["x.py:1 api_client._client"]),
        ("from api_client.contract.session import _tree\n",
         ["x.py:1 api_client.contract.session._tree"]),
        ("from api_client.contract.wire import JobKind\nimport api_client.contract.errors\n", []),
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
    """Leases, ``running`` and progress publishing live in worker/store; their scripts are text
    beside every other script (one folder, one loader: api_client/contract/lua_scripts.py)."""
    defined = {node.name for path in (ROOT / "api_client").rglob("*.py")
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    assert defined & WORKER_ONLY == set()


def test_every_lua_script_is_in_one_folder() -> None:
    folder = ROOT / "api_client" / "contract" / "lua"
    scripts = {p for d in ("api_client", "worker") for p in (ROOT / d).rglob("*.lua")}
    assert {p.parent for p in scripts} == {folder}
    assert {"lease_acquire.lua", "running.lua", "enqueue.lua", "finish.lua"} <= {
        p.name for p in scripts}
    # Each names its KEYS and ARGV in the comment it starts with (a helper: that it reads none).
    for path in scripts:
        lines = path.read_text(encoding="utf-8").split("\n")
        header = "\n".join(line for line in lines[:next(i for i, line in enumerate(lines)
                                                        if not line.startswith("--"))])
        assert "KEYS" in header and "ARGV" in header, path.name


# --- static layering: which worker packages may import which (every import statement counts,
# lazy ones inside functions and TYPE_CHECKING ones included) ---------------------------------
LEAVES = ["worker/tokens", "worker/summary_requests.py", "worker/outbound",
          "worker/observability/metrics.py"]


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


# Each package may have its own settings and its own errors (the same meaning: this package's);
# any other name stands for one thing in the whole tree, private or not.
SHARED_STEMS = {"settings", "errors", "__init__", "__main__"}


def test_no_two_modules_share_a_stem() -> None:
    stems = [p.stem.lstrip("_") for top in ("worker", "api_client")
             for p in (ROOT / top).rglob("*.py") if p.stem not in SHARED_STEMS]
    assert sorted({s for s in stems if stems.count(s) > 1}) == []


def test_the_cli_and_the_service_share_no_module_name() -> None:
    cli = {p.stem for p in (ROOT / "worker" / "cli").glob("*.py")} - {"__init__"}
    service = {p.stem for p in (ROOT / "worker" / "service").glob("*.py")} - {"__init__"}
    assert cli & service == set()


def test_cli_command_modules_are_registered_in_one_place() -> None:
    """Only worker/cli/__init__.py imports the command modules; they share session_files."""
    commands = {"worker.cli.file_commands", "worker.cli.inspect_commands",
                "worker.cli.prompt_commands", "worker.cli.runtime_commands",
                "worker.cli.celery_commands", "worker.cli.serve_command",
                "worker.cli.session_commands"}
    for path in (ROOT / "worker" / "cli").glob("*.py"):
        if path.name != "__init__.py":
            assert not commands & set(_imported_modules(path)), path.name
    init = (ROOT / "worker" / "cli" / "__init__.py").read_text(encoding="utf-8")
    assert all(f"{name.rpartition('.')[2]}.register(" in init for name in commands)


# --- planning keeps no state across jobs: a cache that pays lives at the composition root
# (worker.service.composition builds it) and is passed in. The cl100k encoding loader is exempt.
_STATEFUL = {"IdentityMemo", "PrefixFolds", "TokenCache", "OrderedDict", "dict", "list", "set",
             "defaultdict", "deque", "Lock", "RLock", "ThreadPoolExecutor", "lru_cache", "cache",
             "WeakKeyDictionary", "WeakValueDictionary"}


def _called(node: ast.expr) -> str:
    node = node.func if isinstance(node, ast.Call) else node
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def _outer_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of a module or class body, classes' bodies included, functions' not."""
    return [s for node in body for s in [node, *(
        _outer_statements(node.body) if isinstance(node, ast.ClassDef) else [])]]


def _kept_state(source: str, name: str) -> list[str]:
    """Module and class level assignments of a memo, lock, pool or fresh container, and
    functions cached by ``functools``: state a module keeps from one job to the next."""
    found: list[str] = []
    for node in _outer_statements(ast.parse(source).body):
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        empty = isinstance(value, ast.Dict | ast.List | ast.Set) and not (
            value.keys if isinstance(value, ast.Dict) else value.elts)
        stateful = isinstance(value, ast.Call) and _called(value) in _STATEFUL
        cached = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
            _called(d) in {"lru_cache", "cache"} for d in node.decorator_list)
        if empty or stateful or cached:
            found.append(f"{name}:{node.lineno}")
    return found


def test_planning_and_token_counting_keep_no_module_level_caches() -> None:
    sample = ("import functools\nA = IdentityMemo()\nB: dict[str, int] = {}\nC = {'k': 1}\n"
              "@functools.lru_cache(maxsize=8)\ndef f(): pass\nclass K:\n    x = Lock()\n"
              "    def g(self):\n        y = []\n")
    assert _kept_state(sample, "x.py") == ["x.py:2", "x.py:3", "x.py:6", "x.py:8"]
    sources = [p for area in ("worker/compaction", "worker/tokens") for p in _sources(area)
               if p.name != "bpe.py"]  # bpe.py: the loaded cl100k encoding and counter
    assert len(sources) > 10
    assert [hit for p in sources
            for hit in _kept_state(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))] == []
