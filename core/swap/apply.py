"""Write an A/B winner's llama-server drafting flags into a llama-swap model's cmd.

The winner's drafting flags replace the model's own: a drafting flag the model has and the
winner does not is removed (a draft-model setting must not linger under an n-gram winner),
each of the winner's is set where it is written or added. No winner (nothing beat decoding
without a draft) removes the drafting flags. Flags set in macros are left alone and named.
"""

from __future__ import annotations

from specdeck.core.config.edit import ConfigChange
from specdeck.core.llama_flags import DRAFT_MODEL
from specdeck.core.printable import printable
from specdeck.core.servers.llama_server import drafting_flags
from specdeck.core.swap.cmd import canonical_argv
from specdeck.core.swap.config import SwapConfig
from specdeck.core.swap.edit import BARE, FlagEdit, is_flag, plan_edit


def flag_pairs(flags: tuple[str, ...]) -> list[tuple[str, str | bool]]:
    """("--spec-type", "ngram-simple", "--x=1", "--bare") -> [(flag, value or BARE), ...]."""
    pairs: list[tuple[str, str | bool]] = []
    i = 0
    while i < len(flags):
        flag = flags[i]
        if "=" in flag:
            name, _, value = flag.partition("=")
            pairs.append((name, value))
            i += 1
        elif i + 1 < len(flags) and not is_flag(flags[i + 1]):
            pairs.append((flag, flags[i + 1]))
            i += 2
        else:
            pairs.append((flag, BARE))
            i += 1
    return pairs


def plan_apply_flags(config: SwapConfig, model_name: str,
                     winner: tuple[str, ...] | None) -> ConfigChange:
    model = config.model(model_name)
    wanted = flag_pairs(drafting_flags(winner or ()))
    wanted_names = {_canonical(f) for f, _ in wanted}
    own = canonical_argv(tuple(t.text for t in model.tokens or ()))
    edits = [FlagEdit(name, None) for name, _ in flag_pairs(drafting_flags(own))
             if _canonical(name) not in wanted_names]
    for flag, value in wanted:
        also = tuple(f for f in DRAFT_MODEL if f != flag) if flag in DRAFT_MODEL else ()
        edits.append(FlagEdit(flag, value, also=also))
    warnings = []
    in_macros = model.drafting()["flags_in_macros"]
    if in_macros:
        warnings.append(f"Model {printable(model_name)} also gets drafting flags from macros "
                        f"({' '.join(in_macros)}); SpecDeck leaves macros alone.")
    return plan_edit(config, model_name, edits, tuple(warnings))


def _canonical(flag: str) -> str:
    return DRAFT_MODEL[0] if flag in DRAFT_MODEL else flag
