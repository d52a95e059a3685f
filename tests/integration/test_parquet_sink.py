"""The Parquet sink replaces a batch's directory whole (issue 44, item 4): a crash at any step of
the swap leaves a complete `batch_id=N` (the old or the new one, never half of one), and a reader
of `batch_id=*` never sees the staging area."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.db  # the session's local Spark comes with the test database

OLD_RUN, RESTARTED_RUN = 5, 6  # no deployments rows: run_is_current holds, as for a current run


class Crash(RuntimeError):
    """The driver dies at this step (kill -9, the fenced exit)."""


def _crash(*_args) -> None:
    raise Crash


def _batch(spark, *words: str):
    return spark.createDataFrame([(w,) for w in words], "word string")


def _words(spark, path) -> list[str]:
    return sorted(r.word for r in spark.read.parquet(str(path)).collect())


def test_a_crash_at_any_step_of_the_swap_leaves_a_complete_batch(spark, tmp_path, monkeypatch):
    from streamops.agent import dir_swap
    from streamops.agent.sinks import ParquetSink

    root = tmp_path / "out"
    sink = ParquetSink(str(root), "r.s", OLD_RUN)
    sink.write(_batch(spark, "a", "b"), 3)
    assert _words(spark, root / "batch_id=3") == ["a", "b"]

    # The replay's rows are written, then the driver dies before the swap: the old batch stands.
    with monkeypatch.context() as m:
        m.setattr(dir_swap, "_move_aside", _crash)
        with pytest.raises(Crash):
            sink.write(_batch(spark, "x", "y", "z"), 3)
    assert _words(spark, root / "batch_id=3") == ["a", "b"]
    assert _words(spark, root) == ["a", "b"], "a reader of the sink's directory never sees _tmp"

    # It dies after moving the old batch aside: the old one is whole, aside, and put back at restart.
    with monkeypatch.context() as m:
        m.setattr(dir_swap, "_move_in", _crash)
        with pytest.raises(Crash):
            sink.write(_batch(spark, "x", "y", "z"), 3)
    assert not (root / "batch_id=3").exists()
    (aside,) = (root / "_tmp").glob("batch_id=3.*.old")
    assert _words(spark, aside) == ["a", "b"]
    assert [p.name for p in root.glob("batch_id=*")] == [], "no half batch where readers look"

    restarted = ParquetSink(str(root), "r.s", RESTARTED_RUN)
    restarted.write(_batch(spark, "c"), 4)
    assert _words(spark, root / "batch_id=3") == ["a", "b"], "the old batch put back"
    assert not list((root / "_tmp").iterdir()), "the dead run's staging and asides are gone"

    restarted.write(_batch(spark, "x", "y", "z"), 3)  # the replay, now whole
    assert _words(spark, root / "batch_id=3") == ["x", "y", "z"]
    assert _words(spark, root) == ["c", "x", "y", "z"]
    assert sorted(p.name for p in root.iterdir()) == ["_tmp", "batch_id=3", "batch_id=4"]
    assert not list((root / "_tmp").iterdir())
