"""A target/draft pair that behaves like a real one, made without downloading anything.

Two LlamaForCausalLM models with one real tokenizer (TinyLlama's 32000-token one, from the
shared fixtures or the carried ``.gpukit/tokenizer``) learn the same text on the same
batches. The smaller one then predicts the bigger one's greedy choices often, which is what
a draft model is for; :func:`greedy_agreement` measures how often, on held-out text, before
and after training. Both are saved as Hugging Face folders (safetensors + tokenizer.json),
ready for SpecDeck's PyTorch engine and for ExLlamaV2's converter.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpukit.config import ModelSize, PairConfig
from tools.fixtures import fixtures_dir

REPO_ROOT = Path(__file__).resolve().parents[1]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
BOS_ID, EOS_ID = 1, 2
"""TinyLlama / Llama 2's special ids."""
HELD_OUT_FRACTION = 0.05


def tokenizer_candidates() -> list[Path]:
    """Where a tokenizer folder is looked for, in order."""
    candidates = []
    if os.environ.get("SPECDECK_GPU_TOKENIZER"):
        candidates.append(Path(os.environ["SPECDECK_GPU_TOKENIZER"]))
    candidates.append(REPO_ROOT / ".gpukit" / "tokenizer")
    fixtures = fixtures_dir()
    candidates.append(fixtures / "models" / "TinyLlama-1.1B-Chat-v1.0")
    return candidates


def find_tokenizer() -> Path:
    for folder in tokenizer_candidates():
        if (folder / "tokenizer.json").is_file():
            return folder
    searched = ", ".join(str(p) for p in tokenizer_candidates())
    raise FileNotFoundError(
        f"No tokenizer.json found (searched {searched}). Run `python -m gpukit prepare` "
        "where the shared fixtures are, and carry .gpukit."
    )


def llama_config(size: ModelSize, vocab_size: int, context: int):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=size.hidden,
        intermediate_size=size.intermediate,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads,
        max_position_embeddings=context,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        tie_word_embeddings=False,
    )


@dataclass(frozen=True)
class Agreement:
    positions: int
    agreed: int
    target_correct: int
    """Positions where the target's greedy choice is the text's next token."""

    @property
    def rate(self) -> float:
        return self.agreed / self.positions if self.positions else 0.0

    @property
    def target_accuracy(self) -> float:
        return self.target_correct / self.positions if self.positions else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "rate": self.rate, "target_accuracy": self.target_accuracy}


@dataclass(frozen=True)
class PairResult:
    target_dir: Path
    draft_dir: Path
    target_params: int
    draft_params: int
    steps: int
    train_seconds: float
    target_loss: float
    draft_loss: float
    tokens: int
    agreement_before: Agreement
    agreement_after: Agreement
    device: str
    corpus_sources: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(
            target_dir=str(self.target_dir),
            draft_dir=str(self.draft_dir),
            agreement_before=self.agreement_before.to_json(),
            agreement_after=self.agreement_after.to_json(),
            corpus_sources=list(self.corpus_sources),
        )
        return data


def eval_windows(tokens, seq_len: int, count: int):
    """Up to ``count`` evenly spaced windows of ``seq_len`` tokens (a [n, seq_len] tensor)."""
    import torch

    data = torch.as_tensor(tokens, dtype=torch.long)
    length = min(seq_len, len(data))
    if length < 2:
        raise ValueError("the held-out text is shorter than two tokens")
    starts = range(0, len(data) - length + 1, max(1, (len(data) - length) // max(1, count - 1)))
    windows = [data[s : s + length] for s in list(starts)[:count]]
    return torch.stack(windows)


def greedy_agreement(target, draft, windows, device=None) -> Agreement:
    """How often the draft's greedy next token equals the target's (teacher-forced): the
    rate at which a greedy draft token would be accepted."""
    import torch

    positions = agreed = correct = 0
    with torch.no_grad():
        for window in windows:
            ids = window.unsqueeze(0).to(device or next(target.parameters()).device)
            t = target(input_ids=ids).logits[0, :-1].argmax(-1)
            d = draft(input_ids=ids).logits[0, :-1].argmax(-1)
            positions += t.numel()
            agreed += int((t == d).sum())
            correct += int((t == ids[0, 1:]).sum())
    return Agreement(positions, agreed, correct)


def _lr_factor(step: int, progress: float, warmup: int) -> float:
    """Linear warm-up, then cosine down to 10% as training progresses (0..1)."""
    warm = min(1.0, (step + 1) / max(1, warmup))
    return warm * (0.1 + 0.45 * (1.0 + math.cos(math.pi * min(1.0, progress))))


def train_pair(
    config: PairConfig,
    tokens: list[int],
    vocab_size: int,
    device: str,
    log: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
):
    """Train target and draft on the same random windows; returns (target, draft, facts)."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(config.seed)
    data = torch.as_tensor(tokens, dtype=torch.long)
    if len(data) < 2 * (config.seq_len + 2):
        raise ValueError(f"{len(data)} tokens of text are too few for windows of {config.seq_len}")
    split = int(len(data) * (1 - HELD_OUT_FRACTION))
    train, held = data[:split], data[split:]
    windows = eval_windows(held, config.seq_len, config.eval_windows)
    models = {
        role: LlamaForCausalLM(llama_config(size, vocab_size, config.context)).to(device)
        for role, size in (("target", config.target), ("draft", config.draft))
    }
    for model in models.values():
        model.eval()
    before = greedy_agreement(models["target"], models["draft"], windows)
    rates = {"target": config.target_lr, "draft": config.draft_lr}
    optimizers = {
        role: torch.optim.AdamW(m.parameters(), lr=rates[role], betas=(0.9, 0.95), weight_decay=0.1)
        for role, m in models.items()
    }
    for model in models.values():
        model.train()
    generator = torch.Generator().manual_seed(config.seed)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.startswith("cuda") else None
    started = clock()
    losses = {"target": float("nan"), "draft": float("nan")}
    step = 0
    while step < config.max_steps:
        progress = max(step / config.max_steps, (clock() - started) / config.train_seconds)
        if progress >= 1.0:
            break
        offsets = torch.randint(0, len(train) - config.seq_len - 1, (config.batch,), generator=generator)
        batch = torch.stack([train[o : o + config.seq_len + 1] for o in offsets]).to(device)
        for role, model in models.items():
            for group in optimizers[role].param_groups:
                group["lr"] = rates[role] * _lr_factor(step, progress, config.warmup_steps)
            if autocast is not None:
                with autocast:
                    loss = model(input_ids=batch, labels=batch).loss
            else:
                loss = model(input_ids=batch, labels=batch).loss
            optimizers[role].zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizers[role].step()
            losses[role] = float(loss.detach())
        step += 1
        if step % 200 == 0:
            log(f"   step {step}: target loss {losses['target']:.3f}, draft loss {losses['draft']:.3f}")
    seconds = clock() - started
    for model in models.values():
        model.eval()
    after = greedy_agreement(models["target"], models["draft"], windows)
    facts = {
        "steps": step,
        "train_seconds": seconds,
        "target_loss": losses["target"],
        "draft_loss": losses["draft"],
        "agreement_before": before,
        "agreement_after": after,
    }
    return models["target"], models["draft"], facts


def save_hf(model, folder: Path, tokenizer_dir: Path, dtype: str) -> Path:
    """Save as a Hugging Face folder; written to a staging folder first, then renamed."""
    import torch

    staging = folder.with_name(f".{folder.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    model.to(dtype=getattr(torch, dtype)).save_pretrained(str(staging))
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copy(tokenizer_dir / name, staging / name)
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return folder


def make_pair(
    config: PairConfig,
    out_dir: Path,
    device: str = "cpu",
    tokenizer_dir: Path | None = None,
    include_exllamav2_text: bool = True,
    log: Callable[[str], None] = print,
) -> PairResult:
    """Build the corpus, train both models, save them under out_dir/{target,draft}."""
    from gpukit.corpus import build_corpus, token_stream

    tokenizer_dir = tokenizer_dir or find_tokenizer()
    corpus = build_corpus(include_exllamav2=include_exllamav2_text)
    tokens = token_stream(corpus, tokenizer_dir / "tokenizer.json", BOS_ID, EOS_ID)
    log(f"   corpus: {corpus.characters} characters, {len(tokens)} tokens from {'; '.join(corpus.sources)}")
    vocab_size = _vocab_size(tokenizer_dir)
    target, draft, facts = train_pair(config, tokens, vocab_size, device, log)
    target_dir = save_hf(target, out_dir / "target", tokenizer_dir, config.save_dtype)
    draft_dir = save_hf(draft, out_dir / "draft", tokenizer_dir, config.save_dtype)
    return PairResult(
        target_dir=target_dir,
        draft_dir=draft_dir,
        target_params=sum(p.numel() for p in target.parameters()),
        draft_params=sum(p.numel() for p in draft.parameters()),
        tokens=len(tokens),
        device=device,
        corpus_sources=corpus.sources,
        **facts,
    )


def _vocab_size(tokenizer_dir: Path) -> int:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json")).get_vocab_size(with_added_tokens=True)
