"""llama-swap's macros: which declarations it accepts, and what a cmd says once they are
substituted, the way llama-swap substitutes them.

Followed from llama-swap's internal/config/macros.go (resolveConfigMacros, validateMacro,
mergeModelMacros, substituteMacroList, validateConfigMacroUses) and config.go (MacroList) at
commit 0bdb3720199f530b622a1934c0db89f32c94819c:

- the macros form one ordered list: ``MODEL_ID`` first, then the global macros in the order
  they are written, a model's own macro replacing a global of the same name *in its place*
  and the rest of the model's appended;
- each macro is substituted once, in every value, **last declared first**. A macro's value may
  therefore use macros declared before it, to any depth (a 20-level chain resolves in one
  pass), but a macro declared after it, or a cycle, stays as ``${name}`` text, and llama-swap
  then refuses the whole config ("unknown macro '${name}' found in <model>.cmd");
- ``${PORT}`` is substituted after the others, with the port llama-swap allocates, in models
  whose cmd uses it; ``${PID}`` only in ``cmdStop``; ``${env.NAME}`` from llama-swap's own
  environment before everything else. SpecDeck keeps ``${PORT}`` and ``${env.NAME}`` as
  written (it cannot know them), and reports ``${PID}`` in a cmd as llama-swap does;
- declarations are refused for a name of 64 characters or more, a name outside
  ``[a-zA-Z0-9_-]``, a reserved name (PID, PORT, MODEL_ID), a value that is not a string,
  number or bool, and a value that uses its own name.

llama-swap puts no bound on how large a cmd may grow (each macro can double it), so SpecDeck
bounds it: a cmd whose macros expand past :data:`MAX_CMD_CHARS` is reported, not expanded,
the way core.config.document refuses a YAML alias bomb.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from specdeck.core.printable import printable
from specdeck.core.units import MiB, format_bytes

NAME = re.compile(r"^[a-zA-Z0-9_-]+$")
USE = re.compile(r"\$\{([a-zA-Z0-9_-]+)\}")
"""A macro use (macros.go macroPatternRegex); ``${env.X}`` is not one."""
RESERVED = ("PID", "PORT", "MODEL_ID")
KEPT = ("PORT",)
"""Substituted by llama-swap when the model starts; kept as written in what SpecDeck shows."""
MAX_NAME = 63
SUBSTITUTION_COST = 4096
"""What one substitution costs a file's work budget besides the characters it builds: the
Python work around it (a file of thousands of chained macros is refused in about a second,
not read for minutes)."""
MAX_CMD_CHARS = 2 * MiB
"""The most one expanded cmd may hold: Linux refuses to start a command line over ARG_MAX
(2 MiB with the usual 8 MiB stack), so a larger cmd could never run anyway."""


@dataclass(frozen=True)
class Expansion:
    text: str
    """The value with its macros substituted (as far as they go)."""
    used: tuple[str, ...]
    problem: str | None = None
    """Why llama-swap would refuse this value, or why SpecDeck did not expand it."""
    too_large: bool = False


def go_text(value: Any) -> str:
    """A scalar macro value as llama-swap writes it into a string (Go's ``%v``): bools as
    true/false, floats in Go's shortest form (1e+06, 0.5, 100000)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _go_float(value)
    return str(value)


def _go_float(x: float) -> str:
    # strconv.FormatFloat(x, 'g', -1, 64): the shortest digits that read back as x, in
    # exponent form when the decimal exponent is < -4 or >= 6 (fmt's %v for float64).
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    sign, digits, exponent = Decimal(repr(x)).normalize().as_tuple()
    text = "".join(map(str, digits))
    point = len(digits) + exponent
    exp10 = point - 1
    minus = "-" if sign else ""
    if exp10 < -4 or exp10 >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{minus}{mantissa}e{'-' if exp10 < 0 else '+'}{abs(exp10):02d}"
    if point <= 0:
        return f"{minus}0.{'0' * -point}{text}"
    if point >= len(text):
        return minus + text + "0" * (point - len(text))
    return f"{minus}{text[:point]}.{text[point:]}"


def declaration_problem(name: Any, value: Any) -> str | None:
    """What llama-swap's validateMacro says of one declaration (None: accepted)."""
    name = str(name)
    shown = printable(name)
    if len(name) > MAX_NAME:
        return (f"macro name '{shown[:40]}...' is {len(name)} characters; llama-swap takes "
                f"at most {MAX_NAME}")
    if not NAME.match(name):
        hint = " (YAML merge keys are not read inside macros)" if name == "<<" else ""
        return (f"macro name '{shown}' has characters llama-swap refuses (it allows a-z, A-Z, "
                f"0-9, _ and -){hint}")
    if isinstance(value, str):
        if "${" + name + "}" in value:
            return f"macro '{name}' uses itself"
    elif value is None or not isinstance(value, (bool, int, float)):
        kind = "empty" if value is None else f"a {type(value).__name__}"
        return f"macro '{name}' is {kind}; llama-swap takes a string, number or bool"
    if name in RESERVED:
        return f"macro name '{name}' is reserved by llama-swap"
    return None


@dataclass(frozen=True)
class Declared:
    """One ``macros:`` mapping as llama-swap reads it."""

    macros: tuple[tuple[str, str], ...] = ()
    """(name, text) in the order written, the ones llama-swap accepts (and a self-using one,
    so that its uses show the loop)."""
    problems: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    """Names whose declarations are refused and left out."""


def declarations(value: Any, where: str = "") -> Declared:
    """A ``macros:`` mapping's values as llama-swap reads them (``where``: "model X: " for a
    model's own, to name it in the problems)."""
    if value is None:
        return Declared()
    if not isinstance(value, dict):
        return Declared(problems=(f"{where}macros must be a mapping of names to values",))
    usable, problems, refused = [], [], []
    for name, item in value.items():
        problem = declaration_problem(name, item)
        if problem is not None:
            problems.append(where + problem)
            self_use = isinstance(item, str) and NAME.match(str(name)) and \
                len(str(name)) <= MAX_NAME and str(name) not in RESERVED
            if not self_use:
                refused.append(str(name))
                continue  # a self-use stays: expanding it shows the loop where it is used
        usable.append((str(name), go_text(item)))
    return Declared(tuple(usable), tuple(problems), tuple(refused))


class Table:
    """One ``macros:`` list, indexed once: a file's global macros are shared by every model,
    so a model's scope costs only its own macros (a file of thousands of models and macros
    must not take minutes)."""

    def __init__(self, macros: Sequence[tuple[str, str]]):
        self.names = [n for n, _ in macros]
        self.texts = [t for _, t in macros]
        self.index = {n: i for i, n in enumerate(self.names)}
        self._users: dict[str, list[int]] | None = None

    def users(self, name: str) -> list[int]:
        """Positions of the macros whose text uses ``${name}``, in order."""
        if self._users is None:
            self._users = {}
            for i, text in enumerate(self.texts):
                for used in dict.fromkeys(USE.findall(text)):
                    self._users.setdefault(used, []).append(i)
        return self._users.get(name, [])


class Scope:
    """The macros llama-swap substitutes in one value (mergeModelMacros): ``MODEL_ID`` first
    (for a model), the global macros (only the first ``upto`` of them: a macro's own value
    sees those declared before it), a model's own macro replacing a global of the same name
    in its place, the model's other macros after."""

    def __init__(self, table: Table, own: Sequence[tuple[str, str]] = (),
                 model_id: str | None = None, upto: int | None = None):
        self.table = table
        self.upto = len(table.names) if upto is None else upto
        self.model_id = model_id
        self.own = dict(own)
        first = 1 if model_id is not None else 0
        self._first = first
        self._extra = {n: first + self.upto + k
                       for k, n in enumerate(n for n, _ in own if self._global(n) is None)}

    def _global(self, name: str) -> int | None:
        i = self.table.index.get(name)
        return i if i is not None and i < self.upto else None

    def position(self, name: str) -> int | None:
        """Where ``name`` is in the list llama-swap substitutes from (None: not in it)."""
        if name == "MODEL_ID" and self.model_id is not None:
            return 0
        i = self._global(name)
        return self._first + i if i is not None else self._extra.get(name)

    def text(self, name: str) -> str:
        if name == "MODEL_ID" and self.model_id is not None:
            return self.model_id
        return self.own[name] if name in self.own else self.table.texts[self.table.index[name]]

    def first_user_before(self, name: str, position: int) -> str | None:
        """The first macro declared before ``position`` whose value uses ``${name}``."""
        slug = "${" + name + "}"
        found = [(self.position(n), n) for n in self.own if slug in self.own[n]]
        found += [(self._first + i, self.table.names[i]) for i in self.table.users(name)
                  if i < self.upto and self.table.names[i] not in self.own]
        found = [(p, n) for p, n in found if p is not None and p < position]
        return min(found)[1] if found else None


class Budget:
    """Characters of expansion work one file may cost (each substitution builds a new string
    and is scanned once): a file whose macros need more is refused, never left running."""

    def __init__(self, chars: int):
        self.chars = chars

    def spend(self, chars: int) -> None:
        self.chars -= chars
        if self.chars < 0:
            raise TooTangled()


class TooTangled(Exception):
    """The file's macros take more work to expand than any config needs."""


def expand(value: str, macros: Scope | Sequence[tuple[str, str]], limit: int | None = None,
           refused: Sequence[str] = (), kept: Sequence[str] = (),
           budget: Budget | None = None) -> Expansion:
    """``value`` with ``macros`` substituted as llama-swap does (each once, last declared
    first), never growing past ``limit`` characters (MAX_CMD_CHARS); what it used; what is
    wrong. ``refused``: names whose declarations llama-swap refuses (not in ``macros``);
    ``kept``: names substituted later (besides PORT), not a problem when left; ``budget``:
    the file's expansion work so far (raises TooTangled when spent).

    Only the macros the value comes to use are visited, from the last declared down: a
    substitution can bring in uses of earlier macros (queued) or later ones (already passed,
    so left as written, as llama-swap leaves them)."""
    import heapq

    scope = macros if isinstance(macros, Scope) else Scope(Table(macros))
    limit = MAX_CMD_CHARS if limit is None else limit
    queued: set[int] = set()
    heap: list[tuple[int, str]] = []

    def queue(names, below: int | None) -> None:
        for name in names:
            at = scope.position(name)
            if at is not None and at not in queued and (below is None or at < below):
                queued.add(at)
                heapq.heappush(heap, (-at, name))

    queue(dict.fromkeys(USE.findall(value)), None)
    # A use can also form across a substitution's edges ("${" + a macro holding "name}"), but
    # only where a "${" is not already part of a whole use: then the value is scanned again
    # after each substitution; otherwise only the text each substitution brings in is.
    loose = _loose(value)
    used: list[tuple[int, str]] = []
    while heap:
        at, name = heapq.heappop(heap)
        at = -at
        text = scope.text(name)
        slug = "${" + name + "}"
        count = value.count(slug)
        if not count:
            continue
        size = len(value) + count * (len(text) - len(slug))
        if size > limit:
            used.append((at, name))
            return Expansion(value, _in_order(used), _too_large(limit), True)
        value = value.replace(slug, text)
        loose = loose or _loose(text)
        if budget is not None:
            budget.spend(len(value) * (2 if loose else 1) + len(text) + SUBSTITUTION_COST)
        used.append((at, name))
        queue(dict.fromkeys(USE.findall(value if loose else text)), at)
    left = [n for n in dict.fromkeys(USE.findall(value)) if n not in KEPT and n not in kept]
    problem = _unresolved(left[0], scope, refused) if left else None
    return Expansion(value, _in_order(used), problem)


def _loose(text: str) -> bool:
    """Whether ``text`` has a "${" that does not start a whole macro use."""
    return text.count("${") != len(USE.findall(text))


def _in_order(used: list[tuple[int, str]]) -> tuple[str, ...]:
    return tuple(n for _, n in sorted(used) if n not in RESERVED)


def _too_large(limit: int) -> str:
    return (f"its macros expand to more than {format_bytes(limit)} (each use of a macro that "
            "uses another multiplies it); no system could start such a command, so SpecDeck "
            "stopped expanding it")


def _unresolved(name: str, scope: Scope, refused: Sequence[str] = ()) -> str:
    """Why ``${name}`` is left after substitution, in llama-swap's terms."""
    refuses = f"llama-swap refuses this config (unknown macro '${{{name}}}')"
    if name in refused:
        return f"it uses macro {name}, whose declaration llama-swap refuses"
    position = scope.position(name)
    if position is None:
        if name == "PID":
            return "${PID} is only substituted in cmdStop; " + refuses
        return f"${{{name}}} is not a macro it declares; {refuses}"
    cycle = _cycle_through(name, scope)
    if cycle and len(cycle) == 2:
        return f"macro {name} uses itself; {refuses}"
    if cycle:
        return f"macros {' -> '.join(cycle)} use each other (a cycle); {refuses}"
    user = scope.first_user_before(name, position)
    if user is not None:
        return (f"macro {user} uses ${{{name}}}, which is declared after it; llama-swap "
                f"substitutes each macro once, last declared first, so {refuses}: "
                f"declare {name} before {user}")
    return f"${{{name}}} is left unresolved; {refuses}"


def _cycle_through(start: str, scope: Scope) -> list[str] | None:
    """A chain of macro uses from ``start`` back to itself, if there is one."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        name, path = stack.pop()
        for used in dict.fromkeys(USE.findall(scope.text(name))):
            if used == start:
                return [*path, start]
            if scope.position(used) is not None and used not in seen:
                seen.add(used)
                stack.append((used, [*path, used]))
    return None
