"""A Kafka stage's plain parts, no broker and no Spark: its source fields, its lag read from a
progress report, and the bound its partitions put on the cores every policy and a manual change
may ask for."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from demo.stages import demo_job
from streamops import registry
from streamops.agent.kafka_lag import TopicBacklog, kafka_lag
from streamops.analyze.stats import StageStats, ds2_target, useful_cores
from streamops.plan.change import Current, InvalidChange, validate_change
from streamops.plan.cost import CostModel
from streamops.plan.model import PRESTAGE, SCALE_OUT, OperatorState
from streamops.plan.operator import OperatorContext, operator_cycle
from streamops.plan.options import OperatorOptions

# A progress of Spark 4's Kafka source, as the driver's listener gets it (json), trimmed.
PROGRESS = {
    "batchId": 6, "numInputRows": 200,
    "sources": [{
        "description": "KafkaV2[Subscribe[clicks]]",
        "startOffset": {"clicks": {"0": 900, "1": 880}},
        "endOffset": {"clicks": {"0": 1000, "1": 980}},
        "latestOffset": {"clicks": {"0": 2500, "1": 2628}},
        "numInputRows": 200,
        "metrics": {"avgOffsetsBehindLatest": "1574.0", "maxOffsetsBehindLatest": "1648",
                    "minOffsetsBehindLatest": "1500"},
    }],
}


def _registry(**source):
    return registry.parse({"pools": {"p": {"cores": 8}}, "apps": {"a": {
        "r_max_ms": 1000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 5},
        "stages": {"s": {**demo_job("wordcount", {"kind": "kafka", "topic": "clicks", **source}),
                         "cores": {"initial": 1, "max": 8}, "pool": "p"}}}}})


def test_the_source_fields_default_to_the_embedded_broker_from_the_earliest_offset():
    src = _registry().apps["a"].stages["s"].source
    assert (src.kind, src.topic, src.bootstrap_servers, src.starting_offsets, src.min_partitions) == \
        ("kafka", "clicks", None, "earliest", None)
    assert registry.input_dir(_registry().apps["a"].stages["s"]) is None, "a topic has no input directory"
    with pytest.raises(registry.RegistryError, match="parquet is a format of files"):
        _registry(format="parquet")
    with pytest.raises(registry.RegistryError, match="topic"):
        registry.parse({"pools": {"p": {"cores": 2}}, "apps": {"a": {
            "r_max_ms": 1000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 5},
            "stages": {"s": {**demo_job("wordcount", {"kind": "kafka"}), "cores": {"initial": 1}, "pool": "p"}}}}})


def test_the_lag_is_the_records_behind_the_latest_offsets_summed_over_partitions():
    lag = kafka_lag(PROGRESS)
    assert lag is not None and lag.records == (2500 - 1000) + (2628 - 980)
    assert lag.end_offsets == {"clicks/0": 1000, "clicks/1": 980}
    assert (lag.avg_behind, lag.max_behind) == (1574.0, 1648)
    assert kafka_lag({"batchId": 1, "sources": [{"description": "FileStreamSource[file:/in]"}]}) is None
    backlog = TopicBacklog()
    assert backlog.measure().rows is None and backlog.partitions() is None, "nothing known before a batch"
    backlog.update(PROGRESS)
    assert (backlog.measure().files, backlog.measure().rows, backlog.partitions()) == (None, 3148, 2)


def test_useful_cores_are_the_partitions_or_min_partitions_when_it_splits_them():
    assert useful_cores(None, 8) is None, "partitions not known yet: no bound"
    assert useful_cores(2, None) == 2
    assert useful_cores(2, 6) == 6
    assert useful_cores(4, 2) == 4, "min_partitions never merges partitions"


def _overloaded(cores: int, useful: int | None, **kw) -> StageStats:
    """A stage far behind (a large lag, busy all the time): every policy wants more cores."""
    return StageStats(stage_id="a.s", app="a", pool="p", cores=cores, min_cores=1, max_cores=8, state_partitions=8,
                      span_s=120.0, batches=60, input_rows=120_000, busy_ms=120_000.0, backlog_rows=500_000.0,
                      backlog_growth_rps=50.0, latency_p95_ms=30_000.0, max_useful_cores=useful, **kw)


OPTS = OperatorOptions()


def _asks(policy: str, s: StageStats) -> list[int]:
    ctx = OperatorContext(r_max_ms=1000, cost=CostModel(), pools={}, rng=random.Random(0))
    requests, _ = operator_cycle(policy, s, OPTS, OperatorState(), ctx)
    return [r.target_cores for r in requests if r.action in (SCALE_OUT, PRESTAGE)]


@pytest.mark.parametrize("policy", ["edf", "threshold3", "ds2", "mpc"])
def test_no_policy_asks_for_more_cores_than_the_topic_can_feed(policy):
    unbounded = _asks(policy, _overloaded(2, None))
    assert unbounded and max(unbounded) > 2, f"{policy} wants more cores when nothing bounds it: {unbounded}"
    assert all(t <= 2 for t in _asks(policy, _overloaded(1, 2))), "2 partitions: 2 useful cores"
    assert _asks(policy, _overloaded(2, 2)) == [], "at the bound already: nothing to ask"
    assert all(t <= 6 for t in _asks(policy, _overloaded(1, 6))), "min_partitions 6 splits them into 6 tasks"


@settings(max_examples=100, deadline=None)
@given(cores=st.integers(1, 8), useful=st.integers(1, 8), backlog=st.floats(0, 1e7), busy=st.floats(0.01, 1))
def test_ds2_never_sizes_past_the_bound(cores, useful, backlog, busy):
    s = _overloaded(cores, useful)
    s = StageStats(**{**s.__dict__, "backlog_rows": backlog, "busy_ms": busy * 120_000.0})
    assert 1 <= ds2_target(s) <= max(1, min(8, useful))


def test_a_manual_scale_out_past_the_partitions_is_refused_with_the_reason():
    reg = _registry()
    with pytest.raises(InvalidChange, match="more than its source can use: it reads in 2 tasks"):
        validate_change(reg, "a.s", "scale_out", cores=4, current=Current(1, "p", 8, max_useful_cores=2))
    assert validate_change(reg, "a.s", "scale_out", cores=2, current=Current(1, "p", 8, max_useful_cores=2)).cores == 2
    # a scale-in towards the bound is never refused, and a file stage has no bound
    assert validate_change(reg, "a.s", "scale_in", cores=3, current=Current(4, "p", 8, max_useful_cores=2)).cores == 3
    assert validate_change(reg, "a.s", "scale_out", cores=8, current=Current(1, "p", 8)).cores == 8
