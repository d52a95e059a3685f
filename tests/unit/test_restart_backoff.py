"""Automatic restarts of the same stage back off (issue 48): a restart that fails at once (a torn
checkpoint did, in a second) no longer burns every attempt before the cause can be seen."""

from __future__ import annotations

import random

from streamops.execute import watchdog


def test_restarts_back_off_exponentially_with_jitter_and_a_cap():
    rng = random.Random(7)
    delays = [[watchdog.restart_delay("dead_pid", n, base_s=2.0, rng=rng) for n in range(1, 8)] for _ in range(50)]
    for n, bound in enumerate([2, 4, 8, 16, 30, 30, 30], start=1):
        seen = [d[n - 1] for d in delays]
        assert all(bound / 2 <= s <= bound for s in seen), (n, min(seen), max(seen))
        assert len(set(seen)) > 1, "jittered: two stages failing together do not restart in step"
    assert watchdog.restart_delay("dead_pid", 0, base_s=2.0) == 0, "the first restart is at once"


def test_a_launch_failure_backs_off_longer():
    rng = random.Random(1)
    assert 30 <= watchdog.restart_delay("launch_failed", 5, base_s=2.0, rng=rng) <= 60
