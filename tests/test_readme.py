"""Every ```python block of README.md and of each docs/*.md page runs as written: in order, one
namespace per file (as a reader following that page would), against a real Redis and a real
worker of this test's own, with ``COMPACTOR_REDIS_URL`` pointing at that Redis. The README stays
a front door: at most 400 lines, each docs page linked from it once, and no page cites a text
that is not in the repository."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import RedisProcess
from runtime.runtime_support import running_worker, runtime_settings

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)
# Pages whose python blocks are signatures to read, not examples to run.
SIGNATURES = {"CONTRACTS.md"}
README_MAX_LINES = 400


def blocks(page: Path = README) -> list[tuple[int, str]]:
    """The page's python blocks with the line each starts on (README.md by default)."""
    text = page.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in BLOCK.finditer(text)]


def doc_pages() -> list[Path]:
    return sorted(p for p in DOCS.glob("*.md") if p.name not in SIGNATURES)


def every_block() -> list[tuple[str, int, str]]:
    """README's blocks, then each docs page's, in order."""
    pages = [README, *doc_pages()]
    return [(page.relative_to(REPO).as_posix(), line, code)
            for page in pages for line, code in blocks(page)]


@pytest.fixture(scope="module")
def readme_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    """One namespace per page, created on its first block; a Redis and a worker for all."""
    server = RedisProcess(tmp_path_factory.mktemp("readme-redis"))
    server.start()
    patch = pytest.MonkeyPatch()
    patch.setenv("COMPACTOR_REDIS_URL", server.url)
    for name in ("COMPACTOR_BROKER_URL", "COMPACTOR_RESULT_BACKEND", "COMPACTOR_KEY_PREFIX",
                 "COMPACTOR_TENANT"):
        patch.delenv(name, raising=False)
    patch.chdir(tmp_path_factory.mktemp("readme-cwd"))  # no .env of the developer's
    try:
        with running_worker(runtime_settings(server.url, job_deadline_s=50.0)):
            yield {}
    finally:
        patch.undo()
        server.stop()


def test_readme_has_python_blocks() -> None:
    assert len(blocks()) >= 3
    assert len(every_block()) >= 10


def test_the_readme_is_a_front_door_that_links_each_docs_page_once() -> None:
    text = README.read_text(encoding="utf-8")
    assert text.count("\n") <= README_MAX_LINES
    for page in sorted(DOCS.glob("*.md")):
        assert text.count(f"](docs/{page.name})") == 1, f"README links docs/{page.name} once"


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_no_page_cites_texts_outside_the_repository(page: Path) -> None:
    if page.name in SIGNATURES:
        pytest.skip("signatures of the parts; its owner keeps its references")
    text = page.read_text(encoding="utf-8")
    assert not re.findall(r"SPEC ?§|ARCHITECTURE", text), "say the rule itself"


def _anchors(page: Path) -> set[str]:
    """The anchors of a page's headings, as GitHub makes them (code blocks left out)."""
    text = re.sub(r"^```.*?^```$", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
            for title in re.findall(r"^#+ (.*)$", text, re.M)}


def test_every_relative_link_of_the_docs_resolves() -> None:
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for target, anchor in re.findall(r"\]\(([^)#:]*)(?:#([^)]*))?\)", text):
            path = (page.parent / target).resolve() if target else page
            assert path.exists(), f"{page.name} links {target}"
            assert not anchor or anchor in _anchors(path), f"{page.name} links {target}#{anchor}"


@pytest.mark.integration  # readme_env starts a Redis and a worker
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("page", "line", "code"), every_block(),
                         ids=[f"{p}:{n}" for p, n, _ in every_block()])
def test_block_runs(readme_env: dict[str, dict[str, Any]], page: str, line: int,
                    code: str) -> None:
    namespace = readme_env.setdefault(page, {"__name__": page.replace("/", ".")})
    exec(compile(code, f"{page}:{line}", "exec"), namespace)


def test_the_readme_names_every_package_of_the_fast_extra() -> None:
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = [re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0]
             for req in project["optional-dependencies"]["fast"]]
    text = README.read_text(encoding="utf-8")
    assert names and all(f"`{name}`" in text for name in names), names


def test_the_acl_lines_are_each_written_once() -> None:
    """The recovery tests run Redis with these lines (tests/helpers/doc_facts.py reads them)."""
    from helpers.doc_facts import acl_rules

    assert acl_rules("compactor").startswith("~compactor:* resetchannels ")
    assert acl_rules("acme").startswith("~compactor:tenant:acme:* ")
