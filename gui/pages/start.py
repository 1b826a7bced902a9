"""The start page: what SpecDeck is for, the demo A/B one click away, and what was found on
this machine with the next step for each. The first launch opens here; later launches
reopen the page the user left."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)
from specdeck.gui import workers

TASKS = (
    ("Install a draft", "Find a small draft model for your big one on the Hugging Face Hub (an "
     "EXL2 or EXL3 bitrate, or a GGUF file) and install it, checked and resumable.", "models",
     "Models"),
    ("Check a pair, plan VRAM", "Can this draft speculate for this target (tokenizers, ids, "
     "context)? Will both fit on your GPUs?", "compat", "Compatibility"),
    ("Measure the speed-up", "A/B with and without drafting, in SpecDeck or on the servers you "
     "run (llama-server, TabbyAPI, vLLM, ...), with paired statistics and a losslessness check.",
     "bench", "A/B bench"),
)


DEMO_HINT = ("See a live A/B in a minute, or the whole tuning loop, on the embedded demo "
             "model (no download).")


PATH_SHOWN_CHARS = 64
"""A longer path is shown with its middle elided (whole in the tooltip): kept on one line, a
longer one would widen the page."""
WORD_JOINER = "\u2060"


def unbroken_path(path: str) -> str:
    """A path word wrap keeps on one line: it broke one after "(/" (a slash, like a hyphen
    or a space, is a break opportunity); a word joiner between its characters forbids them."""
    if len(path) > PATH_SHOWN_CHARS:
        half = (PATH_SHOWN_CHARS - 1) // 2
        path = f"{path[:half]}…{path[-half:]}"
    return WORD_JOINER.join(path)


def demo_hint_text() -> tuple[str, str]:
    """Worker: beside the demo buttons, what they do, and the llama-server tuning the demo
    needs (the one SpecDeck found, looked for on disk, or that the Tune page asks for one):
    the hint, and its tooltip (the llama-server's whole path, or none)."""
    from specdeck.core.tune.setup import llama_server_candidates

    found = llama_server_candidates()
    tune = (f"Tuning it runs llama-server ({unbroken_path(str(found[0]))})." if found else
            "Tuning it needs a llama-server binary: none is on PATH, so the Tune page asks "
            "for yours.")
    return f"{DEMO_HINT} {tune}", str(found[0]) if found else ""


def create_page(context) -> QWidget:
    return StartPage(context)


class StartPage(QWidget):
    def __init__(self, context, parent: QWidget | None = None, discover=None):
        super().__init__(parent)
        self.context = context
        self._discover = discover
        self.tasks = workers.Tasks(self)
        layout = QVBoxLayout(self)
        heading = QLabel("<h2>Speculative decoding you can trust</h2>")
        intro = QLabel("A small draft model proposes tokens and your big model checks them: the "
                       "same output, faster, when the draft guesses well. SpecDeck helps you pick "
                       "and fit a draft, set it up, and measure what it really gains.")
        intro.setWordWrap(True)
        layout.addWidget(heading)
        layout.addWidget(intro)

        cards = QGridLayout()
        self.task_buttons: dict[str, QPushButton] = {}
        for column, (title, text, key, page_title) in enumerate(TASKS):
            card = QFrame()
            card.setFrameShape(QFrame.Shape.StyledPanel)
            box = QVBoxLayout(card)
            box.addWidget(QLabel(f"<b>{html.escape(title)}</b>"))
            body = QLabel(text)
            body.setWordWrap(True)
            box.addWidget(body, 1)
            button = QPushButton(f"Open {page_title}")
            button.clicked.connect(lambda _=False, k=key: self.context.page_requested.emit(k, ""))
            box.addWidget(button, 0, Qt.AlignmentFlag.AlignLeft)
            self.task_buttons[key] = button
            cards.addWidget(card, 0, column)
        layout.addLayout(cards)

        demo_row = QHBoxLayout()
        self.demo_button = QPushButton("Run the demo A/B")
        self.demo_button.setProperty("role", "primary")
        self.demo_button.setToolTip("No draft vs n-gram drafting on the embedded SmolLM2-135M "
                                    "demo model, on this CPU: no download, no GPU")
        self.demo_button.clicked.connect(lambda: self.context.page_requested.emit("bench", "demo"))
        demo_row.addWidget(self.demo_button)
        self.tune_demo_button = QPushButton("Tune the demo…")
        self.tune_demo_button.setToolTip("The whole tuning loop (candidates, search, verify) on "
                                         "the demo model and your llama-server, on this CPU")
        self.tune_demo_button.clicked.connect(
            lambda: self.context.page_requested.emit("tune", "demo"))
        demo_row.addWidget(self.tune_demo_button)
        self.demo_hint = QLabel(DEMO_HINT)  # which llama-server: once looked for (refresh)
        self.demo_hint.setProperty("role", "hint")
        self.demo_hint.setWordWrap(True)
        self.demo_hint.setTextFormat(Qt.TextFormat.PlainText)
        demo_row.addWidget(self.demo_hint, 1)
        layout.addLayout(demo_row)

        layout.addWidget(QLabel("<b>Found on this machine</b>"))
        self.findings_host = QWidget()
        self.findings = QGridLayout(self.findings_host)
        self.findings.setContentsMargins(0, 0, 0, 0)
        self.status = QLabel("Looking…")
        self.status.setProperty("role", "hint")
        self.findings.addWidget(self.status, 0, 0)
        layout.addWidget(self.findings_host)
        layout.addStretch(1)
        self.rows: list[tuple[QLabel, QLabel, QPushButton | None]] = []
        self.tune_buttons: list[QPushButton] = []
        """"Tune…" on each finding SpecDeck can tune (a llama-swap config)."""
        self.refresh()

    def refresh(self) -> None:
        """Look again, in a worker: probing local ports and NVML takes a moment."""
        from specdeck.core.discovery import discover

        self.status.setText("Looking…")
        self.status.show()
        self.tasks.run("demo-hint", demo_hint_text, on_result=self._show_demo_hint,
                       on_error=lambda _error: None)  # the hint stays without its last line
        self.tasks.run("discover", self._discover or discover, on_result=self._show,
                       on_error=lambda exc: self.status.setText(f"Could not look: {exc}"))

    def _show_demo_hint(self, hint: tuple[str, str]) -> None:
        text, tooltip = hint
        self.demo_hint.setText(text)
        self.demo_hint.setToolTip(tooltip)

    def shutdown(self) -> None:
        self.tasks.close()

    def _show(self, findings) -> None:
        for label, step, button in self.rows:
            for widget in (label, step, button):
                if widget is not None:
                    widget.deleteLater()
        for button in self.tune_buttons:
            button.deleteLater()
        self.rows, self.tune_buttons = [], []
        self.status.setText("")
        self.status.hide()
        for row, finding in enumerate(findings, start=1):
            mark = "✔" if finding.found else "–"
            # Plain text: escaped text in an auto-format label was shown as "&#x27;".
            label = QLabel(f"{mark} {finding.what}")
            label.setTextFormat(Qt.TextFormat.PlainText)
            label.setWordWrap(True)
            step = QLabel(finding.next_step)
            step.setTextFormat(Qt.TextFormat.PlainText)
            step.setProperty("role", "hint")
            step.setWordWrap(True)
            button = None
            if finding.page:
                button = QPushButton("Go")
                button.clicked.connect(lambda _=False, f=finding: self.context.page_requested.emit(
                    f.page, f.detail))
            self.findings.addWidget(label, row, 0)
            self.findings.addWidget(step, row, 1)
            if button is not None:
                self.findings.addWidget(button, row, 2)
            if finding.tune:
                tune = QPushButton("Tune…")
                tune.setToolTip("Open the Tune page with this setup filled in")
                tune.clicked.connect(lambda _=False, f=finding: self.context.page_requested.emit(
                    "tune", f.tune))
                self.findings.addWidget(tune, row, 3)
                self.tune_buttons.append(tune)
            self.rows.append((label, step, button))
        self.findings.setColumnStretch(0, 3)
        self.findings.setColumnStretch(1, 3)
