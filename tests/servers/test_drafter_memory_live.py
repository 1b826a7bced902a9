"""Drafters that remember earlier requests, on the pinned llama-server.

llama.cpp's ngram-mod keeps one hash pool of n-grams for the server's life (and ngram-cache
its context cache): run a prompt twice and the second run is drafted from the first one's
answer. An A/B that repeats its prompts would then measure a replay, not the drafter
(core.llama_flags.REMEMBERS_ACROSS_REQUESTS). These tests check the fact on the real server,
and that SpecDeck measures every repeat as a first sight: its launched server is restarted
before a prompt it has already run, and it warms up on other text.
"""

from __future__ import annotations

from specdeck.core.bench.plan import Arm, BenchPlan
from specdeck.core.bench.runner import RunFinished, run_plan
from specdeck.core.engines.base import GenerationRequest
from specdeck.core.servers.arms import ServerArm
from specdeck.core.servers.engine import ServerEngine
from specdeck.core.servers.llama_server import LaunchProfile, remembers

FLAGS = ("-t", "1", "-c", "1024")
PROMPT = ("Rewrite this list as a JSON array of objects with name and age: Ann 31, Bob 42, "
          "Cid 27, Dee 35, Eve 29, Fay 51.")


def _arm(llama_bin, demo_gguf, name, *flags) -> Arm:
    from specdeck.core.servers.llama_server import drafter_from_flags

    args = (*FLAGS, *flags)
    return Arm(name, drafter_from_flags(args), ServerArm(launch=LaunchProfile(
        str(llama_bin), str(demo_gguf), args)))


def _counts(result) -> tuple[int, int]:
    return result.stats.drafted, result.stats.accepted


def test_which_spec_types_remember_is_read_from_the_flags():
    assert remembers(("--spec-type", "ngram-mod")).startswith("ngram-mod: its hash pool")
    assert remembers(("--spec-type", "ngram-simple,ngram-cache")).startswith("ngram-cache:")
    assert remembers(("--spec-type", "ngram-map-k")) == ""
    assert remembers(("-md", "d.gguf", "--spec-type", "draft-simple")) == ""
    assert remembers(()) == ""


def test_ngram_mod_drafts_a_repeated_prompt_from_its_first_answer(llama_bin, demo_gguf,
                                                                  tmp_path):
    """The fact: one ngram-mod server, the same greedy request twice; the second accepts
    more drafts (it copies the first answer). An engine without the restart rule sees it."""
    engine = ServerEngine(log_dir=tmp_path)
    arm = _arm(llama_bin, demo_gguf, "B", "--spec-type", "ngram-mod",
               "--spec-ngram-mod-n-max", "8")
    request = GenerationRequest(prompt=PROMPT, max_new_tokens=64, stop_on_eos=False,
                                apply_chat_template=True)
    try:
        engine.activate_arm(arm)
        first = engine._generate(request, None, None)  # noqa: SLF001 - the rule bypassed
        again = engine._generate(request, None, None)  # noqa: SLF001
    finally:
        engine.unload()
    assert first.text == again.text
    assert again.stats.accepted > first.stats.accepted


def test_every_repeat_of_a_remembering_arm_is_measured_as_a_first_sight(llama_bin, demo_gguf,
                                                                       tmp_path):
    """Through the A/B runner: the ngram-mod arm's drafts and acceptances are the same on
    every repeat of a prompt (greedy, a restarted server), the server was restarted once per
    repeat after the first, the plan's notes say so, and the reference was never restarted."""
    engine = ServerEngine(log_dir=tmp_path, max_servers=2)
    plan = BenchPlan(engine="server", model=str(demo_gguf),
                     arms=(_arm(llama_bin, demo_gguf, "A"),
                           _arm(llama_bin, demo_gguf, "B", "--spec-type", "ngram-mod",
                                "--spec-ngram-mod-n-max", "8")),
                     suites=("grounded", "code"), prompt_ids=("fix-typos", "snake-typescript"),
                     max_new_tokens=64, repeats=3,
                     warmup=1, warmup_tokens=8, apply_chat_template=True, stop_on_eos=False)
    pids: dict[str, set[int]] = {"A": set(), "B": set()}

    def watch(event) -> None:
        if isinstance(event, RunFinished) and not event.record.slot.warmup:
            pids[event.record.arm].add(engine.running()[event.record.arm])

    try:
        run = run_plan(plan, engine, watch)
    finally:
        engine.unload()
    assert engine.restarts == 2
    assert len(pids["A"]) == 1 and len(pids["B"]) == 3  # B restarted per repeat, A never
    by_prompt: dict[str, set] = {}
    for record in run.counted("B"):
        by_prompt.setdefault(record.prompt_id, set()).add(_counts(record.result))
    assert len(by_prompt) == 2
    assert all(len(counts) == 1 for counts in by_prompt.values()), by_prompt
    assert any(drafted for counts in by_prompt.values() for drafted, _ in counts)
    notes = " ".join(run.loaded.notes)
    assert "B: ngram-mod: its hash pool" in notes and "restarts this llama-server" in notes
    assert "A: ngram" not in notes


def test_an_arm_that_forgets_is_never_restarted(llama_bin, demo_gguf, tmp_path):
    engine = ServerEngine(log_dir=tmp_path)
    plan = BenchPlan(engine="server", model=str(demo_gguf),
                     arms=(_arm(llama_bin, demo_gguf, "A"),
                           _arm(llama_bin, demo_gguf, "B", "--spec-type", "ngram-map-k")),
                     suites=("structured",), max_prompts=1, max_new_tokens=16, repeats=2,
                     warmup=1, warmup_tokens=8, apply_chat_template=True, stop_on_eos=False)
    try:
        run_plan(plan, engine)
    finally:
        engine.unload()
    assert engine.restarts == 0


def test_a_restart_that_fails_is_a_clear_error(llama_bin, demo_gguf, tmp_path):
    """The model file is gone when the ngram-mod server must restart for a repeat: the plan
    stops with llama-server's reason (a SpecDeckError a grid notes as "could not be measured"
    and goes on), not a crash on what the dead server had seen."""
    import shutil

    import pytest
    from specdeck.core.errors import NotFoundError

    model = tmp_path / "model.gguf"
    shutil.copy(demo_gguf, model)
    engine = ServerEngine(log_dir=tmp_path)
    plan = BenchPlan(engine="server", model=str(model),
                     arms=(_arm(llama_bin, demo_gguf, "A"),
                           _arm(llama_bin, model, "B", "--spec-type", "ngram-mod")),
                     suites=("code",), max_prompts=1, max_new_tokens=12, repeats=2, warmup=1,
                     warmup_tokens=4, apply_chat_template=True, stop_on_eos=False)

    def remove_after_first(event) -> None:
        if isinstance(event, RunFinished) and event.record.arm == "B" \
                and not event.record.slot.warmup:
            model.unlink(missing_ok=True)

    try:
        with pytest.raises(NotFoundError, match="model.gguf does not exist"):
            run_plan(plan, engine, remove_after_first)
    finally:
        engine.unload()
    assert engine.restarts == 1 and "B" not in engine.running()
