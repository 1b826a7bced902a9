"""SpecDeck: a desktop control panel for speculative decoding on local LLM servers.

The distribution exposes one import name. Its parts live in the repository's top-level
folders and are installed beneath it:

- ``specdeck.core``       domain logic, no Qt (core/)
- ``specdeck.gui``        the Qt application (gui/)
- ``specdeck.resources``  prompt suites, icons, templates (resources/)
"""

__version__ = "0.1.0"

SUMMARY = ("Desktop control panel for speculative decoding on local LLM servers: TabbyAPI "
           "(ExLlamaV2, ExLlamaV3), llama.cpp's llama-server and llama-swap, vLLM, SGLang, "
           "LM Studio, Ollama")
"""What SpecDeck is, in one line: the CLI's help, the About box and pyproject.toml's
description (a test holds the last to it)."""


def _source_checkout() -> None:
    """Run from a source checkout with nothing installed (``python -m specdeck`` in the
    repository's root, as the GPU kit does on a bare machine), the parts are the folders
    beside this one: let Python find ``specdeck.core`` in core/ and so on. An installed
    SpecDeck (its parts beneath this folder) is left as it is."""
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.isfile(os.path.join(root, "core", "__init__.py")) \
            and os.path.isfile(os.path.join(root, "setup.py")) and root not in __path__:
        __path__.append(root)


_source_checkout()
