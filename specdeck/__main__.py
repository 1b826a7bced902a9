"""`python -m specdeck` behaves exactly like the `specdeck` command."""

import sys

from specdeck.entry import main

sys.exit(main())
