"""BOS/EOS ids, whether they are added, and the chat template, read the way the engines do.

The engine that runs EXL2 models is ExLlamaV2 behind TabbyAPI, so its rules decide:

- BOS / EOS id (ExLlamaV2 ``ExLlamaV2Tokenizer``): config.json's ``bos_token_id`` /
  ``eos_token_id`` (the first of a list); else the id of tokenizer_config.json's
  ``bos_token`` / ``eos_token`` text; else ExLlamaV2's defaults 1 and 2.
  special_tokens_map.json is consulted before the defaults, as transformers does.
- add BOS: :func:`adds_bos`, the one rule SpecDeck's checks and engines share (see there).
  add EOS: ``add_eos_token``, else False.
- Stop tokens (TabbyAPI ``HFModel.eos_tokens``): config.json's and generation_config.json's
  ``eos_token_id`` together.
- Chat template: tokenizer_config.json's ``chat_template``, else chat_template.jinja, else
  chat_template.json (where transformers writes it).

Every value keeps the name of the file and key it came from, so a report can say why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdeck.core.compat.tokenizer_files import read_optional_json
from specdeck.core.compat.vocab import Vocab
from specdeck.core.files import METADATA_FILE, read_text_bounded

EXLLAMAV2_DEFAULT_BOS = 1
EXLLAMAV2_DEFAULT_EOS = 2
ROLES = ("bos", "eos", "pad", "unk")


@dataclass(frozen=True)
class Sourced:
    """A value and where it was read (file and key, or whose default it is)."""

    value: Any
    source: str


@dataclass(frozen=True)
class SpecialTokens:
    bos_id: Sourced
    eos_id: Sourced
    add_bos: Sourced
    add_eos: Sourced
    stop_ids: tuple[int, ...]
    """Ids TabbyAPI stops on: config.json and generation_config.json eos_token_id."""
    declared: Mapping[str, str | None]
    """Texts of the bos/eos/pad/unk tokens as tokenizer_config / special_tokens_map name them."""
    chat_template: str | None
    chat_template_source: str | None


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config / special_tokens_map write it: text or AddedToken."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _first_id(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, list) and value and isinstance(value[0], int):
        return value[0]
    return None


def _all_ids(value: Any) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def _config_value(config: Mapping[str, Any] | None, key: str) -> Any:
    if not config:
        return None
    if config.get(key) is not None:
        return config[key]
    nested = config.get("text_config")  # multimodal checkpoints nest the language model
    return nested.get(key) if isinstance(nested, Mapping) else None


def _special_id(
    role: str,
    default: int,
    vocab: Vocab,
    config: Mapping[str, Any] | None,
    tokenizer_config: Mapping[str, Any] | None,
    special_map: Mapping[str, Any] | None,
) -> Sourced:
    key = f"{role}_token_id"
    from_config = _first_id(_config_value(config, key))
    if from_config is not None:
        return Sourced(from_config, f"config.json {key}")
    for name, data in (("tokenizer_config.json", tokenizer_config),
                       ("special_tokens_map.json", special_map)):
        if data is None or f"{role}_token" not in data:
            continue
        text = _token_text(data[f"{role}_token"])
        if text is None:
            return Sourced(None, f"{name} {role}_token is null")
        token_id = vocab.id_of(text)
        if token_id is None:
            return Sourced(None, f"{name} {role}_token {text!r} is not in the vocabulary")
        return Sourced(token_id, f"{name} {role}_token {text!r}")
    return Sourced(default, f"ExLlamaV2's default (no {key} and no {role}_token anywhere)")


def add_bos_flag(tokenizer_config: Mapping[str, Any] | None) -> Sourced:
    """Whether a prompt for a model folder starts with BOS, given its tokenizer_config.json
    (None: no such file). The server that runs model folders decides: TabbyAPI (both
    branches, common/transformers_utils.py ``TokenizerConfig.add_bos_token: Optional[bool] =
    True`` and ``HFModel.add_bos_token()``, e632af4 / 79126f9) reads ``add_bos_token`` and
    adds BOS when the key or the file is missing (a null key: no BOS); ExLlamaV2 and
    ExLlamaV3 add only what TabbyAPI asks for. transformers agrees on every tokenizer in the
    test fixtures (tests/core/test_compat_bos.py), and so does llama.cpp on the GGUF its
    converter makes of them (gguf-py writes add_bos_token from the same key, else from the
    tokenizer.json template). GGUF files carry llama.cpp's own flag (core.compat.gguf_file).
    """
    key = "add_bos_token"
    if tokenizer_config is not None and key in tokenizer_config:
        return Sourced(bool(tokenizer_config[key]), f"tokenizer_config.json {key}")
    where = "has no add_bos_token" if tokenizer_config is not None else "is missing"
    return Sourced(True, f"TabbyAPI's default (tokenizer_config.json {where})")


def adds_bos(folder: Path) -> Sourced:
    """:func:`add_bos_flag` for the model in ``folder``."""
    return add_bos_flag(read_optional_json(folder / "tokenizer_config.json"))


def _add_eos_flag(tokenizer_config: Mapping[str, Any] | None) -> Sourced:
    key = "add_eos_token"
    if tokenizer_config is not None and key in tokenizer_config:
        return Sourced(bool(tokenizer_config[key]), f"tokenizer_config.json {key}")
    return Sourced(False, "default: EOS is never added (no add_eos_token)")


def _chat_template(
    folder: Path, tokenizer_config: Mapping[str, Any] | None
) -> tuple[str | None, str | None]:
    value = tokenizer_config.get("chat_template") if tokenizer_config else None
    if isinstance(value, list):  # several named templates: the "default" one is used
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, Mapping)}
        value = named.get("default") or next(iter(named.values()), None)
    if isinstance(value, str) and value.strip():
        return value, "tokenizer_config.json chat_template"
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():  # bounded: a template of gigabytes is refused, never read whole
        return read_text_bounded(jinja, "chat template", METADATA_FILE), "chat_template.jinja"
    data = read_optional_json(folder / "chat_template.json")
    if data and isinstance(data.get("chat_template"), str):
        return data["chat_template"], "chat_template.json"
    return None, None


def read_special_tokens(folder: Path, vocab: Vocab) -> SpecialTokens:
    """The special-token settings of the model in ``folder``."""
    config = read_optional_json(folder / "config.json")
    generation = read_optional_json(folder / "generation_config.json")
    tokenizer_config = read_optional_json(folder / "tokenizer_config.json")
    special_map = read_optional_json(folder / "special_tokens_map.json")

    stop: list[int] = []
    for source in (config, generation):
        for token_id in _all_ids(_config_value(source, "eos_token_id")):
            if token_id not in stop:
                stop.append(token_id)

    declared: dict[str, str | None] = {}
    for role in ROLES:
        text = None
        for data in (tokenizer_config, special_map):
            if data is not None and f"{role}_token" in data:
                text = _token_text(data[f"{role}_token"])
                break
        declared[role] = text

    template, template_source = _chat_template(folder, tokenizer_config)
    return SpecialTokens(
        bos_id=_special_id("bos", EXLLAMAV2_DEFAULT_BOS, vocab, config, tokenizer_config,
                           special_map),
        eos_id=_special_id("eos", EXLLAMAV2_DEFAULT_EOS, vocab, config, tokenizer_config,
                           special_map),
        add_bos=add_bos_flag(tokenizer_config),
        add_eos=_add_eos_flag(tokenizer_config),
        stop_ids=tuple(stop),
        declared=declared,
        chat_template=template,
        chat_template_source=template_source,
    )
