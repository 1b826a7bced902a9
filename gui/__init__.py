"""SpecDeck's Qt application. Thin: widgets, signals and workers; no domain logic."""
