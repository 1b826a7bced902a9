"""SpecDeck's domain logic: pure Python, no Qt. Used by the GUI, the CLI and the tests."""
