"""`specdeck tune` predicting every setting from one plain run (core.tune.replay) against the
real pinned llama-server and the demo GGUF: the replay's calibration agrees with the server's
own counters, every n-gram type is predicted (each with its own lookup and draft lengths), only
the best predicted settings are measured, the verification still decides, the servers
started stay within the number of drafters plus two, and the report and the Tune page's
reducer say why (accepted length by position against each setting's cost)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_tune_predicts_every_setting_and_measures_only_the_finalists(llama_bin, demo_gguf,
                                                                      specdeck_home):
    from specdeck.core.tune import setup as tune_setup
    from specdeck.core.tune.live import SetupRead, TuneLive
    from specdeck.core.tune.replay.search import FINALISTS
    from specdeck.core.tune.report import markdown
    from specdeck.core.tune.run import Forecasted, TuneOptions, tune

    setup = tune_setup.demo(llama_bin, ("-t", "1", "-c", "1024"))
    live = TuneLive()
    live.apply(SetupRead(setup))
    events = []

    def on_event(event):
        events.append(event)
        live.apply(event)

    result = tune(setup, TuneOptions(budget_s=60, suites=("grounded", "code"),
                                     prompts_per_suite=2, max_new_tokens=32),
                  on_event=on_event)
    forecast = result.forecast
    assert forecast is not None
    assert forecast.calibration_exact is True  # the server counted what the replay did
    # The step costs come from this server, unless the machine's load moved the calibration's
    # timings out of what a server can do (the suite's other workers can): then the tune says
    # so and predicts from the prior, and everything below still holds.
    assert forecast.calibrated or any("could not fit the step costs" in n
                                      for n in forecast.notes), forecast.notes
    kinds = {t.candidate.spec_type for t in result.tried}
    assert {s.setting.kinds[0] for s in forecast.settings} == kinds  # every type predicted
    lookups = {s.setting.params_of("ngram-map-k").get("size_n") for s in forecast.settings
               if s.setting.kinds[0] == "ngram-map-k"}
    assert len(lookups) > 1  # its lookup length too, not only k
    means = [round(s.predicted.mean, 4) for s in forecast.settings]  # ties: the cheaper first
    assert means == sorted(means, reverse=True)
    assert all(t.prediction.source.startswith("replay:") for t in result.tried)

    forecasted = [e for e in events if isinstance(e, Forecasted)]
    assert len(forecasted) == 1 and 1 <= len(forecasted[0].finalists) <= FINALISTS
    searched = {row.cell.arm.name for row in result.search.rows}
    assert searched <= {name for name, _, _ in forecasted[0].cells}  # only the finalists
    assert len(searched) <= FINALISTS
    drafters = len(result.tried)
    assert 0 < result.servers_started <= drafters + 2, result.servers_started
    assert result.decision.why  # the verification (or the search) decided, as always
    if result.decision.apply:
        assert result.verification is not None and result.verification.lossless

    text = markdown(result)
    assert "## Predicted from one plain run" in text
    assert f"Servers started (llama.cpp llama-server): {result.servers_started}" in text
    rows = live.forecast_rows()
    assert rows and all(len(r) == 6 for r in rows)
    assert live.cells.keys() >= searched  # the page follows the finalists, not every k
