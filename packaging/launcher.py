"""Entry script for the PyInstaller bundle: the same as the `specdeck` command."""

import sys

from specdeck.entry import main

if __name__ == "__main__":
    sys.exit(main())
