"""`specdeck bench --server` and `specdeck servers probe` against hostile servers on 127.0.0.1
(tests/hostile_servers.py), end to end in a subprocess: one line and exit 2 for a server that
cannot be used, no traceback, failures counted and shown, no secret in any output or file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import hostile_servers as hs

KEY = "sk-env-key-9876543210"
URL_KEY = "sk-url-key-0123456789"


def specdeck(*args, home, env=None):
    return subprocess.run([sys.executable, "-m", "specdeck", *args], capture_output=True,
                          text=True, errors="replace", timeout=120,
                          env=dict(os.environ, SPECDECK_HOME=str(home), **(env or {})))


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("server", "attrs", "says"), [
    (hs.Status, {"status": 503}, "answered 503 (unavailable): Loading model"),
    (hs.Status, {"status": 301,
                 "extra_headers": {"Location": f"http://10.0.0.9:8080/?key={URL_KEY}"}},
     "redirects (301) to http://10.0.0.9:8080/?key=***"),
    (hs.ManyHeaders, {}, "cannot read (got more than 100 headers)"),
    (hs.DeepJson, {}, "not as an LLM server SpecDeck knows"),
    (hs.Echo, {}, "refused the request (401): bad credentials: Authorization=Bearer ***"),
])
def test_probe_says_what_the_server_did_in_one_line(server, attrs, says, specdeck_home):
    with hs.serving(server, **attrs) as (url, _):
        result = specdeck("servers", "probe", url, home=specdeck_home,
                          env={"SPECDECK_SERVER_API_KEY": KEY})
    assert result.returncode == 2, result.stderr
    assert says in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert KEY not in result.stderr + result.stdout and URL_KEY not in result.stderr


@pytest.mark.timeout(180)
def test_a_hostile_ab_exits_2_shows_its_failures_and_leaks_no_key(tmp_path, specdeck_home):
    """Arm A is sound; B's server is slower and reports NaN and accepted > drafted (not
    usable: never a figure, nor a cause made of one); C's server fails every run and echoes
    the key it was sent (--on-error skip): the summary names C's failures, the command exits
    2, and neither key appears anywhere."""
    report = tmp_path / "report"
    out = tmp_path / "out.json"
    with hs.serving(hs.Llm, drafting=False) as (a, _), \
            hs.serving(hs.Reports, step_s=0.02, timings_json='{"predicted_n": 16, '
                       '"predicted_per_second": NaN, "draft_n": 4, "draft_n_accepted": 400}') \
            as (b, _), \
            hs.serving(hs.Echo, status=500) as (c, _):
        result = specdeck(
            "bench", "--server", f"A={a}/v1?api-key={URL_KEY}", "--server", f"B={b}",
            "--server", f"C={c}/?api-key={URL_KEY}", "--server-kind", "llama-server",
            "--suite", "code", "--max-prompts", "2", "--repeats", "1", "--warmup", "0",
            "--max-new", "16", "--on-error", "skip", "--report", str(report),
            "--json", str(out), home=specdeck_home, env={"SPECDECK_SERVER_API_KEY": KEY})
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "error: every measured run of arm C failed (2 of 2)" in result.stderr
    summary = (report / "summary.md").read_text()
    assert "C: 2 of 2 measured runs FAILED" in summary
    assert "C: not usable: every measured run of arm C failed" in summary
    assert "B: not usable: acceptance: timings.draft_n: 400 accepted of 4 drafted" in summary
    assert "/v1/chat/completions?api-key=*** answered 500" in summary
    c_verdict = next(line for line in summary.splitlines() if line.startswith("- C:"))
    assert "0.00x" not in c_verdict and "hurts" not in c_verdict
    b_causes = summary.split("- B ", 1)[1].split("\n- C:", 1)[0]  # B is ten times slower
    assert "likely cause: acceptance unknown (not usable: timings.draft_n: 400 accepted" \
        in b_causes
    assert "draft too slow" not in b_causes  # a step's yield is unknown without accepted counts
    files = [p for p in (*tmp_path.rglob("*"), *Path(specdeck_home).rglob("*")) if p.is_file()]
    assert any(p.name == "plan.json" for p in files) and any(p.suffix == ".svg" for p in files)
    assert any("history" in str(p) for p in files)
    for text in (result.stdout, result.stderr, *(p.read_text(errors="replace") for p in files)):
        assert KEY not in text and URL_KEY not in text
