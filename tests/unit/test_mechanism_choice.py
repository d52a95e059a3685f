"""The mechanisms choose themselves (issue 47 item 1): `plan.mechanisms.choose` picks what the
executor's cost rule picked before it, over a grid of situations."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

from streamops.execute import mechanisms as executors
from streamops.execute import reconfigure
from streamops.plan.mechanisms import Situation, choose

GRID = dict(
    action=("scale_out", "scale_in", "migrate", "upgrade"),
    running=(True, False),
    pool_kind=("local", "standalone"),
    target_pool=(None, "a", "b"),
    current_cores=(1, 2),
    target_cores=(1, 2, 3, 6),
    executor_cores=(1, 2),
    state_partitions=(None, 4),
    target_partitions=(None, 4, 8),
    target_pool_free=(0, 2, 6),
    staged_ready=(False, True),
    source_kind=("files", "kafka"),
)


def situations():
    for values in itertools.product(*GRID.values()):
        k = dict(zip(GRID, values, strict=True))
        if not k["running"] and k["current_cores"] != 1:
            continue  # a stage that is not running has no current cores: one case is enough
        yield Situation(pool="a", target_pool_total=8, **{**k, "current_cores": k["current_cores"] if k["running"]
                                                                  else None})


def test_the_choice_is_the_executors_cost_rule_over_a_grid_of_situations():
    seen, differ = {}, []
    for s in situations():
        old = reconfigure._choose(executors.Situation(  # the rule as the executor applied it before
            action=s.action, live=SimpleNamespace(cores=s.current_cores) if s.running else None, pool=s.pool,
            pool_kind=s.pool_kind, executor_cores=s.executor_cores, target_pool=s.target_pool,
            target_cores=s.target_cores, target_partitions=s.target_partitions, state_partitions=s.state_partitions,
            target_pool_free=s.target_pool_free, target_pool_total=s.target_pool_total, staged_ready=s.staged_ready,
            source_kind=s.source_kind))[0]
        new = choose(s).mechanism
        seen[old] = seen.get(old, 0) + 1
        if new != old:
            differ.append((s, old, new))
    assert not differ, f"{len(differ)} situations differ, e.g. {differ[:3]}"
    assert set(seen) == {"live", "in_driver", "pause_resume", "prestaged", "active_backup"}, seen
