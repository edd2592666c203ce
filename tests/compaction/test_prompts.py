"""Prompt templates and prompt assembly (docs/compaction.md "Summary prompts",
"Summary budgets")."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from string import Template

import pytest

from worker.compaction import prompts
from worker.compaction.prompts import (
    BRANCH_MAX_TOKENS,
    PromptTemplateError,
    build_branch_prompt,
    build_history_prompt,
    build_short_prompt,
    build_turn_prefix_prompt,
    history_max_tokens,
    render,
    short_max_tokens,
    template_names,
    turn_prefix_max_tokens,
)

REPO = Path(__file__).resolve().parents[2]
PROMPTS_DIR = REPO / "prompts"
REQUIRED = {
    "system",
    "summary-initial",
    "summary-update",
    "turn-prefix",
    "short-summary",
    "branch-summary",
    "branch-preamble",
    "compaction-summary-context",
    "branch-summary-context",
    "custom-instructions",
}


def raw(name: str) -> str:
    """A template's text read straight from the repository, independent of the loader."""
    return (PROMPTS_DIR / f"{name}.md").read_text(encoding="utf-8").rstrip()


def identifiers(name: str) -> list[str]:
    return Template(raw(name)).get_identifiers()


# --- budgets -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reserve", "history", "prefix", "short"),
    [
        (16384, 13107, 8192, 512),
        (2000, 1600, 1000, 400),
        (3, 2, 1, 0),  # 0.8*3 = 2.4000000000000004 floors to 2
        (0, 0, 0, 0),
        (100000, 80000, 50000, 512),
    ],
)
def test_budgets(reserve: int, history: int, prefix: int, short: int) -> None:
    assert history_max_tokens(reserve) == history
    assert turn_prefix_max_tokens(reserve) == prefix
    assert short_max_tokens(reserve) == short


def test_branch_budget() -> None:
    assert BRANCH_MAX_TOKENS == 2048


# --- templates -----------------------------------------------------------------------------


def test_template_set_matches_repository() -> None:
    on_disk = {p.stem for p in PROMPTS_DIR.glob("*.md")}
    assert set(template_names()) == on_disk
    assert on_disk >= REQUIRED


@pytest.mark.parametrize("name", sorted(p.stem for p in PROMPTS_DIR.glob("*.md")))
def test_every_template_renders_with_exactly_its_variables(name: str) -> None:
    text = raw(name)
    assert Template(text).is_valid(), f"{name}: malformed placeholder"
    names = identifiers(name)
    values = {var: f"<<{var.upper()}>>" for var in names}
    out = render(name, **values)
    assert out.strip(), f"{name} renders empty"
    for value in values.values():
        assert value in out
    assert "$" not in Template(text).safe_substitute(values).replace("$$", "")
    for var in names:
        with pytest.raises(PromptTemplateError, match="missing variables"):
            render(name, **{k: v for k, v in values.items() if k != var})
    with pytest.raises(PromptTemplateError, match=r"unused variables \['not_in_template'\]"):
        render(name, **values, not_in_template="x")


@pytest.mark.parametrize("name", ["nope", "../pyproject", "System", "system.md", ""])
def test_unknown_template(name: str) -> None:
    with pytest.raises(PromptTemplateError):
        render(name)


@pytest.fixture
def template_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr(prompts, "_root", lambda summary_format=None: (
        tmp_path if summary_format is None else tmp_path / summary_format))
    yield tmp_path


def test_malformed_template_is_rejected(template_dir: Path) -> None:
    (template_dir / "bad.md").write_text("costs $ 5\n", encoding="utf-8")
    (template_dir / "good.md").write_text("costs $$5 for $who\n\n", encoding="utf-8")
    with pytest.raises(PromptTemplateError, match="malformed"):
        render("bad")
    assert render("good", who="you") == "costs $5 for you"  # trailing whitespace dropped


@pytest.mark.parametrize(
    ("name", "headings"),
    [
        (
            name,
            [
                "## Goal",
                "## Constraints & Preferences",
                "## Progress",
                "### Done",
                "### In Progress",
                "### Blocked",
                "## Key Decisions",
                "## Next Steps",
                "## Critical Context",
                "## Additional Notes",
            ],
        )
        for name in ("summary-initial", "summary-update")
    ]
    + [
        (
            "branch-summary",
            [
                "## Goal",
                "## Constraints & Preferences",
                "## Progress",
                "### Done",
                "### In Progress",
                "### Blocked",
                "## Key Decisions",
                "## Next Steps",
            ],
        ),
        ("turn-prefix", ["## Original Request", "## Early Progress", "## Context for Suffix"]),
    ],
)
def test_section_structure(name: str, headings: list[str]) -> None:
    lines = render(name).splitlines()
    found = [line for line in lines if line.startswith("#")]
    assert found == headings


def test_fixed_texts() -> None:
    assert prompts.system_prompt() == raw("system")
    assert prompts.branch_preamble() == raw("branch-preamble")
    assert len(prompts.branch_preamble().splitlines()) == 2
    assert prompts.compaction_context_intro() == raw("compaction-summary-context")
    assert prompts.branch_context_intro() == raw("branch-summary-context")
    assert prompts.with_branch_preamble("BODY") == raw("branch-preamble") + "\n\nBODY"


# --- assembly ------------------------------------------------------------------------------

CONV = "[User]: fix the bug\n\n[Assistant]: done"
CONV_BLOCK = "<conversation>\n" + CONV + "\n</conversation>\n\n"


def label(instructions: str) -> str:
    return Template(raw("custom-instructions")).substitute(instructions=instructions)


@pytest.mark.parametrize(
    ("previous", "override", "custom", "extra"),
    list(
        itertools.product(
            [None, "", "## Goal\nold"],
            [None, "", "OVERRIDE"],
            [None, "", "focus on tests"],
            [(), ("a", "b c")],
        )
    ),
)
def test_history_prompt_shapes(
    previous: str | None, override: str | None, custom: str | None, extra: tuple[str, ...]
) -> None:
    out = build_history_prompt(
        CONV,
        previous_summary=previous,
        custom_instructions=custom,
        prompt_override=override,
        extra_context=extra,
    )
    expected = CONV_BLOCK
    if previous:
        expected += "<previous-summary>\n" + previous + "\n</previous-summary>\n\n"
    if extra:
        expected += "<additional-context>\n- a\n- b c\n</additional-context>\n\n"
    base = override or (raw("summary-update") if previous else raw("summary-initial"))
    if custom:
        base += "\n\n" + label(custom)
    assert out == expected + base


def test_custom_instructions_label_carries_the_text() -> None:
    out = build_history_prompt(CONV, custom_instructions="keep $HOME and ${x} literal")
    assert out.endswith("keep $HOME and ${x} literal")
    assert out.startswith(CONV_BLOCK + raw("summary-initial") + "\n\n")


@pytest.mark.parametrize(
    ("stored", "sent"),
    [
        ("S\n\n<read-files>\na\n</read-files>\n\n<modified-files>\nb\n</modified-files>", "S"),
        ("S<read-files>\na\\nb\n</read-files><modified-files>\nc\n</modified-files>", "S"),
        ("S", "S"),
    ],
)
def test_history_prompt_strips_previous_summary_tags(stored: str, sent: str) -> None:
    out = build_history_prompt(CONV, previous_summary=stored)
    assert out == CONV_BLOCK + "<previous-summary>\n" + sent + "\n</previous-summary>\n\n" + raw(
        "summary-update"
    )


def test_history_prompt_previous_summary_that_is_only_tags_counts_as_none() -> None:
    out = build_history_prompt(CONV, previous_summary="<read-files>\na\n</read-files>")
    assert out == CONV_BLOCK + raw("summary-initial")


def test_turn_prefix_prompt() -> None:
    assert build_turn_prefix_prompt(CONV) == CONV_BLOCK + raw("turn-prefix")
    assert build_turn_prefix_prompt("") == "<conversation>\n\n</conversation>\n\n" + raw(
        "turn-prefix"
    )


@pytest.mark.parametrize(
    ("merged", "extra", "middle"),
    [
        ("", (), ""),
        ("M", (), "<previous-summary>\nM\n</previous-summary>\n\n"),
        ("", ("x",), "<additional-context>\n- x\n</additional-context>\n\n"),
        (
            "M\n\nmore",
            ["x", "y"],
            "<previous-summary>\nM\n\nmore\n</previous-summary>\n\n"
            "<additional-context>\n- x\n- y\n</additional-context>\n\n",
        ),
    ],
)
def test_short_prompt(merged: str, extra: tuple[str, ...], middle: str) -> None:
    out = build_short_prompt(CONV, merged_summary=merged, extra_context=extra)
    assert out == CONV_BLOCK + middle + raw("short-summary")


@pytest.mark.parametrize(
    ("custom", "tail"),
    [(None, None), ("", None), ("Only list the files touched.", "Only list the files touched.")],
)
def test_branch_prompt(custom: str | None, tail: str | None) -> None:
    out = build_branch_prompt(CONV, custom_instructions=custom)
    assert out == CONV_BLOCK + (tail if tail is not None else raw("branch-summary"))


def test_extra_context_accepts_any_iterable() -> None:
    out = build_history_prompt(CONV, extra_context=iter(["one"]))
    assert out == CONV_BLOCK + "<additional-context>\n- one\n</additional-context>\n\n" + raw(
        "summary-initial"
    )


# --- packaging -----------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_wheel_ships_templates_and_loader_finds_them(tmp_path: Path) -> None:
    wheel_dir = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-q", "-w", str(wheel_dir)],
        check=True,
        timeout=45,
        capture_output=True,
    )
    (wheel,) = wheel_dir.glob("compactor-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        shipped = {
            n.removeprefix("worker/_prompts/")
            for n in zf.namelist()
            if n.startswith("worker/_prompts/")
        }
        # the summary formats' folders too (prompts/<format>/*.md)
        assert shipped == {p.relative_to(PROMPTS_DIR).as_posix()
                           for p in PROMPTS_DIR.rglob("*.md")}
        for name in shipped:
            assert zf.read(f"worker/_prompts/{name}").decode() == (PROMPTS_DIR / name).read_text(
                encoding="utf-8"
            )
        for name in ("compaction-summary-context.md", "branch-summary-context.md"):
            # the client's context building reads its own copy (it never imports worker)
            assert zf.read(f"api_client/contract/session/_wrappers/{name}") == zf.read(
                f"worker/_prompts/{name}")
        site = tmp_path / "site"
        zf.extractall(site)
    # A non-editable install: the unpacked wheel first on the path, run from elsewhere.
    probe = (
        "import worker.compaction.prompts as p, sys;"
        "print(p.__file__); print(p._root()); sys.stdout.write(p.system_prompt())"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=env,
        check=True,
        timeout=30,
        capture_output=True,
        text=True,
    )
    module_file, root, text = result.stdout.split("\n", 2)
    assert module_file.startswith(str(site))
    assert Path(root) == site / "worker" / "_prompts"
    assert text == raw("system")
    formatted = subprocess.run(  # a summary format's folder, read from the wheel
        [sys.executable, "-c", "import worker.compaction.prompts as p, sys;"
         "sys.stdout.write(p.system_prompt('pi-1.6'))"],
        cwd=tmp_path, env=env, check=True, timeout=30, capture_output=True, text=True)
    assert formatted.stdout == prompts.system_prompt("pi-1.6")
    probe = (
        "import api_client.contract.session.convert as c, sys;"
        "print(c._wrapper_root()); sys.stdout.write(c.wrap_compaction_summary('S'))"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, check=True,
                            timeout=30, capture_output=True, text=True)
    root, text = result.stdout.split("\n", 1)
    assert Path(root) == site / "api_client" / "contract" / "session" / "_wrappers"
    assert text == raw("compaction-summary-context") + "\n\n<summary>\nS\n</summary>"


@pytest.mark.parametrize(
    "name",
    [
        "summary-initial",
        "summary-update",
        "turn-prefix",
        "branch-summary",
    ],
)
def test_summary_prompts_ask_for_paths_commands_and_errors_verbatim(name: str) -> None:
    text = " ".join(render(name).split())
    assert "verbatim, character for character" in text
    for what in ("every file path", "every command that was run", "first line of every error",
                 "each request the user made"):
        assert what in text


@pytest.mark.parametrize("parts", [(), ("[User]: hi",), ("[User]: a", "[Assistant]: b 😀"),
                                   tuple(f"[User]: {i} é" for i in range(7))])
def test_a_conversation_given_as_parts_is_the_prompt_of_its_text(parts: tuple[str, ...]) -> None:
    conversation = prompts.Conversation(parts, "\n\n")
    text = "\n\n".join(parts)
    assert conversation.length == len(text)
    builders = [
        lambda c: prompts.build_history_prompt(c, previous_summary="old", extra_context=["x"]),
        lambda c: prompts.build_turn_prefix_prompt(c, previous_summary="p"),
        lambda c: prompts.build_short_prompt(c, merged_summary="m"),
        lambda c: prompts.build_branch_prompt(c, custom_instructions="focus"),
    ]
    for build in builders:
        assert build(conversation) == build(text)


def test_a_request_knows_where_its_conversation_stands() -> None:
    from worker.compaction.summarize import RequestOptions, history_request

    messages = [{"role": "user", "content": "fix a.py"},
                {"role": "assistant", "content": [{"type": "text", "text": "done 😀"}]}]
    request = history_request(messages, "before", RequestOptions(None, None, (), 16384, (), ()))
    layout = request.layout
    assert layout is not None
    assert layout.head + layout.separator.join(layout.parts) + layout.tail == request.prompt
    assert layout.parts == ("[User]: fix a.py", "[Assistant]: done 😀")


def test_a_prompt_shaped_otherwise_has_no_layout() -> None:
    from worker.compaction.summarize import _layout

    conversation = prompts.Conversation(("[User]: a", "[User]: b"), "\n\n")
    assert _layout("no conversation here", conversation) is None
    shifted = prompts.CONVERSATION_OPEN + "x" + "[User]: a\n\n[User]: b" + "\ntail"
    assert _layout(shifted, conversation) is None
    assert _layout(prompts.build_branch_prompt(conversation), conversation) is not None


# --- summary formats (docs/compaction.md "Summary formats"; goldens: test_summary_formats.py) --


@pytest.mark.parametrize("summary_format", ["pi-1.6", "pi-0.73"])
def test_format_folders_hold_pis_prompts_under_a_header(summary_format: str) -> None:
    folder = PROMPTS_DIR / summary_format
    names = {p.stem for p in folder.glob("*.md")}
    assert names == {"system", "summary-initial", "summary-update", "turn-prefix",
                     "branch-summary", "branch-preamble", "custom-instructions"}
    version = {"pi-1.6": "pi 1.6.0", "pi-0.73": "pi 0.73.1"}[summary_format]
    for path in folder.glob("*.md"):
        head, _, body = path.read_text(encoding="utf-8").partition("\n")
        assert head.startswith(f"<!-- {version} ") and head.endswith("-->")
        assert render(path.stem, summary_format, **(  # type: ignore[arg-type]
            {"instructions": "x"} if path.stem == "custom-instructions" else {})) == (
            body.rstrip().replace("$instructions", "x"))
        assert "<!--" not in prompts.load_template(path.stem, summary_format).template


def test_pi_formats_cut_tool_results_and_pi16_leaves_thinking_out() -> None:
    long = "[Tool result]: " + "x" * 1999 + "\U0001F600" + "y" * 10  # the emoji on the cut
    parts = ("[User]: hi", "[Assistant thinking]: hmm", "[Assistant]: ok", long)
    assert prompts.agent_parts(parts, None) == parts
    cut = "[Tool result]: " + "x" * 1999 + "\n\n[... 11 more characters truncated]"
    assert prompts.agent_parts(parts, "pi-1.6") == ("[User]: hi", "[Assistant]: ok", cut)
    assert prompts.agent_parts(parts, "pi-0.73") == (*parts[:3], cut)
    short = ("[Tool result]: " + "\U0001F600" * 1000,)  # 2 000 UTF-16 units: whole
    assert prompts.agent_parts(short, "pi-1.6") == short


def test_pi16_turn_prefix_prompt_has_headings_and_focus() -> None:
    prompt = build_turn_prefix_prompt(prompts.Conversation(("[User]: a", "[User]: b"), "\n\n"),
                                      summary_format="pi-1.6", custom_instructions="parser")
    assert prompt.startswith("# Conversation\n[User]: a\n\n[User]: b\n\n# Instructions\n")
    assert prompt.endswith("\n\nAdditional focus: parser")
    assert "## Progress So Far" in prompt and "## Context Needed to Continue" in prompt
    old = build_turn_prefix_prompt("[User]: a", summary_format="pi-0.73",
                                   custom_instructions="parser")
    assert old.startswith("<conversation>\n") and "parser" not in old  # 0.73 takes no focus
