"""The Models page's Hugging Face token: which one is used, Set token… (checked with the Hub,
then kept in the system keyring), Forget token. The keyring and the Hub are asked in
workers; the token itself is never shown nor kept in SpecDeck's settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject
from PySide6.QtWidgets import (
    QHBoxLayout,
    QInputDialog,
    QLineEdit,
    QPushButton,
)
from specdeck.gui.pages.models.widgets import new_label

if TYPE_CHECKING:
    from specdeck.gui.pages.models import ModelsPage


def _token_status() -> str:
    from specdeck.core.hub import resolve_token

    token = resolve_token()
    if token is None:
        return "No Hugging Face token: public repositories only."
    return f"Using the Hugging Face token from {token.source.value}."


def _sign_in(value: str) -> str:
    from specdeck.core.hub import TokenSource, save_token, whoami

    user = whoami(value)
    where = save_token(value)
    kept = "kept in the system keyring" if where == TokenSource.KEYRING else "kept for this session only (no system keyring)"
    return f"Signed in as {user}; token {kept}."


def _forget() -> str:
    from specdeck.core.hub import forget_token

    forget_token()
    return _token_status()


class HubToken(QObject):
    """The token row (part of ModelsPage): owns its label and buttons."""

    def __init__(self, page: ModelsPage):
        super().__init__(page)
        self._page = page
        self.row = QHBoxLayout()
        self.token_label = new_label("", role="hint")
        self.token_button = QPushButton("Set token…")
        self.token_button.setToolTip("For gated and private repositories. Stored in the system keyring, "
                                     "never in config.yml or SpecDeck's settings.")
        self.token_button.clicked.connect(self._ask_token)
        self.forget_button = QPushButton("Forget token")
        self.forget_button.clicked.connect(
            lambda: self._page.run("token", _forget, finished=self.token_label.setText))
        self.row.addWidget(self.token_label, 1)
        self.row.addWidget(self.token_button)
        self.row.addWidget(self.forget_button)

    def refresh(self) -> None:
        """Say which token is used (the keyring is asked in a worker)."""
        self._page.run("token", _token_status, finished=self.token_label.setText)

    def _ask_token(self) -> None:
        value, ok = QInputDialog.getText(
            self._page, "Hugging Face token",
            "Paste a read token from huggingface.co/settings/tokens.\n"
            "It is checked with the Hub, then kept in the system keyring (never in config.yml).\n"
            "HF_TOKEN, when set, takes precedence.",
            QLineEdit.EchoMode.Password,
        )
        if ok and value.strip():
            self.token_label.setText("Checking the token…")
            self._page.run("token", _sign_in, value.strip(), finished=self.token_label.setText,
                           failed=lambda exc: (self._page.show_error(exc), self.refresh()))
