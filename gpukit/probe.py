"""A short GPU probe (about a minute of device time) for what the kit's 2026-11-26 H200 runs
left open, on small random-weight models made on the spot (no training, no quantization):

1. ``attention``: does a row of an unpaged exllamav2 forward see the rows after it? Row 0
   of ``[last, d1..dk]`` is computed twice with two different ``d``; any difference is
   attention leaking forward (exllamav2 0.2.9-0.3.2's SDPA branch has no causal mask, see
   core.engines.exl2_attention). With the library's SDPA as it is, with SpecDeck's restored
   causal mask (SDPA kept), and with ``no_sdpa`` (the matmul branch, which masks), plus row
   0 against a one-row forward (kernel shape).
2. ``engine``: SpecDeck's own ExLlamaV2 engine, greedy, no draft vs a draft model vs
   n-gram, each drafted run compared token by token with the no-draft run (core's check):
   with the engine as it is (the mask fix on) and with the fix switched off.
3. ``memory``: NVML's device total and PyTorch's counters at each stage (CUDA context,
   cuBLAS, the exllamav2 extension, weights, cache, generator), to split what the VRAM
   plan's fixed overhead really holds.

On a machine without CUDA (``--cpu``, the rehearsal) it makes the models and reports the
GPU sections as skipped. Writes ``probe.json`` to ``--out`` after every section.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

PROMPT_LEN = 96
DRAFT_K = 4
NEW_TOKENS = 48
PROMPTS = 3


def make_model(folder: Path, hidden: int, layers: int, heads: int, seed: int,
               tokenizer: Path) -> Path:
    """A random-weight Llama in FP16 safetensors, its head scaled so that greedy choices are
    clear (gaps of whole logits, not float ties), with a real tokenizer beside it."""
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = json.loads((tokenizer / "tokenizer.json").read_text(encoding="utf-8"))
    vocab_size = max(len(vocab["model"]["vocab"]), 32000)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=hidden * 3,
                         num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=heads, max_position_embeddings=2048,
                         bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    model.to(torch.float16).save_pretrained(folder, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (tokenizer / name).is_file():
            shutil.copy(tokenizer / name, folder / name)
    return folder


class Probe:
    def __init__(self, out: Path):
        self.out = out
        self.data: dict[str, Any] = {"probe": "specdeck-gpu-probe", "version": 1}
        out.mkdir(parents=True, exist_ok=True)

    def section(self, name: str, fn, *args) -> Any:
        started = time.perf_counter()
        try:
            result = fn(*args)
            self.data[name] = {"status": "done", **(result if isinstance(result, dict) else {})}
        except Exception as exc:  # noqa: BLE001 - every section reports, none stops the probe
            self.data[name] = {"status": "failed", "error": f"{type(exc).__name__}: {exc}",
                               "traceback": traceback.format_exc()[-3000:]}
            result = None
        self.data[name]["seconds"] = round(time.perf_counter() - started, 2)
        self.save()
        print(f"== {name}: {json.dumps(self.data[name], default=str)[:1500]}", flush=True)
        return result

    def skip(self, name: str, why: str) -> None:
        self.data[name] = {"status": "skipped", "why": why}
        self.save()
        print(f"== {name}: skipped ({why})", flush=True)

    def save(self) -> None:
        (self.out / "probe.json").write_text(json.dumps(self.data, indent=1, default=str) + "\n",
                                             encoding="utf-8")


# memory -------------------------------------------------------------------------------------
class Meter:
    """Device memory used (SpecDeck's own NVML reading, as the kit's memory step reads it)
    and PyTorch's counters, read at named stages."""

    def __init__(self):
        from gpukit.memory import nvml_used_bytes

        if nvml_used_bytes() is None:
            raise RuntimeError("SpecDeck's NVML reading sees no GPU")
        self._used = nvml_used_bytes
        self.stages: list[dict[str, Any]] = []

    def read(self, stage: str) -> None:
        import torch

        row = {"stage": stage, "nvml_used": self._used()}
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
            row.update(allocated=int(torch.cuda.memory_allocated()),
                       reserved=int(torch.cuda.memory_reserved()))
        self.stages.append(row)


# attention ----------------------------------------------------------------------------------
def attention_leak(x: Any, model_dir: Path) -> dict[str, Any]:
    import torch
    from specdeck.core.engines.exl2_attention import remove_causal_sdpa, restore_causal_sdpa

    config = x.ExLlamaV2Config(str(model_dir))
    config.arch_compat_overrides()
    config.no_flash_attn = True  # the unpaged path SpecDeck takes without flash-attn
    config.max_seq_len = 1024
    model = x.ExLlamaV2(config)
    cache = x.ExLlamaV2Cache(model, max_seq_len=1024, lazy=True)
    model.load_autosplit(cache)
    generator = torch.Generator().manual_seed(5)
    prefix = torch.randint(3, 30000, (1, PROMPT_LEN), generator=generator)
    junk = [torch.randint(3, 30000, (1, DRAFT_K), generator=generator) for _ in range(2)]
    rows: dict[str, Any] = {"exllamav2": x.version, "attn": {
        k: bool(getattr(x.attn, k, False)) for k in
        ("has_flash_attn", "has_xformers", "has_lower_right_sdpa")}}
    attention = x.attn.ExLlamaV2Attention
    variants = {"sdpa": (False, False), "sdpa, mask restored": (False, True),
                "matmul": (True, False)}
    with torch.inference_mode():
        for variant, (no_sdpa, restored) in variants.items():
            config.no_sdpa = no_sdpa
            if restored:
                restore_causal_sdpa(attention)
            else:
                remove_causal_sdpa(attention)
            cache.current_seq_len = 0
            model.forward(prefix[:, :-1], cache, preprocess_only=True)
            base = cache.current_seq_len
            last = prefix[:, -1:]
            one = model.forward(last, cache).float().cpu()[0, -1]
            row0 = []
            for d in junk:
                cache.current_seq_len = base
                row0.append(model.forward(torch.cat([last, d], dim=1), cache).float().cpu()[0, 0])
            top = one.topk(2).values
            rows[variant] = {
                "row0_changes_with_later_rows": float((row0[0] - row0[1]).abs().max()),
                "row0_vs_one_row": float((row0[0] - one).abs().max()),
                "argmax_same_as_one_row": [bool(r.argmax() == one.argmax()) for r in row0],
                "one_row_top2_gap": float(top[0] - top[1]),
            }
    remove_causal_sdpa(attention)
    model.unload()
    return rows


# engine -------------------------------------------------------------------------------------
def engine_ab(target: Path, draft: Path, masked: bool, meter: Meter | None = None) -> dict[str, Any]:
    import torch
    from specdeck.core.engines import exllamav2 as module
    from specdeck.core.engines.base import (
        GREEDY,
        NO_DRAFT,
        DrafterKind,
        DrafterSpec,
        GenerationRequest,
        LoadSpec,
    )
    from specdeck.core.engines.exl2_attention import remove_causal_sdpa
    from specdeck.core.engines.lossless import compare_greedy

    original = module.mask_unpaged_attention
    if not masked:
        module.mask_unpaged_attention = lambda x, config, paged: None
        remove_causal_sdpa(module.import_exllamav2().attn.ExLlamaV2Attention)
    try:
        engine = module.ExLlamaV2Engine()
        loaded = engine.load(LoadSpec(target, max_seq_len=1024, cache_mode="FP16",
                                      draft_cache_mode="FP16"))
        if meter is not None:
            meter.read("engine: target loaded, FP16 cache 1024, warmed up")
        generator = torch.Generator().manual_seed(11)
        prompts = [[1] + torch.randint(3, 30000, (PROMPT_LEN,), generator=generator).tolist()
                   for _ in range(PROMPTS)]
        arms = {"none": NO_DRAFT,
                f"draft k={DRAFT_K}": DrafterSpec(DrafterKind.MODEL, draft, num_draft_tokens=DRAFT_K,
                                                  adaptive=False),
                f"n-gram k={DRAFT_K}": DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=DRAFT_K,
                                                   adaptive=False)}
        results: dict[str, list] = {}
        for name, spec in arms.items():
            engine.set_drafter(spec)
            if meter is not None and spec.kind is DrafterKind.MODEL:
                meter.read("engine: + draft loaded, FP16 cache 1024")
            results[name] = [engine.generate(GenerationRequest(
                prompt="", prompt_ids=tuple(ids), max_new_tokens=NEW_TOKENS,
                sampling=GREEDY, stop_on_eos=False)) for ids in prompts]
        out: dict[str, Any] = {"masked": masked, "notes": list(loaded.notes)}
        for name in arms:
            if name == "none":
                continue
            checks = [compare_greedy(ref, cand) for ref, cand in zip(results["none"], results[name])]
            out[name] = {
                "verdicts": [c.verdict.value for c in checks],
                "first_divergence": [c.first_divergence for c in checks],
                "gap_there": [c.gap for c in checks],
                "accepted": [r.stats.accepted for r in results[name]],
                "drafted": [r.stats.drafted for r in results[name]],
            }
        engine.unload()
        return out
    finally:
        module.mask_unpaged_attention = original


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpukit.probe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=None,
                        help="where the models go (default: $SPECDECK_GPU_WORK or /tmp/specdeck-probe)")
    parser.add_argument("--cpu", action="store_true", help="the rehearsal: no GPU sections")
    parser.add_argument("--no-exllamav2", action="store_true",
                        help="the prebuilt extension did not import: skip what needs it")
    args = parser.parse_args(argv)
    args.work = args.work or Path(os.environ.get("SPECDECK_GPU_WORK") or "/tmp/specdeck-probe")

    from gpukit.pair import find_tokenizer

    probe = Probe(args.out)
    meter = None if args.cpu else probe.section("nvml", Meter)
    tokenizer = find_tokenizer()
    models = probe.section("models", lambda: {
        "target": str(make_model(args.work / "target", 512, 6, 8, 1, tokenizer)),
        "draft": str(make_model(args.work / "draft", 256, 2, 4, 2, tokenizer))})
    gpu_sections = ("memory", "attention", "engine_masked", "engine_unmasked")
    if args.cpu or models is None or meter is None:
        why = "CPU rehearsal" if args.cpu else "no models" if models is None else "no NVML"
        for name in gpu_sections:
            probe.skip(name, why)
        return 0 if args.cpu else 1
    probe.section("memory", context_memory, meter, not args.no_exllamav2)
    if args.no_exllamav2:
        for name in gpu_sections[1:]:
            probe.skip(name, "the prebuilt exllamav2 extension did not import")
        return 0
    from specdeck.core.engines.exllamav2 import import_exllamav2

    x = import_exllamav2()
    target, draft = Path(models["target"]), Path(models["draft"])
    probe.section("attention", attention_leak, x, target)
    meter.read("after the attention probe (model unloaded)")
    probe.section("engine_masked", engine_ab, target, draft, True, meter)
    meter.read("after the engine A/B (unloaded)")
    probe.section("engine_unmasked", engine_ab, target, draft, False)
    probe.data["memory"]["stages"] = meter.stages
    probe.save()
    return 0


def context_memory(meter: Meter, with_exllamav2: bool) -> dict[str, Any]:
    """What a process holds on the GPU before any model: the context, cuBLAS, the extension."""
    import torch

    meter.read("process start (no CUDA context)")
    torch.zeros(1, device="cuda")
    meter.read("CUDA context + one tensor")
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    (a @ a).sum().item()
    del a
    meter.read("after a cuBLAS half matmul")
    if with_exllamav2:
        from exllamav2.ext import ext_c  # noqa: F401 - the extension module and its kernels

        meter.read("exllamav2 and its extension imported")
    return {"stages": meter.stages}


if __name__ == "__main__":
    sys.exit(main())
