"""Screenshot of a server A/B on the A/B page: `python -m tools.screenshots servers`.

Two real llama-servers (the pinned build, tools/llama_server_build.py) serve the demo model's
GGUF on 127.0.0.1: A without drafting, B with n-gram drafting (ngram-simple). The page's
Servers engine probes them and runs grounded-edit and code prompts against them.

bench-servers.png: the finished plan: both panes, the results table with the servers'
acceptance, the summary with the paired speed-up and losslessness.
bench-server-arms.png: the Arms dialog with llama-servers to launch (one with last year's
--draft-max), after Check read the binary's --help.
"""

from __future__ import annotations

from pathlib import Path

from tools.shot_bench import _pump_until


def render(window, out_dir: Path) -> list[Path]:
    import tempfile

    from specdeck.core.bench.plan import BenchPlan
    from specdeck.core.bench.suites import first_prompts
    from specdeck.core.engines import SERVER_ENGINE, SERVER_MODEL
    from specdeck.core.engines.demo import find_gguf
    from specdeck.core.servers.arms import arms_from_urls
    from specdeck.core.servers.llama_server import LaunchProfile, ManagedServer

    from tools.llama_server_build import build

    binary, gguf = build(), find_gguf()
    logs = Path(tempfile.mkdtemp(prefix="specdeck-shot-logs-"))
    flags = {"A": ("-t", "2"),
             "B": ("-t", "2", "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2",
                   "--spec-ngram-simple-size-m", "4")}
    servers = [ManagedServer(LaunchProfile(str(binary), str(gguf), f), logs / f"{n}.log")
               for n, f in flags.items()]
    try:
        urls = [server.start(timeout=120) for server in servers]
        page = window.show_page("bench")
        suites = ("code", "grounded")  # the order of the page's suite buttons
        page.form.set_plan(BenchPlan(
            engine=SERVER_ENGINE, model=SERVER_MODEL,
            arms=arms_from_urls([urls[0], f"B={urls[1]}"]),
            suites=suites, prompt_ids=tuple(p.id for p in first_prompts(suites, 2)),
            max_new_tokens=96, repeats=1, warmup=1))
        page.form.probe_servers()
        _pump_until(page, lambda: "Probing" not in page.form.server_info.text(), 30)
        page.start()
        _pump_until(page, lambda: page.last_summary is not None or not page.timer.isActive(), 600)
        _pump_until(page, lambda: False, 0.3)
        shot = out_dir / "bench-servers.png"
        window.grab().save(str(shot))
        return [shot, _arms_dialog(page, binary, gguf, urls[1], out_dir)]
    finally:
        for server in servers:
            server.stop()


def _arms_dialog(page, binary, gguf, url: str, out_dir: Path) -> Path:
    from specdeck.gui.widgets.server_arms_dialog import FOUND, LAUNCH, SOURCE

    page.form.arms_button.click()
    dialog = page.form.arms_dialog
    while dialog.table.rowCount():
        dialog.table.removeRow(0)
    rows = (("A", LAUNCH, ""), ("B", LAUNCH, "--spec-type ngram-simple --spec-ngram-simple-size-n 2"),
            ("C", LAUNCH, "-md SmolLM2-135M-Instruct.Q8_0.gguf --draft-max 8"),
            ("D", "Running server", url))
    for name, source, where in rows:
        row = dialog.add_row(name, source, where)
        dialog.table.cellWidget(row, SOURCE).setCurrentText(source)
    dialog.binary.setText(str(binary))
    dialog.gguf.setText(str(gguf))
    dialog.common.setText("-t 2 -c 4096")
    dialog.one_at_a_time.setChecked(True)
    dialog.check_button.click()
    _pump_until(page, lambda: dialog.table.item(3, FOUND).text() != "", 60)
    _pump_until(page, lambda: False, 0.3)
    shot = out_dir / "bench-server-arms.png"
    dialog.grab().save(str(shot))
    dialog.reject()
    return shot
