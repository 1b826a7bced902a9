"""Print the numbers behind docs/vram.md's cross-checks: `python -m tools.vram_crosscheck`.

Every figure in that page's tables comes from this script, so the page can be regenerated
when the planner changes. Published numbers it compares with are quoted in the page.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from specdeck.core import vram
from specdeck.core.models import Architecture, architecture_from_config, read_model
from specdeck.core.units import GiB, MiB, format_bytes

from tools.fixtures import fixtures_dir

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "models"


def fixtures() -> Path:
    return fixtures_dir() / "models"


def gib(n: float) -> str:
    return f"{n / GiB:.2f}"


def plan_table(title: str, plan: vram.VramPlan) -> None:
    print(f"\n#### {title}\n")
    print(f"{plan.target}" + (f" + {plan.draft}" if plan.draft else "") + f"; {plan.context} tokens, "
          f"cache {plan.cache_mode}" + (f"/{plan.draft_cache_mode}" if plan.draft else "") + f", {plan.split}\n")
    print("| GPU | usable | target W | target KV | draft W | draft KV | overhead | free | layers |")
    print("|---|---|---|---|---|---|---|---|---|")
    for g in plan.gpus:
        layers = ", ".join(filter(None, ["target {}-{}".format(*g.target_layers) if g.target_layers else "",
                                         "draft {}-{}".format(*g.draft_layers) if g.draft_layers else ""]))
        print(f"| {g.index} {g.name} | {gib(g.capacity_bytes)} | {gib(g.target_weights)} | "
              f"{gib(g.target_cache)} | {gib(g.draft_weights)} | {gib(g.draft_cache)} | "
              f"{gib(g.overhead_bytes)} | {gib(g.free_bytes)} | {layers or '-'} |")
    print(f"\nVerdict **{plan.verdict.value}**, headroom {vram.format_bytes(plan.headroom_bytes)}; "
          f"largest context {plan.max_context}" + (f" with the draft, {plan.max_context_without_draft} "
                                                   "without" if plan.draft else "") + ".")
    for g in plan.gpus:
        if g.overhead_bytes:
            parts = ", ".join(f"{vram.OVERHEAD_LABELS[k]} {vram.format_bytes(v)}"
                              for k, v in g.overhead.items() if v)
            print(f"{g.label} overhead: {parts}.")


def nyxkrage_exl2(arch: Architecture, params: float, bpw: float, context: int, cache_bits: int) -> dict:
    """NyxKrage's LLM-Model-VRAM-Calculator, EXL2 mode (as ported by pandora-s-git/
    LLMVRAMCalculator): every parameter at bpw, a llama.cpp-style KV cache and compute
    buffer. Batch 512 as the calculator fixes it."""
    batch = 512
    model = params * bpw / 8
    n_embd_gqa = arch.hidden_size / (arch.num_heads / arch.num_kv_heads)
    kv = 2 * n_embd_gqa * arch.num_layers * context * cache_bits / 8
    inputs = batch + arch.hidden_size * batch + batch + context * batch + context + batch
    compute = (context / 1024 * 2 + 0.75) * arch.num_heads * MiB  # the calculator's MiB
    return {"model": model, "kv": kv, "compute": compute + inputs, "total": model + kv + compute + inputs}


def main() -> None:
    llama2_70b = vram.model_weights(DATA / "Llama-2-70b-hf", bpw=2.5)
    tiny = vram.model_weights(fixtures() / "TinyLlama-1.1B-Chat-v1.0", bpw=4.0)
    llama31_70b = vram.model_weights(DATA / "Llama-3.1-70B-Instruct", bpw=2.5)
    llama32_1b = vram.model_weights(fixtures() / "Llama-3.2-1B", bpw=4.0)
    workstation = vram.parse_gpu_sizes("32,24")

    print("## The workstation")
    base = vram.PlanRequest(llama2_70b, workstation, 16384, "Q4", tiny, "Q4")
    plan_table("Llama-2-70B 2.5 bpw + TinyLlama-1.1B 4.0 bpw, Q4 caches, 16k, 32 GB + 24 GB",
               vram.plan(base))
    plan_table("Llama-3.1-70B-Instruct 2.5 bpw + Llama-3.2-1B 4.0 bpw, Q4 caches, 16k, 32 GB + 24 GB",
               vram.plan(vram.PlanRequest(llama31_70b, workstation, 16384, "Q4", llama32_1b, "Q4")))
    plan_table("The same Llama-3.1 pair on one 24 GB GPU",
               vram.plan(vram.PlanRequest(llama31_70b, vram.parse_gpu_sizes("24"), 16384, "Q4",
                                          llama32_1b, "Q4")))
    single = vram.PlanRequest(llama31_70b, vram.parse_gpu_sizes("24"), 16384, "Q4", llama32_1b, "Q4")
    print(f"\nLargest bpw for that single-GPU case: {vram.largest_bpw(single)}; without the draft "
          f"at 8192 tokens FP16: {vram.largest_bpw(replace(single, draft=None, context=8192, cache_mode='FP16'))}")

    print("\n## Published measurements")
    turbo = vram.plan(vram.PlanRequest(vram.model_weights(DATA / "Llama-2-70b-hf", bpw=2.55),
                                       vram.parse_gpu_sizes("24"), 2048))
    plan_table("exllamav2 README: Llama-2-70B 2.55 bpw, 2048 tokens, one 24 GB GPU", turbo)
    phi = vram.model_weights(DATA / "Phi-3-mini-128k-instruct", bpw=6.0)
    phi_plan = vram.plan(vram.PlanRequest(phi, vram.parse_gpu_sizes("48"), 131072, "Q4"))
    plan_table("exllamav2#425: Phi-3-mini-128k 6.0 bpw, Q4 cache, 131072 tokens", phi_plan)
    print(f"Planned use {gib(phi_plan.gpu(0).used_bytes)} GiB, + 459 MiB driver reservation = "
          f"{gib(phi_plan.gpu(0).used_bytes + 459 * MiB)} GiB as nvidia-smi shows it.")
    per_token = {m: vram.kv_bytes_per_token_layer(phi.arch, m) * phi.arch.num_layers for m in vram.CACHE_MODES}
    print("Phi-3 KV per token: " + ", ".join(f"{m} {format_bytes(v)}" for m, v in per_token.items()))

    codellama = architecture_from_config({
        "hidden_size": 5120, "num_hidden_layers": 40, "num_attention_heads": 40,
        "num_key_value_heads": 40, "intermediate_size": 13824, "vocab_size": 32016,
        "max_position_embeddings": 16384})
    cl = vram.weights_from_bpw(codellama, 2.65, 6, "CodeLlama-13B")
    for flash in (True, False):
        o = vram.Overheads(flash_attention=flash)
        p = vram.plan(vram.PlanRequest(cl, vram.parse_gpu_sizes("24"), 2048), o)
        print(f"CodeLlama-13B 2.65 bpw, 2048 tokens FP16, flash-attn {flash}: "
              f"{p.gpu(0).used_bytes / MiB:.0f} MiB (turboderp measured 7968 MiB, Sep 2023)")

    print("\n## NyxKrage's calculator (EXL2 mode) on the same requests")
    l2 = read_model(DATA / "Llama-2-70b-hf").arch
    l31 = read_model(DATA / "Llama-3.1-70B-Instruct").arch
    cases = [("Llama-2-70B 2.5 bpw, 16k, Q4 (4-bit)", l2, 2.5, 16384, 4, llama2_70b, "Q4"),
             ("Llama-3.1-70B 2.5 bpw, 16k, Q4 (4-bit)", l31, 2.5, 16384, 4, llama31_70b, "Q4"),
             ("Llama-3.1-70B 2.5 bpw, 16k, FP16", l31, 2.5, 16384, 16, llama31_70b, "FP16")]
    print("| request | calculator weights | ours (GPU) | calculator KV | ours KV | calculator buffers | ours overhead (1 GPU) |")
    print("|---|---|---|---|---|---|---|")
    for label, arch, bpw, ctx, bits, weights, mode in cases:
        calc = nyxkrage_exl2(arch, arch.estimated_parameters(), bpw, ctx, bits)
        ours = vram.plan(vram.PlanRequest(weights, vram.parse_gpu_sizes("80"), ctx, mode)).gpu(0)
        print(f"| {label} | {gib(calc['model'])} | {gib(ours.target_weights)} | {gib(calc['kv'])} | "
              f"{gib(ours.target_cache)} | {gib(calc['compute'])} | {gib(ours.overhead_bytes)} |")


if __name__ == "__main__":
    main()
