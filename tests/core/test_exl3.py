"""EXL3 on the Hub and on disk (issue 29): search by format, EXL3 variants, an EXL3 branch
installed and planned, the EXL3 VRAM arithmetic against exllamav3's own storage formulas,
TabbyAPI main's load order, "Use as draft" per TabbyAPI branch, and compatibility.

EXL3 folders are built the way exllamav3's converter writes them (tests/hubserver.py
``exl3_branch``, after exllamav3 4f8ad01): tiny, but real safetensors files read by real code.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import MODELS
from gguf_writer import write_tokenizer_gguf
from hubserver import (  # noqa: F401 - memory_keyring is a fixture
    EXL3_SMALL,
    FakeHub,
    FakeRepo,
    exl2_branch,
    exl3_branch,
    exl3_config,
    exl3_tensors,
    memory_keyring,
    safetensors_bytes,
)

from specdeck.core.cli import main
from specdeck.core.errors import InvalidInputError
from specdeck.core.hub import install, list_variants, search_repos
from specdeck.core.models import architecture_from_config
from specdeck.core.vram import PlanInputs, plan_from_inputs
from specdeck.core.vram import exl3 as exl3_vram
from specdeck.core.vram.weights import model_weights

QWEN = MODELS / "Qwen2.5-0.5B-Instruct"
TINY = MODELS / "TinyLlama-1.1B-Chat-v1.0"
EXL2_REPO = "testorg/Qwen2.5-0.5B-Instruct-exl2"
EXL3_REPO = "turboderp/Qwen2.5-0.5B-Instruct-exl3"
GGUF_REPO = "bartowski/Qwen2.5-0.5B-Instruct-GGUF"


def write_folder(folder: Path, files: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


@pytest.fixture(scope="module")
def gguf_bytes(tmp_path_factory):
    return write_tokenizer_gguf(QWEN, tmp_path_factory.mktemp("gguf") / "q.gguf").read_bytes()


@pytest.fixture
def hub(memory_keyring, gguf_bytes):  # noqa: F811 - the fixture imported above
    """One model in three formats, as their usual authors publish them."""
    main_readme = {"README.md": b"# Qwen2.5-0.5B-Instruct EXL3\n\nEach bitrate on its own branch.\n"}
    repos = [
        FakeRepo(EXL2_REPO, {"main": main_readme, "4.0bpw": exl2_branch(QWEN, 4.0, 6, seed=4)},
                 tags=("exl2", "qwen2"), downloads=3400),
        FakeRepo(EXL3_REPO, {"main": main_readme, "3.0bpw": exl3_branch(QWEN, 3, 6, seed=1),
                             "4.0bpw": exl3_branch(QWEN, 4, 6, seed=2)},
                 tags=("exl3", "qwen2", "text-generation"), downloads=2100),
        FakeRepo(GGUF_REPO, {"main": {"README.md": b"# GGUF\n", "Qwen2.5-0.5B-Instruct-Q8_0.gguf": gguf_bytes}},
                 tags=("gguf", "qwen2"), downloads=9000),
        FakeRepo("testorg/Qwen2.5-0.5B-Instruct", {"main": {"config.json": (QWEN / "config.json").read_bytes()}},
                 tags=("qwen2", "safetensors"), downloads=90000),
    ]
    with FakeHub(repos) as fake:
        yield fake


# search ---------------------------------------------------------------------------------------
def test_search_finds_every_runnable_format_and_filters_by_one(hub, capsys):
    hits = search_repos("qwen2.5 0.5b", endpoint=hub.url)
    assert [(h.repo_id, h.format) for h in hits] == [
        (GGUF_REPO, "gguf"), (EXL2_REPO, "exl2"), (EXL3_REPO, "exl3")]  # the original is no quant
    assert [h.repo_id for h in search_repos("qwen2.5 0.5b", formats="exl3", endpoint=hub.url)] == [EXL3_REPO]
    assert [h.repo_id for h in search_repos(family="qwen2", formats=["exl2", "gguf"], endpoint=hub.url)] == [
        GGUF_REPO, EXL2_REPO]
    assert main(["search", "qwen", "--format", "exl3", "--endpoint", hub.url]) == 0
    out = capsys.readouterr().out
    assert EXL3_REPO in out and EXL2_REPO not in out and "EXL3" in out
    assert main(["search", "qwen", "--endpoint", hub.url, "--json"]) == 0
    assert {h["format"] for h in json.loads(capsys.readouterr().out)} == {"exl2", "exl3", "gguf"}
    with pytest.raises(InvalidInputError, match="Unknown model format 'awq'"):
        search_repos("qwen", formats="awq", endpoint=hub.url)


# variants and install -------------------------------------------------------------------------
def test_exl3_variants_read_bits_from_config_and_agree_with_the_vram_plan(hub, tmp_path, capsys):
    found = list_variants(EXL3_REPO, endpoint=hub.url)
    assert [(v.revision, v.bits, v.head_bits, v.bits_source, v.format) for v in found.variants] == [
        ("3.0bpw", 3.0, 6, "config.json", "exl3"), ("4.0bpw", 4.0, 6, "config.json", "exl3")]
    three = found.find("3.0bpw")
    assert three.format_label == "EXL3 (TabbyAPI main)" and "ExLlamaV2 cannot" in " ".join(three.notes)
    # One computation: the variant's VRAM figure is vram's estimate for its config.json alone.
    only_config = write_folder(tmp_path / "cfg", {"config.json": exl3_branch(QWEN, 3, 6)["config.json"]})
    assert three.weights_vram_bytes == model_weights(only_config).gpu_bytes
    assert list_variants(EXL2_REPO, endpoint=hub.url).variants[0].format == "exl2"
    assert main(["variants", EXL3_REPO, "--endpoint", hub.url]) == 0
    table = capsys.readouterr().out
    assert table.count("EXL3 (TabbyAPI main)") == 2 and "3.0 bpw · h6" in table


def test_an_installed_exl3_branch_gets_a_vram_plan_measured_from_its_files(hub, tmp_path, capsys):
    result = install(EXL3_REPO, "3.0bpw", tmp_path / "models", endpoint=hub.url)
    assert result.model.quant.method == "exl3"
    assert main(["vram", "--model", str(result.path), "--gpus", "24", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["fits"] and "EXL3 3 bpw, sizes from its files" in planned["target"]
    # The files' storage sizes and the formula from bits agree (the folder is all at K = 3).
    measured = model_weights(result.path)
    estimated = exl3_vram.weights_from_bits(measured.arch, 3.0, 6)
    assert measured.source == "files" and measured.gpu_bytes == estimated.gpu_bytes
    assert measured.embedding_bytes == 2 * 512 * 256  # fp16 embedding, kept in system RAM
    # The library labels it, and it is offered as the draft of a TabbyAPI main config.
    assert main(["models", "--dir", str(tmp_path / "models")]) == 0
    listed = capsys.readouterr().out
    assert "EXL3 3 bpw h6" in listed and "TabbyAPI main" in listed
    from specdeck.core.hub.draft import plan_use_as_draft

    change = plan_use_as_draft(result.path, _config_yml(tmp_path / "config.yml", tmp_path / "models", True))
    assert f"draft_model_name: {result.path.name}" in change.new_text


# the arithmetic against exllamav3's formulas, on real configs ----------------------------------
@pytest.mark.parametrize("base", [TINY, QWEN], ids=["TinyLlama-1.1B", "Qwen2.5-0.5B"])
def test_weights_and_cache_follow_exllamav3_storage_on_real_configs(base):
    arch = architecture_from_config(json.loads((base / "config.json").read_text()))
    h, q, kv, inter = arch.hidden_size, arch.num_heads * arch.head_dim, arch.kv_width, arch.intermediate_size

    def stored(i: int, o: int, k: int) -> int:  # pack_trellis: int16 (i/16, o/16, 256*K/16); suh, svh fp16
        return (i // 16) * (o // 16) * (256 * k // 16) * 2 + 2 * i + 2 * o

    shapes = [(h, q), (h, kv), (h, kv), (q, h), (h, inter), (h, inter), (inter, h)]
    for k in (2, 3, 4, 6, 8):
        weights = exl3_vram.weights_from_bits(arch, float(k), 6)
        block = sum(stored(i, o, k) for i, o in shapes) + 2 * 2 * h
        assert [m.nbytes for m in weights.modules[:-2]] == [block] * arch.num_layers
        assert weights.modules[-1].nbytes == stored(h, arch.vocab_size, 6)
        assert weights.embedding_bytes == 2 * arch.vocab_size * h
    # cache/quant.py: int32 words of E/32*bits for K and for V, fp16 scales E/32 each.
    for k_bits, v_bits in ((2, 2), (4, 4), (8, 4), (6, 5), (8, 8)):
        words = (kv // 32) * (k_bits + v_bits)
        assert exl3_vram.kv_bytes_per_token_layer(arch, f"{k_bits},{v_bits}") == 4 * words + 2 * 2 * (kv // 32)
    assert exl3_vram.kv_bytes_per_token_layer(arch, "FP16") == 4 * kv  # cache/fp16.py
    assert exl3_vram.check_cache_mode("q6") == "6,6"  # TabbyAPI main's create_cache
    with pytest.raises(InvalidInputError, match="k,v pair of bits from 2 to 8"):
        exl3_vram.check_cache_mode("9,4")


def test_a_real_sized_exl3_pair_is_planned_as_tabbyapi_main_loads_it(tmp_path):
    """Qwen2.5-7B target, Qwen2.5-0.5B draft, as EXL3 config.json folders on one 24 GiB GPU."""
    target = write_folder(tmp_path / "t", {"config.json": json.dumps(exl3_config(MODELS / "Qwen2.5-7B-Instruct", 4.0, 6)).encode()})
    draft = write_folder(tmp_path / "d", {"config.json": json.dumps(exl3_config(QWEN, 4.0, 6)).encode()})
    result = plan_from_inputs(PlanInputs(model=str(target), draft=str(draft), context=16384, gpus="24",
                                         cache_mode="Q8", draft_cache_mode="8,4"))
    gpu = result.gpus[0]
    t_arch, d_arch = model_weights(target).arch, model_weights(draft).arch
    assert result.cache_mode == "8,8" and result.draft_cache_mode == "8,4"
    assert gpu.target_cache == exl3_vram.kv_bytes_per_token_layer(t_arch, "8,8") * t_arch.num_layers * 16384
    assert gpu.draft_cache == exl3_vram.kv_bytes_per_token_layer(d_arch, "8,4") * d_arch.num_layers * 16384
    assert gpu.target_weights == model_weights(target).gpu_bytes and result.fits
    assert any("TabbyAPI main" in n for n in result.notes)
    # The draft counts twice against the target's limit (exllamav3 util/memory.py): on a GPU
    # with room for both at face value (plus the 96 MB reserve and half the draft again), the
    # target's last layers move on to GPU 1.
    spare = 96 * 2**20 + (gpu.draft_weights + gpu.draft_cache) // 2
    size = (gpu.used_bytes + spare + gpu.reserved_bytes) / 1024**3
    two = plan_from_inputs(PlanInputs(model=str(target), draft=str(draft), context=16384,
                                      gpus=f"{size:.3f},24", cache_mode="Q8", draft_cache_mode="8,4"))
    assert two.gpus[0].draft_weights == gpu.draft_weights and two.gpus[1].target_weights > 0
    assert two.gpus[0].free_bytes > gpu.draft_weights  # what is left on GPU 0 is the double count


def test_a_gpu_split_caps_everything_pytorch_holds_there(tmp_path):
    """exllamav3's use_per_device: the share covers weights, cache and buffers, so a share
    that holds the weights alone sends the last layers on."""
    target = write_folder(tmp_path / "t", {"config.json": json.dumps(
        exl3_config(MODELS / "Qwen2.5-7B-Instruct", 4.0, 6)).encode()})
    weights = model_weights(target)
    share = (weights.gpu_bytes + 64 * 2**20) / 1024**3
    result = plan_from_inputs(PlanInputs(model=str(target), gpus="24,24", context=32768,
                                         gpu_split=f"{share:.3f},20"))
    first, second = result.gpus
    assert first.target_layers[0] == 0 and second.target_layers is not None
    assert second.target_layers[0] == first.target_layers[1] + 1
    torch_bytes = first.used_bytes - first.overhead["cuda_context"]
    assert torch_bytes <= share * 1024**3 and result.split.startswith("gpu_split")
    # On one GPU TabbyAPI main keeps its own 96 MB reserve, whatever autosplit_reserve says.
    one = plan_from_inputs(PlanInputs(model=str(target), gpus="24", context=32768))
    ignored = plan_from_inputs(PlanInputs(model=str(target), gpus="24", context=32768,
                                          autosplit_reserve_mb="20000"))
    assert one.fits and ignored.gpus == one.gpus and ignored.max_context == one.max_context
    spread = plan_from_inputs(PlanInputs(model=str(target), gpus="24,24", context=32768,
                                         autosplit_reserve_mb="20000"))
    assert spread.gpus[1].target_weights > 0  # two GPUs: the user's reserve counts


def test_tabbyapi_main_config_draft_modes_choose_the_draft(tmp_path):
    from specdeck.core import config
    from specdeck.core.vram import inputs_from_tabby_config

    models = tmp_path / "models"
    write_folder(models / "target", exl3_branch(QWEN, 4))
    write_folder(models / "q-exl3", exl3_branch(QWEN, 3))
    yml = _config_yml(tmp_path / "config.yml", models, True)
    assert inputs_from_tabby_config(config.load(yml)).draft is None  # draft_mode: ngram
    text = yml.read_text().replace("draft_mode: ngram", "draft_mode: model\n  draft_model_name: q-exl3")
    yml.write_text(text)
    assert inputs_from_tabby_config(config.load(yml)).draft == str(models / "q-exl3")
    yml.write_text(text.replace("draft_mode: model", "draft_mode: mtp"))
    planned = inputs_from_tabby_config(config.load(yml))
    assert planned.mtp and planned.draft is None


def test_tabbyapi_main_refusals_are_explained(tmp_path):
    target = write_folder(tmp_path / "t", exl3_branch(QWEN, 4))
    exl2 = write_folder(tmp_path / "e", exl2_branch(QWEN, 4.0, 6))
    with pytest.raises(InvalidInputError, match="ExLlamaV3, which loads EXL3"):
        plan_from_inputs(PlanInputs(model=str(target), draft=str(exl2), gpus="24"))
    with pytest.raises(InvalidInputError, match="Cannot specify both memory usage and memory reserve"):
        plan_from_inputs(PlanInputs(model=str(target), draft=str(target), gpus="24,24", draft_gpu_split="0,4"))
    with pytest.raises(InvalidInputError, match="no MTP layers"):
        plan_from_inputs(PlanInputs(model=str(target), gpus="24", mtp=True))


def test_mtp_layers_draft_for_their_own_model(tmp_path):
    config = exl3_config(QWEN, 4, 6, mtp_num_hidden_layers=1, **EXL3_SMALL)
    files = {"config.json": json.dumps(config).encode(),
             "model.safetensors": safetensors_bytes(exl3_tensors(config, 4, 6, mtp_layers=1))}
    folder = write_folder(tmp_path / "mtp", files)
    target = model_weights(folder)
    assert target.gpu_bytes == exl3_vram.weights_from_bits(target.arch, 4.0, 6).gpu_bytes  # mtp.* left out
    result = plan_from_inputs(PlanInputs(model=str(folder), gpus="24", mtp=True, context=4096))
    block = exl3_vram.block_bytes(target.arch, 4.0)
    fc = exl3_vram.linear_bytes(512, 256, 4.0) + 2 * 256
    assert result.gpus[0].draft_weights == block + fc
    assert result.gpus[0].draft_cache == exl3_vram.kv_bytes_per_token_layer(target.arch, "FP16") * 4096


# use as draft, compatibility ------------------------------------------------------------------
def _config_yml(path: Path, models: Path, main_branch: bool) -> Path:
    extra = "  dynamic_draft: false\n" if main_branch else ""
    backend = "exllamav3" if main_branch else "exllamav2"
    path.write_text(f"model:\n  model_dir: {models}\n  model_name: target\n  backend: {backend}\n"
                    f"draft_model:\n  draft_model_dir: {models}\n  draft_mode: ngram\n{extra}")
    return path


def test_use_as_draft_follows_the_configs_tabbyapi_branch(tmp_path):
    from specdeck.core.hub.draft import plan_use_as_draft

    models = tmp_path / "models"
    exl3_draft = write_folder(models / "q-exl3", exl3_branch(QWEN, 4))
    exl2_draft = write_folder(models / "q-exl2", exl2_branch(QWEN, 4.0, 6))
    main_yml = _config_yml(tmp_path / "main.yml", models, main_branch=True)
    change = plan_use_as_draft(exl3_draft, main_yml)
    assert "draft_model_name: q-exl3" in change.new_text and "draft_mode: model" in change.new_text
    with pytest.raises(InvalidInputError, match="main branch, which runs ExLlamaV3 only"):
        plan_use_as_draft(exl2_draft, main_yml)
    old_yml = _config_yml(tmp_path / "exl2.yml", models, main_branch=False)
    with pytest.raises(InvalidInputError, match="exl2-checkpoint"):
        plan_use_as_draft(exl3_draft, old_yml)
    assert "draft_model_name: q-exl2" in plan_use_as_draft(exl2_draft, old_yml).new_text


def test_compat_accepts_exl3_folders_and_names_the_pairs_no_server_loads(tmp_path, gguf_bytes, capsys):
    from specdeck.core.compat import check

    tiny_target = write_folder(tmp_path / "tt", exl3_branch(TINY, 4, seed=1))
    tiny_draft = write_folder(tmp_path / "td", exl3_branch(TINY, 3, seed=2))
    rules = {r.key: r for r in check(tiny_target, tiny_draft).rules}
    assert rules["exllamav3_tokenizer"].status.value == "pass" and "exllamav2_tokenizer" not in rules
    assert not [r for r in rules.values() if r.blocking and r.status.value == "fail"]
    # Qwen2.5's fixture has vocab.json + merges.txt but no tokenizer.json: read, but warned.
    target = write_folder(tmp_path / "t", exl3_branch(QWEN, 4, seed=1))
    draft = write_folder(tmp_path / "d", exl3_branch(QWEN, 3, seed=2))
    rules = {r.key: r for r in check(target, draft).rules}
    assert rules["exllamav3_tokenizer"].status.value == "warn" and "tokenizer.json" in rules["exllamav3_tokenizer"].detail
    exl2 = write_folder(tmp_path / "e", exl2_branch(QWEN, 4.0, 6))
    mixed = {r.key: r for r in check(target, exl2).rules}["formats"]
    assert (mixed.target, mixed.draft) == ("EXL3", "EXL2") and "no TabbyAPI" in mixed.detail
    gguf = tmp_path / "q.gguf"
    gguf.write_bytes(gguf_bytes)
    mixed = {r.key: r for r in check(gguf, target).rules}["formats"]
    assert (mixed.target, mixed.draft) == ("GGUF", "EXL3") and "no server loads them together" in mixed.detail
    assert main(["vram", "--model", str(target), "--draft", str(gguf), "--gpus", "24"]) == 2
    assert "no server loads them together" in capsys.readouterr().err


# the Models page ------------------------------------------------------------------------------
@pytest.fixture
def page(qtbot, configured_qapp, hub, monkeypatch, tmp_path):
    from specdeck.gui.context import AppContext
    from specdeck.gui.pages.models import ModelsPage

    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    page = ModelsPage(AppContext())
    qtbot.addWidget(page)
    page.set_install_dir(tmp_path / "drafts")
    page.resize(1200, 800)
    page.show()
    yield page
    page.shutdown()
    qtbot.waitUntil(lambda: not page.busy(), timeout=10_000)


def test_models_page_filters_by_format_and_labels_exl3(qtbot, page, tmp_path):
    from PySide6.QtCore import Qt

    def results() -> list[tuple[str, str]]:
        table = page.results_table
        return [(table.item(r, 0).text(), table.item(r, 4).text()) for r in range(table.rowCount())]

    qtbot.keyClicks(page.search_edit, "qwen2.5 0.5b")
    qtbot.mouseClick(page.search_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.results_table.rowCount() == 3, timeout=10_000)
    assert results() == [(GGUF_REPO, "GGUF"), (EXL2_REPO, "EXL2"), (EXL3_REPO, "EXL3")]
    page.format_combo.setCurrentIndex(page.format_combo.findData("exl3"))
    qtbot.mouseClick(page.search_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: results() == [(EXL3_REPO, "EXL3")], timeout=10_000)
    assert page.search_status.text().startswith("1 EXL3 repository")
    page.select_repo(EXL3_REPO)
    qtbot.waitUntil(lambda: page.variants_table.rowCount() == 2, timeout=10_000)
    assert [row["Bitrate / quant"] for row in page.variant_rows().values()] == [
        "EXL3 · 3.0 bpw · h6", "EXL3 · 4.0 bpw · h6"]
    page.grab().save(str(tmp_path / "models-exl3.png"))
    assert (tmp_path / "models-exl3.png").stat().st_size > 10_000


def test_models_page_use_as_draft_follows_a_main_configs_backend(qtbot, page, tmp_path, monkeypatch):
    """TabbyAPI main's own config_sample.yml (f1f2c85): an installed EXL2 branch is refused as
    its draft, with the reason on the page; an EXL3 branch is offered and saved."""
    from conftest import TABBY
    from PySide6.QtCore import Qt

    from specdeck.core import config
    from specdeck.gui.widgets import config_dialog

    config_yml = tmp_path / "tabby" / "config.yml"
    config_yml.parent.mkdir()
    config_yml.write_text((TABBY / "config_sample.f1f2c85.yml").read_text())
    original = config_yml.read_text()
    page.context.set_config_path(config_yml)
    monkeypatch.setattr(config_dialog.ConfirmChangeDialog, "exec",
                        lambda dialog: config_dialog.QDialog.DialogCode.Accepted)

    def install(repo: str, branch: str):
        page.show_repo(repo)
        qtbot.waitUntil(lambda: branch in page.variant_rows(), timeout=10_000)
        page.select_variant(branch)
        with qtbot.waitSignal(page.install_finished, timeout=60_000) as finished:
            qtbot.mouseClick(page.install_button, Qt.MouseButton.LeftButton)
        return finished.args[0].path

    install(EXL2_REPO, "4.0bpw")
    qtbot.mouseClick(page.use_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "ExLlamaV3 only" in page.error_banner.label.text(), timeout=10_000)
    assert "cannot load EXL2" in page.error_banner.label.text() and config_yml.read_text() == original
    exl3 = install(EXL3_REPO, "3.0bpw")
    with qtbot.waitSignal(page.context.config_saved, timeout=10_000):
        qtbot.mouseClick(page.use_button, Qt.MouseButton.LeftButton)
    assert config.load(config_yml).draft_model_path() == exl3
