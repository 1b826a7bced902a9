"""The text the target and the draft learn from: SpecDeck's prompt suites, plus the
calibration text shipped inside the exllamav2 package when it is installed.

Nothing is downloaded. The exllamav2 files are found with ``importlib.util.find_spec``,
which locates the package without importing it (importing it would build its CUDA
extension).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

DOCUMENT_MARKERS = ("</doc>", "<|endoftext|>")
"""How the calibration files separate their articles (wiki.utf8, tiny.utf8)."""


def prompt_suite_texts() -> list[str]:
    from specdeck.core.bench.suites import builtin_suites

    return [p.text for suite in builtin_suites().values() for p in suite.prompts]


def exllamav2_calibration_dir() -> Path | None:
    """exllamav2/conversion/standard_cal_data of the installed package, if any."""
    spec = importlib.util.find_spec("exllamav2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        folder = Path(location) / "conversion" / "standard_cal_data"
        if folder.is_dir():
            return folder
    return None


def split_documents(text: str) -> list[str]:
    """Articles of a calibration file (or the whole text when it has no markers)."""
    pieces = [text]
    for marker in DOCUMENT_MARKERS:
        pieces = [part for piece in pieces for part in piece.split(marker)]
    return [p.strip() for p in pieces if p.strip()]


def calibration_texts(folder: Path | None) -> list[str]:
    if folder is None:
        return []
    documents = []
    for file in sorted(folder.glob("*.utf8")):
        documents.extend(split_documents(file.read_text(encoding="utf-8")))
    return documents


@dataclass(frozen=True)
class Corpus:
    documents: tuple[str, ...]
    sources: tuple[str, ...]
    """Where the documents came from, for the report."""

    @property
    def characters(self) -> int:
        return sum(len(d) for d in self.documents)


def build_corpus(extra_dirs: Iterable[Path] = (), include_exllamav2: bool = True) -> Corpus:
    documents = prompt_suite_texts()
    sources = [f"SpecDeck prompt suites ({len(documents)} prompts)"]
    folders = [exllamav2_calibration_dir()] if include_exllamav2 else []
    folders.extend(Path(d) for d in extra_dirs)
    for folder in folders:
        texts = calibration_texts(folder)
        if texts:
            documents.extend(texts)
            sources.append(f"{folder} ({len(texts)} documents)")
    return Corpus(tuple(documents), tuple(sources))


def token_stream(corpus: Corpus, tokenizer_json: Path, bos_id: int, eos_id: int) -> list[int]:
    """Every document as BOS + tokens + EOS, concatenated (what the models learn)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    tokens: list[int] = []
    for encoding in tokenizer.encode_batch(list(corpus.documents), add_special_tokens=False):
        tokens.append(bos_id)
        tokens.extend(encoding.ids)
        tokens.append(eos_id)
    return tokens
