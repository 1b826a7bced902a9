"""tests/schedule.py: the suite's modules go to the xdist workers longest first."""

import json

from schedule import longest_first, read_record


def test_the_longest_modules_go_first_and_unknown_ones_count_as_the_median():
    ids = ["a.py::t1", "b.py::t1", "a.py::t2", "c.py::t", "d.py::t", "e.py::t"]
    seconds = {"a.py": 5.0, "b.py": 50.0, "c.py": 20.0, "e.py": 1.0}
    # d.py is not in the record: it counts as the median, 12.5 s, after c.py's 20
    assert longest_first(ids, seconds) == ["b.py", "c.py", "d.py", "a.py", "e.py"]


def test_equal_or_unrecorded_modules_keep_the_collections_order():
    assert longest_first(["x.py::t", "y.py::t", "z.py::t"], {}) == ["x.py", "y.py", "z.py"]


def test_a_missing_or_broken_record_only_leaves_the_order_as_collected(tmp_path):
    assert read_record(tmp_path / "absent.json") == {}
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert read_record(broken) == {}
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps({"a.py": 3, "b.py": "slow"}))
    assert read_record(mixed) == {"a.py": 3.0}

