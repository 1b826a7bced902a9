"""Names from the Hub: repo ids and URLs, bitrates in branch names, folder names, paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdeck.core.errors import InvalidInputError
from specdeck.core.hub.paths import folder_name_problem, path_problem, safe_join
from specdeck.core.hub.spec import parse_repo_spec
from specdeck.core.hub.variants import (
    bits_from_branch,
    bits_from_repo_name,
    format_bits,
    variant_folder_name,
)


@pytest.mark.parametrize(
    ("text", "repo_id", "revision"),
    [
        ("turboderp/Llama-3.2-1B-Instruct-exl2", "turboderp/Llama-3.2-1B-Instruct-exl2", None),
        ("turboderp/Llama-3.2-1B-Instruct-exl2@4.0bpw", "turboderp/Llama-3.2-1B-Instruct-exl2", "4.0bpw"),
        ("  bartowski/Qwen2.5-0.5B-Instruct-exl2@6_5 ", "bartowski/Qwen2.5-0.5B-Instruct-exl2", "6_5"),
        ("https://huggingface.co/turboderp/Llama-3.2-1B-Instruct-exl2/tree/8.0bpw",
         "turboderp/Llama-3.2-1B-Instruct-exl2", "8.0bpw"),
        ("https://huggingface.co/turboderp/Llama-3.2-1B-Instruct-exl2", "turboderp/Llama-3.2-1B-Instruct-exl2", None),
        ("hf.co/org/name/blob/5.0bpw/config.json", "org/name", "5.0bpw"),
    ],
)
def test_repo_specs_users_paste(text, repo_id, revision):
    spec = parse_repo_spec(text)
    assert (spec.repo_id, spec.revision) == (repo_id, revision)


@pytest.mark.parametrize(
    "text",
    ["", "justaname", "a/b/c", "org/bad--name", "org/name@", "https://example.com/org/name", "org/.hidden"],
)
def test_bad_repo_specs_are_refused_with_a_fix(text):
    with pytest.raises(InvalidInputError) as info:
        parse_repo_spec(text)
    assert str(info.value)


def test_explicit_revision_overrides_the_one_in_the_text():
    assert parse_repo_spec("org/name@4.0bpw", "6_5").revision == "6_5"


@pytest.mark.parametrize(
    ("branch", "expected"),
    [
        ("4.0bpw", (4.0, None)),
        ("6_5", (6.5, None)),
        ("8_0", (8.0, None)),
        ("4.65bpw-h6", (4.65, 6)),
        ("6.0bpw_h8", (6.0, 8)),
        ("5bpw", (5.0, None)),
        ("exl2-3.0bpw", (3.0, None)),
        ("4.0bpw-h6-exl2", (4.0, 6)),
        ("2.25bpw", (2.25, None)),
        ("main", None),
        ("measurement", None),
        ("65", None),  # 65 bits per weight is not a bitrate
        ("v1.0", None),
    ],
)
def test_bitrate_from_branch_names(branch, expected):
    assert bits_from_branch(branch) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("TinyLlama-1.1B-Chat-v1.0-4.0bpw-h6-exl2", (4.0, 6)),
        ("Mistral-7B-v0.1-6_5bpw", (6.5, None)),
        ("Qwen2.5-0.5B-Instruct-exl2", None),
        ("Llama-3.2-1B", None),
    ],
)
def test_bitrate_from_repository_names(name, expected):
    assert bits_from_repo_name(name) == expected


def test_folder_names_follow_repo_name_and_bitrate():
    assert format_bits(4.0) == "4.0"
    assert format_bits(6.5) == "6.5"
    assert format_bits(4.65) == "4.65"
    assert variant_folder_name("Qwen2.5-0.5B-Instruct-exl2", "4.0bpw", 4.0) == "Qwen2.5-0.5B-Instruct-exl2-4.0bpw"
    assert variant_folder_name("Qwen2.5-0.5B-Instruct-exl2", "6_5", 6.5) == "Qwen2.5-0.5B-Instruct-exl2-6.5bpw"
    assert variant_folder_name("M-exl2", "8.0bpw-h8", 8.0, 8) == "M-exl2-8.0bpw-h8"
    # The name already says the bitrate: keep it.
    assert variant_folder_name("TinyLlama-4.0bpw-h6-exl2", "main", 4.0, 6) == "TinyLlama-4.0bpw-h6-exl2"
    # No bitrate known: the branch stands in, made safe for a folder.
    assert variant_folder_name("M", "my/branch name", None) == "M-my-branch-name"
    assert variant_folder_name("M", "main", None) == "M"


@pytest.mark.parametrize(
    "name",
    ["../escape.txt", "sub/../../escape.txt", "/etc/passwd", "..\\escape.txt", "C:/x", "a//b", "./a",
     "a/./b", "", "con.json", "bad\x00name", "trailing. "],
)
def test_unsafe_repo_paths_are_named(name):
    assert path_problem(name) is not None


@pytest.mark.parametrize("name", ["config.json", "original/tokenizer.model", ".gitattributes", "a/b/c.safetensors"])
def test_ordinary_repo_paths_are_safe(name):
    assert path_problem(name) is None


def test_safe_join_stays_inside_even_through_a_planted_symlink(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(tmp_path)
    assert safe_join(root, "a/b.json") == root / "a" / "b.json"
    with pytest.raises(ValueError):
        safe_join(root, "../x")
    with pytest.raises(ValueError):
        safe_join(root, "link/outside.txt")


@pytest.mark.parametrize(
    ("name", "ok"),
    [("Model-exl2-4.0bpw", True), (".hidden", False), ("a/b", False), ("", False), ("   ", False), ("..", False)],
)
def test_install_folder_names(name, ok):
    assert (folder_name_problem(name) is None) is ok


def test_parse_repo_spec_has_no_side_effects(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    parse_repo_spec("org/name@4.0bpw")
    assert list(Path(tmp_path).iterdir()) == []
