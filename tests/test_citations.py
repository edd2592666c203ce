"""The repository explains itself: what the code cites is in ``docs/`` of this repository.

No tracked file cites a document that is not in the repository (the specification or the
architecture notes the project started from); every ``docs/<page>.md "<heading>"`` citation in
the code, the tests, the Lua scripts, the extension and the docs names a page and a heading
(or a paragraph's bold lead) that exist; a README section cited is in the README; and every
numbered difference the code names (``Q22``) is listed in docs/differences.md "Numbered
differences"."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
# Built from pieces, so that this file does not match itself.
OUTSIDE = re.compile("SPEC" + r" ?(?:§|Q\d)|" + "ARCH" + "ITECTURE")
# Figures and history may quote what they like; test_readme.py spells out its own check.
OUTSIDE_ALLOWED = {"docs/benchmarks.md", "tests/test_readme.py"}
CITATION = re.compile(r'docs/([\w.-]+\.md) "([^"\n]+)"')
README_CITATION = re.compile(r'README[,:]? "([^"\n]+)"')
CODE = (".py", ".lua", ".ts", ".mjs", ".js", ".md", ".toml", ".yaml", ".yml", ".sh")
LABEL = re.compile(r"\bQ(\d{1,2})\b")


@cache
def tracked() -> tuple[str, ...]:
    """The repository's tracked text files (git ls-files), vendored packages left out."""
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, check=True, capture_output=True,
                            text=True).stdout.split("\n")
    return tuple(p for p in listed if p.endswith(CODE) and "node_modules/" not in p
                 and (REPO / p).is_file())


def _text(path: str) -> str:
    return (REPO / path).read_text(encoding="utf-8", errors="replace")


@cache
def headings(page: str) -> frozenset[str]:
    """The headings of a docs page and its paragraphs' bold leads (``**Retention.**``), code
    blocks left out."""
    text = re.sub(r"^```.*?^```$", "", (DOCS / page).read_text(encoding="utf-8"),
                  flags=re.S | re.M)
    leads = re.findall(r"^\*\*([^*\n]+?)\.?\*\*", text, re.M)
    return frozenset(t.strip() for t in [*re.findall(r"^#+ (.*)$", text, re.M), *leads])


def test_no_file_cites_documents_outside_the_repository() -> None:
    found = [f"{path}:{n}: {line.strip()}"
             for path in tracked() if path not in OUTSIDE_ALLOWED
             for n, line in enumerate(_text(path).split("\n"), 1) if OUTSIDE.search(line)]
    assert found == [], "cite the docs/ page that states the rule:\n" + "\n".join(found)


def test_every_docs_citation_names_a_real_page_and_heading() -> None:
    citations = [(path, page, heading) for path in tracked()
                 for page, heading in CITATION.findall(_text(path))]
    assert len(citations) >= 100  # the parse finds the citations the code makes
    wrong = [f"{path}: docs/{page} \"{heading}\"" for path, page, heading in citations
             if not (DOCS / page).is_file() or heading not in headings(page)]
    assert wrong == [], "citations of no heading:\n" + "\n".join(wrong)


def test_every_readme_citation_names_a_readme_heading() -> None:
    """The README is a front door: a section that moved to docs/ is cited there."""
    text = re.sub(r"^```.*?^```$", "", _text("README.md"), flags=re.S | re.M)
    titles = {t.strip() for t in re.findall(r"^#+ (.*)$", text, re.M)}
    wrong = [f"{path}: README \"{heading}\"" for path in tracked() if path != "README.md"
             for heading in README_CITATION.findall(_text(path)) if heading not in titles]
    assert wrong == [], "cite the docs/ page instead:\n" + "\n".join(wrong)


@pytest.mark.parametrize("line", [
    'see docs/rules.md "Token counting".',
    'x = 1  # docs/hooks.md "Dispatch rules (as in the reference agent)"',
])
def test_the_parse_reads_a_citation(line: str) -> None:
    ((page, heading),) = CITATION.findall(line)
    assert heading in headings(page)


def test_every_numbered_difference_the_code_names_is_listed() -> None:
    listed = set(re.findall(r"^\| (Q\d+(?:, Q\d+)*) \|", _text("docs/differences.md"), re.M))
    numbers = {int(q[1:]) for row in listed for q in row.split(", ")}
    named = {int(n) for path in tracked() if path.endswith((".py", ".lua", ".ts"))
             for n in LABEL.findall(_text(path))}
    assert named, "the code names numbered differences"
    assert named <= numbers, f"not in docs/differences.md: {sorted(named - numbers)}"
