"""What the kit builds and measures: model sizes, training time, bitrates, A/B settings.

``GPU`` is the real run, sized for one command of about eight minutes on one H100 or H200
(the device lends 15 minutes a session, the machine's start included): a minute of
training on the GPU while the extension builds, one bitrate per model, small calibration.
``TINY`` is the same pipeline at toy sizes for the CPU tests and the CPU rehearsal.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class ModelSize:
    """A LlamaForCausalLM shape. Every input dimension is a multiple of 128 at GPU sizes:
    EXL2's kernels want groups of 32 and the converter pads to them otherwise."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


@dataclass(frozen=True)
class PairConfig:
    target: ModelSize
    draft: ModelSize
    context: int = 2048
    """max_position_embeddings of both models (and the context the kit runs at)."""
    train_seconds: float = 150.0
    """Wall-clock budget for training both models (they train on the same batches)."""
    max_steps: int = 100_000
    batch: int = 32
    seq_len: int = 512
    target_lr: float = 6e-4
    draft_lr: float = 1e-3
    warmup_steps: int = 100
    eval_windows: int = 64
    """Held-out windows over which greedy agreement is measured."""
    save_dtype: str = "float16"
    seed: int = 1234


@dataclass(frozen=True)
class AbConfig:
    """The kit's A/B, sized for its minutes of device time. These are the kit's own choices,
    not plan defaults (core.bench.fields holds those): this module is read before SpecDeck
    can be imported on the device, so it imports nothing of it."""

    draft_ks: tuple[int, ...] = (4,)
    """One k since issue 40: the minutes go to the seed-scale step, which predicts the
    speed-up at 70B from this arm's acceptance (k = 2 and 6 ran on 2026-11-26: 0.74-0.90x)."""
    ngram_k: int = 4
    repeats: int = 3
    max_new_tokens: int = 256
    prompts: tuple[str, ...] = ("grounded", "prose", "code")
    """Suite names; one prompt each is taken per suite (the first `prompts_per_suite`)."""
    prompts_per_suite: int = 1
    bare_repeats: int = 5
    telemetry_seconds: float = 60.0
    warmup: int = 2
    """Unmeasured runs of each arm first: on the first H200 run the first ten runs decoded
    at 21-100 tok/s where the same arms later ran at 300-900 (a cold GPU and first-use
    kernels), which widened every interval."""


@dataclass(frozen=True)
class SeedModel:
    """A model written with random codes in EXL2's layout (gpukit.exl2_synth) from a real
    config.json in the checkout (tests/data: the device runs from the tree, so nothing is
    carried)."""

    name: str
    config: str
    """A config.json's path from the repository root."""
    bpw: float
    head_bits: int = 6


@dataclass(frozen=True)
class SeedLoad:
    """One load measured against `specdeck vram` (TabbyAPI's settings for it)."""

    label: str
    target: str
    draft: str | None
    context: int
    cache_mode: str
    draft_cache_mode: str = "FP16"


LLAMA3_TOKENIZER = "tests/data/fixtures/models/Llama-3.2-1B"
"""Llama 3's 128256-token tokenizer (tokenizer.derived.json: see that folder's SOURCE.txt)."""


@dataclass(frozen=True)
class SeedConfig:
    """The VRAM plan and the step costs at the seed's scale (issue 40): seed 000 runs
    Llama-3-70B at 2.5 bpw with a Llama-3.2-1B draft, Q4 caches at 16k, on TabbyAPI."""

    models: tuple[SeedModel, ...] = (
        SeedModel("llama3-70b-2.5bpw", "tests/data/models/Llama-3.1-70B-Instruct/config.json", 2.5),
        SeedModel("llama3.2-1b-4.0bpw", f"{LLAMA3_TOKENIZER}/config.json", 4.0),
        SeedModel("llama3-8b-4.0bpw", "tests/data/fixtures/models/Llama-3.1-8B/config.json", 4.0),
    )
    loads: tuple[SeedLoad, ...] = (
        SeedLoad("70B 2.5 bpw + 1B draft 4.0 bpw, Q4 caches, 16k (seed 000)",
                 "llama3-70b-2.5bpw", "llama3.2-1b-4.0bpw", 16384, "Q4", "Q4"),
        SeedLoad("8B 4.0 bpw, Q4 cache, 32k", "llama3-8b-4.0bpw", None, 32768, "Q4"),
    )
    shape: tuple[tuple[str, int], ...] = ()
    """config.json overrides for every model (the CPU rehearsal's toy sizes)."""
    verify_k: int = 4
    """Draft tokens per verification for the step costs (the A/B's draft arm's k)."""
    prefix_tokens: int = 1024
    """Cache position the step costs are measured at."""
    timing_repeats: int = 20


@dataclass(frozen=True)
class KitConfig:
    pair: PairConfig
    bits: tuple[float, ...] = (4.0, 6.0)
    head_bits: int = 6
    calibration_length: int = 1024
    """Tokens per calibration row (the converter's -l / -ml; its default is 2048)."""
    calibration_rows: int | None = 40
    """Rows for the quantization (-r; the converter's default is 100)."""
    measurement_rows: int | None = 8
    """Rows for the measurement pass (-mr; the converter's default is 16)."""
    cache_mode: str = "FP16"
    ab: AbConfig = field(default_factory=AbConfig)
    seed: SeedConfig = field(default_factory=SeedConfig)
    build_jobs: int = 0
    """MAX_JOBS for the JIT build (ninja's parallelism); 0: the machine's cores."""


GPU = KitConfig(
    pair=PairConfig(
        target=ModelSize(hidden=768, layers=20, heads=12, kv_heads=4, intermediate=2048),
        draft=ModelSize(hidden=384, layers=2, heads=6, kv_heads=2, intermediate=1024),
        train_seconds=60.0,
    ),
    bits=(4.0,),
)

TINY = replace(
    GPU,
    pair=PairConfig(
        target=ModelSize(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128),
        draft=ModelSize(hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64),
        context=512,
        train_seconds=60.0,
        max_steps=60,
        batch=4,
        seq_len=48,
        target_lr=1e-2,
        draft_lr=1e-2,
        warmup_steps=5,
        eval_windows=8,
        save_dtype="float32",
    ),
    ab=AbConfig(draft_ks=(2,), repeats=1, max_new_tokens=16, prompts=("grounded",),
                bare_repeats=1, telemetry_seconds=1.0, warmup=0),
    seed=SeedConfig(
        loads=(SeedLoad("toy 70B-shaped + draft, Q4 caches", "llama3-70b-2.5bpw",
                        "llama3.2-1b-4.0bpw", 512, "Q4", "Q4"),),
        shape=(("hidden_size", 128), ("num_hidden_layers", 2), ("num_attention_heads", 4),
               ("num_key_value_heads", 2), ("intermediate_size", 256), ("head_dim", 32)),
        prefix_tokens=32, timing_repeats=2),
    build_jobs=2,
)

PRESETS = {"gpu": GPU, "tiny": TINY}
