"""Ollama's drafting, and the one setting a request can change: ``draft_num_predict``.

Read from ollama/ollama fb30760996871fa9460115c753afd2c60d4ab0f7:

- ``draft_num_predict`` is a Runner option (api/types.go ``Runner``: "options which must be
  set when the model is loaded"), default 4 (``DefaultOptions``). When Ollama starts its
  llama-server for a model, ``appendDraftArgs`` (llm/llama_server.go) adds
  ``--spec-type draft-mtp`` (the model's own MTP layers, or an MTP draft layer) or
  ``draft-dflash`` (a DFlash draft layer) with ``--spec-draft-n-max draft_num_predict``;
  with draft_num_predict <= 0, or a model without a draft, it adds nothing.
- A model without a DRAFT layer drafts only when draft_num_predict was set, in its
  Modelfile or the request (server/routes.go ``modelOptions``: otherwise it is 0).
- A request whose Runner options differ from the loaded runner's reloads the model
  (server/sched.go ``needsReload``): an arm that changes draft_num_predict pays a reload, so
  SpecDeck loads each arm's setting before its runs (``POST /api/generate`` with an empty
  prompt only loads: done_reason "load", server/routes.go GenerateHandler).
- What a client can read: ``POST /api/show`` gives ``parameters`` (the Modelfile's
  PARAMETER lines, ``draft_num_predict   4``), ``modelfile`` (a ``DRAFT`` line when the
  model has a draft layer) and ``model_info`` (GGUF metadata:
  ``<arch>.nextn_predict_layers`` when the model carries MTP layers); ``/api/ps`` lists
  loaded models with no options. The final stream object's Metrics are total_duration,
  load_duration, prompt_eval_count/duration, eval_count/duration: llama-server's draft_n is
  dropped (llamaServerTimings has cache_n, prompt_n, prompt_ms, predicted_n, predicted_ms),
  so Ollama reports no acceptance and an arm measures speed only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specdeck.core.errors import InvalidInputError
from specdeck.core.servers.readings import MAX_DRAFT_PER_TOKEN
from specdeck.core.servers.transport import Base, ServerError, request_json

OPTION = "draft_num_predict"
LOAD_TIMEOUT_S = 300.0
"""A model load (a reload with other runner options) may take minutes for a large model."""
MTP_ARCHES = ("qwen35", "qwen35moe")
"""Architectures whose MTP tensors Ollama finds by name (hasLegacyQwenMTPDraft), which
/api/show without verbose does not list: their drafting is unknown, not absent."""


@dataclass(frozen=True)
class ModelDrafting:
    """What Ollama's /api/show says about a model's drafting."""

    model: str
    draft: str | None
    """"DRAFT layer", "MTP layers (nextn_predict_layers N)", or None for none found."""
    default_n: int | None
    """draft_num_predict from the model's own parameters; None when it sets none."""
    certain: bool = True
    """False when the model may carry MTP tensors /api/show does not list."""

    @property
    def drafts_by_default(self) -> bool | None:
        """Whether a request without the option drafts (routes.go modelOptions)."""
        if self.draft is None:
            return None if not self.certain else False
        if self.draft == "DRAFT layer":
            return (self.default_n if self.default_n is not None else 4) > 0
        return bool(self.default_n and self.default_n > 0)

    def describe(self) -> str:
        if self.draft is None:
            return ("no draft found (no DRAFT layer, no MTP layers)" if self.certain else
                    "drafting unknown (MTP tensors are not listed by /api/show)")
        n = f"draft_num_predict {self.default_n}" if self.default_n is not None else \
            "no draft_num_predict in its parameters"
        return f"{self.draft}, {n}"


def parse_draft_n(text: str, arm: str) -> int:
    """--server-draft B=N for an Ollama arm: N drafted tokens per step (draft_num_predict)."""
    try:
        n = int(text.strip())
    except ValueError:
        n = -1
    if not 1 <= n <= MAX_DRAFT_PER_TOKEN:
        raise InvalidInputError(
            f"Arm {arm}: on Ollama, --server-draft gives draft_num_predict, a whole number "
            f"from 1 to {MAX_DRAFT_PER_TOKEN}; got {text!r}.",
            f"Write --server-draft {arm}=4 (the model's draft then proposes up to 4 tokens).")
    return n


def request_options(draft: str | None, reference: bool) -> dict[str, int]:
    """The drafting option an arm's requests carry: the reference 0 (a model with a draft
    layer drafts by default), an arm with --server-draft its N, others none (as configured)."""
    if reference:
        return {OPTION: 0}
    if draft:
        return {OPTION: int(draft)}
    return {}


def model_drafting(base: Base, model: str, api_key: str | None) -> ModelDrafting:
    data = request_json(base, "POST", "/api/show", {"model": model}, api_key=api_key,
                        timeout=5.0)
    return read_show(model, data if isinstance(data, dict) else {})


def read_show(model: str, data: dict[str, Any]) -> ModelDrafting:
    default_n = None
    for line in str(data.get("parameters") or "").splitlines():
        name, _, value = line.strip().partition(" ")
        if name == OPTION:
            try:
                default_n = int(float(value.strip().strip('"')))
            except ValueError:
                default_n = None
    modelfile = str(data.get("modelfile") or "")
    info = data.get("model_info") if isinstance(data.get("model_info"), dict) else {}
    layers = next((v for k, v in info.items() if k.endswith(".nextn_predict_layers")
                   and isinstance(v, int) and not isinstance(v, bool) and v > 0), None)
    arch = info.get("general.architecture")
    if any(line.startswith("DRAFT ") for line in modelfile.splitlines()):
        draft = "DRAFT layer"
    elif layers:
        draft = f"MTP layers (nextn_predict_layers {layers})"
    else:
        draft = None
    return ModelDrafting(model, draft, default_n, certain=draft is not None or arch not in
                         MTP_ARCHES)


def load(base: Base, model: str, options: dict[str, int], api_key: str | None) -> None:
    """Have Ollama load ``model`` with ``options`` (its runner restarts when they differ
    from the loaded one's), so that no measured run pays for the reload."""
    try:
        request_json(base, "POST", "/api/generate",
                     {"model": model, "prompt": "", "stream": False, "options": options},
                     api_key=api_key, timeout=LOAD_TIMEOUT_S)
    except ServerError as exc:
        raise ServerError(f"Ollama could not load {model} with {options}: {exc.what}",
                          exc.fix) from None

