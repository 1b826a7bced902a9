"""What is listening at a URL: the kind of server, the model and draft it holds, what it
reports. Each kind is recognised by a route only it answers that way (read defensively:
field names drift between versions)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specdeck.core.servers.transport import Base, ServerError, request_json, request_text
from specdeck.core.servers.kinds import TRAITS, ServerKind
from specdeck.core.servers.router import is_router, router_models

PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ServerInfo:
    url: str
    """Redacted."""
    kind: ServerKind
    model: str | None = None
    """The model a request should name (the loaded model's id), when the server says."""
    models: tuple[str, ...] = ()
    """Every model the server lists (llama-swap presets, Ollama tags, ...)."""
    draft: str | None = None
    """The draft model or speculative method the server reports, when it does."""
    speculative: bool | None = None
    """True/False when the server says whether it drafts; None when it cannot tell."""
    version: str | None = None
    metrics: bool = False
    """It exposes Prometheus metrics with speculative-decoding counters."""
    detected_by: str = ""
    notes: tuple[str, ...] = field(default=())
    router: bool = False
    """A llama-server router: it switches models by the request's model name."""
    model_flags: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """A router's models and each one's llama-server flags (what makes their arms differ)."""

    def flags_of(self, model: str | None) -> tuple[str, ...] | None:
        """A router model's llama-server flags; None when unknown."""
        return dict(self.model_flags).get(model) if model else None

    @property
    def acceptance(self) -> str:
        return TRAITS[self.kind].acceptance

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "kind": self.kind.value, "title": TRAITS[self.kind].title,
                "model": self.model, "models": list(self.models), "draft": self.draft,
                "speculative": self.speculative, "version": self.version,
                "metrics": self.metrics, "acceptance": self.acceptance,
                "cache_off": TRAITS[self.kind].cache_off, "detected_by": self.detected_by,
                "router": self.router,
                "model_flags": {m: list(f) for m, f in self.model_flags},
                "notes": list(self.notes)}


def _get(base: Base, route: str, api_key: str | None) -> Any:
    try:
        return request_json(base, "GET", route, api_key=api_key, timeout=PROBE_TIMEOUT_S)
    except ServerError as exc:
        if any(w in exc.what for w in ("Nothing is listening", "did not answer", "Cannot reach",
                                         "refused the request")):
            raise  # down, or asking for a key: say so, not "unknown server"
        return None


def _model_ids(data: Any) -> tuple[str, ...]:
    if not isinstance(data, dict):
        return ()
    items = data.get("data") or data.get("models") or []
    ids = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            name = item.get("id") or item.get("name") or item.get("model")
            if isinstance(name, str):
                ids.append(name)
    return tuple(ids)


def probe(url: str, api_key: str | None = None, kind: ServerKind | None = None) -> ServerInfo:
    """Identify the server at ``url``; ``kind`` skips detection (the user knows better)."""
    base = Base.parse(url)
    order = [kind] if kind is not None else [
        ServerKind.LLAMA_SERVER, ServerKind.LLAMA_SWAP, ServerKind.TABBYAPI, ServerKind.VLLM,
        ServerKind.LMSTUDIO, ServerKind.OLLAMA, ServerKind.OPENAI]
    for candidate in order:
        info = _PROBES[candidate](base, api_key)
        if info is not None:
            return info
    if kind is not None:
        return ServerInfo(base.shown, kind, detected_by="chosen by hand",
                          notes=("The server did not answer as this kind usually does.",))
    raise ServerError(f"{base.shown} answers HTTP, but not as an LLM server SpecDeck knows "
                      "(no /v1/models).",
                      "Check the URL (the server's base address, e.g. http://127.0.0.1:8080).")


def _llama_server(base: Base, api_key: str | None) -> ServerInfo | None:
    props = _get(base, "/props", api_key)
    if not isinstance(props, dict) or not ("default_generation_settings" in props
                                           or "build_info" in props):
        return None
    if is_router(props):
        return _llama_router(base, api_key, props)
    slots = _get(base, "/slots", api_key)
    speculative = None
    if isinstance(slots, list) and slots and isinstance(slots[0], dict):
        value = slots[0].get("speculative")
        speculative = value if isinstance(value, bool) else None
    models = _model_ids(_get(base, "/v1/models", api_key))
    notes = []
    if speculative is None:
        notes.append("The server's /slots is off (--no-slots): whether it drafts is unknown.")
    return ServerInfo(
        base.shown, ServerKind.LLAMA_SERVER,
        model=models[0] if models else props.get("model_path"),
        models=models,
        speculative=speculative,
        version=str(props.get("build_info")) if props.get("build_info") else None,
        metrics=_has_metrics(base, api_key, "llamacpp:spec_decode"),
        detected_by="/props",
        notes=tuple(notes),
    )


def _llama_router(base: Base, api_key: str | None, props: dict) -> ServerInfo:
    from specdeck.core.engines.base import DrafterKind
    from specdeck.core.servers.llama_server import drafter_from_flags

    models = router_models(base, api_key)
    drafting = [m.id for m in models.values()
                if drafter_from_flags(m.flags).kind is not DrafterKind.NONE]
    return ServerInfo(
        base.shown, ServerKind.LLAMA_SERVER,
        models=tuple(models),
        version=str(props.get("build_info")) if props.get("build_info") else None,
        detected_by="/props (role: router)",
        router=True,
        model_flags=tuple((m.id, m.flags) for m in models.values()),
        notes=("A llama-server router: it switches models by the request's model name; give "
               "each arm its model (NAME=URL#MODEL). SpecDeck loads each arm's model before "
               "its runs.",
               "Drafting models (from their flags): " + (", ".join(drafting) or "none") + "."),
    )


def _has_metrics(base: Base, api_key: str | None, prefix: str) -> bool:
    try:
        return prefix in request_text(base, "/metrics", api_key, timeout=PROBE_TIMEOUT_S)
    except ServerError:
        return False


def _llama_swap(base: Base, api_key: str | None) -> ServerInfo | None:
    running = _get(base, "/running", api_key)
    if not isinstance(running, dict) or "running" not in running:
        return None
    models = _model_ids(_get(base, "/v1/models", api_key))
    return ServerInfo(base.shown, ServerKind.LLAMA_SWAP, models=models, detected_by="/running",
                      notes=("llama-swap switches llama-servers by the request's model name: "
                             "give each arm its model (NAME=URL#model).",))


def _tabbyapi(base: Base, api_key: str | None) -> ServerInfo | None:
    # TabbyAPI's /v1/model is a ModelCard (endpoints/core/types/model.py: owned_by "tabbyAPI",
    # parameters.draft a ModelCard of the draft when one is loaded).
    card = _get(base, "/v1/model", api_key)
    if not isinstance(card, dict) or str(card.get("owned_by", "")).lower() != "tabbyapi":
        return None
    params = card.get("parameters") if isinstance(card.get("parameters"), dict) else {}
    draft = params.get("draft") if isinstance(params.get("draft"), dict) else None
    draft_name = draft.get("id") if draft else None
    return ServerInfo(base.shown, ServerKind.TABBYAPI, model=card.get("id"),
                      draft=draft_name, speculative=draft is not None, detected_by="/v1/model",
                      notes=("TabbyAPI reports no draft acceptance over HTTP.",))


def _vllm(base: Base, api_key: str | None) -> ServerInfo | None:
    version = _get(base, "/version", api_key)
    if not isinstance(version, dict) or "version" not in version:
        return None
    models = _model_ids(_get(base, "/v1/models", api_key))
    return ServerInfo(base.shown, ServerKind.VLLM, model=models[0] if models else None,
                      models=models, version=str(version["version"]),
                      metrics=_has_metrics(base, api_key, "vllm:spec_decode"),
                      detected_by="/version")


def _lmstudio(base: Base, api_key: str | None) -> ServerInfo | None:
    # LM Studio's docs (lmstudio-ai/docs c6854fba): /api/v0/models lists data[] with "state"
    # loaded / not-loaded (1_developer/2_rest/endpoints.mdx); 0.4's /api/v1/models lists
    # models[] with "key" and "loaded_instances" (2_rest/list.md). Unknown routes answer 200
    # with an "error": only the fields tell.
    note = ("LM Studio loads a draft per request: give a drafting arm its draft with "
            "--server-draft NAME=DRAFT.")
    data = _get(base, "/api/v0/models", api_key)
    if isinstance(data, dict) and isinstance(data.get("data"), list) and all(
            isinstance(m, dict) and "state" in m for m in data["data"]):
        loaded = [m.get("id") for m in data["data"] if m.get("state") == "loaded"]
        return ServerInfo(base.shown, ServerKind.LMSTUDIO, model=loaded[0] if loaded else None,
                          models=_model_ids(data), detected_by="/api/v0/models", notes=(note,))
    data = _get(base, "/api/v1/models", api_key)
    items = data.get("models") if isinstance(data, dict) else None
    if not isinstance(items, list) or not all(isinstance(m, dict) and "key" in m for m in items):
        return None
    loaded = [i.get("id") for m in items for i in (m.get("loaded_instances") or [])
              if isinstance(i, dict)]
    return ServerInfo(base.shown, ServerKind.LMSTUDIO, model=loaded[0] if loaded else None,
                      models=tuple(str(m["key"]) for m in items), detected_by="/api/v1/models",
                      notes=(note,))


def _ollama(base: Base, api_key: str | None) -> ServerInfo | None:
    version = _get(base, "/api/version", api_key)
    if not isinstance(version, dict) or "version" not in version:
        return None
    tags = _model_ids(_get(base, "/api/tags", api_key))
    running = _model_ids(_get(base, "/api/ps", api_key))  # the models loaded now
    model = running[0] if running else (tags[0] if len(tags) == 1 else None)
    notes = () if model else ("Ollama needs a model name in every request: give it as "
                              "URL#MODEL.",)
    return ServerInfo(base.shown, ServerKind.OLLAMA, model=model, models=tags,
                      version=str(version["version"]), detected_by="/api/version", notes=notes)


def _openai(base: Base, api_key: str | None) -> ServerInfo | None:
    data = _get(base, "/v1/models", api_key)
    models = _model_ids(data)
    if not isinstance(data, dict):
        return None
    return ServerInfo(base.shown, ServerKind.OPENAI, model=models[0] if models else None,
                      models=models, detected_by="/v1/models")


_PROBES = {
    ServerKind.LLAMA_SERVER: _llama_server,
    ServerKind.LLAMA_SWAP: _llama_swap,
    ServerKind.TABBYAPI: _tabbyapi,
    ServerKind.VLLM: _vllm,
    ServerKind.LMSTUDIO: _lmstudio,
    ServerKind.OLLAMA: _ollama,
    ServerKind.OPENAI: _openai,
}
