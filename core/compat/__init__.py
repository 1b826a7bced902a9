"""Draft/target compatibility: can this draft model speculate for this target model?

    report = check("/models/Llama-3.1-70B-exl2", "turboderp/Llama-3.2-1B-exl2@4.0bpw")
    report.verdict              # CompatVerdict.COMPATIBLE / WARNINGS / INCOMPATIBLE / INCONCLUSIVE
    report.rules                # every rule: status, a sentence, the values on both sides
    report.to_json()            # the stable shape `specdeck check --json` prints

    ranked = suggest("/models/Qwen2.5-72B-exl2", model_dirs=["/models"])

Modules: vocab (what a vocabulary is), tokenizer_files (reading every tokenizer format),
special (BOS/EOS/chat template, the engines' way), cache, source (folder or Hub id), load
(one side), compare (id-by-id text), rules, report, check, known (curated Hub drafts),
library (model folders), suggest.
"""

from specdeck.core.compat.check import check, compare_models
from specdeck.core.compat.load import CheckSide, load_model
from specdeck.core.compat.report import CompatReport, CompatVerdict, RuleResult, Status
from specdeck.core.compat.source import ModelSource, parse_source
from specdeck.core.compat.suggest import Suggestion, SuggestionList, suggest

__all__ = [
    "CompatReport",
    "CheckSide",
    "ModelSource",
    "RuleResult",
    "Status",
    "Suggestion",
    "SuggestionList",
    "CompatVerdict",
    "check",
    "compare_models",
    "load_model",
    "parse_source",
    "suggest",
]
