"""A bare ExLlamaV2 dynamic-generator loop, no SpecDeck code in it: the yardstick for
SpecDeck's overhead (goal: SpecDeck's baseline tok/s >= 0.98 x this loop's).

Written against exllamav2 v0.3.2 (``examples/inference_speculative.py``,
``generator/dynamic.py``): config + ``arch_compat_overrides``, ``load_autosplit`` with a
lazy FP16 cache, ``ExLlamaV2DynamicGenerator`` (paged only where flash-attn's paged
attention is available, as the generator requires), ``warmup()``, then one
``ExLlamaV2DynamicJob`` per run, greedy, no stop conditions, iterated to its end. Speed is
the job's own ``new_tokens / time_generate`` (the definition SpecDeck's engine reports).

exllamav2 is imported inside :meth:`BareLoop.load`: importing it builds its CUDA
extension, which fails on a machine without CUDA. Unverified until a GPU run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class BareRun:
    new_tokens: int
    time_generate: float
    time_prefill: float
    token_ids: tuple[int, ...]

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.time_generate if self.time_generate > 0 else 0.0


class BareLoop:
    def __init__(self) -> None:
        self._generator: Any = None
        self._model: Any = None
        self._x: Any = None

    def load(self, model_dir: Path, max_seq_len: int) -> None:
        from types import SimpleNamespace

        import exllamav2
        from exllamav2 import attn
        from exllamav2.generator import (
            ExLlamaV2DynamicGenerator,
            ExLlamaV2DynamicJob,
            ExLlamaV2Sampler,
        )
        from specdeck.core.engines.exl2_attention import mask_unpaged_attention
        from specdeck.core.engines.exllamav2 import paged_attention_usable

        config = exllamav2.ExLlamaV2Config(str(model_dir))
        config.arch_compat_overrides()
        config.max_seq_len = max_seq_len
        # The engine's rule, not flash-attn's presence alone: an architecture whose
        # overrides turn flash-attn off, or a pre-Ampere GPU, cannot run paged (the generator
        # asserts "Paged mode requires flash-attn", dynamic.py 354-357).
        x = SimpleNamespace(attn=attn, version=exllamav2.__version__)
        paged = paged_attention_usable(x, config)
        if not paged:
            config.no_flash_attn = True
        # The same attention as the engine's (a causal mask where exllamav2's SDPA branch
        # has none), so the overhead ratio compares the loops, not two attention kernels.
        mask_unpaged_attention(x, config, paged)
        self._model = exllamav2.ExLlamaV2(config)
        cache = exllamav2.ExLlamaV2Cache(self._model, max_seq_len=max_seq_len, lazy=True)
        self._model.load_autosplit(cache)
        tokenizer = exllamav2.ExLlamaV2Tokenizer(config)
        self._generator = ExLlamaV2DynamicGenerator(
            model=self._model, cache=cache, tokenizer=tokenizer, paged=paged)
        self._generator.warmup()
        self._x = (ExLlamaV2DynamicJob, ExLlamaV2Sampler)

    def run(self, prompt_ids: list[int], max_new_tokens: int) -> BareRun:
        import torch

        job_cls, sampler = self._x
        job = job_cls(
            input_ids=torch.tensor([list(prompt_ids)], dtype=torch.long),
            max_new_tokens=max_new_tokens,
            gen_settings=sampler.Settings.greedy(),
        )
        self._generator.enqueue(job)
        tokens: list[int] = []
        final: dict[str, Any] = {}
        while self._generator.num_remaining_jobs():
            for result in self._generator.iterate():
                if result.get("stage") != "streaming":
                    continue
                if "token_ids" in result:
                    tokens.extend(int(t) for t in result["token_ids"].flatten().tolist())
                if result.get("eos"):
                    final = result
        return BareRun(int(final.get("new_tokens", len(tokens))),
                       float(final.get("time_generate", 0.0)),
                       float(final.get("time_prefill", 0.0)), tuple(tokens))

    def unload(self) -> None:
        if self._model is not None:
            self._model.unload()
        self._model = self._generator = None


def interleaved_overhead_runs(target: Path, context: int, prompt: str, max_new_tokens: int,
                              repeats: int) -> tuple[list[Any], list[BareRun]]:
    """SpecDeck's baseline and the bare loop on the same prompt tokens, alternately (both
    models stay loaded, so drift hits both alike); ([GenerationResult], [BareRun])."""
    from specdeck.core.engines import create_engine
    from specdeck.core.engines.base import GenerationRequest, LoadSpec

    engine = create_engine("exllamav2")
    engine.load(LoadSpec(Path(target), max_seq_len=context))
    bare = BareLoop()
    try:
        bare.load(Path(target), engine.loaded.max_seq_len)
        ids = tuple(engine.tokenize(prompt))
        ours, theirs = [], []
        for _ in range(repeats):
            result = engine.generate(GenerationRequest(
                prompt_ids=ids, max_new_tokens=max_new_tokens, stop_on_eos=False))
            ours.append(result)
            theirs.append(bare.run(list(ids), max_new_tokens))
    finally:
        bare.unload()
        engine.unload()
    return ours, theirs
