"""What the tune measures once every setting is predicted (core.tune.replay.search): the
finalists, how long the verification runs, and how the Tune page's reducer follows them."""

from __future__ import annotations

from specdeck.core.tune.candidates import Candidate
from specdeck.core.tune.live import TuneLive
from specdeck.core.tune.predict import Prediction
from specdeck.core.tune.replay.costs import Predicted, StepCosts
from specdeck.core.tune.replay.phase import Forecast, SettingForecast
from specdeck.core.tune.replay.search import finalists, repeats_needed, short
from specdeck.core.tune.replay.session import Replayed, Setting
from specdeck.core.tune.run import CandidatesFound, Forecasted


def _item(candidate: str, kind: str, mean: float, drafts: int = 5, **params) -> SettingForecast:
    setting = Setting.of(kind, **params)
    predicted = Predicted(mean, mean - 0.05, mean + 0.05, (mean,), mean, 2.0, (0.5, 0.25), 0.1)
    return SettingForecast(candidate, setting, setting.flags(), predicted,
                           Replayed(4, drafts=drafts, drafted=4 * drafts, accepted=drafts))


def _forecast(*items: SettingForecast) -> Forecast:
    return Forecast(tuple(items), StepCosts(1.0, 0.6, noise=0.05), True, True, requests=6)


def test_finalists_are_the_best_predicted_at_most_two_of_a_candidate():
    forecast = _forecast(_item("ngram-map-k", "ngram-map-k", 1.3, size_n=3, size_m=8),
                         _item("ngram-map-k", "ngram-map-k", 1.25, size_n=3, size_m=16),
                         _item("ngram-map-k", "ngram-map-k", 1.2, size_n=2, size_m=8),
                         _item("ngram-mod", "ngram-mod", 1.1, n_max=8),
                         _item("ngram-cache", "ngram-cache", 1.05))
    chosen = finalists(forecast)
    assert [(f.candidate, f.predicted.mean) for f in chosen] == [
        ("ngram-map-k", 1.3), ("ngram-map-k", 1.25), ("ngram-mod", 1.1)]
    assert short(chosen[0]) == "sm8sn3" and short(_item("c", "ngram-cache", 1.0)) == "default"


def test_a_setting_that_never_drafts_is_no_finalist_and_hopeless_ones_only_alone():
    forecast = _forecast(_item("ngram-simple", "ngram-simple", 1.0, drafts=0),
                         _item("ngram-cache", "ngram-cache", 0.8),
                         _item("ngram-mod", "ngram-mod", 0.7, n_max=4))
    # nothing can beat no drafting: the best of them alone goes on, for the verification
    # to say so
    assert [f.candidate for f in finalists(forecast)] == ["ngram-cache"]


def test_the_verification_runs_as_long_as_the_predicted_speed_up_needs():
    few = repeats_needed(1.5, 0.03, prompts=5, least=2, most=8)
    close = repeats_needed(1.03, 0.03, prompts=5, least=2, most=8)
    assert few == 2 and close > few and close <= 8
    assert repeats_needed(0.9, 0.03, prompts=5, least=2, most=8) == 2  # nothing to show
    # too close to 1.0 for any repeats the budget allows: the fewest, and the verdict says so
    assert repeats_needed(1.02, 0.2, prompts=5, least=2, most=8) == 2


def test_the_page_follows_the_finalists_and_shows_why():
    map_k, mod = Candidate("ngram-map-k"), Candidate("ngram-mod")
    live = TuneLive()
    live.apply(CandidatesFound(((map_k, Prediction(1.0, 0.9, 1.1, "theory")),
                                (mod, Prediction(1.04, 1.0, 2.0, "theory"))), ()))
    forecast = _forecast(_item("ngram-map-k", "ngram-map-k", 1.3, size_n=3, size_m=8),
                         _item("ngram-mod", "ngram-mod", 1.1, n_max=8))
    live.apply(Forecasted(forecast, ("ngram-map-k (size-m=8 size-n=3)",),
                          (("ngram_map_k-sm8sn3", "ngram-map-k (size-m=8 size-n=3)", map_k),),
                          ((map_k, Prediction(1.3, 1.2, 1.4, "replay: ...")),
                           (mod, Prediction(1.1, 1.0, 1.2, "replay: ...")))))
    assert list(live.cells) == ["ngram_map_k-sm8sn3"]
    assert [r.candidate for r in live.candidates] == [map_k, mod]  # re-ranked by the replay
    assert live.candidates[0].predicted_text == "1.30x (1.20-1.40)"
    rows = live.forecast_rows()
    assert rows[0] == ("ngram-map-k m=8 n=3", "1.30x (1.25-1.35)", "1.300x", "50% 25%",
                       "2.00", "4.4")  # a full step of k=4: 1 + 1.0 + 0.6 x 4 plain steps


def test_the_replay_takes_the_servers_slots_and_similarity_from_its_flags():
    from specdeck.core.tune.replay.phase import server_shape

    assert server_shape(("-t", "2")) == (4, 0.1)  # -np auto: 4 slots
    assert server_shape(("-np", "1", "--slot-prompt-similarity", "0.5")) == (1, 0.5)
    assert server_shape(("--parallel", "-1")) == (4, 0.1)


def test_a_fault_in_the_replay_costs_the_tune_its_shortcut_not_the_tune(monkeypatch, llama_bin):
    """The replay only predicts: an arithmetic fault in it (a tune under load once died of
    an OverflowError there) leaves every candidate to the search, with a note saying so."""
    import threading

    from specdeck.core.tune import setup as tune_setup
    from specdeck.core.tune.llama_server import replay_phase
    from specdeck.core.tune.replay import phase
    from specdeck.core.tune.run import TuneOptions

    def broken(*args, **kwargs):
        raise OverflowError("math range error")

    monkeypatch.setattr(phase, "forecast", broken)
    predicted = [(Candidate("ngram-mod"), Prediction(1.1, 1.0, 1.2, "theory"))]
    notes: list[str] = []
    setup = tune_setup.demo(llama_bin, ("-t", "1"))
    forecast, after = replay_phase(setup, predicted, TuneOptions(), "cpu", lambda e: None,
                                   threading.Event(), notes)
    assert forecast is None and after == predicted
    assert any("OverflowError" in n and "every candidate was searched" in n for n in notes)
