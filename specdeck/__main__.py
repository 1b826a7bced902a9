"""`python -m specdeck` behaves exactly like the `specdeck` command."""

import sys

from specdeck.entry import main

if __name__ == "__main__":  # not when a spawned child process imports this module
    sys.exit(main())
