"""The TabbyAPI / ExLlamaV2 rules every layer takes from core.exl2_facts, checked against the
sources they cite (TabbyAPI backends/exllamav2/model.py 02a8d68, common/utils.py; exllamav2
0.3.2 cache.py and generator/dynamic.py)."""

from __future__ import annotations

import pytest
from specdeck.core.exl2_facts import (
    CACHE_MODES,
    kv_bytes_per_element,
    ntk_rope_alpha,
    round_up_to_cache_step,
    tabby_chunk_size,
)


@pytest.mark.parametrize(
    "tokens, expected", [(0, 256), (1, 256), (256, 256), (257, 512), (4096, 4096), (5000, 5120)]
)
def test_cache_lengths_are_whole_pages_of_256(tokens, expected):
    assert round_up_to_cache_step(tokens) == expected


def test_ntk_alpha_follows_tabbyapis_fitted_formula():
    assert ntk_rope_alpha(0.5) == 1.0 and ntk_rope_alpha(1.0) == 1.0
    assert ntk_rope_alpha(2.0) == pytest.approx(-0.13436 + 0.80541 * 2 + 0.28833 * 4)
    assert ntk_rope_alpha(4.0) == pytest.approx(7.70056, abs=1e-5)


@pytest.mark.parametrize("chunk, max_seq_len, expected", [
    (2048, 4096, 2048),   # the default, untouched
    (100, 4096, 256),     # TabbyAPI raises anything below 256 to 256
    (300, 4096, 512),     # and rounds up to a multiple of 256
    (8192, 4096, 4096),   # and never past max_seq_len
    (2048, 1000, 1024),   # max_seq_len itself is rounded up when it is the bound
])
def test_tabbyapi_clamps_and_rounds_chunk_size(chunk, max_seq_len, expected):
    assert tabby_chunk_size(chunk, max_seq_len) == expected


def test_cache_bytes_per_element_follow_the_cache_classes_layout():
    # FP16: K and V float16; Q8: a byte each; Q6: K a byte, V half; Q4: half each; the
    # quantized ones add a float16 scale per 32 elements of K and of V.
    expected = {"FP16": 4.0, "Q8": 2.0 + 0.125, "Q6": 1.5 + 0.125, "Q4": 1.0 + 0.125}
    assert {mode: kv_bytes_per_element(mode) for mode in CACHE_MODES} == expected
