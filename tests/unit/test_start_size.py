"""A new deployment starts at the size its input needs (issue 48, item 10): plan.start_size, over
plain numbers. `cores.initial` is the floor; the last size (when recent) and DS2's n* from the
backlog and the rate lift it; cores.max, the pool's free cores and the source's partitions cap it."""

from __future__ import annotations

from streamops.plan.start_size import RECENT_S, StartInputs, start_size


def test_nothing_known_starts_at_cores_initial():
    got = start_size(StartInputs(initial=1, max_cores=4))
    assert got.cores == 1 and got.estimate is None
    assert got.reason == ("starts at 1 core: no rows/s per core declared or measured; "
                          "cores.initial 1 is the floor")


def test_a_backlog_without_a_rate_per_core_sizes_nothing():
    got = start_size(StartInputs(initial=2, max_cores=4, backlog_rows=100_000))
    assert got.cores == 2 and got.estimate is None


def test_a_first_start_with_a_waiting_backlog_and_a_declared_rate_starts_above_initial():
    # 3,600 rows over a 60 s catch-up = 60 rows/s; 30 rows/s per core at 70 % = 21: 2.86 -> 3 cores
    got = start_size(StartInputs(initial=1, max_cores=4, backlog_rows=3600, rate_per_core=30,
                                 rate_per_core_declared=True))
    assert got.cores == 3 and got.estimate == 3
    assert got.reason == ("starts at 3 cores: 3,600 rows waiting (caught up in 60 s), 30.0 rows/s per core "
                          "(declared) at 70% utilization: 3 cores")


def test_measured_rate_and_backlog_are_capped_at_cores_max():
    # (40 + 3,400 / 60) / (30 × 0.7) = 4.6 -> 5, above cores.max 2
    got = start_size(StartInputs(initial=1, max_cores=2, input_rate=40, backlog_rows=3400, rate_per_core=30))
    assert got.cores == 2 and got.estimate == 5
    assert "3,400 rows waiting (caught up in 60 s) + 40.0 rows/s measured over the last run" in got.reason
    assert "(measured)" in got.reason and got.reason.endswith("capped at cores.max 2")


def test_the_policy_catch_up_and_utilization_are_used():
    inp = StartInputs(initial=1, max_cores=8, backlog_rows=6000, rate_per_core=50)
    assert start_size(inp, catch_up_s=60, target_utilization=1.0).cores == 2  # 100 / 50
    assert start_size(inp, catch_up_s=20, target_utilization=0.5).cores == 8  # 300 / 25 = 12, cores.max 8


def test_the_last_size_is_restored_when_recent():
    got = start_size(StartInputs(initial=1, max_cores=4, last_cores=3, last_age_s=300))
    assert got.cores == 3
    assert "last ran at 3 cores 5 min ago" in got.reason


def test_an_old_last_size_does_not_count():
    got = start_size(StartInputs(initial=1, max_cores=4, last_cores=3, last_age_s=RECENT_S + 1))
    assert got.cores == 1
    assert "too old to count" in got.reason


def test_the_larger_of_last_size_and_estimate_wins():
    small_input = StartInputs(initial=1, max_cores=4, last_cores=3, input_rate=5, backlog_rows=0, rate_per_core=30)
    assert start_size(small_input).cores == 3  # the input needs 1; it last ran at 3
    big_input = StartInputs(initial=1, max_cores=4, last_cores=1, input_rate=50, backlog_rows=0, rate_per_core=30)
    assert start_size(big_input).cores == 3  # 50 / 21 = 2.4 -> 3


def test_an_old_input_rate_is_dropped_but_the_backlog_still_counts():
    inp = StartInputs(initial=1, max_cores=4, input_rate=200, input_rate_age_s=RECENT_S + 1, backlog_rows=1260,
                      rate_per_core=30)
    assert start_size(inp).cores == 1  # 1,260 / 60 = 21 rows/s: one core at 70 %


def test_cores_initial_is_the_floor():
    got = start_size(StartInputs(initial=2, max_cores=4, last_cores=1, input_rate=1, backlog_rows=0,
                                 rate_per_core=100))
    assert got.cores == 2 and got.estimate == 1
    assert got.reason.endswith("cores.initial 2 is the floor")


def test_capped_at_the_pool_free_cores_but_never_below_the_floor():
    inp = StartInputs(initial=1, max_cores=4, backlog_rows=12_000, rate_per_core=30, free_cores=2)
    got = start_size(inp)
    assert got.cores == 2 and got.reason.endswith("capped at the pool's 2 cores free")
    # the room other stages of the pool need to start at their own floor is not taken
    shared = start_size(StartInputs(initial=1, max_cores=4, backlog_rows=12_000, rate_per_core=30, free_cores=4,
                                    reserved_cores=2))
    assert shared.cores == 2
    assert shared.reason.endswith("capped at the pool's 4 cores free (2 kept for its other stages' cores.initial)")
    # a full pool: the floor stays, and admission refuses the start as before
    full = start_size(StartInputs(initial=2, max_cores=4, last_cores=4, free_cores=0))
    assert full.cores == 2 and full.reason == "starts at 2 cores: last ran at 4 cores just now; " \
                                              "held at cores.initial 2: the pool's 0 cores free"


def test_capped_at_the_topic_partitions():
    inp = StartInputs(initial=1, max_cores=8, backlog_rows=100_000, rate_per_core=10, useful_cores=3)
    got = start_size(inp)
    assert got.cores == 3 and got.reason.endswith("capped at the source's 3 partitions")


def test_no_input_at_all_needs_one_core():
    got = start_size(StartInputs(initial=1, max_cores=4, input_rate=0.0, backlog_rows=0, rate_per_core=30))
    assert got.cores == 1 and got.estimate == 1


def test_a_cluster_pool_starts_in_whole_executors():
    # n* = 60 / 21 = 2.86 -> 3, in executors of 2 cores: 4
    inp = StartInputs(initial=2, max_cores=6, backlog_rows=3600, rate_per_core=30, step=2)
    got = start_size(inp)
    assert got.cores == 4 and got.reason.endswith("in executors of 2 cores")
    # 3 free cores hold one executor of 2, not one and a half: the floor
    assert start_size(StartInputs(initial=2, max_cores=6, backlog_rows=10_000, rate_per_core=30, step=2,
                                  free_cores=3)).cores == 2


def test_a_declared_input_rate_stands_in_for_a_measured_one():
    # a first start with nothing waiting: the declared 60 rows/s at 30 rows/s per core x 70 % -> 3
    first = StartInputs(initial=1, max_cores=4, backlog_rows=0, declared_input_rate=60, rate_per_core=30,
                        rate_per_core_declared=True)
    got = start_size(first)
    assert got.cores == 3 and "60.0 rows/s declared" in got.reason
    # a measured rate wins over the declared one while it is recent
    measured = StartInputs(initial=1, max_cores=4, input_rate=10, declared_input_rate=60, rate_per_core=30)
    assert start_size(measured).cores == 1
    assert start_size(StartInputs(initial=1, max_cores=4, input_rate=10, input_rate_age_s=RECENT_S + 1,
                                  declared_input_rate=60, rate_per_core=30)).cores == 3
