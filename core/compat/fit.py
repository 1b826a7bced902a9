"""Does a suggested draft fit beside the target? The bridge to the VRAM planner (core.vram).

The plan uses TabbyAPI's settings from config.yml when one is given (cache modes, splits,
context), the target being suggested for, and the GPUs typed by the user or, if none were
typed, this machine's GPUs. When no plan is possible at all (no GPU here, a target whose
size is unknown) every draft's fit stays unknown and ``note`` says why. An EXL3 target is
planned as TabbyAPI main loads it; a draft of the other format has no plan (unknown fit).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specdeck.core.errors import SpecDeckError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FitPlanner:
    inputs: Any | None
    """core.vram.PlanInputs for the target alone; None when no plan is possible."""
    frame: Any | None
    """The GPU telemetry frame planned on (None when GPU sizes were typed)."""
    note: str | None
    """Why every fit is unknown, when it is."""

    def fits(self, draft_folder: Path) -> bool | None:
        """Whether target + this draft fit; None when the plan cannot be made."""
        if self.inputs is None:
            return None
        from specdeck.core.vram import plan_from_inputs

        try:
            return plan_from_inputs(replace(self.inputs, draft=str(draft_folder)), self.frame).fits
        except SpecDeckError as exc:
            log.info("No VRAM plan with draft %s: %s", draft_folder, exc)
            return None


def fit_planner(
    target_folder: Path,
    *,
    config_path: str | Path | None = None,
    gpus: str | None = None,
    max_seq_len: int | None = None,
    bpw: float | None = None,
) -> FitPlanner:
    """Prepare plans for ``target_folder``: settings, GPUs, and one plan of the target alone
    to find out early whether planning is possible at all."""
    from specdeck.core.vram import PlanInputs, build_request

    inputs = PlanInputs(model=str(target_folder), context=max_seq_len)
    if config_path:
        try:
            from specdeck.core import config
            from specdeck.core.vram import inputs_from_tabby_config

            configured = inputs_from_tabby_config(config.load(config_path))
            # A suggested draft replaces whatever config.yml drafts with (a draft model, or
            # TabbyAPI main's MTP layers).
            inputs = replace(configured, model=str(target_folder), draft=None, mtp=False,
                             context=max_seq_len or configured.context)
        except SpecDeckError as exc:
            log.info("Planning VRAM without %s's settings: %s", config_path, exc)
    inputs = replace(inputs, gpus=gpus, bpw=bpw if bpw is not None else inputs.bpw)
    frame = None
    if not gpus:
        from specdeck.core.gpu import read_once

        frame = read_once()
        if not frame.gpus:
            return FitPlanner(None, None, f"VRAM fit unknown: {frame.headline}.")
    try:
        build_request(inputs, frame)
    except SpecDeckError as exc:
        return FitPlanner(None, None, f"VRAM fit unknown: {exc}")
    return FitPlanner(inputs, frame, None)
