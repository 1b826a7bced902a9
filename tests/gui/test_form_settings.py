"""Each page's form is one frozen model (both directions through its real widgets) and is
kept between sessions by that model's field table (gui.form_settings): a form round-trips
through the widgets and through saved settings, and a settings file edited by hand or left
by another version never crashes a page: each unusable value is the field's default, the
others come back."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings
from specdeck.core.forms import form_field
from specdeck.core.tune.request import GGUF, TABBY, TuneForm, kept_flags
from specdeck.gui import form_settings


def _page(qtbot, create):
    from specdeck.gui.context import AppContext

    page = create(AppContext())
    qtbot.addWidget(page)
    return page


def tune_page(qtbot):
    from specdeck.gui.pages.tune import TunePage

    return _page(qtbot, TunePage)


def gpus_page(qtbot):
    from specdeck.gui.pages.gpus import GpusPage

    return _page(qtbot, GpusPage)


def swap_page(qtbot):
    from specdeck.gui.pages.swap import SwapPage

    return _page(qtbot, SwapPage)


@pytest.mark.parametrize("form", [
    TuneForm(kind=GGUF, binary="/opt/llama.cpp/llama-server", gguf="/models/target.gguf",
             flags="-ngl 99 --api-key sekrit -c 8192", budget="90s", max_new=32,
             prompts="/data/mine.jsonl", downloads_gib=2.5),
    TuneForm(kind=TABBY, tabby_url="http://127.0.0.1:5000", tabby_config="/srv/config.yml",
             api_key_env="MY_KEY", admin_key_env="MY_ADMIN", budget="1h", tabby_folder="/t",
             tabby_python="/t/venv/bin/python"),
], ids=["llama-server", "running TabbyAPI"])
def test_the_tune_form_round_trips_through_its_widgets_and_the_settings(qtbot, configured_qapp,
                                                                        form):
    page = tune_page(qtbot)
    page.set_form(form)
    assert page.form() == form
    page._save()
    again = tune_page(qtbot)
    # Kept: what the form types; never the download budget (a consent for one session), the
    # max tokens, nor a key typed into the flags.
    assert again.form() == replace(form, flags=kept_flags(form.flags), max_new=TuneForm().max_new,
                                   downloads_gib=0.0)
    assert "sekrit" not in again.flags.text() and "sekrit" not in _settings_text()


def test_the_vram_plan_form_round_trips_through_its_widgets_and_the_settings(qtbot,
                                                                             configured_qapp):
    from specdeck.gui.pages.gpus import PlanChoices

    choices = PlanChoices(target="/models/70b-exl2", draft="/models/1b", target_bpw=4.25,
                          draft_bpw=0.0, context=32768, cache_mode="Q6", draft_cache_mode="Q8",
                          typed_gpus=True, gpu_sizes="24,24", gpu_split="20,24",
                          draft_gpu_split="", reserve="128", count_in_use=False)
    page = gpus_page(qtbot)
    page.form.show_choices(choices)
    assert page.form.choices() == choices
    assert page.form.inputs().gpus == "24,24" and page.form.inputs().bpw == 4.25
    page.form.save()
    again = gpus_page(qtbot)
    assert again.form.choices() == choices


def test_the_swap_page_reopens_its_config_with_its_binary(qtbot, configured_qapp, tmp_path):
    from swap_samples import USER

    config = tmp_path / "config.yaml"
    config.write_text(USER, encoding="utf-8")
    page = swap_page(qtbot)
    page.binary.setText("")
    page.open_path(config)
    qtbot.waitUntil(lambda: page.config is not None, timeout=10_000)
    page.shutdown()
    again = swap_page(qtbot)
    qtbot.waitUntil(lambda: again.config is not None, timeout=10_000)
    assert again.choices() == page.choices() and again.choices().config == str(config)
    again.shutdown()


def test_a_remembered_config_since_deleted_shows_the_welcome(qtbot, configured_qapp, tmp_path):
    from specdeck.gui.pages.swap import SETTINGS_PREFIX, SwapChoices

    form_settings.save(SETTINGS_PREFIX, SwapChoices(config=str(tmp_path / "gone.yaml")))
    page = swap_page(qtbot)
    qtbot.waitUntil(lambda: not page.tasks.running("load"), timeout=10_000)
    assert page.config is None and "Open the <b>config.yaml</b>" in page.banner.label.text()
    page.shutdown()


CORRUPTED = r"""[tune]
kind=nonsense
budget=forever
binary=/opt/llama-server
tabby_url=http://127.0.0.1:5000

[gpus]
plan\target=/models/70b
plan\context=99999999999
plan\cache_mode=Q3
plan\draft_cache_mode=Q4
plan\target_bpw=abc
plan\draft_bpw=nan
plan\gpu_source=7

[bench]
engine=nope
k=1000
max_new=-5
repeats=2
suites=not json
launch={"bad": 1}
arms={not json
use_ngram=maybe
servers=http://127.0.0.1:8080

[swap]
config=a, b
llama_server=/opt/llama-server

[models]
install_dir=1, 2, 3
"""


def test_a_corrupted_settings_file_gives_each_bad_field_its_default(qtbot, configured_qapp):
    """Out of range, not a choice, another type, not JSON: each such field is its default,
    the good ones come back, no page fails."""
    from specdeck.gui.bench_form import BenchForm, FormChoices
    from specdeck.gui.pages.gpus import PlanChoices

    path = Path(QSettings().fileName())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(CORRUPTED, encoding="utf-8")
    QSettings().sync()

    tune = tune_page(qtbot)
    assert tune.kind.currentData() == TuneForm().kind and tune.budget.text() == "10m"
    assert tune.binary.text() == "/opt/llama-server"
    assert tune.tabby_url.text() == "http://127.0.0.1:5000"

    gpus_host = gpus_page(qtbot)
    gpus = gpus_host.form
    default = PlanChoices()
    assert gpus.gpu_source.currentIndex() == 0 and gpus.cache_mode.currentText() == "FP16"
    assert gpus.context.value() == default.context and gpus.target.bpw.value() == 0.0
    assert gpus.draft.bpw.value() == 0.0
    assert gpus.target.path.text() == "/models/70b" and gpus.draft_cache_mode.currentText() == "Q4"

    form = BenchForm()
    qtbot.addWidget(form)
    form.restore()
    choices, default = form.choices(), FormChoices()
    assert form.engine.currentIndex() >= 0 and choices.engine == default.engine
    assert (choices.k, choices.max_new_tokens, choices.suites, choices.launch,
            choices.server_arms, choices.ngram) == (
        default.k, default.max_new_tokens, default.suites, default.launch, None, default.ngram)
    assert choices.repeats == 2 and choices.servers == "http://127.0.0.1:8080"

    swap = swap_page(qtbot)
    assert swap.binary.text() == "/opt/llama-server" and swap.config is None
    swap.shutdown()


@dataclass(frozen=True)
class _Sample:
    name: str = form_field("x")
    count: int = form_field(3, low=1, high=9)
    ratio: float = form_field(0.5, low=0.0, high=1.0)
    on: bool = form_field(False)
    tags: tuple[str, ...] = form_field(("a",))
    mode: str = form_field("fast", choices=("fast", "slow"))
    secret: str = form_field("", kept=False)


def test_every_kind_of_field_round_trips_and_the_unkept_is_never_written(configured_qapp):
    sample = _Sample("y", 7, 0.25, True, ("b", "c"), "slow", secret="hunter2")
    form_settings.save("sample/", sample)
    QSettings().sync()
    assert form_settings.restore("sample/", _Sample()) == replace(sample, secret="")
    assert "hunter2" not in _settings_text()


@pytest.mark.parametrize("name, raw", [
    ("count", "0"), ("count", "10"), ("count", "2.5"), ("count", "many"), ("count", "true"),
    ("ratio", "1.5"), ("ratio", "inf"), ("ratio", "x"), ("on", "maybe"), ("tags", "[1, 2]"),
    ("tags", "{"), ("mode", "medium"), ("name", ["a", "list"]),
])
def test_a_saved_value_out_of_range_or_of_another_type_is_the_default(configured_qapp, name,
                                                                       raw):
    QSettings().setValue("sample/name", "kept")
    QSettings().setValue(f"sample/{name}", raw)
    restored = form_settings.restore("sample/", _Sample())
    assert getattr(restored, name) == getattr(_Sample(), name)
    if name != "name":
        assert restored.name == "kept"


def _settings_text() -> str:
    store = QSettings()
    return "\n".join(f"{key}={store.value(key)}" for key in store.allKeys())


def test_the_vram_form_saved_by_an_older_specdeck_comes_back(qtbot, configured_qapp):
    """Before, the GPU choice and the cache modes were kept as their dropdowns' indexes."""
    store = QSettings()
    for key, value in (("target", "/models/70b"), ("gpu_source", 1), ("cache_mode", 2),
                       ("draft_cache_mode", 3), ("context", 8192)):
        store.setValue("gpus/plan/" + key, value)
    store.sync()
    page = gpus_page(qtbot)
    choices = page.form.choices()
    assert (choices.typed_gpus, choices.cache_mode, choices.draft_cache_mode, choices.context) == (
        True, "Q6", "Q4", 8192)


def test_a_fresh_form_is_its_models_default(qtbot, configured_qapp):
    """The widgets start where the field table says: nothing saved, nothing changes."""
    from specdeck.gui.bench_form import BenchForm, FormChoices
    from specdeck.gui.pages.gpus import PlanChoices

    form = BenchForm()
    qtbot.addWidget(form)
    assert form.choices() == FormChoices()
    gpus, tune = gpus_page(qtbot), tune_page(qtbot)
    assert gpus.form.choices() == PlanChoices() and tune.form() == TuneForm()


def test_the_ab_form_saved_by_an_older_specdeck_comes_back(qtbot, configured_qapp):
    """Before, each suite was kept as its own tick and Spec-Bench's choice on its own: they
    come back in the form's order; the arms under their older name too."""
    from specdeck.gui.bench_form import BenchForm

    store = QSettings()
    for key, value in (("suite_structured", True), ("suite_chat", True), ("suite_code", False),
                       ("suite_grounded", "false"), ("spec_bench", "spec-bench/qa"),
                       ("use_ngram", "false"), ("max_new", "48")):
        store.setValue("bench/" + key, value)
    store.sync()
    form = BenchForm()
    qtbot.addWidget(form)
    form.restore()
    choices = form.choices()
    assert choices.suites == ("chat", "structured", "spec-bench/qa")
    assert (choices.ngram, choices.max_new_tokens) == (False, 48)
    form.save()
    again = BenchForm()
    qtbot.addWidget(again)
    again.restore()
    assert again.choices() == choices


def test_saved_suites_none_of_which_the_form_knows_are_its_default(qtbot, configured_qapp):
    from specdeck.gui.bench_form import BenchForm, FormChoices

    QSettings().setValue("bench/suites", '["gone", "/nowhere/question.jsonl"]')
    form = BenchForm()
    qtbot.addWidget(form)
    form.restore()  # the file is looked for in a worker (issue 45), then dropped
    qtbot.waitUntil(lambda: not form.tasks.running("spec-bench"), timeout=10_000)
    assert form.choices().suites == FormChoices().suites
