"""bench/harness.py: the result file every benchmark writes and the summaries of its samples (issue 47)."""

from __future__ import annotations

import argparse
import json

from bench.harness import summary, table, write_result


def test_a_result_says_where_it_came_from(tmp_path):
    args = argparse.Namespace(runs=3, out=tmp_path)
    path = write_result(tmp_path / "deep" / "x.json", {"median_s": 1.5}, args)
    got = json.loads(path.read_text())
    assert got["median_s"] == 1.5
    prov = got["provenance"]
    assert prov["args"] == {"runs": 3, "out": str(tmp_path)} and len(prov["loadavg"]) == 3
    assert set(prov) >= {"git_revision", "cpus", "argv", "written_at"}


def test_a_list_or_a_dict_keyed_by_names_is_written_as_it_is(tmp_path):
    assert json.loads(write_result(tmp_path / "l.json", [{"a": 1}]).read_text()) == [{"a": 1}]
    assert json.loads(write_result(tmp_path / "d.json", {"edf": {}}, stamp=False).read_text()) == {"edf": {}}


def test_a_summary_skips_missing_samples_and_counts_the_rest():
    assert summary([3.14159, None, 1.0, 2.0], 2) == {"median": 2.0, "min": 1.0, "max": 3.14, "n": 3}
    assert summary([], count="runs") == {"median": None, "min": None, "max": None, "runs": 0}


def test_a_table_aligns_figures_right_and_names_left():
    t = table("t", ("name", "ms"), [["a", "1"]], left=("name",))
    assert [c.justify for c in t.columns] == ["left", "right"] and t.row_count == 1
