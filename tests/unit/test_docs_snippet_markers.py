"""The docs test's reader (tests/support/snippets.py): markers, files, and broken references."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.snippets import broken_references, slug, snippets


def _doc(tmp_path: Path, text: str) -> Path:
    doc = tmp_path / "doc.md"
    doc.write_text(text)
    return doc


def test_markers_skip_files_and_hidden_blocks(tmp_path: Path) -> None:
    doc = _doc(
        tmp_path,
        "Intro.\n\n<!-- snippet: skip (installs things) -->\n\n```bash\npip install x\n```\n\n"
        "<!-- snippet: file notes.md -->\n```markdown\n# Notes\n```\n\n"
        "```python\n# mytools.py\nimport agentflow\n```\n\n"
        "<!-- snippet: hidden\nRUN = 'abc'\n-->\n\n"
        "Text in between.\n```yaml\nname: x\n```\n",
    )
    skip, file, module, hidden, plain = snippets(doc)
    assert (skip.lang, skip.skip, skip.line) == ("bash", "installs things", 6)
    assert file.file == "notes.md" and file.skip is None
    assert module.file == "mytools.py"
    assert hidden.hidden and hidden.code == "RUN = 'abc'\n" and hidden.lang == "python"
    assert plain.skip is None and plain.file is None and plain.code == "name: x\n"


def test_a_marker_applies_only_to_the_next_block(tmp_path: Path) -> None:
    doc = _doc(tmp_path, "<!-- snippet: skip (why) -->\nSome prose.\n\n```bash\nagentflow demo\n```\n")
    (block,) = snippets(doc)
    assert block.skip is None


@pytest.mark.parametrize(
    ("marker", "problem"),
    [("<!-- snippet: skip -->", "write the reason"), ("<!-- snippet: maybe -->", "unknown snippet marker")],
)
def test_bad_markers_are_refused(tmp_path: Path, marker: str, problem: str) -> None:
    doc = _doc(tmp_path, f"{marker}\n```bash\nagentflow demo\n```\n")
    with pytest.raises(ValueError, match=problem):
        snippets(doc)


def test_an_unclosed_block_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="never closed"):
        snippets(_doc(tmp_path, "```bash\nagentflow demo\n"))


def test_github_heading_anchors() -> None:
    assert slug("9. The inbox and waits for an event") == "9-the-inbox-and-waits-for-an-event"
    assert slug("`save_to_state`") == "save_to_state"
    assert (
        slug("Task changes reach the run that made the task")
        == "task-changes-reach-the-run-that-made-the-task"
    )


def test_broken_links_anchors_and_cited_files_are_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## A heading\n")
    doc = _doc(
        tmp_path,
        "# Title\n\n[ok](other.md#a-heading) [ok](#title) [web](https://example.com/x.md)\n"
        "[gone](missing.md) [no anchor](other.md#nope) `docs/nowhere/file.py` see NOWHERE.md\n"
        "`src/agentflow/settings.py` `llm/select.py` `src/agentflow/knowledge/playbooks/*.md`\n"
        "```bash\ncat not-checked-in-code.md\n```\n<!-- snippet: file hidden-name.md -->\n",
    )
    problems = broken_references(doc)
    assert len(problems) == 4, problems
    assert any("missing.md" in p for p in problems)
    assert any("other.md#nope" in p for p in problems)
    assert any("docs/nowhere/file.py" in p for p in problems)
    assert any("NOWHERE.md" in p for p in problems)
