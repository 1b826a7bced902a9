"""The llama-swap page, driven like a user: open a config.yaml, pick a model, set its draft,
read the diff, save; migrate a user's out-of-date file; a bad file is explained."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QDialog
from specdeck.core import swap
from specdeck.core.swap.actions import model_rows
from specdeck.gui.widgets.config_dialog import ConfirmChangeDialog
from swap_samples import SWAP, USER, schema_ok


@pytest.fixture
def page(qtbot, configured_qapp):
    from specdeck.gui.context import AppContext
    from specdeck.gui.pages.swap import SwapPage

    page = SwapPage(AppContext())
    qtbot.addWidget(page)
    page.resize(1280, 720)
    page.show()
    yield page
    page.shutdown()


@pytest.fixture
def accept_saves(monkeypatch):
    """The confirmation dialog answered with Save (its diff is what the page showed)."""
    shown = []

    def exec_(dialog):
        shown.append(dialog.diff.toPlainText())
        return QDialog.DialogCode.Accepted

    monkeypatch.setattr(ConfirmChangeDialog, "exec", exec_)
    return shown


def _open(qtbot, page, path: Path) -> None:
    page.open_path(path)
    qtbot.waitUntil(lambda: page.config is not None and page.config.path == path, timeout=10_000)


def _select(page, name: str) -> None:
    names = [page.models.item(i).data(256) for i in range(page.models.count())]
    page.models.setCurrentRow(names.index(name))


def test_set_a_draft_on_the_example_shows_the_diff_and_saves_only_those_lines(
        qtbot, page, tmp_path, accept_saves):
    path = tmp_path / "config.yaml"
    before = (SWAP / "config.example.yaml").read_text()
    path.write_text(before)
    _open(qtbot, page, path)
    rows = model_rows(swap.load(path))
    assert page.models.count() == len(rows)
    assert [page.models.item(i).text().split(" — ")[0].lstrip("⚠ ") for i in range(len(rows))] == [
        r["model"] for r in rows]

    _select(page, "gpt-oss-120b")
    assert "gpt-oss-120b" in page.model_info.text() and page.draft.isEnabled()
    page.draft.setText("/models/gpt-oss-20b-Q4_K_M.gguf")
    page.draft_max.setValue(8)
    qtbot.waitUntil(lambda: "--spec-draft-n-max 8" in page.diff_view.toPlainText(), timeout=10_000)
    diff = page.diff_view.toPlainText()
    added = [ln[1:] for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    removed = [ln for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    assert removed == []
    assert [a.strip() for a in added] == ["-md /models/gpt-oss-20b-Q4_K_M.gguf",
                                         "--spec-type draft-simple", "--spec-draft-n-max 8"]
    assert page.save_button.isEnabled()

    page.save()
    assert accept_saves == [diff]
    assert page.status.text() == "Saving config.yaml…" and not page.save_button.isEnabled()
    qtbot.waitUntil(lambda: not page.tasks.running("save"), timeout=10_000)  # in a worker
    assert (tmp_path / "config.yaml.bak").read_text() == before
    text = path.read_text()
    schema_ok(text)
    assert swap.load(path).model("gpt-oss-120b").flag_value("--spec-draft-n-max") == "8"
    # Re-read after the save: the model now drafts, the form is clear, nothing to save.
    qtbot.waitUntil(lambda: "draft" in page.models.currentItem().text()
                    and page.change is None, timeout=10_000)
    assert not page.save_button.isEnabled() and page.draft.text() == ""


def test_migrate_all_rewrites_last_years_flags_in_a_users_file(qtbot, page, tmp_path, accept_saves):
    path = tmp_path / "config.yaml"
    path.write_text(USER)
    _open(qtbot, page, path)
    assert all(page.models.item(i).text().startswith("⚠") for i in range(page.models.count()))
    _select(page, "qwen-coder-32b")
    findings = [page.findings.item(i).text() for i in range(page.findings.count())]
    assert any("--draft-max was removed" in f for f in findings)
    assert any("--flash-attn now needs" in f for f in findings)
    assert page.migrate_button.isEnabled()

    page.plan_migrate_all()
    qtbot.waitUntil(lambda: page.change is not None, timeout=10_000)
    diff = page.diff_view.toPlainText()
    assert "+      --spec-draft-n-max 16 --spec-draft-n-min 4" in diff
    assert "+      --flash-attn on --metrics" in diff
    page.save()
    qtbot.waitUntil(lambda: not page.tasks.running("save"), timeout=10_000)
    text = path.read_text()
    schema_ok(text)
    assert "# the draft goes on the P40" in text and "-md /models/Qwen2.5-Coder-0.5B-Instruct-Q8_0.gguf   " in text
    for model in swap.load(path).models:
        assert swap.findings(model) == []
    qtbot.waitUntil(lambda: not any(page.models.item(i).text().startswith("⚠")
                                    for i in range(page.models.count())), timeout=10_000)
    assert not page.migrate_button.isEnabled()


def test_remove_drafting_and_revert(qtbot, page, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(USER)
    _open(qtbot, page, path)
    _select(page, "llama-8b")
    page.no_draft.setChecked(True)
    assert not page.draft.isEnabled()
    qtbot.waitUntil(lambda: page.change is not None, timeout=10_000)
    assert "-md /models/Llama-3.2-1B-Q8_0.gguf" not in page.change.new_text.split("llama-8b")[1]
    page.revert()
    assert page.change is None and page.diff_view.toPlainText() == "" and not page.no_draft.isChecked()
    assert path.read_text() == USER  # nothing written without Save


def test_a_file_that_is_not_a_llama_swap_config_is_explained(qtbot, page, tmp_path):
    path = tmp_path / "config.yml"
    path.write_text("network:\n  host: 127.0.0.1\n")  # a TabbyAPI config, say
    page.open_path(path)
    qtbot.waitUntil(lambda: page.banner.isVisible() and "no models: section" in page.banner.label.text(),
                    timeout=10_000)
    assert page.config is None and not page.models.isEnabled() and not page.save_button.isEnabled()


def test_names_from_the_file_are_shown_escaped_and_unreadable_cmds_explained(qtbot, page,
                                                                              tmp_path):
    """A model name with terminal escapes and HTML reads as what it is in every label, list
    item and tooltip; a cmd whose macros loop is explained and not offered for editing; what
    llama-swap refuses in the file is in the banner (issue 26)."""
    from swap_hostile import SERVER

    path = tmp_path / "config.yaml"
    path.write_text(f"""\
macros:
  a: "-md ${{b}}"
  b: "${{a}}"
  me: "${{me}}"
models:
  "evil\\e[2J<img src=x>":
    cmd: {SERVER} -m /m/t.gguf -md /m/d.gguf
  looped:
    cmd: {SERVER} -m /m/t.gguf ${{a}}
""")
    _open(qtbot, page, path)
    name = "evil\x1b[2J<img src=x>"
    item = page.models.item(0)
    assert item.data(256) == name  # the real name, for the edits
    assert item.text().startswith("⚠ evil\\x1b[2J<img src=x> — ")  # plain text, escaped
    assert "\x1b" not in item.toolTip() and item.toolTip().startswith("<qt>")
    _select(page, name)
    info = page.model_info.text()
    assert "<b>evil\\x1b[2J&lt;img src=x&gt;</b>" in info and "<img" not in info
    assert page.draft.isEnabled()
    page.draft_max.setValue(4)
    qtbot.waitUntil(lambda: page.change is not None, timeout=10_000)
    assert "\x1b" not in page.status.text()

    _select(page, "looped")
    assert "a cycle" in page.model_info.text() and "Problem" in page.model_info.text()
    assert not page.draft.isEnabled() and not page.draft_max.isEnabled()
    assert page.banner.isVisible()
    assert "macro &#x27;me&#x27; uses itself" in page.banner.label.text()


def test_a_save_that_fails_is_shown_in_place_and_the_change_stays(qtbot, page, tmp_path,
                                                                 accept_saves):
    path = tmp_path / "config.yaml"
    before = (SWAP / "config.example.yaml").read_text()
    path.write_text(before)
    _open(qtbot, page, path)
    _select(page, "gpt-oss-120b")
    page.draft.setText("/models/gpt-oss-20b-Q4_K_M.gguf")
    qtbot.waitUntil(lambda: page.save_button.isEnabled(), timeout=10_000)
    path.chmod(0o444)  # read-only: SpecDeck leaves it as it is
    try:
        page.save()
        qtbot.waitUntil(lambda: page.banner.isVisible(), timeout=10_000)
    finally:
        path.chmod(0o644)
    assert "Could not save config.yaml" in page.banner.label.text()
    assert "read-only" in page.banner.label.text()
    assert path.read_text() == before and page.save_button.isEnabled()


def test_the_spec_type_dropdown_lists_what_the_binary_offers(qtbot, page, tmp_path):
    """Issue 28: the dropdown is the llama-server's own --help list, so a method SpecDeck has
    never heard of (help_samples: ngram-foo) is offered, and Draft max writes that method's
    own k flag; with no binary given, the list is the fallback and says so."""
    from help_samples import newer_binary
    from specdeck.core.servers.llama_server import fallback_help

    (tmp_path / "b").mkdir()
    binary = newer_binary(tmp_path / "b")
    path = tmp_path / "config.yaml"
    path.write_text(f"models:\n  smol:\n    cmd: {binary} -m /models/smol.gguf -t 2\n")
    _open(qtbot, page, path)
    offered = [page.spec_type.itemData(i) for i in range(1, page.spec_type.count())]
    assert offered == [m.name for m in fallback_help().methods] and "ngram-foo" not in offered
    assert page.spec_type_source.isVisible() and "fallback" in page.spec_type_source.text()
    assert "fallback" in page.spec_type.toolTip()
    _select(page, "smol")

    page.binary.setText(binary)
    page.reload()
    qtbot.waitUntil(lambda: page.info is not None, timeout=10_000)
    offered = [page.spec_type.itemData(i) for i in range(1, page.spec_type.count())]
    assert offered[-2:] == ["ngram-foo", "draft-zeta"] and not page.spec_type_source.isVisible()
    foo = page.spec_type.findData("ngram-foo")
    assert "--spec-ngram-foo-size-m (default 16)" in page.spec_type.itemData(foo, 3)  # tooltip
    _select(page, "smol")
    page.spec_type.setCurrentIndex(foo)
    page.draft_max.setValue(6)
    qtbot.waitUntil(lambda: "--spec-ngram-foo-size-m 6" in page.diff_view.toPlainText(),
                    timeout=10_000)
    assert "--spec-type ngram-foo" in page.diff_view.toPlainText()
    assert page.draft_max.toolTip().startswith("--spec-ngram-foo-size-m")
    page.grab().save(str(tmp_path / "swap-spec-types.png"))


def test_the_page_takes_the_draft_counts_set_draft_takes(qtbot, page):
    """Draft max, draft min and p-min take what core.swap.actions.DraftSetting takes (the
    range `specdeck swap set-draft` parses too, tests/core/test_flag_facts.py), their
    lowest value showing "unchanged": the page took draft max 0, which the CLI refused."""
    from specdeck.core.errors import InvalidInputError
    from specdeck.core.swap.actions import DraftSetting

    def core_takes(**value) -> bool:
        try:
            DraftSetting(**value)
        except InvalidInputError:
            return False
        return True

    for field, name in ((page.draft_max, "draft_max"), (page.draft_min, "draft_min")):
        for n in range(-2, 260):
            field.setValue(n)
            held = field.value() == n and field.value() > field.minimum()
            assert held == core_takes(**{name: n}), (name, n)
            if held:  # what the page then asks core to write
                assert getattr(page.setting(), name) == n
        field.setValue(field.minimum())
        assert field.text() == "unchanged"
    for p in (-0.01, 0.0, 0.5, 1.0, 1.01):
        page.p_min.setValue(p)
        held = round(page.p_min.value(), 2) == p and page.p_min.value() > page.p_min.minimum()
        assert held == core_takes(p_min=p), p
