"""Screenshots of acceptance by draft position on the A/B page:
`python -m tools.screenshots positions`.

1. A real run of the embedded demo model (SmolLM2-135M on this CPU): no draft vs n-gram
   drafting (k <= 4) on a grounded-edit and a code prompt; the engine counts every draft.
   bench-positions.png at the screenshots' default size (1280x800), and
   bench-positions-1200.png 1200 px wide, where every plot title must still read whole
   (issue 28: "... (server count" was cut off).
2. Three llama-servers SpecDeck launches (the pinned build, tools/llama_server_build.py) on
   the demo model's GGUF: A without drafting, B with ngram-simple, C with a draft model (the
   same model requantized to Q4_0 by llama.cpp's llama-quantize). Positions come from each
   server's /metrics counters; no GPU that NVML reads here, so the memory plot says the
   servers' memory is not visible. bench-positions-servers.png, 1200 px wide.
"""

from __future__ import annotations

from pathlib import Path

from tools.shot_bench import _pump_until, demo_plan


def _finish(page, plan) -> None:
    page.form.set_plan(plan)
    page.start()
    _pump_until(page, lambda: page.last_summary is not None, 2400)
    _pump_until(page, lambda: False, 0.5)


def render(window, out_dir: Path) -> list[Path]:
    page = window.show_page("bench")
    _finish(page, demo_plan(per_suite=1, max_new_tokens=64, repeats=1, warmup=0))
    shots = [out_dir / "bench-positions.png", out_dir / "bench-positions-1200.png",
             out_dir / "bench-positions-servers.png"]
    window.grab().save(str(shots[0]))
    window.resize(1200, 800)
    _pump_until(page, lambda: False, 0.5)
    window.grab().save(str(shots[1]))
    _finish(page, _server_plan())
    window.grab().save(str(shots[2]))
    return shots


def _server_plan():
    import subprocess
    import tempfile

    from specdeck.core.bench.plan import BenchPlan
    from specdeck.core.bench.suites import first_prompts
    from specdeck.core.engines import SERVER_ENGINE, SERVER_MODEL
    from specdeck.core.engines.demo import find_gguf
    from specdeck.core.llama_flags import DRAFT_SIMPLE
    from specdeck.core.servers.arms import launched_arm

    from tools.llama_server_build import build

    binary, gguf = build(), find_gguf()
    draft = Path(tempfile.mkdtemp(prefix="specdeck-shot-draft-")) / "SmolLM2-135M.Q4_0.gguf"
    subprocess.run([str(binary.parent / "llama-quantize"), "--allow-requantize", str(gguf),
                    str(draft), "Q4_0"], check=True, capture_output=True, timeout=300)
    common = ("-t", "2", "-c", "2048")
    flags = {"A": (),
             "B": ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2",
                   "--spec-ngram-simple-size-m", "4"),
             "C": ("-md", str(draft), "--spec-type", DRAFT_SIMPLE, "--spec-draft-n-max", "4")}
    suites = ("code", "grounded")
    return BenchPlan(engine=SERVER_ENGINE, model=SERVER_MODEL,
                     arms=tuple(launched_arm(n, str(binary), str(gguf), f, common)
                                for n, f in flags.items()),
                     suites=suites, prompt_ids=tuple(p.id for p in first_prompts(suites, 2)),
                     max_new_tokens=64, repeats=1, warmup=0)
