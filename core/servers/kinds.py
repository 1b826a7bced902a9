"""The kinds of server SpecDeck talks to, and what each can tell a client (docs/servers.md):
how it is detected, whether it reports draft acceptance, whether a client can
turn its prefix cache off."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ServerKind(str, enum.Enum):
    LLAMA_SERVER = "llama-server"
    LLAMA_SWAP = "llama-swap"
    TABBYAPI = "tabbyapi"
    VLLM = "vllm"
    SGLANG = "sglang"
    LMSTUDIO = "lmstudio"
    OLLAMA = "ollama"
    OPENAI = "openai"
    """Any other OpenAI-compatible server: client-side tok/s only."""


@dataclass(frozen=True)
class KindTraits:
    title: str
    acceptance: str
    """Where draft acceptance comes from, or why there is none."""
    cache_off: bool
    """A request can turn the prompt cache off (llama-server's cache_prompt: false)."""
    tellable: str = ""
    """Where no run carried a draft count: why SpecDeck cannot tell whether an arm of this
    kind drafted, and what makes it tellable (core.bench.summary's ``drafting_unknown``)."""


_LLAMA_TELLABLE = (
    "llama-server leaves draft_n out of a response that drafted nothing, and without /metrics "
    "there are no counters to tell: start llama-server with --metrics (the servers SpecDeck "
    "starts have it)")

TRAITS = {
    ServerKind.LLAMA_SERVER: KindTraits(
        "llama.cpp llama-server", "timings.draft_n / draft_n_accepted per request", True,
        _LLAMA_TELLABLE),
    ServerKind.LLAMA_SWAP: KindTraits(
        "llama-swap (llama-servers by model name)",
        "timings.draft_n / draft_n_accepted per request", True,
        _LLAMA_TELLABLE.replace("start llama-server with --metrics",
                                "add --metrics to the model's cmd")),
    ServerKind.TABBYAPI: KindTraits(
        "TabbyAPI", "not reported by this server (TabbyAPI returns no draft counts)", False,
        "TabbyAPI returns no draft counts over HTTP: let SpecDeck start TabbyAPI from its "
        "folder, so that it reads them from TabbyAPI's log (the ExLlamaV3 backend logs them)"),
    ServerKind.VLLM: KindTraits(
        "vLLM", "metrics.speculative_decoding per request where the server was started with "
        "--per-request-spec-decode-metrics (exact), else the Prometheus spec_decode counters "
        "around each run (other traffic skews them)", False,
        "vLLM gave no draft counts: start it with --per-request-spec-decode-metrics, or let "
        "SpecDeck read its /metrics"),
    ServerKind.SGLANG: KindTraits(
        "SGLang", "sglext.spec_tokens_details per request (spec_verify_ct, "
        "spec_num_correct_drafts, spec_num_proposed_drafts); its sglang:spec_accept_length / "
        "spec_accept_rate are gauges, read after each run as the server's recent average, "
        "not the run's", False,
        "SGLang gave no draft counts: SpecDeck asks for return_spec_tokens_details; a build "
        "that ignores it cannot be told"),
    ServerKind.LMSTUDIO: KindTraits(
        "LM Studio", "stats.total_draft_tokens_count / accepted / rejected / ignored per "
        "response where it carries them (checked: accepted + rejected + ignored = total; "
        "LM Studio's streams did not carry them in 0.3.x: then not reported)", False,
        "LM Studio's responses carried no draft counts (its REST /api/v0 stats have them)"),
    ServerKind.OLLAMA: KindTraits(
        "Ollama", "not reported by this server (its final stats have eval_count and "
        "eval_duration, no draft counts): drafting on or off (options.draft_num_predict) is "
        "measured by speed alone", False,
        "Ollama reports no draft counts: only a model with a draft (ollama show) drafts"),
    ServerKind.OPENAI: KindTraits(
        "OpenAI-compatible server", "not reported by this server (tok/s only)", False,
        "this server reports no draft counts"),
}


def parse_kind(text: str) -> ServerKind:
    from specdeck.core.errors import InvalidInputError

    wanted = text.strip().lower().replace("_", "-")
    aliases = {"llamacpp": "llama-server", "llama.cpp": "llama-server", "tabby": "tabbyapi",
               "lm-studio": "lmstudio", "sgl": "sglang", "oai": "openai", "openai-compatible": "openai"}
    wanted = aliases.get(wanted, wanted)
    for kind in ServerKind:
        if kind.value == wanted:
            return kind
    raise InvalidInputError(f"Unknown server kind {text!r}.",
                            "Use one of " + ", ".join(k.value for k in ServerKind) + ".")
