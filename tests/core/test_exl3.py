"""EXL3 on the Hub and on disk (issue 29): search by format, EXL3 variants, an EXL3 branch
installed and planned, the EXL3 VRAM arithmetic against exllamav3's own storage formulas,
TabbyAPI main's load order, "Use as draft" per TabbyAPI branch, and compatibility.

EXL3 folders are built the way exllamav3 1.6.5's converter writes them (tests/hubserver.py
``exl3_branch``): tiny, but real safetensors files read by real code.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from conftest import MODELS
from gguf_writer import write_tokenizer_gguf
from hubserver import (  # noqa: F401 - memory_keyring is a fixture
    EXL3_MUL1,
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
from specdeck.core.models import architecture_from_config, quantization_from_config, read_model
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
    bias = 2 * (q + 2 * kv) if arch.model_type == "qwen2" else 0  # qwen2.py: fp16 q/k/v biases
    assert bias == (2 * (896 + 2 * 128) if base == QWEN else 0)
    for k in (2, 3, 4, 6, 8):
        weights = exl3_vram.weights_from_bits(arch, float(k), 6)
        block = sum(stored(i, o, k) for i, o in shapes) + 2 * 2 * h + bias
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
    # exllamav3 1.6.5 counts the draft once against the target's limit (util/memory.py
    # set_memory_fraction_reserve adds what PyTorch holds back in; 1.4.1 counted it twice).
    # What binds is the loader's physical margin, 256 MiB beyond the held transients
    # (model_ls.py EXL3_AUTOSPLIT_MARGIN_MB): with it, everything stays on GPU 0; 2 MiB short
    # of it, the target's last module moves on to GPU 1.
    def on(size_bytes: int):
        size = (size_bytes + gpu.reserved_bytes) / 1024**3
        return plan_from_inputs(PlanInputs(model=str(target), draft=str(draft), context=16384,
                                           gpus=f"{size:.9f},24", cache_mode="Q8", draft_cache_mode="8,4"))

    room = on(gpu.used_bytes + exl3_vram.AUTOSPLIT_MARGIN + 2**20)
    assert room.gpus[1].target_weights == 0 and room.gpus[0].target_weights == gpu.target_weights
    assert room.gpus[0].draft_weights == gpu.draft_weights
    short = on(gpu.used_bytes + exl3_vram.AUTOSPLIT_MARGIN - 2**20)
    assert short.gpus[0].draft_weights == gpu.draft_weights and short.gpus[1].target_weights > 0
    # Only the head moved (every block stays on GPU 0); 1.4.1's rule, the draft's weights and
    # cache counted twice, would have sent whole layers on.
    head = model_weights(target).modules[-1].nbytes
    assert short.gpus[0].target_layers == gpu.target_layers and short.gpus[1].target_weights == head


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


def test_a_gpu_split_is_per_load_so_a_draft_split_first_leaves_the_targets_share_whole(tmp_path):
    """exllamav3 1.6.5 util/memory.py set_memory_fraction_use: the limit is what PyTorch
    already holds plus min(use, free), so the draft loaded first under draft_gpu_split does not
    eat into the target's gpu_split share (1.4.1: the share capped both)."""
    target = write_folder(tmp_path / "t", {"config.json": json.dumps(
        exl3_config(MODELS / "Qwen2.5-7B-Instruct", 4.0, 6)).encode()})
    draft = write_folder(tmp_path / "d", {"config.json": json.dumps(exl3_config(QWEN, 4.0, 6)).encode()})
    share = (model_weights(target).gpu_bytes + 64 * 2**20) / 1024**3
    alone = plan_from_inputs(PlanInputs(model=str(target), gpus="24,24", context=32768, gpu_split=f"{share:.3f},20"))
    paired = plan_from_inputs(PlanInputs(model=str(target), draft=str(draft), gpus="24,24", context=32768,
                                         gpu_split=f"{share:.3f},20", draft_gpu_split="2,0"))
    assert paired.gpus[0].draft_weights == model_weights(draft).gpu_bytes and paired.gpus[1].draft_weights == 0
    assert paired.gpus[0].target_layers == alone.gpus[0].target_layers
    held = paired.gpus[0]
    draft_part = held.draft_weights + held.draft_cache
    assert held.used_bytes - held.overhead["cuda_context"] > share * 1024**3 > held.target_weights + held.target_cache
    assert draft_part > 0


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
    # mtp.fc and its two input norms, mtp.norm (architecture/qwen3_5_mtp.py); markers stay off
    fc = exl3_vram.linear_bytes(512, 256, 4.0) + 3 * 2 * 256
    assert result.gpus[0].draft_weights == block + fc
    assert result.gpus[0].draft_cache == exl3_vram.kv_bytes_per_token_layer(target.arch, "FP16") * 4096


# cross-check: the plan's weight bytes against the files' own storage sizes ---------------------
def _storage(folder: Path) -> dict[str, tuple[str, int]]:
    """name -> (dtype, storage bytes) from the safetensors header, read here by hand: what
    exllamav3's SafetensorsCollection.get_tensor_sizes / list_tensors report (end - begin)."""
    found = {}
    for path in folder.glob("*.safetensors"):
        raw = path.read_bytes()
        header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
        for name, entry in header.items():
            if name != "__metadata__":
                found[name] = (entry["dtype"], entry["data_offsets"][1] - entry["data_offsets"][0])
    return found


@pytest.mark.parametrize("base", [TINY, QWEN], ids=["TinyLlama-1.1B", "Qwen2.5-0.5B"])
@pytest.mark.parametrize(("bits", "head_bits"), [(2, 6), (4, 6), (8, 8), (2.5, 3.5), (3, 16)])
def test_exl3_weight_bytes_equal_the_files_storage_less_what_stays_off_the_gpu(base, bits, head_bits, tmp_path):
    """The safetensors storage sum is the plan's GPU bytes, plus the embedding (system RAM,
    modules/embedding.py prefer_cpu) and one 4-byte mul1 codebook marker per linear layer
    (loader/safetensors.py get_codebook_marker: a shared CPU tensor, never on the GPU)."""
    folder = write_folder(tmp_path / "m", exl3_branch(base, bits, head_bits))
    info = read_model(folder)
    assert (info.quant.bits, info.quant.head_bits) == (bits, head_bits)  # 2.5 and 3.5 kept as read
    assert info.arch.tie_word_embeddings is False  # 1.6.5's update_config unties the output
    stored = _storage(folder)
    markers = [n for n in stored if n.endswith(".mul1")]
    assert len(markers) == 7 * 2 + (head_bits != 16) and all(stored[n] == ("I32", 4) for n in markers)
    measured = model_weights(folder)
    assert measured.source == "files"
    total = sum(size for _, size in stored.values())
    assert measured.gpu_bytes + measured.embedding_bytes + 4 * len(markers) == total
    assert measured.embedding_bytes == stored["model.embed_tokens.weight"][1]
    # quantization_config.json (create_quantization_config_json) lists the same storage.
    listed = json.loads((folder / "quantization_config.json").read_text())["tensor_storage"]
    assert sum(t["n_bytes"] for m in listed.values() for t in m["stored_tensors"].values()) == total
    assert {m["bits_per_weight"] for k, m in listed.items() if k.startswith("model.layers.")
            and "quant_format" in m} == {bits}
    # The folder is all at one K, so the estimate from config.json alone agrees to the byte.
    estimated = exl3_vram.weights_from_bits(measured.arch, float(bits), head_bits)
    assert [m.nbytes for m in measured.modules] == [m.nbytes for m in estimated.modules]


def _rewrite(folder: Path, change) -> Path:
    from safetensors.numpy import load_file, save_file

    tensors = load_file(folder / "model.safetensors")
    change(tensors)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def test_an_older_folder_with_packed_signs_plans_the_gpu_bytes_it_unpacks_to(tmp_path):
    """Older converters stored su/sv as packed sign bits (int16, one bit per element), a
    float32 bias and a scale; load_exl3 unpacks the signs to fp16 suh/svh on the GPU, casts the
    bias to fp16 and leaves scale unloaded, so the GPU holds what a 1.6.5 folder holds."""
    import numpy as np

    new = write_folder(tmp_path / "new", exl3_branch(QWEN, 4, 6))
    old = write_folder(tmp_path / "old", exl3_branch(QWEN, 4, 6))

    def pack(tensors: dict) -> None:
        for name in [n for n in tensors if n.endswith((".suh", ".svh", ".mul1"))]:
            array = tensors.pop(name)
            if not name.endswith(".mul1"):
                tensors[name[:-1]] = np.zeros(array.shape[0] // 16, dtype=np.int16)
        for name in [n for n in tensors if n.endswith(".bias")]:
            tensors[name] = tensors[name].astype(np.float32)
        tensors["model.layers.0.self_attn.q_proj.scale"] = np.ones((), dtype=np.float32)

    _rewrite(old, pack)
    assert any(n.endswith(".su") for n in _storage(old)) and not any(n.endswith(".suh") for n in _storage(old))
    assert _storage(old)["model.layers.0.self_attn.q_proj.bias"][0] == "F32"
    assert [m.nbytes for m in model_weights(old).modules] == [m.nbytes for m in model_weights(new).modules]


def test_a_quantized_embedding_table_stays_in_system_ram_with_its_signs_on_the_gpu(tmp_path):
    """exllamav3 1.6.5 --embed_bits: model.embed_tokens.trellis (the row table, held in RAM
    or streamed) and .signs ((groups, 256) fp16, on the device; modules/embedding.py)."""
    import numpy as np

    plain = write_folder(tmp_path / "plain", exl3_branch(TINY, 4, 6))
    folder = write_folder(tmp_path / "q", exl3_branch(TINY, 4, 6))
    h, vocab, k = EXL3_SMALL["hidden_size"], EXL3_SMALL["vocab_size"], 4
    groups = -(-h // 256)

    def quantize(tensors: dict) -> None:
        del tensors["model.embed_tokens.weight"]
        tensors["model.embed_tokens.trellis"] = np.zeros((vocab, groups * (1 + 16 * k)), dtype=np.int16)
        tensors["model.embed_tokens.signs"] = np.ones((groups, 256), dtype=np.float16)

    _rewrite(folder, quantize)
    table, base = model_weights(folder), model_weights(plain)
    assert table.embedding_bytes == vocab * groups * (1 + 16 * k) * 2 < base.embedding_bytes
    assert table.gpu_bytes == base.gpu_bytes + groups * 256 * 2


def test_half_integer_and_fp16_head_bits_are_read_as_the_converter_writes_them():
    assert quantization_from_config({"quantization_config": {"quant_method": "exl3", "bits": 2.5,
                                                             "head_bits": 3.5}}).head_bits == 3.5
    assert quantization_from_config({"quantization_config": {"quant_method": "exl2", "bits": 4.0,
                                                             "head_bits": 6.0}}).label == "EXL2 4 bpw h6"
    arch = architecture_from_config(json.loads((TINY / "config.json").read_text()))
    head = exl3_vram.weights_from_bits(arch, 4.0, 16).modules[-1].nbytes
    assert head == 2 * arch.hidden_size * arch.vocab_size  # lm_head.weight, fp16, no suh/svh


def test_exl3_chunk_buffers_follow_reconstruct_hgemm_1_6_5():
    """Rows above 144 rebuild the weight; from 1024 rows (dims divisible by 128) the input is
    not copied into xh, so the largest rotated input is a 1023-row pass."""
    from specdeck.core.vram.costs import DEFAULT_OVERHEADS, TENSOR_PAD

    arch = architecture_from_config(json.loads((TINY / "config.json").read_text()))
    widest_in = arch.intermediate_size  # down_proj
    rebuilt = 2 * arch.hidden_size * arch.intermediate_size  # gate/up: in x out halves
    for chunk, rows in ((256, 256), (1023, 1023), (2048, 1023), (4096, 1023)):
        costs = exl3_vram.model_costs(arch, "FP16", 4096, chunk, DEFAULT_OVERHEADS)
        assert costs.scratch_fixed == rebuilt + rows * widest_in * 2 + TENSOR_PAD + exl3_vram.ARENA_BLOCK
    qwen = architecture_from_config(json.loads((QWEN / "config.json").read_text()))  # 896 = 7 x 128
    costs = exl3_vram.model_costs(qwen, "FP16", 4096, 2048, DEFAULT_OVERHEADS)
    assert costs.scratch_fixed == (2 * qwen.hidden_size * qwen.intermediate_size
                                   + 1023 * qwen.intermediate_size * 2 + TENSOR_PAD + exl3_vram.ARENA_BLOCK)


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
    page.installer.set_install_dir(tmp_path / "drafts")
    page.resize(1200, 800)
    page.show()
    yield page
    page.shutdown()
    qtbot.waitUntil(lambda: not page.busy(), timeout=10_000)


def test_models_page_filters_by_format_and_labels_exl3(qtbot, page, tmp_path):
    from PySide6.QtCore import Qt

    def results() -> list[tuple[str, str]]:
        table = page.browser.results_table
        return [(table.item(r, 0).text(), table.item(r, 4).text()) for r in range(table.rowCount())]

    qtbot.keyClicks(page.browser.search_edit, "qwen2.5 0.5b")
    qtbot.mouseClick(page.browser.search_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.browser.results_table.rowCount() == 3, timeout=10_000)
    assert results() == [(GGUF_REPO, "GGUF"), (EXL2_REPO, "EXL2"), (EXL3_REPO, "EXL3")]
    page.browser.format_combo.setCurrentIndex(page.browser.format_combo.findData("exl3"))
    qtbot.mouseClick(page.browser.search_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: results() == [(EXL3_REPO, "EXL3")], timeout=10_000)
    assert page.browser.search_status.text().startswith("1 EXL3 repository")
    page.browser.select_repo(EXL3_REPO)
    qtbot.waitUntil(lambda: page.browser.variants_table.rowCount() == 2, timeout=10_000)
    assert [row["Bitrate / quant"] for row in page.browser.variant_rows().values()] == [
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
        page.browser.show_repo(repo)
        qtbot.waitUntil(lambda: branch in page.browser.variant_rows(), timeout=10_000)
        page.browser.select_variant(branch)
        with qtbot.waitSignal(page.install_finished, timeout=60_000) as finished:
            qtbot.mouseClick(page.installer.install_button, Qt.MouseButton.LeftButton)
        return finished.args[0].path

    install(EXL2_REPO, "4.0bpw")
    qtbot.mouseClick(page.installer.use_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "ExLlamaV3 only" in page.error_banner.label.text(), timeout=10_000)
    assert "cannot load EXL2" in page.error_banner.label.text() and config_yml.read_text() == original
    exl3 = install(EXL3_REPO, "3.0bpw")
    with qtbot.waitSignal(page.context.file_changed, timeout=10_000):
        qtbot.mouseClick(page.installer.use_button, Qt.MouseButton.LeftButton)
    assert config.load(config_yml).draft_model_path() == exl3
