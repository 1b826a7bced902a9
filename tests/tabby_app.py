"""A stand-in for TabbyAPI's start-up (``python main.py``), for what cannot run here (TabbyAPI
needs an NVIDIA GPU), serving the HTTP API of tests/tabby_standin.py. A test's TabbyAPI folder
has a main.py that calls :func:`main`.

What it follows, from TabbyAPI main e632af41eba68abeadc3437c62674360f2f8cbf1 (the
exl2-checkpoint branch, 79126f904c2e00aece026b36bb70bbb87e4892b2, differs where noted):

- common/args.py + common/tabby_config.py ``TabbyConfig.load``: the config is config.yml of
  the working folder, then the ``TABBY_<SECTION>_<KEY>`` environment, then either
  ``--config FILE`` (read like config.yml; every other option ignored) or the options, merged
  in that order by ``deep_merge_dicts`` after ``filter_none_values`` drops None values.
- ``_from_file``: a file whose ``model`` section has a ``draft`` mapping is legacy: it is
  renamed to ``<name>.bak`` and a migrated file written in its place.
- main.py ``entrypoint_async``: a port in use makes it take port + 1 ("Port N is currently in
  use. Switching to N+1."), both in use ends it; the model (model_dir/model_name) and its draft
  load before the API serves anything.
- backends/exllamav3/model.py: draft_mode in {model, disabled, mtp, ngram} (anything else:
  ValueError "Unknown exllamav3 draft mode"); a draft model only with draft_mode model and a
  draft_model_name; ngram_match_min must be > 0 for ngram. exl2-checkpoint
  (backends/exllamav2/model.py): a draft when draft_model_name is truthy, no draft_mode.
- A model or draft folder that does not exist stops the start-up with an error.

What is the stand-in's own: how fast it answers, and how much of a draft is accepted. A
test sets seconds per token for each drafting setting in the environment
(SPECDECK_STANDIN_STEPS, JSON: a key per setting such as "model:NAME:4", "ngram:2:4", "none";
"default" for any other) and the share of draft tokens accepted (SPECDECK_STANDIN_ACCEPT,
the same keys; 0.5 by default), which it prints in TabbyAPI's metrics line per request
(tests/tabby_standin.py), because neither is a stand-in's to say. Unverified: everything the
real server does on a GPU.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from tabby_standin import TabbyHandler  # noqa: E402

FIXTURES = Path(os.environ.get("SPECDECK_FIXTURES", HERE / "data" / "fixtures"))
SAMPLES = {"exl2-checkpoint": "config_sample.exl2-checkpoint.yml",
           "main": "config_sample.f1f2c85.yml"}
SECTIONS = ("network", "logging", "model", "draft_model", "sampling", "developer", "embeddings",
            "lora", "memory")


def _read(path: Path) -> dict:
    from ruamel.yaml import YAML

    if not path.is_file():
        return {}
    data = YAML(typ="safe").load(path.read_text(encoding="utf-8")) or {}
    model = data.get("model") or {}
    if isinstance(model.get("draft"), dict):  # legacy: TabbyAPI renames and rewrites it
        path.rename(f"{path}.bak")
        data["draft_model"] = model.pop("draft")
        from ruamel.yaml import YAML as Dumper

        with path.open("w", encoding="utf-8") as handle:
            Dumper().dump(data, handle)
    return data


def _drop_none(value):
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    return value


def _merge(*configs: dict) -> dict:
    out: dict = {}
    for config in configs:
        for key, value in config.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = _merge(out[key], value)
            else:
                out[key] = value
    return out


def _environment() -> dict:
    cfg: dict = {}
    for name, value in os.environ.items():
        if not name.startswith("TABBY_"):
            continue
        rest = name[len("TABBY_"):].lower()
        for section in SECTIONS:
            if rest.startswith(section + "_"):
                cfg.setdefault(section, {})[rest[len(section) + 1:]] = value
    return cfg


def load_config(argv: list[str]) -> dict:
    configs = [_read(Path("config.yml")), _environment()]
    if "--config" in argv:
        configs.append(_read(Path(argv[argv.index("--config") + 1])))
    return _merge(*(_drop_none(c) for c in configs))


def _in_use(host: str, port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex((host if host != "0.0.0.0" else "127.0.0.1", port)) == 0


def drafting(config: dict, branch: str) -> tuple[str | None, str]:
    """(the draft model's name or None, the setting's key in SPECDECK_STANDIN_STEPS)."""
    draft = config.get("draft_model") or {}
    name = draft.get("draft_model_name")
    tokens = draft.get("draft_num_tokens")
    if branch == "exl2-checkpoint":
        return (name, f"model:{name}:4") if name else (None, "none")  # exllamav2 drafts 4
    mode = draft.get("draft_mode") or "model"
    if mode not in {"model", "disabled", "mtp", "ngram"}:
        raise ValueError(f"Unknown exllamav3 draft mode: {mode}")
    if mode == "model" and name:
        return name, f"model:{name}:{tokens}"
    if mode == "ngram":
        match_min = draft.get("ngram_match_min") or 2
        if int(match_min) <= 0:
            raise ValueError("ngram_match_min must be greater than 0 for n-gram drafting")
        return None, f"ngram:{match_min}:{tokens}"
    if mode == "mtp":
        return None, f"mtp:{tokens}"
    return None, "none"


def main(branch: str = "main") -> None:
    import http.server

    config = load_config(sys.argv[1:])
    network = config.get("network") or {}
    host, port = str(network.get("host") or "127.0.0.1"), int(network.get("port") or 5000)
    if _in_use(host, port):
        if _in_use(host, port + 1):
            print(f"Ports {port} and {port + 1} are in use by different services.", flush=True)
            return
        print(f"Port {port} is currently in use. Switching to {port + 1}.", flush=True)
        port += 1
    model = config.get("model") or {}
    name = model.get("model_name")
    draft_name, setting = drafting(config, branch)
    if name:
        folder = Path(model.get("model_dir") or "models") / str(name)
        if not folder.is_dir():
            raise SystemExit(f"Model path {folder} does not exist")
        if draft_name:
            draft_dir = Path((config.get("draft_model") or {}).get("draft_model_dir")
                             or "models") / str(draft_name)
            if not draft_dir.is_dir():
                raise SystemExit(f"Draft model path {draft_dir} does not exist")
    steps = json.loads(os.environ.get("SPECDECK_STANDIN_STEPS", "{}"))
    shares = json.loads(os.environ.get("SPECDECK_STANDIN_ACCEPT", "{}"))
    tokens = (config.get("draft_model") or {}).get("draft_num_tokens") or 4
    draft_log = None if branch == "exl2-checkpoint" or setting == "none" else (
        float(shares.get(setting, shares.get("default", 0.5))), int(tokens))
    handler = type("Tabby", (TabbyHandler,), {
        "model_name": str(name or ""), "draft_name": draft_name, "branch": branch,
        "step_s": float(steps.get(setting, steps.get("default", steps.get("none", 0.004)))),
        "usage_seen": [], "log_metrics": True, "draft_log": draft_log,
        "admin_calls": [], "models": tuple(p.name for p in Path(model.get("model_dir")
                                                                  or "models").iterdir())})
    print(f"Loaded {name} with {setting}", flush=True)
    server = http.server.ThreadingHTTPServer((host, port), handler)
    print(f"Uvicorn running on http://{host}:{port}", flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    threading.Event().wait()


def make_install(root: Path, branch: str = "main", draft: str | None = "Qwen2.5-0.5B-exl3",
                  legacy: bool = False) -> Path:
    """A TabbyAPI folder: main.py starting the stand-in, the branch's real config sample as
    config.yml naming a model (and a draft), and the model folders."""
    root.mkdir()
    (root / "main.py").write_text(
        f"import sys\nsys.path.insert(0, {str(HERE)!r})\nfrom tabby_app import main\n"
        f"main({branch!r})\n", encoding="utf-8")
    text = (FIXTURES / "tabbyapi" / SAMPLES[branch]).read_text(encoding="utf-8")
    text = text.replace("  model_name:\n", "  model_name: Qwen2.5-7B-exl3\n", 1)
    if draft:
        text = text.replace("  draft_model_name:\n", f"  draft_model_name: {draft}\n", 1)
    if legacy:  # the draft section nested as model.draft, as files before 2024-09 had it
        lines, inside = [], False
        for line in text.splitlines(keepends=True):
            if line.startswith("draft_model:"):
                inside, line = True, "  draft:\n"
            elif inside and line[:1].isalpha():
                inside = False
            elif inside and line.strip():
                line = "  " + line
            lines.append(line)
        text = "".join(lines)
    (root / "config.yml").write_text(text, encoding="utf-8")
    for name in ("Qwen2.5-7B-exl3", "Qwen2.5-0.5B-exl3"):
        (root / "models" / name).mkdir(parents=True)
        (root / "models" / name / "config.json").write_text("{}", encoding="utf-8")
    return root


# A TabbyAPI folder with real tokenizers ---------------------------------------------------------
TARGET = "Qwen2.5-7B-Instruct-exl2-4.0bpw"
DRAFT = "Qwen2.5-0.5B-Instruct-exl2-4.0bpw"
OTHER_FAMILY = "Llama-3.2-1B-exl2-4.0bpw"
EXL3_DRAFT = "Qwen2.5-0.5B-Instruct-exl3-3.0bpw"


def _weights(folder: Path, size: int) -> None:
    """A safetensors file of ``size`` bytes (one uint8 tensor; sparse on disk)."""
    import struct

    header = json.dumps({"w": {"dtype": "U8", "shape": [size],
                               "data_offsets": [0, size]}}).encode()
    path = folder / "model.safetensors"
    with path.open("wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
    with path.open("r+b") as handle:
        handle.truncate(8 + len(header) + size)


def _model(models: Path, name: str, fixture: str, method: str, size: int) -> Path:
    import shutil

    folder = models / name
    shutil.copytree(FIXTURES / "models" / fixture, folder,
                    ignore=shutil.ignore_patterns("SOURCE.txt"))
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["quantization_config"] = {"quant_method": method, "bits": 4.0, "head_bits": 6}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    _weights(folder, size)
    return folder


def tabby_folder(root: Path, branch: str, draft: str | None = None) -> Path:
    """A TabbyAPI folder: config.yml from the branch's real sample, naming the target (and
    ``draft``), and models/ with the target, a draft of its family, one of another family and
    one in the other branch's format (real tokenizer fixtures, sparse weights). Returns its
    config.yml; :func:`standin_main` makes it start the stand-in."""
    text = (FIXTURES / "tabbyapi" / SAMPLES[branch]).read_text(encoding="utf-8")
    text = text.replace("  model_name:\n", f"  model_name: {TARGET}\n", 1)
    if draft:
        text = text.replace("  draft_model_name:\n", f"  draft_model_name: {draft}\n", 1)
    root.mkdir()
    (root / "config.yml").write_text(text, encoding="utf-8")
    models = root / "models"
    models.mkdir()
    fmt = "exl3" if branch == "main" else "exl2"
    _model(models, TARGET, "Qwen2.5-7B-Instruct", fmt, 4_000_000_000)
    _model(models, DRAFT, "Qwen2.5-0.5B-Instruct", fmt, 400_000_000)
    _model(models, OTHER_FAMILY, "Llama-3.2-1B", fmt, 900_000_000)
    _model(models, EXL3_DRAFT if fmt == "exl2" else "Qwen2.5-0.5B-Instruct-exl2-4.0bpw-old",
           "Qwen2.5-0.5B-Instruct", "exl2" if fmt == "exl3" else "exl3", 300_000_000)
    return root / "config.yml"


def standin_main(folder: Path, branch: str) -> None:
    """main.py starting the stand-in, and the keys TabbyAPI would have made in api_tokens.yml
    (the stand-in's, tests/tabby_standin.py)."""
    (folder / "main.py").write_text(
        f"import sys\nsys.path.insert(0, {str(HERE)!r})\nfrom tabby_app import main\n"
        f"main({branch!r})\n", encoding="utf-8")
    (folder / "api_tokens.yml").write_text("api_key: tabby-api-key\nadmin_key: tabby-admin-key\n")
