"""What the tune measures once every setting is predicted: the finalists, and how long the
verification must run to decide.

The replay predicts; it never decides alone. The search measures the best predicted settings
(``FINALISTS``, at most ``PER_CANDIDATE`` of one candidate, so that one drafter's error cannot
fill the final), beside the user's current setting and the candidates the replay cannot
predict, on the tuning prompts; the verification then judges the search's pick on held-out
prompts as it always did (output unchanged, interval above 1.0). What the replay changes is
how many settings are run (a few instead of every k of every candidate, and never a server per
setting) and how long the verification is: as many repeats as the predicted speed-up needs
for its 95% interval to clear 1.0 at this machine's noise, not as many as the budget holds.
"""

from __future__ import annotations

import math

from specdeck.core.bench.winner import beats_no_draft
from specdeck.core.tune.replay.costs import MEDIAN_SE, Z95
from specdeck.core.tune.replay.phase import Forecast, SettingForecast

FINALISTS = 3
PER_CANDIDATE = 2


def finalists(forecast: Forecast, count: int = FINALISTS,
              per_candidate: int = PER_CANDIDATE) -> list[SettingForecast]:
    """The best predicted settings, at most ``per_candidate`` of one candidate; those whose
    interval cannot reach above 1.0 only when nothing else is left (the best of them, then:
    the verification says whether it beats no drafting)."""
    chosen: list[SettingForecast] = []
    taken: dict[str, int] = {}
    for item in forecast.settings:
        if len(chosen) >= count:
            break
        if taken.get(item.candidate, 0) >= per_candidate or item.replayed.drafts == 0:
            continue
        if not beats_no_draft(item.predicted.high) and chosen:
            break
        chosen.append(item)
        taken[item.candidate] = taken.get(item.candidate, 0) + 1
    return chosen


def short(item: SettingForecast) -> str:
    """A setting's parameters in a few characters, for an arm's name."""
    params = item.setting.params_of(item.setting.kinds[0])
    return "".join(f"{''.join(w[0] for w in k.split('_'))}{v:g}" for k, v in params.items()) \
        or "default"


def cells(setup, candidates: dict, chosen: list[SettingForecast]) -> list:
    """The finalists as grid cells (core.bench.grid.Cell): each a launched llama-server of
    the setup's own flags and the setting's drafting flags, named so that the tune maps a
    measurement back to its candidate."""
    from specdeck.core.bench.grid import Cell
    from specdeck.core.bench.plan import Arm
    from specdeck.core.servers.arms import ServerArm
    from specdeck.core.servers.llama_server import LaunchProfile, binary_help, drafter_from_flags

    out = []
    for item in chosen:
        candidate = candidates[item.candidate]
        args = tuple(setup.common) + item.flags
        name = (candidate.arm_prefix + short(item))[:60]
        label = f"{candidate.label} ({item.label.split(' ', 1)[1]})" \
            if " " in item.label else candidate.label
        launch = LaunchProfile(setup.binary, str(setup.target), args)
        out.append(Cell(Arm(name, drafter_from_flags(args, binary_help(setup.binary)),
                            ServerArm(launch=launch)), label, (("k", str(item.k)),)))
    return out


def prediction_of(item: SettingForecast, costs_text: str):
    """A candidate's prediction (core.tune.predict.Prediction) from its best setting's."""
    from specdeck.core.tune.predict import Prediction

    p = item.predicted
    return Prediction(p.speedup, p.low, p.high,
                      f"replay: {item.label}, {item.replayed.drafts} verifications, mean "
                      f"accepted length {p.mean_accepted_length:.2f}; {costs_text}")


def repeats_needed(expected: float, noise_share: float, prompts: int, least: int,
                   most: int) -> int:
    """Repeats of ``prompts`` held-out prompts for a speed-up of ``expected`` to show its 95%
    interval above 1.0, at a run-to-run noise of ``noise_share`` (a ratio of two runs has
    sqrt(2) of it), at least ``least``; where even ``most`` could not show it, ``least``: a
    speed-up that close to 1.0 is not told from noise in any number of repeats the budget
    allows, and the verification says so as soon."""
    if prompts < 1 or not beats_no_draft(expected) or noise_share <= 0:
        return least
    margin = math.log(expected)
    sigma = math.sqrt(2.0) * noise_share
    needed = math.ceil((Z95 * MEDIAN_SE * sigma / margin) ** 2 / prompts)
    return least if needed > most else max(least, needed)
