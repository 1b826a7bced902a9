"""Start the desktop app."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QEvent, QObject, QSettings, QTimer
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication
from specdeck.core import appdirs

from specdeck import __version__

ORGANIZATION = "SpecDeck"
APPLICATION = "SpecDeck"
STARTUP_PROBE_ENV = "SPECDECK_STARTUP_PROBE"
"""If set to a file path, the app writes the wall-clock time of its first painted frame
there and quits: `make bench` measures cold start with it."""


def configure_application(app: QCoreApplication) -> None:
    """Names, settings location and look; shared by the app and the tests."""
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APPLICATION)
    app.setApplicationVersion(__version__)
    if os.environ.get(appdirs.HOME_ENV):
        # Tests and portable setups keep QSettings beside SpecDeck's other files.
        QSettings.setDefaultFormat(QSettings.Format.IniFormat)
        QSettings.setPath(
            QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(appdirs.config_dir())
        )
    if isinstance(app, QApplication):
        from specdeck.gui.gc_guard import install
        from specdeck.resources import path as resource_path

        install(app)  # cycles are collected on the GUI thread, never on a worker's

        app.setWindowIcon(QIcon(str(resource_path("icons", "specdeck.svg"))))
        app.setDesktopFileName("specdeck")
        style = resource_path("style.qss")
        if style.exists():
            app.setStyleSheet(style.read_text(encoding="utf-8"))


class _FirstPaintProbe(QObject):
    def __init__(self, target: Path):
        super().__init__()
        self._target = target
        self._done = False

    def eventFilter(self, watched, event):  # noqa: N802 - Qt's name
        if not self._done and event.type() == QEvent.Type.Paint:
            self._done = True
            QTimer.singleShot(0, QCoreApplication.quit)  # a probe that cannot write still ends
            self._target.parent.mkdir(parents=True, exist_ok=True)
            self._target.write_text(f"{time.time():.6f}\n", encoding="utf-8")
        return False


def run_gui(argv: Sequence[str] = ()) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from specdeck.core.urls import redact_log_records

    redact_log_records()  # HTTP clients log whole URLs, credentials included
    app = QApplication.instance() or QApplication([sys.argv[0], *argv])
    configure_application(app)

    from specdeck.gui.main_window import MainWindow

    window = MainWindow()
    probe_path = os.environ.get(STARTUP_PROBE_ENV)
    if probe_path:
        probe = _FirstPaintProbe(Path(probe_path))
        window.installEventFilter(probe)
        window.centralWidget().installEventFilter(probe)
    window.show()
    return app.exec()
