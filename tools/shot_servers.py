"""Screenshot of a server A/B on the A/B page: `python -m tools.screenshots servers`.

Two real llama-servers (the pinned build, tools/llama_server_build.py) serve the demo model's
GGUF on 127.0.0.1: A without drafting, B with n-gram drafting (ngram-simple). The page's
Servers engine probes them and runs grounded-edit and code prompts against them.

bench-servers.png: the finished plan: both panes, the results table with the servers'
acceptance, the summary with the paired speed-up and losslessness.
"""

from __future__ import annotations

from pathlib import Path

from tools.shot_bench import _pump_until


def render(window, out_dir: Path) -> list[Path]:
    import tempfile

    from specdeck.core.engines.demo import find_gguf
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
        page.engine.setCurrentIndex(page.engine.findData("server"))
        page.servers.setText(f"{urls[0]}, B={urls[1]}")
        page.probe_servers()
        _pump_until(page, lambda: "Probing" not in page.server_info.text(), 30)
        for name, button in page.suite_buttons.items():
            button.setChecked(name in ("grounded", "code"))
        page.per_suite.setValue(2)
        page.max_new.setValue(96)
        page.repeats.setValue(1)
        page.warmup.setValue(1)
        page.start()
        _pump_until(page, lambda: page.last_summary is not None or not page.timer.isActive(), 600)
        _pump_until(page, lambda: False, 0.3)
        shot = out_dir / "bench-servers.png"
        window.grab().save(str(shot))
        return [shot]
    finally:
        for server in servers:
            server.stop()
