"""llama-swap's config.yaml: each model's cmd, its drafting flags, edits that change only
the flags asked for, and migration of flags current llama-server removed."""

from specdeck.core.swap.config import ModelCmd, SwapConfig, from_document, from_text, load
from specdeck.core.swap.edit import BARE, FlagEdit, plan_edit
from specdeck.core.swap.migrate import Finding, findings

__all__ = ["BARE", "Finding", "FlagEdit", "ModelCmd", "SwapConfig", "findings", "from_document",
           "from_text", "load", "plan_edit"]
