"""Tiny real Llama models for the engine tests, saved as Hugging Face folders.

Each folder holds a LlamaForCausalLM with a real tokenizer copied from the shared fixtures
(TinyLlama's 32000-token SentencePiece tokenizer by default), so everything the engines do
(tokenize, load with transformers, forward, KV cache, detokenize) runs for real, in
milliseconds per step.

- :func:`random_llama`: random weights (a fixed seed), as transformers initialises them.
- :func:`cycling_llama`: weights set so that greedy decoding walks a short fixed cycle of
  tokens whatever the prompt (attention and MLP outputs are zeroed, so the next token
  depends only on the current one, and the output head only scores the cycle's tokens).
  Its output repeats itself, which n-gram drafting must then predict almost perfectly.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from conftest import MODELS

TINYLLAMA = MODELS / "TinyLlama-1.1B-Chat-v1.0"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def _config(vocab_size: int, hidden: int, layers: int, max_positions: int):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )


def _save(model, folder: Path, tokenizer_from: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder))
    for name in TOKENIZER_FILES:
        if (tokenizer_from / name).is_file():
            shutil.copy(tokenizer_from / name, folder / name)
    return folder


def random_llama(
    folder: Path,
    seed: int = 0,
    hidden: int = 64,
    layers: int = 2,
    max_positions: int = 512,
    tokenizer_from: Path = TINYLLAMA,
    vocab_size: int = 32000,
) -> Path:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(_config(vocab_size, hidden, layers, max_positions))
    return _save(model, folder, tokenizer_from)


def cycling_llama(
    folder: Path,
    cycle: Sequence[int] = (450, 4996, 17354, 1701, 29916),
    seed: int = 0,
    hidden: int = 64,
    noise: float = 0.0,
) -> Path:
    """Greedy output: ..., cycle[i], cycle[i+1], ... (wrapping), from any prompt token.

    With ``noise`` > 0 the attention outputs are random (that standard deviation) instead of
    zero: the next token then depends a little on the context, and the model leaves the cycle
    at some positions. As a draft of the plain cycling model its drafts are right often at
    the first positions and less often further on (noise 3.0: acceptance stops growing past
    about 4 draft tokens)."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(_config(32000, hidden, 2, 512))
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        # One-hot directions: token cycle[i] embeds as e_i, every other token as e_c; the
        # head scores cycle[i+1] on e_i and cycle[0] on e_c. RMSNorm keeps the directions.
        c = len(cycle)
        basis = torch.eye(c + 1, hidden) * 8.0
        embed = model.model.embed_tokens.weight
        head = model.lm_head.weight
        embed.copy_(basis[c].expand_as(embed))
        head.zero_()
        for i, token in enumerate(cycle):
            embed[token] = basis[i]
            head[cycle[(i + 1) % c]] += basis[i] / 8.0
        head[cycle[0]] += basis[c] / 8.0
        if noise:
            # Attention put back, weakly: the next token now depends a little on the context,
            # so the model leaves the cycle at some positions and not at others.
            for layer in model.model.layers:
                layer.self_attn.o_proj.weight.normal_(0.0, noise)
    return _save(model, folder, TINYLLAMA)


def ab_models(root: Path) -> dict[str, Path]:
    """The A/B tests' trio: a random target, a smaller random draft (acceptance ~0) and the
    cycling model (n-gram acceptance ~1)."""
    return {
        "target": random_llama(root / "target", seed=0),
        "draft": random_llama(root / "draft", seed=1, hidden=32, layers=1),
        "cycle": cycling_llama(root / "cycle"),
    }


def tiny_plan(model: Path, arms, **overrides):
    """A small greedy A/B plan on CPU for ``model``; ``overrides`` are BenchPlan fields."""
    from specdeck.core.bench.plan import BenchPlan
    from specdeck.core.engines.base import LoadSpec

    values = dict(engine="torch", model=str(model), arms=arms, suites=("code",), max_prompts=2,
                  max_new_tokens=12, repeats=2, warmup=1, warmup_tokens=4,
                  apply_chat_template=False, load=LoadSpec(model, device="cpu"))
    values.update(overrides)
    return BenchPlan(**values)


def dying_engine(name: str):
    """An engine factory for A/B sessions whose engine process dies while loading, as one
    killed by the kernel's out-of-memory killer would (module level: the child imports it)."""
    import os

    from specdeck.core.engines import create_engine

    engine = create_engine(name)

    def load(*_args, **_kwargs):
        os._exit(9)

    engine.load = load
    return engine


def environment_engine(name: str):
    """An engine factory whose engine fails to load, saying what ``SPECDECK_TEST_MARK`` is in
    the engine process's environment (module level: the child imports it)."""
    import os

    from specdeck.core.engines import create_engine
    from specdeck.core.errors import SpecDeckError

    engine = create_engine(name)

    def load(*_args, **_kwargs):
        raise SpecDeckError(f"mark={os.environ.get('SPECDECK_TEST_MARK')}")

    engine.load = load
    return engine


def forward_clock(monkeypatch, cost) -> list[float]:
    """The PyTorch engine's clock advances only by the models' forwards, ``cost(model, ids)``
    seconds each: which setting is fastest becomes a property of the forwards it runs, not of
    a shared CPU's load. Tokens, drafts and acceptance stay real. ``monkeypatch`` None: for
    good (in an engine process of its own, which ends with the test)."""
    from specdeck.core.engines import speculative

    if monkeypatch is None:
        import types

        monkeypatch = types.SimpleNamespace(setattr=setattr)

    now = [0.0]
    real_feed = speculative.KVModel.feed

    def feed(self, ids, all_logits=True):
        now[0] += cost(self.model, ids)
        return real_feed(self, ids, all_logits)

    class Clock:
        @staticmethod
        def perf_counter() -> float:
            return now[0]

    monkeypatch.setattr(speculative.KVModel, "feed", feed)
    monkeypatch.setattr(speculative, "time", Clock)
    return now


def clocked_torch_engine(name: str):
    """An engine factory for core.bench.session.BenchSession (module level, so the engine
    process can import it): the PyTorch engine on ``forward_clock``, each forward 1 ms, so a
    page's A/B runs in its own process measure the forwards, not the machine's load."""
    from specdeck.core.engines import create_engine

    forward_clock(None, lambda model, ids: 1e-3)
    return create_engine(name)


def parameter_clock(monkeypatch) -> list[float]:
    """A forward costs 1 ns per parameter of the model, whatever the tokens it is given: the
    memory-bound decoding of a GPU, where a forward reads every weight once however many
    tokens it verifies."""
    sizes: dict[int, int] = {}

    def cost(model, ids):
        if id(model) not in sizes:
            sizes[id(model)] = sum(p.numel() for p in model.parameters())
        return sizes[id(model)] * 1e-9

    return forward_clock(monkeypatch, cost)


def changed_fastest(run):
    """``run`` with its fastest drafting arm's output changed at one token of every run; that
    arm, and the arm that must win instead (the fastest of the rest, by hand)."""
    from dataclasses import replace

    from specdeck.core.bench.summary import summarize

    medians = {c.arm: c.speedup.median for c in summarize(run).comparisons}
    fastest = max(medians, key=medians.get)
    rest = {arm: m for arm, m in medians.items() if arm != fastest}
    expected = max(rest, key=rest.get)
    assert rest[expected] > 1.0

    def changed(record):
        if record.arm != fastest:
            return record
        ids = list(record.result.token_ids)
        ids[5] = ids[5] + 1
        return replace(record, result=replace(record.result, token_ids=tuple(ids)))

    return replace(run, records=tuple(changed(r) for r in run.records)), fastest, expected
