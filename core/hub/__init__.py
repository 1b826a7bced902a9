"""The Hugging Face Hub: find draft models, list their EXL2 bitrate variants (branches) and
GGUF files (core.hub.gguf), install one.

Built on huggingface_hub (HfApi for search, refs, trees and file metadata; its HTTP session,
headers and error classes); SpecDeck adds what a safe one-click install needs: resumable,
cancellable, checksum-verified downloads into a hidden staging folder and an atomic move into
place (see install.py and transfer.py). Importing this package loads no huggingface_hub.

    search_repos("qwen2.5 0.5b")                      -> [RepoHit]
    list_variants("owner/Model-exl2")                 -> RepoVariants (one Variant per branch)
    plan_install("owner/Model-exl2", "4.0bpw", dest)  -> InstallPlan (nothing written)
    install("owner/Model-exl2", "4.0bpw", dest, progress=cb, cancel=event) -> InstallResult
    find_partial_installs(dest) / discard_partial(p)  -> unfinished installs
    fetch_metadata("owner/Model", revision)           -> folder with config + tokenizer only
"""

from specdeck.core.hub.auth import (
    HubToken,
    TokenSource,
    forget_token,
    resolve_token,
    save_token,
    whoami,
)
from specdeck.core.hub.client import RemoteFile, is_offline, resolve_endpoint
from specdeck.core.hub.errors import (
    HubAccessError,
    HubAuthError,
    HubConnectionError,
    HubError,
    HubOfflineError,
    InstallBusyError,
    InstallConflictError,
    InsufficientSpaceError,
    IntegrityError,
    RateLimitedError,
    RepoNotFoundError,
    RevisionNotFoundError,
    UnsafeRepoError,
)
from specdeck.core.hub.install import (
    InstallMarker,
    InstallPlan,
    InstallResult,
    PartialInstall,
    discard_partial,
    find_partial_installs,
    free_folder_name,
    install,
    plan_install,
    read_marker,
    verify_installed,
)
from specdeck.core.hub.library import LibraryEntry, installed_variants, scan_library
from specdeck.core.hub.locations import default_install_dir, model_dirs
from specdeck.core.hub.metadata import fetch_metadata
from specdeck.core.hub.progress import InstallProgress
from specdeck.core.hub.search import RepoHit, search_repos
from specdeck.core.hub.spec import RepoSpec, parse_repo_spec
from specdeck.core.hub.transfer import RetryPolicy
from specdeck.core.hub.variants import RepoVariants, Variant, list_variants
from specdeck.core.units import format_bytes

__all__ = [
    "HubAccessError",
    "HubAuthError",
    "HubConnectionError",
    "HubError",
    "HubOfflineError",
    "HubToken",
    "InstallBusyError",
    "InstallConflictError",
    "InstallMarker",
    "InstallPlan",
    "InstallProgress",
    "InstallResult",
    "InsufficientSpaceError",
    "IntegrityError",
    "LibraryEntry",
    "PartialInstall",
    "RateLimitedError",
    "RemoteFile",
    "RepoHit",
    "RepoNotFoundError",
    "RepoSpec",
    "RepoVariants",
    "RetryPolicy",
    "RevisionNotFoundError",
    "TokenSource",
    "UnsafeRepoError",
    "Variant",
    "default_install_dir",
    "discard_partial",
    "fetch_metadata",
    "find_partial_installs",
    "forget_token",
    "format_bytes",
    "free_folder_name",
    "install",
    "installed_variants",
    "is_offline",
    "list_variants",
    "model_dirs",
    "parse_repo_spec",
    "plan_install",
    "read_marker",
    "resolve_endpoint",
    "resolve_token",
    "save_token",
    "scan_library",
    "search_repos",
    "verify_installed",
    "whoami",
]
