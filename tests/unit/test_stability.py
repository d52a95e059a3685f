"""No flip-flops, and no scale-in while catching up (issue 46, item 3): plan.stability's guard, as
the Application Manager applies it, and the churn figures the suite reports."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from streamops.plan.application import AppView, application_cycle
from streamops.plan.model import MIGRATE, SCALE_IN, SCALE_OUT, AppState, Request
from streamops.plan.options import AppOptions
from streamops.plan.stability import (
    LastChange,
    StageFacts,
    churn,
    direction,
    draining,
    refreshed_target,
    stability_verdict,
)

UTC = UTC
NOW = datetime(2024, 1, 1, 2, 0, tzinfo=UTC)  # inside the window below (every hour, 30 min)
APP = AppView("app", 1000.0, "0 * * * *", 30.0, 3)
OPT = AppOptions()


def req(action: str, cores: int, target: int, since_s: float | None = None) -> Request:
    first = None if since_s is None else NOW - timedelta(seconds=since_s)
    return Request("app.s1", action, target, None, 0.5, 1000.0, "policy's reason", {"cores": cores}, app="app",
                   first_made_at=first)


def last(action: str, ago_s: float, frm: int = 2, to: int = 4) -> LastChange:
    return LastChange(NOW - timedelta(seconds=ago_s), action, frm, to)


@pytest.mark.parametrize("action,frm,to,expected", [
    (SCALE_OUT, 2, 4, 1), (SCALE_IN, 4, 2, -1), (MIGRATE, 2, 2, 0), (SCALE_OUT, None, 3, 1), (SCALE_IN, None, 1, -1),
])
def test_direction(action, frm, to, expected):
    assert direction(action, frm, to) == expected


@pytest.mark.parametrize("backlog,rate,expected", [
    (0.0, 100.0, False), (OPT.drain_backlog_s * 100.0, 100.0, False), (OPT.drain_backlog_s * 100.0 + 1, 100.0, True),
    (OPT.drain_backlog_s + 1, 0.0, True),  # no input: a backlog above drain_backlog_s rows at 1 row/s
])
def test_draining_is_a_backlog_above_drain_backlog_s_of_input(backlog, rate, expected):
    assert draining(backlog, rate, OPT) is expected


def test_scale_in_refused_while_draining():
    v = stability_verdict(req(SCALE_IN, 4, 2, since_s=10 * OPT.scale_down_delay_s), StageFacts(draining=True),
                          NOW, OPT)
    assert v is not None and v[0] == "declined" and "backlog" in v[1]
    # a scale-out while draining is what catching up needs
    assert stability_verdict(req(SCALE_OUT, 2, 4), StageFacts(draining=True), NOW, OPT) is None


def test_scale_in_waits_for_the_scale_down_delay():
    d = OPT.scale_down_delay_s
    early = stability_verdict(req(SCALE_IN, 4, 2, since_s=d - 30), StageFacts(), NOW, OPT)
    assert early is not None and early[0] == "deferred" and "scale-down delay" in early[1]
    assert stability_verdict(req(SCALE_IN, 4, 2, since_s=d), StageFacts(), NOW, OPT) is None
    # a request without a first-made time (production before the column) is treated as new
    fresh = stability_verdict(req(SCALE_IN, 4, 2), StageFacts(), NOW, OPT)
    assert fresh is not None and fresh[0] == "deferred"
    assert stability_verdict(req(SCALE_IN, 4, 2), StageFacts(), NOW, AppOptions(scale_down_delay_s=0)) is None


@pytest.mark.parametrize("previous,action,cores,target,ago,refused", [
    (SCALE_OUT, SCALE_IN, 4, 2, 60, True),  # 2→4, then 4→2 a minute later
    (SCALE_IN, SCALE_OUT, 2, 4, 60, True),  # 4→2, then 2→4
    (SCALE_OUT, SCALE_OUT, 4, 6, 60, False),  # the same direction is no reversal
    (SCALE_OUT, SCALE_IN, 4, 2, OPT.reversal_interval_s, False),  # the interval has passed
    (MIGRATE, SCALE_IN, 4, 2, 60, False),  # a migration has no direction
])
def test_a_reversal_within_the_interval_is_refused_with_that_reason(previous, action, cores, target, ago, refused):
    frm, to = (2, 4) if previous == SCALE_OUT else (4, 2) if previous == SCALE_IN else (4, 4)
    facts = StageFacts(last=last(previous, ago, frm, to))
    v = stability_verdict(req(action, cores, target, since_s=10 * OPT.scale_down_delay_s), facts, NOW, OPT)
    if refused:
        assert v is not None and v[0] == "declined" and "reverses" in v[1] and f"{int(ago)} s ago" in v[1]
    else:
        assert v is None


def test_a_scale_out_of_a_stage_falling_behind_is_never_refused_as_a_reversal():
    """A load step soon after a scale-in: the suite's flash_crowd:101 had a 3.9x crowd 115 s after
    `count` scaled in 12→1; the guard refused its scale-out for the rest of the 900 s interval,
    and the stage was 785 s above R_max, its backlog at 97 000 rows."""
    facts = StageFacts(last=last(SCALE_IN, 115, 12, 1), draining=True)
    assert stability_verdict(req(SCALE_OUT, 1, 12), facts, NOW, OPT) is None
    # not falling behind: still a reversal
    v = stability_verdict(req(SCALE_OUT, 1, 12), StageFacts(last=last(SCALE_IN, 115, 12, 1)), NOW, OPT)
    assert v is not None and v[0] == "declined" and "reverses" in v[1]
    # and a scale-in while draining is still declined, whatever came before
    v = stability_verdict(req(SCALE_IN, 4, 2, since_s=10 * OPT.scale_down_delay_s),
                          StageFacts(last=last(SCALE_OUT, 115, 2, 4), draining=True), NOW, OPT)
    assert v is not None and v[0] == "declined" and "backlog" in v[1]


def test_a_reversal_let_through_says_so_in_its_grant():
    o = req(SCALE_OUT, 1, 12)
    facts = {"app.s1": StageFacts(last=last(SCALE_IN, 115, 12, 1), draining=True)}
    decisions, _ = application_cycle(APP, OPT, AppState(tokens=1.0), [o], 2000.0, True, NOW, facts)
    assert [d.outcome for d in decisions] == ["granted"]
    assert "reverses the scale_in 12→1 granted 115 s ago, allowed: the stage is falling behind" in decisions[0].reason
    # a scale-out that reverses nothing says nothing of it
    decisions, _ = application_cycle(APP, OPT, AppState(tokens=1.0), [o], 2000.0, True, NOW,
                                     {"app.s1": StageFacts(draining=True)})
    assert decisions[0].outcome == "granted" and "reverses" not in decisions[0].reason


def test_application_cycle_applies_the_guard_and_spends_nothing():
    r = req(SCALE_IN, 4, 2, since_s=10 * OPT.scale_down_delay_s)
    o = req(SCALE_OUT, 2, 4)
    o = Request("app.s2", o.action, o.target_cores, None, 0.5, 1000.0, "out", {"cores": 2}, app="app")
    facts = {"app.s1": StageFacts(last=last(SCALE_OUT, 60)),
             "app.s2": StageFacts(last=LastChange(NOW - timedelta(seconds=60), SCALE_IN, 4, 2))}
    decisions, state = application_cycle(APP, OPT, AppState(tokens=1.0), [r, o], 2000.0, True, NOW, facts)
    by = {d.request.stage_id: d for d in decisions}
    assert by["app.s1"].outcome == "declined" and "reverses" in by["app.s1"].reason
    assert by["app.s2"].outcome == "declined" and "reverses" in by["app.s2"].reason
    assert state.window_actions == 0 and state.tokens == 1.0  # neither a token nor the window's budget spent
    # without facts, the cycle is what it was
    decisions, _ = application_cycle(APP, OPT, AppState(tokens=1.0), [r, o], 2000.0, True, NOW)
    assert {d.outcome for d in decisions} == {"granted"}


def test_accept_all_is_guarded_too():
    opt = AppOptions(policy="accept_all")
    r = req(SCALE_IN, 4, 2, since_s=10 * opt.scale_down_delay_s)
    decisions, _ = application_cycle(APP, opt, AppState(), [r], None, False, NOW,
                                     {"app.s1": StageFacts(draining=True)})
    assert decisions[0].outcome == "declined"


def test_churn_counts_flip_flops_and_changes_per_stage_per_day():
    # (t, stage, from, to): s1 goes 1→2→1→2 within 6 minutes (2 flip-flops), s2 2→3 then 3→2 after 20 min
    changes = [(0.0, "s1", 1, 2), (120.0, "s1", 2, 1), (360.0, "s1", 1, 2), (0.0, "s2", 2, 3), (1200.0, "s2", 3, 2)]
    c = churn(changes, stages=2, duration_s=7200.0, day_s=7200.0, window_s=900.0)
    assert c["flip_flops"] == 2
    assert c["changes_per_stage_day"] == 2.5
    assert c["flip_flops_by_stage"] == {"s1": 2, "s2": 0}
    # a migration between two opposite changes neither counts nor resets the previous direction
    c = churn([(0.0, "s1", 1, 2), (10.0, "s1", 2, 2), (20.0, "s1", 2, 1)], stages=1, duration_s=7200.0,
              day_s=7200.0, window_s=900.0)
    assert c["flip_flops"] == 1


def test_options_validate():
    with pytest.raises(ValueError):
        AppOptions(scale_down_delay_s=-1)
    with pytest.raises(ValueError):
        AppOptions(reversal_interval_s=-1)
    with pytest.raises(ValueError):
        AppOptions(drain_backlog_s=-1)


@pytest.mark.parametrize("action,cores,kept,asked,expected", [
    (SCALE_IN, 10, 5, 2, 5),  # asked 10→5, then 10→2 at the trough: it keeps 5
    (SCALE_IN, 10, 2, 5, 5),  # the newer, larger ask wins too
    (SCALE_IN, 5, 5, 2, 2),  # the stage was resized to the kept target since: the newest ask
    (SCALE_OUT, 2, 8, 4, 4),  # a scale-out always takes the newest ask
    (SCALE_IN, None, 5, 2, 2),  # no cores in the snapshot: the newest ask
])
def test_a_waiting_scale_in_keeps_the_most_cores_it_asked_for(action, cores, kept, asked, expected):
    assert refreshed_target(action, cores, kept, asked) == expected
