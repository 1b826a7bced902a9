"""A stand-in for the part of exllamav2 0.3.2 the engine calls, which enforces what the real
classes assert and answers iterate() the way the real dynamic generator does, so the
engine's whole load -> set_drafter -> generate path runs here (exllamav2 cannot import
without CUDA). Every rule cites the exllamav2 0.3.2 wheel's line it mirrors.

Not modelled: tensors, attention, sampling, paging itself (reset_page_table is recorded),
and timing. iterate() plays a script of steps given by the test.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

PAGED_PAGE_SIZE = 256  # generator/dynamic.py: PAGED_PAGE_SIZE


@dataclass
class Step:
    """One iterate() of a job: tokens the target emitted, and how its drafts fared."""

    tokens: tuple[int, ...]
    accepted: int = 0
    rejected: int = 0
    eos: bool = False
    with_prefill: bool = False
    """The prompt's prefill results come in the same iterate() (a short prompt)."""
    gaps: tuple[float, ...] = ()
    """Top-1 minus top-2 logit of each token, returned as logits when the job asks
    (return_logits); 1.0 each when not given."""


class StandInExLlamaV2:
    def __init__(self, script: list[Step], eos_token_id: int = 2):
        self.script = script
        self.calls: list[str] = []
        self.generators: list[dict] = []
        outer = self

        class Config(SimpleNamespace):
            def __init__(self, path):
                # config.py: max_input_len 2048, max_batch_size 1; generation_config is read
                # from generation_config.json only when that file exists (config.py prepare).
                gen = Path(path) / "generation_config.json"
                super().__init__(model_dir=path, max_input_len=2048, max_batch_size=1,
                                 max_seq_len=2048, no_flash_attn=False, vocab_size=32000,
                                 generation_config={"eos_token_id": [eos_token_id]}
                                 if gen.is_file() else None)

            def arch_compat_overrides(self, quiet=False):
                pass

        class Model:
            def __init__(self, config):
                self.config = config

            def load_autosplit(self, cache, reserve_vram=None, callback=None):
                outer.calls.append(f"load_autosplit {Path(self.config.model_dir).name}")

            def load(self, gpu_split=None, callback=None):
                outer.calls.append(f"load {Path(self.config.model_dir).name}")

            def unload(self):
                outer.calls.append(f"unload {Path(self.config.model_dir).name}")

        def cache(model, max_seq_len, lazy=False):
            return SimpleNamespace(model=model, max_seq_len=max_seq_len, batch_size=1)

        class Job:
            def __init__(self, input_ids, max_new_tokens, gen_settings=None, seed=None,
                         stop_conditions=None, decode_special_tokens=False,
                         return_logits=False):
                self.input_ids, self.max_new_tokens = input_ids, max_new_tokens
                self.stop_conditions = stop_conditions
                self.return_logits = return_logits  # dynamic.py 1613, 1746
                self.new_tokens = self.accepted_draft_tokens = self.rejected_draft_tokens = 0

        class Generator:
            def __init__(self, model, cache, tokenizer, max_batch_size=None, max_q_size=8,
                         paged=True, draft_model=None, draft_cache=None,
                         num_draft_tokens=4, use_ngram_draft=False, max_ngram=4, **rest):
                cfg = model.config
                if draft_model or use_ngram_draft:  # dynamic.py 338-340
                    assert num_draft_tokens <= max_q_size, \
                        "num_draft_tokens cannot be larger than max_q_size."
                if draft_model:  # dynamic.py 345-352
                    assert draft_cache is not None, "Must supply cache for draft model"
                    assert draft_cache.max_seq_len == cache.max_seq_len, \
                        "Cache and draft cache must be same dimensions"
                    assert draft_model.config.max_seq_len >= cfg.max_seq_len, \
                        "Draft model seq len must be >= model seq len"
                if paged:  # dynamic.py 354-357
                    assert not cfg.no_flash_attn, "Paged mode requires flash-attn, but " \
                        "flash-attn is disabled in model config."
                if max_batch_size:  # dynamic.py 365-370
                    assert max_q_size * max_batch_size <= cfg.max_batch_size * cfg.max_input_len
                assert cache.batch_size == 1  # dynamic.py 386
                assert cache.max_seq_len % PAGED_PAGE_SIZE == 0, \
                    f"cache.max_seq_len must be multiple of {PAGED_PAGE_SIZE}"  # dynamic.py 389
                outer.generators.append(dict(max_q_size=max_q_size, paged=paged,
                                             num_draft_tokens=num_draft_tokens,
                                             use_ngram_draft=use_ngram_draft,
                                             max_ngram=max_ngram, draft_model=draft_model))
                self.jobs: list = []
                self.steps: list[Step] = []

            def warmup(self):
                outer.calls.append("warmup")

            def reset_page_table(self):
                # dynamic.py 483: no job may be running (it rebuilds every page)
                assert not self.jobs, "reset_page_table with jobs in the queue"
                outer.calls.append("reset_page_table")

            def enqueue(self, job):
                outer.calls.append("enqueue")
                self.jobs.append(job)
                self.steps = list(outer.script)

            def num_remaining_jobs(self):
                return len(self.jobs)

            def clear_queue(self):
                self.jobs.clear()

            def iterate(self):
                job = self.jobs[0]
                step = self.steps.pop(0)
                results = []
                if step.with_prefill:  # dynamic.py iterate(): "started", then "prefill"
                    results += [{"job": job, "stage": "started", "eos": False, "serial": 0},
                                {"job": job, "stage": "prefill", "eos": False, "serial": 0,
                                 "curr_progress": 1, "max_progress": 1}]
                job.new_tokens += len(step.tokens)
                job.accepted_draft_tokens += step.accepted
                job.rejected_draft_tokens += step.rejected
                import torch

                streamed = step.tokens[:-1] if step.eos else step.tokens
                gaps = list(step.gaps or [1.0] * len(step.tokens))

                def logits(rows):  # dynamic.py 2116: held_logits, one row per token
                    out = torch.zeros((1, len(rows), 8))
                    for i, gap in enumerate(rows):
                        out[0, i, 0], out[0, i, 1] = 5.0 + gap, 5.0
                    return out

                if streamed:
                    result = {"job": job, "stage": "streaming", "eos": False,
                              "serial": 0, "text": "".join(f" t{t}" for t in streamed),
                              "token_ids": torch.tensor([list(streamed)])}
                    if job.return_logits:
                        result["logits"] = logits(gaps[:len(streamed)])
                    results.append(result)
                if step.eos or not self.steps:
                    final = {"job": job, "stage": "streaming", "eos": True, "serial": 0,
                             "eos_reason": "stop_token" if step.eos else "max_new_tokens",
                             "new_tokens": job.new_tokens, "time_prefill": 0.01,
                             "time_generate": 0.05,
                             "accepted_draft_tokens": job.accepted_draft_tokens,
                             "rejected_draft_tokens": job.rejected_draft_tokens}
                    if step.eos:  # the stop token is held, not streamed (dynamic.py emit)
                        final["held"] = {"token_ids": torch.tensor([[step.tokens[-1]]])}
                        if job.return_logits:
                            final["held"]["logits"] = logits(gaps[-1:])
                        final["eos_triggering_token_id"] = step.tokens[-1]
                    results.append(final)
                    self.jobs.clear()
                return results

        class Sampler:
            class Settings:
                def __init__(self, **kwargs):
                    self.__dict__.update(kwargs)

                @classmethod
                def greedy(cls, **kwargs):
                    return cls(greedy=True, **kwargs)

        self.ExLlamaV2Config = Config
        self.ExLlamaV2 = Model
        self.ExLlamaV2Cache = cache
        self.ExLlamaV2Cache_Q4 = cache
        self.ExLlamaV2Tokenizer = lambda config: StandInTokenizer(config.model_dir,
                                                                  eos_token_id)
        self.ExLlamaV2DynamicGenerator = Generator
        self.ExLlamaV2DynamicJob = Job
        self.ExLlamaV2Sampler = Sampler
        self.attn = SimpleNamespace(has_flash_attn_with_paged=True)


class StandInTokenizer:
    """ExLlamaV2Tokenizer's ``encode`` for one string (tokenizer/tokenizer.py, da07fac:
    ``encode(text, add_bos=False, ...)`` encodes without special tokens, then inserts
    ``bos_token_id`` first only when the caller asks with add_bos; it returns a (1, n) tensor).
    The ids come from the folder's tokenizer.json through the tokenizers library, as
    ExLlamaV2's HF tokenizer model does; BOS is 1, ExLlamaV2's default where config.json
    names none (the test folders are Llama family)."""

    bos_token = "<s>"
    bos_token_id = 1

    def __init__(self, model_dir, eos_token_id: int):
        self.eos_token_id = eos_token_id
        self._file = Path(model_dir) / "tokenizer.json"

    def encode(self, text, add_bos=False, add_eos=False, encode_special_tokens=False):
        import torch
        from tokenizers import Tokenizer

        ids = Tokenizer.from_file(str(self._file)).encode(text, add_special_tokens=False).ids
        if add_bos and self.bos_token_id is not None:
            ids.insert(0, self.bos_token_id)
        if add_eos and self.eos_token_id is not None:
            ids.append(self.eos_token_id)
        return torch.tensor([ids])
