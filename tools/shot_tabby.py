"""Screenshot of the Arms dialog with TabbyAPIs that SpecDeck starts: `python -m tools.screenshots
tabby`.

bench-tabby-arms.png: three arms started from one TabbyAPI install (no draft, n-gram, a draft
model), after Check read the install and TabbyAPI's rules for each setting. The install is a
folder with TabbyAPI main's real config_sample.yml (f1f2c85) as config.yml; nothing is started
(a TabbyAPI needs an NVIDIA GPU), so no speed is shown.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tools.shot_bench import _pump_until

SAMPLE = (Path(__file__).resolve().parents[1] / "tests" / "data" / "fixtures" / "tabbyapi"
          / "config_sample.f1f2c85.yml")


def render(window, out_dir: Path) -> list[Path]:
    from specdeck.core.engines import SERVER_ENGINE
    from specdeck.gui.widgets.server_arms_dialog import FOUND, SOURCE, TABBY

    folder = Path(tempfile.mkdtemp(prefix="specdeck-shot-")) / "tabbyAPI"
    folder.mkdir()
    (folder / "main.py").write_text("# TabbyAPI's entry point\n", encoding="utf-8")
    (folder / "venv" / "bin").mkdir(parents=True)
    (folder / "venv" / "bin" / "python").symlink_to(sys.executable)
    for name in ("Qwen2.5-32B-Instruct-exl3-4.0bpw", "Qwen2.5-0.5B-Instruct-exl3-4.0bpw"):
        (folder / "models" / name).mkdir(parents=True)
    (folder / "config.yml").write_text(
        SAMPLE.read_text(encoding="utf-8").replace(
            "  model_name:\n", "  model_name: Qwen2.5-32B-Instruct-exl3-4.0bpw\n", 1),
        encoding="utf-8")
    page = window.show_page("bench")
    form = page.form
    form.engine.setCurrentIndex(form.engine.findData(SERVER_ENGINE))
    form.arms_button.click()
    dialog = form.arms_dialog
    while dialog.table.rowCount():
        dialog.table.removeRow(0)
    rows = (("A", ""), ("B", "draft_mode=ngram draft_num_tokens=4"),
            ("C", "draft_model_name=Qwen2.5-0.5B-Instruct-exl3-4.0bpw draft_num_tokens=3"))
    for name, where in rows:
        row = dialog.add_row(name, TABBY, where)
        dialog.table.cellWidget(row, SOURCE).setCurrentText(TABBY)
    dialog.tabby_folder.setText(str(folder))
    dialog.check_button.click()
    _pump_until(page, lambda: dialog.table.item(2, FOUND).text() != "", 60)
    _pump_until(page, lambda: False, 0.3)
    shot = out_dir / "bench-tabby-arms.png"
    dialog.grab().save(str(shot))
    dialog.reject()
    return [shot]
