"""The bitrate variants of an EXL2 or EXL3 repository.

EXL2 and EXL3 repositories keep one quantization per branch ("4.0bpw", "6_5", "8.0bpw-h8", ...;
turboderp's EXL3 repositories name them the same way)
with a README and measurement.json on main; some keep a single quantization on main with
the bitrate in the repository's name ("...-4.0bpw-h6-exl2"). For every branch SpecDeck lists
the files (sizes from the tree listing) and reads config.json's ``quantization_config``,
which is what exllamav2 and exllamav3 themselves read: the branch name is only a label and
can be wrong. exllamav3's converter writes ``{"quant_method": "exl3", "bits", "head_bits"}``
there (exllamav3 1.6.5 conversion/compile.py compile_model), exllamav2's
``{"quant_method": "exl2", ...}``.
"""

from __future__ import annotations

import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from specdeck.core.errors import CancelledError, SpecDeckError
from specdeck.core.hub.client import HubClient
from specdeck.core.hub.errors import HubAccessError, HubAuthError, IntegrityError
from specdeck.core.hub.spec import parse_repo_spec
from specdeck.core.models import quantization_from_config

# "4.0bpw", "6_5", "8_0", "4.65bpw-h6", "6.0bpw_h8", "5bpw", "exl2-3.0bpw", "4.0bpw-h6-exl2",
# "exl3-3.0bpw", "3.0bpw-exl3"
_BRANCH_BITS = re.compile(
    r"^(?:exl[23][-_.])?(?P<bits>\d{1,2}(?:[._]\d{1,3})?)(?:[-_]?bpw|[-_]?bits?)?"
    r"(?:[-_.]?h(?P<head>\d{1,2}))?(?:[-_.]exl[23])?$",
    re.IGNORECASE,
)
# A bitrate inside a repository name: "...-4.0bpw-h6-exl2", "..._6_5bpw"
_NAME_BITS = re.compile(
    r"(?:^|[-_])(?P<bits>\d{1,2}(?:[._]\d{1,3})?)bpw(?:[-_]h(?P<head>\d{1,2}))?(?=$|[-_.])",
    re.IGNORECASE,
)
MIN_BITS, MAX_BITS = 1.0, 16.0
WEIGHT_SUFFIX = ".safetensors"
MAX_PARALLEL_BRANCHES = 4


def _bits(match: re.Match | None) -> tuple[float, int | None] | None:
    if match is None:
        return None
    bits = float(match.group("bits").replace("_", "."))
    if not MIN_BITS <= bits <= MAX_BITS:
        return None
    head = match.group("head")
    return bits, int(head) if head else None


def bits_from_branch(name: str) -> tuple[float, int | None] | None:
    """(bits per weight, head bits or None) named by an EXL2 branch, or None."""
    return _bits(_BRANCH_BITS.match(name.strip()))


def bits_from_repo_name(name: str) -> tuple[float, int | None] | None:
    """The bitrate written in a repository's name ("...-4.0bpw-h6-exl2"), or None."""
    return _bits(_NAME_BITS.search(name))


def format_bits(bits: float) -> str:
    """4.0 -> "4.0", 6.5 -> "6.5", 4.65 -> "4.65": at least one decimal, no float noise."""
    text = f"{bits:.2f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def variant_folder_name(repo_name: str, revision: str, bits: float | None, head_bits: int | None = None) -> str:
    """The install folder of a variant: "<repo name>-<bpw>bpw[-h<head>]".

    ``head_bits`` is added only when the caller wants it named (the branch named it). A repo
    name that already states its bitrate is used as is. Without a known bitrate the branch
    name stands in (sanitized), and main adds nothing.
    """
    if bits_from_repo_name(repo_name) is not None:
        return repo_name
    if bits is not None:
        head = f"-h{head_bits}" if head_bits else ""
        return f"{repo_name}-{format_bits(bits)}bpw{head}"
    if revision in ("main", "master", ""):
        return repo_name
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", revision).strip("-.") or "variant"
    return f"{repo_name}-{safe}"


@dataclass(frozen=True)
class Variant:
    """One installable quantization: a branch with config.json and .safetensors weights."""

    repo_id: str
    revision: str
    commit: str
    bits: float | None
    head_bits: int | None
    bits_source: str  # "config.json", "branch name", "repository name" or "" (unknown)
    quant_method: str | None
    model_type: str | None
    total_bytes: int
    weight_bytes: int
    file_count: int
    notes: tuple[str, ...] = ()
    weights_vram_bytes: int | None = None
    """The weights' share of VRAM, estimated by the VRAM planner from config.json and the
    bitrate (the embedding stays in system RAM); the KV cache comes on top and depends on
    the target's context. None when config.json could not be read."""

    @property
    def spec(self) -> str:
        return f"{self.repo_id}@{self.revision}"

    @property
    def format(self) -> str | None:
        """"exl2" or "exl3" as config.json says (else as the repository's name says)."""
        if self.quant_method in ("exl2", "exl3"):
            return self.quant_method
        from specdeck.core.hub.search import format_of

        named = format_of(self.repo_id)
        return named if named in ("exl2", "exl3") else None

    @property
    def format_label(self) -> str:
        """"EXL2" / "EXL3" and the TabbyAPI branch that loads it, for lists and tables."""
        return {"exl2": "EXL2 (exl2-checkpoint)", "exl3": "EXL3 (TabbyAPI main)"}.get(self.format or "", "?")

    @property
    def label(self) -> str:
        if self.bits is None:
            return self.quant_method.upper() if self.quant_method else "unknown bitrate"
        head = f" · h{self.head_bits}" if self.head_bits else ""
        return f"{format_bits(self.bits)} bpw{head}"

    @property
    def folder_name(self) -> str:
        named = bits_from_branch(self.revision)
        head = self.head_bits if named and named[1] else None
        return variant_folder_name(self.repo_id.split("/", 1)[1], self.revision, self.bits, head)


@dataclass(frozen=True)
class RepoVariants:
    repo_id: str
    variants: tuple[Variant, ...]
    other_branches: tuple[tuple[str, str], ...]  # (branch, why it is not a variant)

    def find(self, revision: str) -> Variant | None:
        return next((v for v in self.variants if v.revision == revision), None)


def _weights_vram(config: dict, bits: float | None, head_bits: int | None,
                  quant_method: str | None = None) -> int | None:
    """GPU bytes of an EXL2 or EXL3 variant's weights, from the VRAM planner's estimate (the
    same one `specdeck vram` makes for a folder with only this config.json)."""
    from specdeck.core.models import architecture_from_config
    from specdeck.core.vram import exl3
    from specdeck.core.vram.weights import DEFAULT_HEAD_BITS, weights_from_bpw

    if bits is None:
        return None
    try:
        arch = architecture_from_config(config)
        if quant_method == exl3.EXL3:
            return exl3.weights_from_bits(arch, bits, head_bits or exl3.DEFAULT_HEAD_BITS).gpu_bytes
        return weights_from_bpw(arch, bits, head_bits or DEFAULT_HEAD_BITS).gpu_bytes
    except SpecDeckError:  # an unusual config: no estimate rather than a wrong one
        return None


def _inspect_branch(client: HubClient, repo_id: str, branch: str, commit: str) -> Variant | tuple[str, str]:
    files = client.list_files(repo_id, commit)
    by_path = {f.path: f for f in files}
    weights = [f for f in files if f.path.endswith(WEIGHT_SUFFIX)]
    if "config.json" not in by_path or not weights:
        names = ", ".join(sorted(by_path)[:4]) or "nothing"
        return branch, f"no model here (holds {names})"
    notes: list[str] = []
    quant_method = model_type = None
    bits: float | None = None
    head: int | None = None
    source = ""
    try:
        config = json.loads(client.read_small_file(repo_id, commit, "config.json", expected=by_path["config.json"]))
    except (HubAuthError, HubAccessError):
        config = None
        notes.append("config.json needs access to this gated repository; bitrate read from the branch name")
    except IntegrityError:
        config = None
        notes.append("config.json did not match the Hub's checksum; bitrate read from the name")
    except ValueError:
        config = None
        notes.append("config.json is not valid JSON")
    if isinstance(config, dict):
        quant = quantization_from_config(config)
        model_type = str(config.get("model_type") or "") or None
        quant_method = quant.method if quant.method != "none" else None
        if quant.method in ("exl2", "exl3") and quant.bits is not None:
            bits, head, source = quant.bits, quant.head_bits, "config.json"
        elif quant.method == "none":
            notes.append("not quantized (no quantization_config in config.json)")
        if quant.method == "exl3":
            notes.append("EXL3: TabbyAPI main (ExLlamaV3) loads it; ExLlamaV2 cannot")
        elif quant.method not in ("exl2", "none"):
            notes.append(f"{quant.method.upper()} quantization, not EXL2 or EXL3: TabbyAPI cannot load it")
    named = bits_from_branch(branch) or bits_from_repo_name(repo_id.split("/", 1)[1])
    if bits is None and named is not None:
        bits, head = named
        source = "branch name" if bits_from_branch(branch) else "repository name"
    elif named is not None and abs(named[0] - bits) > 0.01:  # type: ignore[operator]
        notes.append(f"the name says {format_bits(named[0])} bpw but config.json says {format_bits(bits)} bpw")  # type: ignore[arg-type]
    weights_vram = _weights_vram(config, bits, head, quant_method) if isinstance(config, dict) else None
    code = [f.path for f in files if f.path.endswith(".py")]
    if code:
        notes.append(f"holds Python code ({', '.join(code[:3])}), which SpecDeck never installs")
    return Variant(
        repo_id=repo_id,
        revision=branch,
        commit=commit,
        bits=bits,
        head_bits=head,
        bits_source=source,
        quant_method=quant_method,
        model_type=model_type,
        total_bytes=sum(f.size for f in files),
        weight_bytes=sum(f.size for f in weights),
        file_count=len(files),
        notes=tuple(notes),
        weights_vram_bytes=weights_vram,
    )


def list_variants(
    repo: str,
    *,
    endpoint: str | None = None,
    token: str | bool | None = None,
    cancel: threading.Event | None = None,
    client: HubClient | None = None,
) -> RepoVariants:
    """Every branch of ``repo`` that holds a model, with its bitrate and download size."""
    spec = parse_repo_spec(repo)
    client = client or HubClient(endpoint, token)
    branches = client.branches(spec.repo_id)
    results: list[Variant | tuple[str, str]] = []
    workers = max(1, min(MAX_PARALLEL_BRANCHES, len(branches)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="specdeck-variants") as pool:
        futures = [pool.submit(_inspect_branch, client, spec.repo_id, name, commit) for name, commit in branches]
        try:
            for future in futures:
                while True:
                    if cancel is not None and cancel.is_set():
                        raise CancelledError()
                    try:
                        results.append(future.result(timeout=0.1))
                        break
                    except FutureTimeout:
                        continue
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    variants = sorted(
        (r for r in results if isinstance(r, Variant)),
        key=lambda v: (v.bits is None, v.bits or 0.0, v.head_bits or 0, v.revision),
    )
    others = tuple(r for r in results if not isinstance(r, Variant))
    return RepoVariants(spec.repo_id, tuple(variants), others)
