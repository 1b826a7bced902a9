"""Draft suggestions from a real model library (fixture folders) and the known Hub list."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from compat_helpers import copy_model, edit_json
from conftest import MODELS, TABBY
from specdeck.core.compat import suggest
from specdeck.core.compat.library import read_config_models
from specdeck.core.hub.locations import library_dirs

LIBRARY = ("Qwen2.5-0.5B-Instruct", "TinyLlama-1.1B-Chat-v1.0", "Llama-3.2-1B",
           "Mistral-7B-v0.1", "Qwen2.5-7B-Instruct")


@pytest.fixture
def library(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    for name in LIBRARY:
        (folder / name).symlink_to(MODELS / name, target_is_directory=True)
    return folder


def test_qwen_target_gets_the_local_qwen_draft_first(library):
    result = suggest(library / "Qwen2.5-7B-Instruct", model_dirs=[library])
    names = [s.name for s in result.suggestions]
    assert names[0] == "Qwen2.5-0.5B-Instruct"
    first = result.suggestions[0]
    assert first.origin == "local" and first.status == "compatible_with_warnings"
    assert first.ratio == pytest.approx(7615487488 / 494005120)
    assert "inside the 5-30x sweet spot" in first.reason and str(first.path) in first.reason
    assert first.fits_vram is None
    # Hub drafts of the same family follow, unverified, ranked by size ratio.
    hub = [s for s in result.suggestions if s.origin == "hub"]
    assert hub and all(s.status == "unverified" for s in hub)
    assert [s.repo_id for s in hub[:2]] == ["cgus/Qwen2.5-0.5B-Instruct-exl2",
                                           "Zenabius/Qwen2.5-Coder-0.5B-Instruct-exl2"]
    assert names.index("cgus/Qwen2.5-1.5B-Instruct-exl2") < names.index(
        "Zenabius/Qwen2.5-3B-Instruct-exl2")  # 4.9x is nearer the sweet spot than 2.5x
    assert [s.rank for s in result.suggestions] == list(range(1, len(names) + 1))
    assert result.family.startswith("Qwen 2.5")
    rejected = {r.name: r.reason for r in result.rejected}
    assert rejected["TinyLlama-1.1B-Chat-v1.0"].startswith("Incompatible.")
    assert rejected["Mistral-7B-v0.1"].startswith("Incompatible.")
    assert "Qwen2.5-7B-Instruct" not in rejected  # the target itself is not a candidate


def test_larger_models_are_not_drafts(library):
    result = suggest(MODELS / "Llama-2-7b-hf", model_dirs=[library], include_hub=False)
    assert [s.name for s in result.suggestions] == ["TinyLlama-1.1B-Chat-v1.0"]
    rejected = {r.name: r.reason for r in result.rejected}
    assert rejected["Qwen2.5-7B-Instruct"] == "as large as the target or larger"
    assert rejected["Mistral-7B-v0.1"] == "as large as the target or larger"


def test_limit_and_no_hub(library):
    result = suggest(MODELS / "Qwen2.5-7B-Instruct", model_dirs=[library], limit=2)
    assert len(result.suggestions) == 2
    local_only = suggest(MODELS / "Qwen2.5-7B-Instruct", model_dirs=[library], include_hub=False)
    assert [s.origin for s in local_only.suggestions] == ["local"]


def test_target_outside_any_known_family_gets_nothing_from_the_hub(library):
    result = suggest(MODELS / "Mistral-7B-v0.1", model_dirs=[library])
    assert result.family is None
    assert result.suggestions == ()


def test_undecidable_local_drafts_come_last_with_the_reason(library):
    result = suggest(MODELS / "Llama-3.1-8B", model_dirs=[library])
    local = [s for s in result.suggestions if s.origin == "local"]
    assert [s.name for s in local] == ["Llama-3.2-1B"]
    assert local[0].status == "inconclusive"
    assert result.suggestions[-1].name == "Llama-3.2-1B"
    assert "could not decide" in local[0].reason


def test_an_installed_hub_draft_is_not_suggested_twice(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    installed = copy_model("TinyLlama-1.1B-Chat-v1.0", models)
    installed.rename(models / "TinyLlama-1B-exl2-4.0bpw")
    result = suggest(MODELS / "Llama-2-7b-hf", model_dirs=[models])
    names = [s.name for s in result.suggestions]
    assert "TinyLlama-1B-exl2-4.0bpw" in names
    assert "turboderp/TinyLlama-1B-exl2" not in names
    assert "bartowski/TinyLlama-1.1B-Chat-v1.0-exl2" in names


# --- where the library is ----------------------------------------------------------------


def test_model_dirs_come_from_tabbyapi_config(tmp_path, library):
    config = tmp_path / "config.yml"
    shutil.copy(TABBY / "config_sample.exl2-checkpoint.yml", config)  # model_dir: models
    config.chmod(0o644)
    assert list(read_config_models(config).model_dirs) == [tmp_path / "models"]
    result = suggest(MODELS / "Qwen2.5-7B-Instruct", config_path=config, include_hub=False)
    assert result.scanned_dirs == (tmp_path / "models",)
    assert [s.name for s in result.suggestions] == ["Qwen2.5-0.5B-Instruct"]


def test_legacy_nested_draft_section_is_understood(tmp_path):
    config = tmp_path / "config.yml"
    config.write_text("model:\n  model_dir: /srv/big\n  draft:\n    draft_model_dir: drafts\n")
    assert list(read_config_models(config).model_dirs) == [Path("/srv/big"), tmp_path / "drafts"]


def test_unreadable_config_is_reported_not_fatal(tmp_path, library):
    config = tmp_path / "config.yml"
    config.write_text("model: [unclosed\n")
    dirs, problems = library_dirs(config, [library])
    assert dirs == [library]
    assert problems and str(config) in problems[0]


def test_configured_pair_and_context_are_read(tmp_path):
    config = tmp_path / "config.yml"
    config.write_text(
        "model:\n  model_dir: big\n  model_name: Qwen2.5-7B-Instruct\n  max_seq_len: 16384\n"
        "draft_model:\n  draft_model_dir: /srv/drafts\n  draft_model_name: Qwen2.5-0.5B\n")
    models = read_config_models(config)
    assert models.model_dirs == (tmp_path / "big", Path("/srv/drafts"))
    assert models.target == tmp_path / "big" / "Qwen2.5-7B-Instruct"
    assert models.draft == Path("/srv/drafts/Qwen2.5-0.5B")
    assert models.max_seq_len == 16384


# --- VRAM fit (core.vram) --------------------------------------------------------------


def as_exl2(name, dest, bits=4.0):
    """A copy whose config.json says EXL2 at ``bits`` (no weight files: the planner sizes it
    from the architecture, as it does for a model not downloaded yet)."""
    folder = copy_model(name, dest)
    edit_json(folder / "config.json", quantization_config={
        "quant_method": "exl2", "version": "0.3.2", "bits": bits, "head_bits": 6})
    return folder


@pytest.mark.parametrize(("gpus", "fits"), [("24", True), ("2", False)])
def test_local_drafts_carry_the_vram_planner_answer(tmp_path, gpus, fits):
    target = as_exl2("Qwen2.5-7B-Instruct", tmp_path)
    library = tmp_path / "library"
    library.mkdir()
    as_exl2("Qwen2.5-0.5B-Instruct", library)
    result = suggest(target, model_dirs=[library], gpus=gpus)
    [local] = [s for s in result.suggestions if s.origin == "local"]
    assert local.fits_vram is fits
    # A draft that does not fit goes after those that might.
    assert (result.suggestions[0] is local) is fits
    assert ("Fits in VRAM" if fits else "Does not fit in VRAM") in local.reason
    assert all(s.fits_vram is None for s in result.suggestions if s.origin == "hub")
    assert result.vram_note is None


def test_vram_fit_is_unknown_without_gpus_or_sizes(library):
    # No NVIDIA GPU on this machine and no sizes typed: say so, guess nothing.
    result = suggest(MODELS / "Qwen2.5-7B-Instruct", model_dirs=[library])
    assert all(s.fits_vram is None for s in result.suggestions)
    assert result.vram_note.startswith("VRAM fit unknown")


def test_an_unquantized_target_is_planned_at_the_bpw_given(library):
    """Without a bitrate an unquantized target's size is unknown, and the note said to pass
    --bpw, which `suggest` did not take."""
    unknown = suggest(MODELS / "Qwen2.5-7B-Instruct", model_dirs=[library], gpus="24,24")
    assert "--bpw" in unknown.vram_note
    planned = suggest(MODELS / "Qwen2.5-7B-Instruct", model_dirs=[library], gpus="24,24", bpw=4.0)
    assert planned.vram_note is None
    from specdeck.core.cli import build_parser

    args = build_parser().parse_args(["suggest", "T", "--bpw", "4.5", "--no-hub"])
    assert args.bpw == 4.5
