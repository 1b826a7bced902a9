"""SpecDeck: a desktop control panel for speculative decoding on local LLM servers.

The distribution exposes one import name. Its parts live in the repository's top-level
folders and are installed beneath it:

- ``specdeck.core``       domain logic, no Qt (core/)
- ``specdeck.gui``        the Qt application (gui/)
- ``specdeck.resources``  prompt suites, icons, templates (resources/)
"""

__version__ = "0.1.0"
