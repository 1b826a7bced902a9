"""The pages of the main window, in sidebar order.

Each page lives in its own module, which exposes ``create_page(context) -> QWidget``. Pages
are built the first time they are shown, so the window opens fast.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PageSpec:
    key: str
    title: str
    module: str
    summary: str


PAGES: tuple[PageSpec, ...] = (
    PageSpec(
        "start",
        "Start",
        "specdeck.gui.pages.start",
        "What SpecDeck is for, the demo A/B, and what was found on this machine.",
    ),
    PageSpec(
        "models",
        "Models",
        "specdeck.gui.pages.models",
        "Your local draft and target models, and EXL2, EXL3 and GGUF drafts to install from the "
        "Hugging Face Hub.",
    ),
    PageSpec(
        "draft",
        "Draft settings",
        "specdeck.gui.pages.draft_settings",
        "The draft-model settings of TabbyAPI's config.yml.",
    ),
    PageSpec(
        "swap",
        "llama-swap",
        "specdeck.gui.pages.swap",
        "The drafting flags in llama-swap's config.yaml: see, set and migrate them.",
    ),
    PageSpec(
        "compat",
        "Compatibility",
        "specdeck.gui.pages.compatibility",
        "Can this draft work with this target? Tokenizer and context checks.",
    ),
    PageSpec(
        "gpus",
        "GPUs & VRAM",
        "specdeck.gui.pages.gpus",
        "Live GPU telemetry and a VRAM plan for target + draft.",
    ),
    PageSpec(
        "bench",
        "A/B bench",
        "specdeck.gui.pages.bench",
        "Side-by-side runs with and without speculation, with honest statistics.",
    ),
    PageSpec(
        "tune",
        "Tune",
        "specdeck.gui.pages.tune",
        "Make your llama-server draft faster: search, verify, apply (or the demo, on the CPU).",
    ),
)


def spec(key: str) -> PageSpec:
    for page in PAGES:
        if page.key == key:
            return page
    raise KeyError(key)
