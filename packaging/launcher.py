"""Entry script for the PyInstaller bundle: the same as the `specdeck` command."""

import multiprocessing
import sys

from specdeck.entry import main

if __name__ == "__main__":
    # The A/B bench's engine runs in a spawned child process; a frozen app must let the
    # child take over here instead of starting a second SpecDeck.
    multiprocessing.freeze_support()
    sys.exit(main())
