"""Make the repository's `bench` package importable (pytest may run from elsewhere)."""

import sys

from conftest import REPO_ROOT

if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
