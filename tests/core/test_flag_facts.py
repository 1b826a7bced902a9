"""Facts that several commands and pages read, each written once: a second copy that
disagrees fails here. The removed llama-server flags and what replaces them (a llama-swap
cmd's migration and a router's presets), the flag that sets k (`swap set-draft` on either
file), the draft counts `set-draft` takes, the model library's folders, TabbyAPI's defaults
and the byte units."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import REPO_ROOT
from specdeck.core import llama_flags, swap
from specdeck.core.cli import main
from specdeck.core.servers.llama_server import parse_help
from specdeck.core.swap import presets as ini
from specdeck.core.swap.actions import plan_migration

PINNED_HELP = REPO_ROOT / "tests" / "data" / "servers" / "llama-server-11434-help.txt"
SERVER = "/opt/llama.cpp/build/bin/llama-server"  # not on this machine: the pinned rules judge


def test_the_fallback_knows_every_flag_the_pinned_build_removed():
    """Without a binary, the pinned build's "removed params" judge: all of them, n-gram sizes
    included (they were a list of the migration's own)."""
    removed = parse_help(PINNED_HELP.read_text(encoding="utf-8")).removed
    assert set(llama_flags.REMOVED) == set(removed)


SETUPS = {
    "a draft model alone": ("-md d.gguf", "model-draft = d.gguf\n"),
    "draft-simple": ("-md d.gguf --spec-type draft-simple",
                     "model-draft = d.gguf\nspec-type = draft-simple\n"),
    "ngram-mod": ("--spec-type ngram-mod", "spec-type = ngram-mod\n"),
    "ngram-simple": ("--spec-type ngram-simple", "spec-type = ngram-simple\n"),
    "ngram-map-k": ("--spec-type ngram-map-k", "spec-type = ngram-map-k\n"),
}


@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("flag", sorted(llama_flags.REMOVED))
def test_a_preset_and_a_cmd_replace_each_removed_flag_alike(flag, setup):
    """The same drafting, written as a llama-swap cmd and as a router preset, migrates each
    removed flag to the same flag (or removes it alike): the presets used to rename
    --draft-max to --spec-draft-n-max even for ngram-mod, and kept the n-gram sizes."""
    cmd_tail, keys = SETUPS[setup]
    config = swap.from_text(f"models:\n  m:\n    cmd: {SERVER} -m x.gguf {cmd_tail} {flag} 6\n")
    change, _ = plan_migration(config)
    argv = swap.from_text(change.new_text).model("m").argv if change else ()
    by_cmd = next((a for a, v in zip(argv, argv[1:]) if v == "6"), None)

    presets = ini.parse(f"[m]\nmodel = x.gguf\n{keys}{ini.key_of(flag)} = 6\n")
    for _message, values, renames in ini.findings(presets, "m"):
        presets = ini.parse(ini.plan_edit(presets, "m", values, renames).new_text)
    by_preset = next((e.key for e in presets.section("m").entries if e.value == "6"), None)
    assert by_preset == (ini.key_of(by_cmd) if by_cmd else None)
    assert by_preset != ini.key_of(flag)


def _set_draft(path, *args) -> int:
    return main(["swap", "set-draft", "--config", str(path), "--model", "m", "--yes", *args])


@pytest.mark.parametrize(("args", "k_flag"), [
    (("--spec-type", "ngram-mod"), "--spec-ngram-mod-n-max"),
    (("--spec-type", "ngram-simple"), "--spec-ngram-simple-size-m"),
    (("--draft", "d.gguf"), "--spec-draft-n-max"),
])
def test_set_draft_writes_the_same_k_flag_to_a_presets_file_and_a_config_yaml(
        tmp_path, args, k_flag):
    yaml = tmp_path / "config.yaml"
    yaml.write_text(f"models:\n  m:\n    cmd: {SERVER} -m x.gguf\n", encoding="utf-8")
    presets = tmp_path / "presets.ini"
    presets.write_text("[m]\nmodel = x.gguf\n", encoding="utf-8")
    assert _set_draft(yaml, *args, "--draft-max", "8") == 0
    assert _set_draft(presets, *args, "--draft-max", "8") == 0
    assert swap.load(yaml).model("m").flag_value(k_flag) == "8"
    assert ini.load(presets).effective("m")[ini.key_of(k_flag)] == "8"


def test_set_draft_on_a_preset_replaces_its_removed_count_where_migrate_would(tmp_path):
    presets = tmp_path / "presets.ini"
    presets.write_text("[m]\nmodel = x.gguf\nspec-type = ngram-mod\ndraft-max = 16\n",
                       encoding="utf-8")
    assert _set_draft(presets, "--draft-max", "8") == 0
    assert ini.load(presets).effective("m") == {"model": "x.gguf", "spec-type": "ngram-mod",
                                                "spec-ngram-mod-n-max": "8"}


def test_the_cli_takes_the_draft_counts_a_draft_setting_takes():
    """One range for `swap set-draft` and the llama-swap page (tests/gui/test_swap_page.py
    checks the page's fields against the same DraftSetting)."""
    from specdeck.core.cli import build_parser
    from specdeck.core.errors import InvalidInputError
    from specdeck.core.swap.actions import DraftSetting

    parser = build_parser()

    def cli_takes(option: str, value: str) -> bool:
        try:
            parser.parse_args(["swap", "set-draft", "--config", "c.yaml", option, value])
        except SystemExit:
            return False
        return True

    def core_takes(**value) -> bool:
        try:
            DraftSetting(**value)
        except InvalidInputError:
            return False
        return True

    for n in range(-2, 260):
        assert cli_takes("--draft-max", str(n)) == core_takes(draft_max=n), n
        assert cli_takes("--draft-min", str(n)) == core_takes(draft_min=n), n
    for p in (-0.01, 0.0, 0.5, 1.0, 1.01):
        assert cli_takes("--p-min", str(p)) == core_takes(p_min=p), p
    assert not core_takes(draft_max=0)


def test_every_page_and_command_scans_the_same_model_library(tmp_path, monkeypatch):
    """The Models page and `specdeck models` (core.hub), the Compatibility page and
    `specdeck suggest` (core.compat) list the same folders: config.yml's model and draft
    folders, SpecDeck's extra folders, each once however it is written."""
    from conftest import MODELS
    from specdeck.core import settings
    from specdeck.core.compat import suggest
    from specdeck.core.hub.library import scan_for_install
    from specdeck.core.hub.locations import library_dirs, model_dirs

    monkeypatch.setenv("HOME", str(tmp_path))
    config = tmp_path / "tabby" / "config.yml"
    config.parent.mkdir()
    config.write_text("model:\n  model_dir: big\ndraft_model:\n  draft_model_dir: /srv/drafts\n")
    extra = tmp_path / "more"
    extra.mkdir()
    settings.save(settings.Settings(extra_model_dirs=("~/more", str(tmp_path / "tabby" / "big"))
                                    ).with_config(config))
    expected = [config.parent / "big", Path("/srv/drafts"), tmp_path / "more"]
    assert model_dirs() == expected
    assert library_dirs() == (expected, [])
    assert list(scan_for_install(None, None).dirs) == expected
    found = suggest(MODELS / "Qwen2.5-7B-Instruct", include_hub=False)
    assert list(found.scanned_dirs) == expected


def test_a_config_that_says_nothing_plans_with_the_forms_defaults(tmp_path):
    """TabbyAPI's defaults are the config schema's: a config.yml that names only its model
    gives the plan inputs a blank form starts with, and the engines load with them."""
    from specdeck.core import config as tabby_config
    from specdeck.core.config.schema import DRAFT, MODEL, setting
    from specdeck.core.engines.base import LoadSpec
    from specdeck.core.vram import PlanInputs, inputs_from_tabby_config
    from specdeck.core.vram.request import PlanRequest

    path = tmp_path / "config.yml"
    path.write_text("model:\n  model_name: Target\n")
    read = inputs_from_tabby_config(tabby_config.load(path))
    blank = PlanInputs(model=read.model)
    assert read == blank
    schema = {key: setting(section, key).default for section, key in (
        (MODEL, "cache_mode"), (DRAFT, "draft_cache_mode"), (MODEL, "autosplit_reserve"),
        (MODEL, "chunk_size"), (MODEL, "gpu_split_auto"))}
    assert (blank.cache_mode, blank.draft_cache_mode, blank.chunk_size, blank.autosplit) == (
        schema["cache_mode"], schema["draft_cache_mode"], schema["chunk_size"],
        schema["gpu_split_auto"])
    assert tuple(float(mb) for mb in blank.autosplit_reserve_mb.split(",")) \
        == schema["autosplit_reserve"]
    fields = PlanRequest.__dataclass_fields__
    load = LoadSpec.__dataclass_fields__
    assert fields["cache_mode"].default == load["cache_mode"].default == schema["cache_mode"]
    assert fields["autosplit_reserve_mb"].default == load["autosplit_reserve_mb"].default \
        == schema["autosplit_reserve"]


def test_byte_units_are_defined_once():
    """core.units holds KiB, MiB, GiB and TiB; a page, a view or the GPU kit that defines its
    own has a second copy to drift."""
    own = re.compile(r"^\s*(KiB|MiB|GiB|TiB)\s*=", re.MULTILINE)
    found = [str(path.relative_to(REPO_ROOT))
             for folder in ("core", "gui", "gpukit", "specdeck", "benchmarks", "tools")
             for path in sorted((REPO_ROOT / folder).rglob("*.py"))
             if own.search(path.read_text(encoding="utf-8"))]
    assert found == ["core/units.py"]


def test_the_replay_drafts_with_the_defaults_the_pinned_builds_help_gives():
    """What the replay's drafters use for a flag a setting leaves unset is what the pinned
    llama-server's own --help says, read once (SpecMethod.default_of, a fractional default
    such as --spec-draft-p-min's 0.00 included), not numbers written again beside it."""
    from specdeck.core.tune.replay.draft_model import DraftModel
    from specdeck.core.tune.replay.drafters import NgramMap, NgramMod, NgramSimple

    pinned = {m.name: m for m in parse_help(PINNED_HELP.read_text(encoding="utf-8")).methods}

    def default(kind, param):
        return pinned[kind].default_of(llama_flags.spec_flag(kind, param))

    simple = pinned[llama_flags.DRAFT_SIMPLE]
    assert simple.default_of(llama_flags.DRAFT_P_MIN) == 0.0
    model = DraftModel({})
    assert (model.n_max, model.n_min, model.p_min) == (
        default(llama_flags.DRAFT_SIMPLE, "n_max"), default(llama_flags.DRAFT_SIMPLE, "n_min"),
        default(llama_flags.DRAFT_SIMPLE, "p_min"))
    ngram = NgramSimple()
    assert (ngram.n, ngram.m) == (default(llama_flags.NGRAM_SIMPLE, "size_n"),
                                  default(llama_flags.NGRAM_SIMPLE, "size_m"))
    for key_only, kind in ((True, llama_flags.NGRAM_MAP_K), (False, llama_flags.NGRAM_MAP_K4V)):
        mapped = NgramMap(key_only)
        assert (mapped.n, mapped.m, mapped.min_hits) == tuple(
            default(kind, p) for p in ("size_n", "size_m", "min_hits"))
    mod = NgramMod()
    assert (mod.n, mod.n_max_draft, mod.n_min) == tuple(
        default(llama_flags.NGRAM_MOD, p) for p in ("n_match", "n_max", "n_min"))


def test_a_spec_types_flags_are_named_one_way():
    """Every flag the pinned --help gives a replayed type is the one spec_flag names for its
    parameter (the replay's settings and a removed flag's replacement build names with it),
    and back."""
    from specdeck.core.tune.replay.session import Setting

    methods = parse_help(PINNED_HELP.read_text(encoding="utf-8")).methods
    for method in methods:
        if method.name not in (llama_flags.DRAFT_SIMPLE, *llama_flags.NGRAM_TYPES):
            continue
        for flag in method.flags:
            param = llama_flags.spec_param(method.name, flag)
            assert param is not None and llama_flags.spec_flag(method.name, param) == flag
    assert Setting.of(llama_flags.NGRAM_MOD, n_max=8).flags()[2:] == ("--spec-ngram-mod-n-max",
                                                                     "8")
    assert Setting.of(llama_flags.DRAFT_SIMPLE, p_min=0.5).flags()[2:] == (
        llama_flags.DRAFT_P_MIN, "0.5")


def test_what_specdeck_sets_on_a_server_it_launches_is_what_a_tune_takes_off_a_command():
    """The flags a launch sets itself (the target, where it listens, its metrics) are those a
    tune strips from the user's command before it adds its own, under every spelling."""
    from specdeck.core.servers.llama_server import LaunchProfile
    from specdeck.core.tune.setup import _split_own

    argv = LaunchProfile("llama-server", "t.gguf", ("-t", "4")).argv(8080)[1:]
    own = [a for a in argv if a.startswith("-") and a != "-t"]
    assert set(own) <= set(llama_flags.OWN_FLAGS)
    assert _split_own(tuple(argv)) == ("t.gguf", ("-t", "4"))
    for spelling in llama_flags.TARGET_MODEL:
        assert _split_own((spelling, "u.gguf", "--no-metrics", "-c", "512")) == (
            "u.gguf", ("-c", "512"))
