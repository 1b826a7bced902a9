"""Where SpecDeck looks for a server's keys: the environment variables' default names, and
the command-line options that name others, worded once for every command that talks to
servers (bench, tune, servers probe). Light on purpose: the CLI imports it to build its
parser, before any command runs."""

from __future__ import annotations

import argparse

DEFAULT_KEY_ENV = "SPECDECK_SERVER_API_KEY"
"""The variable holding a server's API key when an arm names none."""
DEFAULT_ADMIN_KEY_ENV = "SPECDECK_TABBY_ADMIN_KEY"
"""The variable holding a running TabbyAPI's admin key (model reloads need it)."""
KEYRING_SERVICE = "specdeck-server"
"""The system keyring's service for server API keys (the user is the server's host:port)."""


def add_api_key_option(group: argparse._ActionsContainer, *, tabby: bool = True) -> None:
    where = f"default {DEFAULT_KEY_ENV}, then the system keyring"
    if tabby:
        where += "; a TabbyAPI started from --tabby-folder: its api_tokens.yml"
    group.add_argument("--api-key-env", metavar="VAR",
                       help=f"the environment variable holding the server's API key ({where})")


def add_tabby_options(group: argparse._ActionsContainer) -> None:
    """--admin-key-env and --tabby-python, for the commands that reload or start TabbyAPI."""
    group.add_argument("--admin-key-env", metavar="VAR",
                       help="--tabby: the environment variable holding TabbyAPI's admin key "
                       f"(default {DEFAULT_ADMIN_KEY_ENV})")
    group.add_argument("--tabby-python", metavar="PYTHON",
                       help="--tabby-folder: the Python that runs TabbyAPI (default: its "
                       "folder's venv)")
