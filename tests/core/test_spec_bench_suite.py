"""Spec-Bench's prompts as a suite: the shipped categories, their licenses, ids that stay put,
the upstream question file read as it is, and one prompt per category through the demo."""

from __future__ import annotations

import json

import pytest
from specdeck.core.bench.fields import DEFAULT_SUITES
from specdeck.core.bench.suites import (
    builtin_suites,
    first_prompts,
    load_suite,
    public_suites,
    select_prompts,
    spec_bench_categories,
    spec_bench_category,
    spec_bench_info,
    spec_bench_suite,
)
from specdeck.core.errors import InvalidInputError, NotFoundError
from specdeck.resources import path

FOLDER = path("prompts", "spec_bench")
SHIPPED = ("mt_bench", "qa", "math_reasoning")
LEFT_OUT = ("translation", "summarization", "rag")
MT_BENCH_KINDS = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem",
                  "humanities")


def _lines(category: str) -> list[dict]:
    text = (FOLDER / f"{category}.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_every_shipped_category_loads_with_its_80_questions():
    suites = public_suites()
    assert list(suites) == ["spec-bench", *(f"spec-bench/{c}" for c in SHIPPED)]
    for category in SHIPPED:
        suite = suites[f"spec-bench/{category}"]
        assert len(suite.prompts) == 80
        assert {p.tags for p in suite.prompts} == {(f"spec-bench/{category}",)}
        assert {p.suite for p in suite.prompts} == {f"spec-bench/{category}"}
    assert len(suites["spec-bench"].prompts) == 240
    assert [c.name for c in spec_bench_categories()] == [
        "mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"]


def test_ids_are_spec_benchs_own_numbers():
    """An id names Spec-Bench's question_id, so a report's prompt lines up with the paper's."""
    suites = public_suites()
    for category in SHIPPED:
        lines = _lines(category)
        by_id = {p.id: p for p in suites[f"spec-bench/{category}"].prompts}
        assert set(by_id) == {f"spec-bench-{line['question_id']}" for line in lines}
        for line in lines:
            assert by_id[f"spec-bench-{line['question_id']}"].text == line["turns"][0]
    ids = [p.id for p in suites["spec-bench"].prompts]
    assert ids[:6] == ["spec-bench-81", "spec-bench-321", "spec-bench-401",
                       "spec-bench-91", "spec-bench-322", "spec-bench-402"]
    assert suites["spec-bench/qa"].prompts[0].text == "Who played anna in once upon a time?"
    assert suites["spec-bench/math_reasoning"].prompts[0].text.startswith(
        "Jen decides to travel to 3 different countries.")
    # Spec-Bench numbers MT-bench 81-160, QA 321-400, GSM8K 401-480.
    numbers = {c: sorted(line["question_id"] for line in _lines(c)) for c in SHIPPED}
    assert numbers == {"mt_bench": list(range(81, 161)), "qa": list(range(321, 401)),
                       "math_reasoning": list(range(401, 481))}


def test_mt_bench_sends_first_turns_and_alternates_its_eight_kinds():
    lines = _lines("mt_bench")
    assert all(len(line["turns"]) == 2 for line in lines)
    prompts = public_suites()["spec-bench/mt_bench"].prompts
    kind = {f"spec-bench-{line['question_id']}": line["category"] for line in lines}
    assert tuple(kind[p.id] for p in prompts[:8]) == MT_BENCH_KINDS
    assert all(p.text == next(line["turns"][0] for line in lines
                              if f"spec-bench-{line['question_id']}" == p.id) for p in prompts)
    assert not any(p.text in {line["turns"][1] for line in lines} for p in prompts)


def test_the_license_files_and_the_notice_name_source_commit_and_citation():
    info = spec_bench_info()
    commit = info["source"]["commit"]
    notice = (FOLDER / "README.md").read_text(encoding="utf-8")
    assert commit in notice and info["source"]["sha256"] in notice
    assert "Apache License" in (FOLDER / "LICENSE-Apache-2.0.txt").read_text(encoding="utf-8")
    mit = (FOLDER / "LICENSE-MIT-GSM8K.txt").read_text(encoding="utf-8")
    assert mit.startswith("MIT License") and "Copyright (c) 2021 OpenAI" in mit
    assert "xia-etal-2024-unlocking" in notice and "10.18653/v1/2024.findings-acl.456" in notice
    for category in spec_bench_categories():
        assert f"`spec-bench/{category.name}`" in notice
        if category.name in SHIPPED:
            assert category.license and not category.not_shipped
            assert (FOLDER / category.file).is_file() and category.file in notice
        else:
            assert category.name in LEFT_OUT and category.not_shipped and not category.file
            assert not (FOLDER / f"{category.name}.jsonl").exists()
    assert {c.license for c in spec_bench_categories() if c.license} == {
        "Apache-2.0", "CC-BY-SA-3.0", "MIT"}


def test_the_papers_pld_column_is_quoted_with_its_hardware():
    reference = spec_bench_info()["reference"]
    assert reference["method"].startswith("PLD") and commit_of(reference["source"])
    rtx = reference["rows"][0]
    assert "3090" in rtx["hardware"] and rtx["model"] == "Vicuna-7B-v1.3"
    assert set(rtx["speedup"]) == {c.name for c in spec_bench_categories()}
    assert rtx["speedup"]["summarization"] == 2.46 and rtx["speedup"]["translation"] == 1.15


def commit_of(url: str) -> str:
    return url.split("/blob/")[1].split("/")[0]


def test_the_default_suites_stay_the_shipped_five():
    assert set(builtin_suites()) == {"code", "structured", "grounded", "chat", "prose"}
    assert not any(p.suite.startswith("spec-bench") for p in select_prompts([]))
    assert not set(DEFAULT_SUITES) & set(public_suites())


def test_selected_by_name_per_category_and_with_the_shipped_suites():
    prompts = select_prompts(["spec-bench/qa", "code"])
    assert prompts[0].id == "spec-bench-321" and prompts[80].suite == "code"
    firsts = first_prompts(["spec-bench/math_reasoning", "spec-bench/mt_bench"], 2)
    assert [p.id for p in firsts] == ["spec-bench-401", "spec-bench-402", "spec-bench-81",
                                      "spec-bench-91"]


@pytest.mark.parametrize("category", LEFT_OUT)
def test_a_category_left_out_says_why_and_how_to_run_it(category):
    with pytest.raises(NotFoundError, match="not shipped") as caught:
        select_prompts([f"spec-bench/{category}"])
    assert "question.jsonl" in str(caught.value)


def _question_file(tmp_path):
    """A question.jsonl in the upstream format (MT-bench's), including categories SpecDeck
    does not ship: the translation line is written for these tests, the others are shipped
    lines."""
    upstream = [*_lines("mt_bench")[:2], *_lines("qa")[:2],
                {"question_id": 161, "category": "translation",
                 "turns": ["Translate German to English: Der Hund schläft."]},
                *_lines("math_reasoning")[:1]]
    file = tmp_path / "question.jsonl"
    file.write_text("\n".join(json.dumps(line) for line in upstream) + "\n", encoding="utf-8")
    return file


def test_spec_benchs_own_question_file_gives_every_category(tmp_path):
    file = _question_file(tmp_path)
    suite = load_suite(file)
    assert [p.id for p in suite.prompts] == ["spec-bench-81", "spec-bench-321", "spec-bench-161",
                                             "spec-bench-401", "spec-bench-82", "spec-bench-322"]
    assert suite.prompts[2].tags == ("spec-bench/translation",)
    assert suite.prompts[0].tags == suite.prompts[4].tags == ("spec-bench/mt_bench",)
    assert [p.id for p in select_prompts([str(file)])] == [p.id for p in suite.prompts]


def test_the_first_prompts_of_a_spec_bench_suite_are_per_category(tmp_path):
    """How the A/B page picks prompts: the first N of each category, in the suite's own
    (round-robin) order, for the whole shipped benchmark and for the user's question file."""
    whole = first_prompts(["spec-bench"], 2)
    assert [p.id for p in whole] == ["spec-bench-81", "spec-bench-321", "spec-bench-401",
                                     "spec-bench-91", "spec-bench-322", "spec-bench-402"]
    assert [p.id for p in first_prompts(["code", "spec-bench/qa"], 1)] == [
        builtin_suites()["code"].prompts[0].id, "spec-bench-321"]
    file = _question_file(tmp_path)
    assert [p.id for p in first_prompts([str(file)], 1)] == [
        "spec-bench-81", "spec-bench-321", "spec-bench-161", "spec-bench-401"]
    assert [p.id for p in first_prompts([str(file)], 5)] == [
        p.id for p in load_suite(file).prompts]


def test_spec_bench_suite_takes_what_the_cli_takes_and_nothing_else(tmp_path):
    assert spec_bench_suite("spec-bench") == public_suites()["spec-bench"]
    assert spec_bench_suite("spec-bench/qa") == public_suites()["spec-bench/qa"]
    file = _question_file(tmp_path)
    assert spec_bench_suite(str(file)).prompts == load_suite(file).prompts
    with pytest.raises(NotFoundError, match="not shipped"):
        spec_bench_suite("spec-bench/rag")
    with pytest.raises(NotFoundError, match="Prompt file .*missing.jsonl does not exist"):
        spec_bench_suite(str(tmp_path / "missing.jsonl"))
    with pytest.raises(NotFoundError, match="No prompt suite called 'nope'"):
        spec_bench_suite("nope")
    plain = tmp_path / "mine.jsonl"
    plain.write_text('{"prompt": "Say hello."}\n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match="not a Spec-Bench question file"):
        spec_bench_suite(str(plain))
    with pytest.raises(InvalidInputError, match="not a Spec-Bench question file"):
        spec_bench_suite("code")


def test_a_tag_names_its_category_shipped_or_not():
    assert spec_bench_category("spec-bench/qa").label == "Question Answering"
    assert spec_bench_category("spec-bench/rag").not_shipped
    assert spec_bench_category("spec-bench") is None and spec_bench_category("code") is None
    assert spec_bench_category("spec-bench/nope") is None


def test_a_question_without_a_first_turn_is_named(tmp_path):
    file = tmp_path / "question.jsonl"
    file.write_text('{"question_id": 1, "category": "qa", "turns": ["ok"]}\n'
                    '{"question_id": 2, "category": "qa", "turns": []}\n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match="line 2: question 2 has no first turn"):
        load_suite(file)
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"question_id": 1, "category": "qa", "turns": ["a"]}\n{"prompt": "b"}\n',
                     encoding="utf-8")
    with pytest.raises(InvalidInputError, match='prompt 1 has no "prompt" text'):
        load_suite(mixed)  # one format per file: a question line among prompt lines is named


@pytest.fixture(scope="module")
def demo_dir(shared_demo_dir):
    return shared_demo_dir


@pytest.mark.slow
@pytest.mark.demo
def test_one_prompt_per_category_through_the_demo_engine(demo_dir):
    from specdeck.core.bench.plan import Arm, BenchPlan
    from specdeck.core.bench.runner import run_plan
    from specdeck.core.bench.summary import summarize
    from specdeck.core.engines.base import DrafterKind, DrafterSpec, LoadSpec

    ids = tuple(p.id for p in first_prompts([f"spec-bench/{c}" for c in SHIPPED], 1))
    plan = BenchPlan(engine="torch", model=str(demo_dir), suites=("spec-bench",), prompt_ids=ids,
                     arms=(Arm("A"), Arm("B", DrafterSpec(DrafterKind.NGRAM))),
                     max_new_tokens=12, repeats=1, warmup=0,
                     load=LoadSpec(demo_dir, device="cpu"))
    run = run_plan(plan)
    assert [p.id for p in run.prompts] == ["spec-bench-81", "spec-bench-321", "spec-bench-401"]
    assert {r.prompt_id for r in run.counted("B")} == set(ids)
    summary = summarize(run)
    ngram = summary.comparison("B")
    assert set(ngram.by_tag) == {f"spec-bench/{c}" for c in SHIPPED}
    assert all(r.n == 1 for r in ngram.by_tag.values())
    assert ngram.lossless.compared == 3 and not ngram.lossless.diverged
