"""The A/B page's plan form: engine, target, drafters, prompts and sizes, or the server arms.

``plan()`` is the plan the controls describe; ``set_plan(plan)`` shows a plan in them. Every
tool, benchmark, test and the page's own requests drive the form this way, never widget by
widget. The two round-trip exactly: after ``form.set_plan(p)``, ``form.plan() == p`` for any
plan the controls can express, and ``set_plan`` refuses any other plan (a suite file, a
sampled plan, arms the drafter controls cannot make, ...) with what the form cannot hold,
leaving the form as it was.

The mapping between controls and plans is :class:`FormChoices` and two plain functions
(``plan_from_choices``, ``choices_from_plan``); the widget only reads and shows choices.

Prompts: the built-in suites are toggle buttons; Spec-Bench is one choice beside them (the
whole shipped benchmark, one shipped category, or the user's own Spec-Bench question.jsonl,
read by core's ``spec_bench_suite`` as ``--suite`` reads it), last in the plan's suites. Its
categories that are not shipped are listed, disabled, with core's reason.

Server arms are kept between sessions in plan.json's own arm format (``core.bench.plan``'s
``arm_to_json``); the older format (a ServerArm's JSON with the arm's name) is still read,
and written over in the new one.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass, replace
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QToolButton,
    QWidget,
)
from specdeck.core.bench.fields import DEFAULT_KS, PLAN_FIELDS, QUICK_SUITES
from specdeck.core.bench.plan import Arm, BenchPlan, default_arms
from specdeck.core.engines import SERVER_ENGINE, SERVER_MODEL
from specdeck.core.engines.base import DrafterKind
from specdeck.core.engines.demo import DEMO_ALIAS
from specdeck.core.errors import InvalidInputError, SpecDeckError
from specdeck.core.forms import form_field
from specdeck.gui import form_settings
from specdeck.gui.widgets.server_arms_dialog import LaunchSettings

log = logging.getLogger(__name__)

SETTINGS_PREFIX = "bench/"
ARMS_KEY = SETTINGS_PREFIX + "arms"
"""The edited server arms, as a JSON list of plan.json arms (FormChoices.server_arms)."""
LEGACY_ARMS_KEY = SETTINGS_PREFIX + "server_arms"
"""Before: a JSON list of ServerArm JSON, each with the arm's name (read, then removed)."""
DEFAULT_SUITES = QUICK_SUITES
QUESTION_FILE = "?question-file"
"""The Spec-Bench choice's item that asks for the user's question.jsonl."""
SERVERS_TIP = ("One arm per server, comma-separated: [NAME=]URL[#MODEL]. The first is the "
               "no-draft reference. API keys come from SPECDECK_SERVER_API_KEY or the keyring. "
               "Arms… for servers SpecDeck starts (llama-server, TabbyAPI) and per-arm key "
               "variables.")


def _plan_range(name: str) -> dict:
    """A plan field's range (core.bench.fields: the CLI's and plan.json's)."""
    return {"low": PLAN_FIELDS[name].low, "high": PLAN_FIELDS[name].high}


def _arms_text(arms) -> str:
    return "" if arms is None else arms_to_settings(arms)


def _arms_read(text: str):
    return arms_from_settings(text) if text else None


def _older_suites(saved: dict) -> str | None:
    """Before, each built-in suite was kept as its own tick (``suite_NAME``) and the Spec-Bench
    choice as ``spec_bench``: the suites as they are kept now (the form puts them in its
    order)."""
    ticked = [name[len("suite_"):] for name, on in saved.items()
              if name.startswith("suite_") and on in (True, "true")]
    spec_bench = saved.get("spec_bench")
    if not ticked and not spec_bench:
        return None
    return json.dumps(ticked + ([spec_bench] if isinstance(spec_bench, str) and spec_bench
                                else []))


def _launch_read(text: str) -> LaunchSettings:
    return LaunchSettings(**json.loads(text or "{}"))


@dataclass(frozen=True)
class FormChoices:
    """What the controls hold, whether or not it makes a plan. Its field table (core.forms)
    is how the page keeps it between sessions (gui.form_settings): every field, under the
    names the page has always used."""

    engine: str = form_field("torch")
    model: str = form_field(DEMO_ALIAS)
    use_draft: bool = form_field(False)
    draft: str = form_field("")
    ngram: bool = form_field(True, key="use_ngram")
    k: int = form_field(PLAN_FIELDS["k"].quick, **_plan_range("k"))
    adaptive: bool = form_field(True)
    sweep: bool = form_field(False)
    suites: tuple[str, ...] = form_field(DEFAULT_SUITES, older=(_older_suites,))
    """The ticked built-in suites in their order, then the Spec-Bench choice (if any)."""
    per_suite: int = form_field(1, low=1)
    max_new_tokens: int = form_field(PLAN_FIELDS["max_new_tokens"].quick, key="max_new",
                                     **_plan_range("max_new_tokens"))
    repeats: int = form_field(PLAN_FIELDS["repeats"].quick, **_plan_range("repeats"))
    warmup: int = form_field(PLAN_FIELDS["warmup"].quick, **_plan_range("warmup"))
    servers: str = form_field("")
    """The one-line server list ([NAME=]URL[#MODEL], ...)."""
    server_arms: tuple[Arm, ...] | None = form_field(None, key="arms", older=("server_arms",),
                                                      to_text=_arms_text, from_text=_arms_read)
    """Arms from the Arms dialog that the line cannot express (servers SpecDeck starts, key
    variables, an LM Studio draft); None: the line is the list. Kept in plan.json's own arm
    format (``arms_to_settings``)."""
    one_at_a_time: bool = form_field(False)
    launch: LaunchSettings = form_field(LaunchSettings(), to_text=lambda s: json.dumps(asdict(s)),
                                        from_text=_launch_read)
    """What every launched arm shares (the Arms dialog's binary, GGUF, flags, TabbyAPI)."""

    @property
    def serving(self) -> bool:
        return self.engine == SERVER_ENGINE


# choices <-> plans (no Qt) ---------------------------------------------------------------
def parse_server_line(text: str) -> tuple[Arm, ...]:
    from specdeck.core.servers.arms import arms_from_urls

    return arms_from_urls(re.split(r"[,\s]+", text.strip()))


def server_line(arms) -> str | None:
    """The one-line list that makes exactly ``arms``; None when the line cannot hold them."""
    from specdeck.core.bench.plan import arm_letter

    if any(a.server is None or a.server.url is None for a in arms):
        return None
    # A name is written only where it is not the one the line would give (A, B, C, ...).
    text = ", ".join(("" if a.name == arm_letter(i) else f"{a.name}=") + a.server.url
                     + (f"#{a.server.model}" if a.server.model else "")
                     for i, a in enumerate(arms))
    try:
        return text if parse_server_line(text) == tuple(arms) else None
    except SpecDeckError:
        return None


def server_arms(choices: FormChoices) -> tuple[Arm, ...]:
    if choices.server_arms is not None:
        return choices.server_arms
    return parse_server_line(choices.servers)


def local_arms(choices: FormChoices) -> tuple[Arm, ...]:
    """A (no draft), then the ticked drafters with one k; a sweep: every k of each."""
    draft = choices.draft.strip() if choices.use_draft else None
    arms = default_arms(draft or None, choices.ngram, choices.k, choices.adaptive)
    if choices.sweep and len(arms) > 1:
        from specdeck.core.bench.sweep import sweep_arms

        return sweep_arms([a.drafter for a in arms[1:]])
    return arms


def preview_arms(choices: FormChoices) -> tuple[Arm, ...]:
    """The arms to show panes for while the form is edited (never raises)."""
    try:
        arms = server_arms(choices) if choices.serving else local_arms(choices)
    except SpecDeckError:
        arms = () if choices.serving else local_arms(replace(choices, use_draft=False))
    return arms or (Arm("A"),)


def prompt_ids(names, per_suite: int, suites=None) -> tuple[str, ...]:
    from specdeck.core.bench.suites import first_prompts

    return tuple(p.id for p in first_prompts(names, per_suite, suites))


def plan_from_choices(choices: FormChoices, suites=None, comparison: bool = True) -> BenchPlan:
    """The plan ``choices`` describe; SpecDeckError when they describe none. ``suites``: the
    built-in suites by name (read when not given). ``comparison``: also refuse a plan with
    nothing beside the reference (what Start needs; a plan being shown may have the reference
    alone)."""
    if not choices.suites:
        raise InvalidInputError("No prompt suite is selected.", "Tick at least one suite.")
    sizes = dict(suites=choices.suites,
                 prompt_ids=prompt_ids(choices.suites, choices.per_suite, suites),
                 max_new_tokens=choices.max_new_tokens, repeats=choices.repeats,
                 warmup=choices.warmup)
    if choices.serving:
        arms = server_arms(choices)
        if not arms:
            raise InvalidInputError("No server is given.", "Type the reference server's URL, "
                                    "then the drafting server(s), separated by commas.")
        plan = BenchPlan(engine=SERVER_ENGINE, model=SERVER_MODEL, arms=arms,
                         one_server_at_a_time=choices.one_at_a_time, **sizes)
        if comparison:
            plan.require_comparison("Give the reference server first, then the drafting "
                                    "server(s), separated by commas.")
        return plan
    if choices.use_draft and not choices.draft.strip():
        raise InvalidInputError("Draft model is ticked but no folder is given.",
                                "Choose the draft model's folder, or untick Draft model.")
    plan = BenchPlan(engine=choices.engine, model=choices.model.strip() or DEMO_ALIAS,
                     arms=local_arms(choices), **sizes)
    if comparison:
        plan.require_comparison("Tick Draft model and/or N-gram.")
    return plan


_PAGE_FIELDS = ("engine", "model", "arms", "suites", "prompt_ids", "max_new_tokens", "repeats",
                "warmup", "one_server_at_a_time")
"""What the form sets; every other field of a plan it shows must be BenchPlan's default."""


def choices_from_plan(plan: BenchPlan, current: FormChoices, engines, suites,
                      read: dict | None = None,
                      unreadable: dict[str, BaseException] | None = None) -> FormChoices:
    """The choices that make exactly ``plan`` (what the plan leaves open, such as k in a sweep
    or a draft folder not ticked, stays as ``current`` has it); SpecDeckError saying what the
    form cannot hold otherwise. ``engines``: the engine names the form offers; ``suites``:
    the built-in suites by name; ``read``: the Spec-Bench choices read already, by name (a
    shipped one read here is added to it); ``unreadable``: the question files that could
    not be read, with why."""
    cannot = []
    defaults = BenchPlan(arms=plan.arms, suites=plan.suites)
    others = [name for name in BenchPlan.__dataclass_fields__
              if name not in _PAGE_FIELDS and getattr(plan, name) != getattr(defaults, name)]
    if others:
        cannot.append(f"its {', '.join(others)} (the page runs every plan with the defaults)")
    if plan.engine not in engines:
        cannot.append(f"the engine {plan.engine!r} (it offers {', '.join(engines)})")
    ticked = [s for s in plan.suites if s in suites]
    unknown = [s for s in plan.suites if s not in suites]
    read = {} if read is None else read
    suites_ok = True
    if len(unknown) > 1 or (unknown and plan.suites[-1] != unknown[0]):
        cannot.append(f"the suite(s) {', '.join(unknown)} (it ticks built-in suites and one "
                      "Spec-Bench choice, after them)")
        suites_ok = False
    elif unknown and unknown[0] not in read:
        error = (unreadable or {}).get(unknown[0])
        if error is None:
            from specdeck.core.bench.suites import spec_bench_suite

            try:  # the form hands a user's question file read already (see set_plan)
                read[unknown[0]] = spec_bench_suite(unknown[0])
            except SpecDeckError as exc:
                error = exc
        if error is not None:
            cannot.append(f"the suite {unknown[0]} (it ticks built-in suites and Spec-Bench "
                          f"only: {error})")
            suites_ok = False
    order = [name for name in suites if name in ticked]
    if ticked != order:
        cannot.append(f"its suites in the order {', '.join(plan.suites)} (it takes them in its "
                      f"own order: {', '.join(order + unknown)})")
        suites_ok = False
    per_suite = None
    known = {**suites, **read}
    if suites_ok:
        most = max(len(known[s].prompts) for s in plan.suites)
        fitting = [n for n in range(1, most + 1)
                   if prompt_ids(plan.suites, n, known) == plan.prompt_ids]
        per_suite = current.per_suite if current.per_suite in fitting else min(fitting, default=None)
        if per_suite is None:
            cannot.append("its prompts (the page runs the first N prompts of each suite, of "
                          "each category in Spec-Bench)")
    if cannot:
        raise InvalidInputError(f"The A/B page cannot show this plan: {'; '.join(cannot)}.",
                                "Run it from the command line: specdeck bench --plan plan.json.")
    choices = replace(current, engine=plan.engine, suites=tuple(plan.suites), per_suite=per_suite,
                      max_new_tokens=plan.max_new_tokens, repeats=plan.repeats,
                      warmup=plan.warmup, one_at_a_time=plan.one_server_at_a_time)
    if plan.engine == SERVER_ENGINE:
        line = server_line(plan.arms)
        choices = replace(choices, servers=line if line is not None else current.servers,
                          server_arms=None if line is not None else tuple(plan.arms))
    else:
        drafted = [a.drafter for a in plan.arms[1:]]
        models = [d.model_path for d in drafted if d.kind is DrafterKind.MODEL]
        swept = any(a.name not in ("B", "C") for a in plan.arms[1:])  # default_arms' names
        choices = replace(
            choices, model=plan.model, use_draft=bool(models),
            draft=str(models[0]) if models else current.draft,
            ngram=any(d.kind is DrafterKind.NGRAM for d in drafted), sweep=swept,
            k=drafted[0].num_draft_tokens if drafted and not swept else current.k,
            adaptive=drafted[0].adaptive if drafted and not swept else current.adaptive)
    try:
        made = plan_from_choices(choices, known, comparison=False)
    except SpecDeckError as exc:
        made = exc
    if made != plan:
        if isinstance(made, SpecDeckError):
            what = str(made)
        else:
            differ = [name for name in _PAGE_FIELDS if getattr(made, name) != getattr(plan, name)]
            parts = [f"its {name}" for name in differ if name != "arms"]
            if "arms" in differ:
                parts.append("its arms (the page makes A without a draft, then a draft model "
                             "and/or n-gram drafting with one k, or a sweep of k; or one arm "
                             "per server)")
            what = "; ".join(parts)
        raise InvalidInputError(f"The A/B page cannot show this plan: {what}.",
                                "Run it from the command line: specdeck bench --plan plan.json.")
    return choices


def arms_from_settings(text: str) -> tuple[Arm, ...]:
    """Saved server arms: plan.json arms (``arm_to_json``), or the older format."""
    from specdeck.core.bench.plan import arm_from_json

    items = json.loads(text)
    if not isinstance(items, list):
        raise ValueError("not a list of arms")
    if all(isinstance(i, dict) and "drafter" in i for i in items):
        return tuple(arm_from_json(item) for item in items)
    return _legacy_arms(items)


def arms_to_settings(arms) -> str:
    """Arms as plan.json holds them: URLs without passwords, key variable names, never keys."""
    from specdeck.core.bench.plan import arm_to_json

    return json.dumps([arm_to_json(a) for a in arms])


def _legacy_arms(items) -> tuple[Arm, ...]:
    """Arms saved before they were kept as plan.json arms: ServerArm JSON with the arm's name;
    the first is the reference, launched arms draft as their flags say."""
    from specdeck.core.engines.base import NO_DRAFT, DrafterSpec
    from specdeck.core.servers.arms import ServerArm
    from specdeck.core.servers.llama_server import drafter_from_flags

    arms = []
    for item in items:
        server = ServerArm.from_json(item)
        if server.launch is not None:
            drafter = drafter_from_flags(tuple(server.launch.args))
        else:
            drafter = NO_DRAFT if not arms else DrafterSpec(DrafterKind.SERVER, adaptive=False)
        arms.append(Arm(str(item["name"]), drafter, server))
    return tuple(arms)


# the widget --------------------------------------------------------------------------------
class BenchForm(QWidget):
    """The plan controls, one group per row (they fit 1280 px screens and grow downwards)."""

    arms_changed = Signal()
    """The arms the controls describe may have changed (the page redraws its panes)."""
    refused = Signal(object)
    """A choice the form could not take (a file that is not Spec-Bench's question.jsonl, a
    plan it cannot show once its question file was read): the SpecDeckError, for the page's
    banner."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        from specdeck.core.bench.suites import builtin_suites
        from specdeck.core.engines import engine_label, engine_names
        from specdeck.gui.widgets.server_arms_dialog import LaunchSettings
        from specdeck.gui.workers import Tasks

        self.tasks = Tasks(self)
        """Probing servers ("probe"); reading a Spec-Bench choice ("spec-bench"): files are
        read in a worker, never on the GUI thread."""
        self._suites = builtin_suites()
        self._read: dict[str, Any] = {}
        """The Spec-Bench choices read so far (a shipped one, the user's question file), by
        name: what the form counts and plans with, without reading again."""
        self._server_arms: tuple[Arm, ...] | None = None
        self._launch_settings = LaunchSettings()
        self._one_at_a_time = False
        self._editable = True
        self.arms_dialog = None

        self.engine = QComboBox()
        for name in engine_names():
            self.engine.addItem(engine_label(name), name)
        self.model = QComboBox()
        self.model.setEditable(True)
        self.model.addItem(DEMO_ALIAS)
        self.model.setToolTip('A model folder, or "demo" for the embedded SmolLM2-135M demo model')
        self.model.setMinimumWidth(150)
        browse_model = QToolButton()
        browse_model.setText("…")
        browse_model.clicked.connect(lambda: self._browse(self.model.lineEdit()))
        self.servers = QLineEdit()
        self.servers.setPlaceholderText("http://127.0.0.1:8080, B=http://127.0.0.1:8081")
        self.servers.setToolTip(SERVERS_TIP)
        self.probe_button = QToolButton()
        self.probe_button.setText("Probe")
        self.probe_button.setToolTip("Ask each server what it is, what it has loaded and whether "
                                     "it drafts")
        self.probe_button.clicked.connect(self.probe_servers)
        self.arms_button = QToolButton()
        self.arms_button.setText("Arms…")
        self.arms_button.setToolTip("Edit the arms one per row: running servers (URL, model, key "
                                    "variable) or llama-servers SpecDeck launches (their flags)")
        self.arms_button.clicked.connect(self.edit_server_arms)
        self.server_info = QLabel()
        self.server_info.setProperty("role", "hint")
        self.server_info.setWordWrap(True)
        self.use_draft = QCheckBox("Draft model")
        self.draft = QLineEdit()
        self.draft.setPlaceholderText('draft model folder, or "demo"')
        self.draft.setToolTip('A draft model folder, or "demo": the embedded SmolLM2-135M drafts for '
                              "a larger SmolLM2 target")
        browse_draft = QToolButton()
        browse_draft.setText("…")
        browse_draft.clicked.connect(lambda: self._browse(self.draft))
        self.use_ngram = QCheckBox("N-gram")
        self.use_ngram.setChecked(True)
        self.k = _spin("k", "k = ", "")
        self.adaptive = QCheckBox("adaptive")
        self.adaptive.setToolTip("Draft fewer tokens after rejections (PyTorch engine only)")
        self.adaptive.setChecked(True)
        low, high = DEFAULT_KS[0], DEFAULT_KS[-1]
        self.sweep = QCheckBox(f"sweep k {low}–{high}")
        self.sweep.setToolTip(f"Run every k from {low} to {high} (exactly k drafts per step) for "
                              "each ticked drafter, interleaved per prompt, then apply the best")
        self.sweep.toggled.connect(self._sync_k)

        self.suite_buttons: dict[str, QToolButton] = {}
        suites_row = QHBoxLayout()
        for name, suite in self._suites.items():
            button = QToolButton()
            button.setText(name)
            button.setCheckable(True)
            button.setToolTip(suite.description)
            button.setChecked(name in DEFAULT_SUITES)
            self.suite_buttons[name] = button
            suites_row.addWidget(button)
        self.spec_bench = _spec_bench_choice()
        self.spec_bench.activated.connect(self._spec_bench_activated)
        self.spec_bench.currentIndexChanged.connect(self._sync_per_suite)
        self._spec_bench_index = 0
        """The choice before the question-file item was picked (restored if none is taken)."""
        suites_row.addWidget(self.spec_bench)
        suites_row.addStretch(1)
        self.per_suite = QSpinBox()
        self._builtin_most = max(len(s.prompts) for s in self._suites.values())
        self.per_suite.setRange(1, self._builtin_most)
        self.per_suite.setSuffix(" per suite")
        self.per_suite.setToolTip("The first N prompts of each ticked suite (of each category "
                                  "in Spec-Bench)")
        self.max_new = _spin("max_new_tokens", "", " new tokens")
        self.repeats = _spin("repeats", "× ", "")
        self.warmup = _spin("warmup", "warm-up ", "")

        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.addWidget(QLabel("Engine"), 0, 0)
        top = QHBoxLayout()
        top.addWidget(self.engine)
        self.target_label = QLabel("Target")
        top.addWidget(self.target_label)
        top.addWidget(self.model, 1)
        top.addWidget(browse_model)
        top.addWidget(self.servers, 1)
        top.addWidget(self.probe_button)
        top.addWidget(self.arms_button)
        grid.addLayout(top, 0, 1)
        draft_row = QHBoxLayout()
        for widget in (self.use_draft, self.draft, browse_draft, self.use_ngram, self.k,
                       self.adaptive, self.sweep, self.server_info):
            draft_row.addWidget(widget, 1 if widget in (self.draft, self.server_info) else 0)
        self._local_only = [self.model, browse_model, browse_draft, self.use_draft, self.draft,
                            self.use_ngram, self.k, self.adaptive, self.sweep]
        self.drafters_label = QLabel("Drafters")
        grid.addWidget(self.drafters_label, 1, 0)
        grid.addLayout(draft_row, 1, 1)
        grid.addWidget(QLabel("Prompts"), 2, 0)
        grid.addLayout(suites_row, 2, 1)
        self.size_row = QHBoxLayout()
        """Prompts per suite, tokens, repeats, warm-up; the page adds Start and Stop."""
        for widget in (self.per_suite, self.max_new, self.repeats, self.warmup):
            self.size_row.addWidget(widget)
        self.size_row.addStretch(1)
        grid.addWidget(QLabel("Size"), 3, 0)
        grid.addLayout(self.size_row, 3, 1)
        grid.setColumnStretch(1, 1)

        for signal in (self.use_draft.toggled, self.use_ngram.toggled, self.draft.textChanged,
                       self.k.valueChanged, self.adaptive.toggled, self.sweep.toggled,
                       self.servers.textChanged):
            signal.connect(self.arms_changed)
        self.engine.currentIndexChanged.connect(self._sync_engine)
        self._show_engine_controls()

    # plans -----------------------------------------------------------------------------
    def _known(self) -> dict[str, Any]:
        """Every suite the form has read: the built-ins and the Spec-Bench choices."""
        return {**self._suites, **self._read}

    def plan(self) -> BenchPlan:
        """The plan the controls describe; SpecDeckError (worded for the page) when none."""
        return plan_from_choices(self.choices(), self._known())

    def set_plan(self, plan: BenchPlan) -> bool:
        """Show ``plan`` in the controls, so that ``plan()`` returns it; SpecDeckError, and
        nothing changed, when the form cannot express it. True when shown at once; False
        when it names a question file of the user's not read yet: that is read in a worker,
        then the plan shown, or ``refused`` emitted with what the form cannot hold."""
        from specdeck.core.bench.suites import spec_bench_suite

        file = next((s for s in plan.suites if s not in self._suites and s not in self._read
                     and _is_file_item(s)), None)
        if file is None:
            self._show(self._choices_from(plan))
            return True

        def read(suite) -> None:
            self._read[file] = suite
            self._show_read(plan)

        self.tasks.run("spec-bench", spec_bench_suite, file, on_result=read,
                       on_error=lambda error: self._show_read(plan, {file: error}))
        return False

    def _choices_from(self, plan: BenchPlan, unreadable=None) -> FormChoices:
        engines = [self.engine.itemData(i) for i in range(self.engine.count())]
        return choices_from_plan(plan, self.choices(), engines, self._suites, self._read,
                                 unreadable)

    def _show_read(self, plan: BenchPlan, unreadable=None) -> None:
        """``plan``, its question file read (or found unreadable)."""
        try:
            self._show(self._choices_from(plan, unreadable))
        except SpecDeckError as exc:
            self.refused.emit(exc)

    def choices(self) -> FormChoices:
        return FormChoices(
            engine=self.engine.currentData(), model=self.model.currentText(),
            use_draft=self.use_draft.isChecked(), draft=self.draft.text(),
            ngram=self.use_ngram.isChecked(), k=self.k.value(),
            adaptive=self.adaptive.isChecked(), sweep=self.sweep.isChecked(),
            suites=tuple(n for n, b in self.suite_buttons.items() if b.isChecked())
            + tuple(n for n in (self._spec_bench_name(),) if n),
            per_suite=self.per_suite.value(), max_new_tokens=self.max_new.value(),
            repeats=self.repeats.value(), warmup=self.warmup.value(),
            servers=self.servers.text(), server_arms=self._server_arms,
            one_at_a_time=self._one_at_a_time, launch=self._launch_settings)

    def _show(self, choices: FormChoices) -> None:
        self.blockSignals(True)  # one arms_changed at the end, not one per control
        try:
            self.engine.setCurrentIndex(self.engine.findData(choices.engine))
            self.model.setEditText(choices.model)
            self.use_draft.setChecked(choices.use_draft)
            self.draft.setText(choices.draft)
            self.use_ngram.setChecked(choices.ngram)
            self.k.setValue(choices.k)
            self.adaptive.setChecked(choices.adaptive)
            self.sweep.setChecked(choices.sweep)
            for name, button in self.suite_buttons.items():
                button.setChecked(name in choices.suites)
            self._show_spec_bench(next((n for n in choices.suites
                                        if n not in self.suite_buttons), ""))
            self.per_suite.setValue(choices.per_suite)
            self.max_new.setValue(choices.max_new_tokens)
            self.repeats.setValue(choices.repeats)
            self.warmup.setValue(choices.warmup)
            self._one_at_a_time = choices.one_at_a_time
            self._launch_settings = choices.launch
            if choices.server_arms is not None:
                self._set_server_arms(choices.server_arms)
            else:
                self._set_server_arms(None, choices.servers)
        finally:
            self.blockSignals(False)
        self.arms_changed.emit()

    def preview_arms(self) -> tuple[Arm, ...]:
        return preview_arms(self.choices())

    def serving(self) -> bool:
        return self.engine.currentData() == SERVER_ENGINE

    def set_editable(self, editable: bool) -> None:
        """Off while a plan runs."""
        for widget in (self.engine, self.model, self.use_draft, self.draft, self.use_ngram,
                       self.sweep, self.per_suite, self.max_new, self.repeats, self.warmup,
                       self.servers, self.probe_button, self.spec_bench,
                       *self.suite_buttons.values()):
            widget.setEnabled(editable)
        self._editable = editable
        self._sync_k()

    def _sync_k(self) -> None:
        on = self._editable and not self.sweep.isChecked()
        for widget in (self.k, self.adaptive):
            widget.setEnabled(on)

    # Spec-Bench ------------------------------------------------------------------------
    def _spec_bench_name(self) -> str:
        """The Spec-Bench suite chosen: "", a suite name or a question file's path."""
        name = self.spec_bench.currentData()
        return "" if name == QUESTION_FILE else name

    def _show_spec_bench(self, name: str) -> None:
        """Select the Spec-Bench choice ``name`` ("" none; a question file gets its item)."""
        index = self.spec_bench.findData(name)
        if index < 0:
            index = self._question_file_item(name)
        self.spec_bench.setCurrentIndex(index)
        self._spec_bench_index = index

    def _question_file_item(self, path: str) -> int:
        """The index of the item for the question file ``path`` (the one such item, renamed)."""
        from pathlib import Path

        index = self.spec_bench.findData(QUESTION_FILE) - 1
        if not _is_file_item(self.spec_bench.itemData(index)):
            index += 1
            self.spec_bench.insertItem(index, "")
        self.spec_bench.setItemText(index, f"Spec-Bench: {Path(path).name} (every category)")
        self.spec_bench.setItemData(index, path)
        self.spec_bench.setItemData(index, f"{path}: Spec-Bench's own question file, read as "
                                    "specdeck bench --suite FILE reads it",
                                    Qt.ItemDataRole.ToolTipRole)
        return index

    def set_question_file(self, path: str) -> None:
        """Choose the user's Spec-Bench question.jsonl, read and checked in a worker as
        ``--suite`` reads it: shown once read; when it is not one, ``refused`` is emitted and
        the choice stays as it was."""
        from specdeck.core.bench.suites import spec_bench_suite

        def read(suite) -> None:
            self._read[path] = suite
            self._show_spec_bench(path)
            self._sync_per_suite()

        def refused(error: BaseException) -> None:
            self.spec_bench.setCurrentIndex(self._spec_bench_index)
            self.refused.emit(error)

        self.spec_bench.setCurrentIndex(self._spec_bench_index)  # until it is read
        self.tasks.run("spec-bench", spec_bench_suite, path, on_result=read, on_error=refused)

    def _spec_bench_activated(self, index: int) -> None:
        if self.spec_bench.itemData(index) != QUESTION_FILE:
            self._spec_bench_index = index
            return
        path, _ = QFileDialog.getOpenFileName(
            self, "Spec-Bench's question.jsonl (data/spec_bench/question.jsonl)", "",
            "Spec-Bench questions (*.jsonl);;All files (*)")
        if not path:
            self.spec_bench.setCurrentIndex(self._spec_bench_index)
        else:
            self.set_question_file(path)

    def _sync_per_suite(self, *_args) -> None:
        """Prompts per suite reach every prompt of the largest suite chosen (Spec-Bench's
        categories hold 80)."""
        from specdeck.core.bench.suites import spec_bench_suite

        name = self._spec_bench_name()
        most = self._builtin_most
        if name and name not in self._read and not _is_file_item(name):
            try:  # shipped with SpecDeck, read as the built-in suites are
                self._read[name] = spec_bench_suite(name)
            except SpecDeckError:
                pass
        if name in self._read:
            most = max(most, len(self._read[name].prompts))
        elif name and _is_file_item(name):  # the user's file: read in a worker, then counted
            def read(suite, name=name) -> None:
                self._read[name] = suite
                self._sync_per_suite()

            self.tasks.run("spec-bench", spec_bench_suite, name, on_result=read,
                           on_error=lambda _error: None)  # said when it is planned
        self.per_suite.setMaximum(most)

    # engine ----------------------------------------------------------------------------
    def _sync_engine(self, *_args) -> None:
        self._show_engine_controls()
        self.arms_changed.emit()

    def _show_engine_controls(self) -> None:
        """Local engines: a target and drafters. Servers: one URL per arm (their drafting is
        whatever each server was started with)."""
        serving = self.serving()
        for widget in self._local_only:
            widget.setVisible(not serving)
        for widget in (self.servers, self.probe_button, self.arms_button, self.server_info):
            widget.setVisible(serving)
        self.target_label.setText("Servers" if serving else "Target")
        self.drafters_label.setText("Found" if serving else "Drafters")
        if serving and not self.server_info.text():
            self.server_info.setText("Probe to see what each server is and whether it drafts.")

    def _browse(self, line: QLineEdit) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose a model folder", line.text())
        if folder:
            line.setText(folder)

    # server arms -----------------------------------------------------------------------
    def _set_server_arms(self, arms, line: str | None = None) -> None:
        """Show ``arms`` in the one-line list when it can hold them, else as a summary (and
        keep them); ``arms`` None: the list is ``line``."""
        if arms is not None:
            line = server_line(arms)
        self._server_arms = None if line is not None else tuple(arms)
        self.servers.setReadOnly(line is None)
        if line is not None:
            self.servers.setText(line)
            self.servers.setToolTip(SERVERS_TIP)
        else:
            self.servers.setText(" · ".join(f"{a.name}: {a.server.where}" for a in arms))
            self.servers.setToolTip("Set in Arms… (servers SpecDeck starts or key variables "
                                    "do not fit on one line); edit them there.")
        self.arms_changed.emit()

    def add_server(self, url: str) -> None:
        """Switch to server arms and add ``url`` as the next arm (unless it is one already)."""
        from specdeck.core.bench.plan import arm_letter
        from specdeck.core.servers.arms import url_arm

        self.engine.setCurrentIndex(self.engine.findData(SERVER_ENGINE))
        if self._server_arms is not None:
            if all(a.server.url != url for a in self._server_arms):
                arm = url_arm(arm_letter(len(self._server_arms)), url)
                self._set_server_arms((*self._server_arms, arm))
        elif url not in self.servers.text():
            self.servers.setText(", ".join(t for t in (self.servers.text().strip(), url) if t))

    def edit_server_arms(self) -> None:
        from specdeck.gui.widgets.server_arms_dialog import ServerArmsDialog

        try:
            arms = server_arms(self.choices())
        except SpecDeckError:
            arms = ()
        dialog = ServerArmsDialog(arms, self._launch_settings, self._one_at_a_time, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self._take_arms(dialog))
        self.arms_dialog = dialog
        dialog.open()

    def _take_arms(self, dialog) -> None:
        self._launch_settings = dialog.launch_settings()
        self._one_at_a_time = dialog.one_at_a_time.isChecked()
        self._set_server_arms(dialog.arms())

    def probe_servers(self) -> None:
        import html

        try:
            arms = server_arms(self.choices())
        except SpecDeckError as exc:
            self.server_info.setText(html.escape(str(exc)))
            return
        self.server_info.setText("Probing…")
        self.tasks.run("probe", _probe_arms, arms, on_result=self._show_probes,
                       on_error=lambda exc: self.server_info.setText(html.escape(str(exc))))

    def _show_probes(self, lines) -> None:
        self.server_info.setText(" · ".join(lines) or "No server given.")

    def shutdown(self) -> None:
        self.tasks.close()

    # settings --------------------------------------------------------------------------
    def save(self) -> None:
        """Keep the controls for the next session (gui.form_settings)."""
        form_settings.save(SETTINGS_PREFIX, self.choices())

    def restore(self) -> None:
        """Show the controls kept last session; what this form cannot show (an engine not
        installed, a suite not shipped, a question file since deleted) is its default."""
        saved = form_settings.restore(SETTINGS_PREFIX, FormChoices())
        if self.engine.findData(saved.engine) < 0:
            saved = replace(saved, engine=self.engine.currentData())
        spec_bench = [name for name in saved.suites if name not in self.suite_buttons and (
            self.spec_bench.findData(name) > 0 or _is_file_item(name))]
        suites = tuple(name for name in self.suite_buttons if name in saved.suites) + tuple(
            spec_bench[-1:])
        if saved.suites and not suites:  # none of them is this form's
            suites = FormChoices().suites
        self._show(replace(saved, suites=suites))
        self._show_engine_controls()
        self._sync_k()
        file = next((name for name in spec_bench[-1:] if _is_file_item(name)), None)
        if file is not None:  # shown now, read in a worker: gone or not Spec-Bench's, dropped
            from specdeck.core.bench.suites import spec_bench_suite

            def read(suite) -> None:
                self._read[file] = suite
                self._sync_per_suite()
                self.per_suite.setValue(saved.per_suite)

            def unreadable(_error: BaseException) -> None:
                if self._spec_bench_name() == file:
                    self._show_spec_bench("")
                    if not self.choices().suites:  # it was the only one: the defaults
                        for name, button in self.suite_buttons.items():
                            button.setChecked(name in FormChoices().suites)

            self.tasks.run("spec-bench", spec_bench_suite, file, on_result=read,
                           on_error=unreadable)


def _probe_arms(arms) -> list[str]:
    """Worker: one line per server arm (what it is, whether it drafts)."""
    from specdeck.core.servers.arms import describe

    return [describe(arm) for arm in arms]


def _spec_bench_choice() -> QComboBox:
    """Spec-Bench beside the built-in suites: none, the shipped categories together, each of
    its six categories in its table's order (those not shipped disabled, with core's reason),
    and the user's own question.jsonl."""
    from specdeck.core.bench.suites import SPEC_BENCH, spec_bench_categories

    combo = QComboBox()
    combo.addItem("No Spec-Bench", "")
    combo.addItem("Spec-Bench: shipped categories", SPEC_BENCH)
    combo.setItemData(1, "Spec-Bench (Xia et al., ACL Findings 2024): the categories SpecDeck "
                      "ships, the first N prompts of each", Qt.ItemDataRole.ToolTipRole)
    for category in spec_bench_categories():
        index = combo.count()
        if category.not_shipped:
            combo.addItem(f"    {category.label} (not shipped)", f"{SPEC_BENCH}/{category.name}")
            combo.model().item(index).setEnabled(False)
            combo.setItemData(index, f"Not shipped with SpecDeck: {category.not_shipped} Choose "
                              "Spec-Bench's own question.jsonl to run it.",
                              Qt.ItemDataRole.ToolTipRole)
        else:
            combo.addItem(f"    {category.label}", f"{SPEC_BENCH}/{category.name}")
            combo.setItemData(index, f"{category.dataset} ({category.license})",
                              Qt.ItemDataRole.ToolTipRole)
    combo.addItem("Spec-Bench question.jsonl…", QUESTION_FILE)
    combo.setItemData(combo.count() - 1, "Your copy of Spec-Bench's data/spec_bench/"
                      "question.jsonl: all six categories", Qt.ItemDataRole.ToolTipRole)
    combo.setToolTip("Spec-Bench's prompts, tagged by its categories: the result gives a "
                     "speed-up per category")
    return combo


def _is_file_item(data) -> bool:
    """An item of the Spec-Bench choice that holds a question file's path."""
    from specdeck.core.bench.suites import SPEC_BENCH

    return (bool(data) and data not in (QUESTION_FILE, SPEC_BENCH)
            and not str(data).startswith(SPEC_BENCH + "/"))


def _spin(name: str, prefix: str, suffix: str) -> QSpinBox:
    """A spin box over one of the plan's fields: its range is the CLI's and plan.json's."""
    field = PLAN_FIELDS[name]
    spin = QSpinBox()
    spin.setRange(field.low, field.high)
    spin.setValue(field.quick)
    spin.setToolTip(field.describe())
    spin.setPrefix(prefix)
    spin.setSuffix(suffix)
    return spin
