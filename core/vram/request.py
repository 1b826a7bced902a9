"""What a plan depends on, named as in TabbyAPI's config.yml."""

from __future__ import annotations

from dataclasses import dataclass, replace

from specdeck.core.errors import InvalidInputError
from specdeck.core.exl2_facts import (
    DEFAULT_AUTOSPLIT_RESERVE_MB,
    DEFAULT_CACHE_MODE,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_SEQ_LEN,
    tabby_chunk_size,
)
from specdeck.core.vram.costs import check_cache_mode, round_context
from specdeck.core.vram.gpus import GpuSpec
from specdeck.core.vram.weights import ModelWeights


@dataclass(frozen=True)
class PlanRequest:
    """Everything a plan depends on; field names follow TabbyAPI's config.yml."""

    target: ModelWeights
    gpus: tuple[GpuSpec, ...]
    context: int = DEFAULT_MAX_SEQ_LEN
    """max_seq_len / cache_size in tokens (rounded up to 256 in the plan)."""
    cache_mode: str = DEFAULT_CACHE_MODE
    draft: ModelWeights | None = None
    draft_cache_mode: str = DEFAULT_CACHE_MODE
    gpu_split: tuple[float, ...] | None = None
    """GB per GPU for the target; None = autosplit."""
    draft_gpu_split: tuple[float, ...] | None = None
    autosplit: bool = True
    """TabbyAPI's gpu_split_auto (ignored with one GPU, where TabbyAPI turns it off)."""
    autosplit_reserve_mb: tuple[float, ...] = DEFAULT_AUTOSPLIT_RESERVE_MB
    chunk_size: int = DEFAULT_CHUNK_SIZE

    def checked(self) -> PlanRequest:
        """This request with cache modes normalised; InvalidInputError for bad values."""
        if not self.gpus:
            raise InvalidInputError(
                "There are no GPUs to plan for.",
                "Type the GPU sizes to plan for another machine, e.g. --gpus 32,24.",
            )
        for split, what in ((self.gpu_split, "gpu_split"), (self.draft_gpu_split, "draft_gpu_split")):
            if split is not None and len(split) > len(self.gpus):
                raise InvalidInputError(
                    f"{what} lists {len(split)} GPUs but the plan has {len(self.gpus)}.",
                    "Give one size per GPU, or add the missing GPUs.",
                )
        if self.chunk_size < 1:
            raise InvalidInputError(f"chunk_size {self.chunk_size} must be at least 1 token.",
                                    f"TabbyAPI's default is {DEFAULT_CHUNK_SIZE}.")
        if self.is_exl3:
            return self._checked_exl3()
        if self.draft is not None and self.draft.is_exl3:
            raise InvalidInputError(
                f"The draft {self.draft.name} is EXL3 but the target {self.target.name} is EXL2: "
                "TabbyAPI loads both with one backend (ExLlamaV2 on exl2-checkpoint, ExLlamaV3 "
                "on main), so no TabbyAPI runs this pair.",
                "Pick an EXL2 draft for an EXL2 target, or EXL3 quants of both.")
        return replace(
            self,
            cache_mode=check_cache_mode(self.cache_mode),
            draft_cache_mode=check_cache_mode(self.draft_cache_mode),
        )

    def _checked_exl3(self) -> PlanRequest:
        from specdeck.core.vram import exl3

        if self.draft is not None and not self.draft.is_exl3:
            raise InvalidInputError(
                f"The target {self.target.name} is EXL3 but the draft {self.draft.name} is not: "
                "TabbyAPI's main branch runs ExLlamaV3, which loads EXL3 (or unquantized) "
                "models, not EXL2.",
                "Pick an EXL3 quant of the draft (specdeck search --format exl3).")
        manual = self.gpu_split is not None and len(self.gpus) > 1
        if self.draft is not None and self.draft_gpu_split is not None and not manual:
            raise InvalidInputError(
                "draft_gpu_split without gpu_split does not load on TabbyAPI main: it passes its "
                "autosplit_reserve and the draft_gpu_split to exllamav3 together, and "
                "Model.load_gen refuses both at once (\"Cannot specify both memory usage and "
                "memory reserve\"; backends/exllamav3/model.py e632af4, exllamav3 model/model.py).",
                "Set gpu_split for the target too (TabbyAPI main ignores it on one GPU), or leave "
                "draft_gpu_split out.")
        return replace(
            self,
            cache_mode=exl3.check_cache_mode(self.cache_mode),
            draft_cache_mode=exl3.check_cache_mode(self.draft_cache_mode),
        )

    @property
    def is_exl3(self) -> bool:
        """The target is EXL3: TabbyAPI main and ExLlamaV3 load it (core.vram.exl3)."""
        return self.target.is_exl3

    @property
    def cache_tokens(self) -> int:
        return round_context(self.context)

    def chunk_for(self, autosplit: bool) -> int:
        """The chunk (max_input_len) a model's buffers are sized for: TabbyAPI clamps
        chunk_size to 256..max_seq_len and rounds it up to a multiple of 256
        (core.exl2_facts.tabby_chunk_size); exllamav2 0.3.2 clamps that to max_seq_len again
        when it loads with autosplit (model.py line 536, load_autosplit_gen), not when it
        loads a manual gpu_split."""
        if self.is_exl3:
            from specdeck.core.vram.exl3 import tabby_chunk_size as main_chunk_size

            return main_chunk_size(self.chunk_size)
        chunk = tabby_chunk_size(self.chunk_size, self.context)
        return min(chunk, self.context) if autosplit else chunk

    @property
    def split_label(self) -> str:
        if len(self.gpus) == 1:
            return "single GPU"
        if self.gpu_split is not None:
            return f"gpu_split [{', '.join(f'{v:g}' for v in self.gpu_split)}]"
        if not self.autosplit and not self.is_exl3:
            return f"gpu_split_auto off (all on {self.gpus[0].in_words})"
        reserve = ", ".join(f"{v:g}" for v in self.autosplit_reserve_mb)
        return f"autosplit (reserve [{reserve}] MB)"
