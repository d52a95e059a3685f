"""The Application Manager: one per app. Collects its stages' requests and *grants* [000].

Pure: (app, options, state, requests, response, now) → (decisions, new state).
- token_bucket: capacity B; each granted reconfiguration spends a token; tokens are added per
  control interval by a pluggable generator; scale-outs are chosen greedily by gain/cost.
- accept_all: EDF's decentralized baseline, grants everything.
- Controlled windows: scale-ins and migrations are deferred to the app's maintenance window,
  which has its own budget (max_actions per window), best gain/cost first.
- Urgent scale-outs (response > R_max and backlog growing) go first, within the bucket, and the
  ones granted in the same cycle share one token: an app falling behind is resized in one episode.
  A chain's downstream stage left waiting a control interval for the next token restarted a
  minute after the others, a second outage in one flash crowd. (The simulator restarts them at
  once; production's `streamops_reconfigure` pool, 1 slot on a 2-core machine, back to back.)
- Before any of that, plan.stability's guard (given each stage's `facts`): no scale-in while the
  backlog drains or within its scale-down delay, no reversal of a recent change.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from croniter import croniter

from streamops.plan.model import (
    ADD_REPLICA,
    DISRUPTIVE,
    LOCAL,
    REMOVE_REPLICA,
    SCALE_IN,
    SCALE_OUT,
    AppState,
    Decision,
    Request,
)
from streamops.plan.options import AppOptions
from streamops.plan.stability import StageFacts, reversal, stability_verdict

TokenGenerator = Callable[[float | None, float, float], float]


def edf_step(response_ms: float | None, r_max_ms: float, beta: float) -> float:
    """EDF: one token per interval if the response time is above β·R_max."""
    return 1.0 if response_ms is not None and response_ms > beta * r_max_ms else 0.0


def proportional(response_ms: float | None, r_max_ms: float, beta: float) -> float:
    """A rate that rises as the response nears R_max: 0 at β·R_max, 1 at R_max and above."""
    if response_ms is None:
        return 0.0
    if beta >= 1.0:  # no ramp left: a step at R_max
        return 1.0 if response_ms >= r_max_ms else 0.0
    return min(1.0, max(0.0, (response_ms / r_max_ms - beta) / (1.0 - beta)))


GENERATORS: dict[str, TokenGenerator] = {"edf_step": edf_step, "proportional": proportional}


@dataclass(frozen=True)
class AppView:
    name: str
    r_max_ms: float
    window_cron: str
    window_minutes: float
    window_max_actions: int


@dataclass(frozen=True)
class WindowState:
    open: bool
    start: datetime | None  # of the open window
    next_open: datetime


def maintenance_window(app: AppView, now: datetime) -> WindowState:
    return _window(app.window_cron, app.window_minutes, now)


@functools.lru_cache(maxsize=1024)  # a re-plan of 1 000 apps sees a handful of distinct crons
def _window(cron: str, minutes: float, now: datetime) -> WindowState:
    # croniter's get_prev excludes `now` itself: look from just after it, so the window is
    # open at its very first instant (a request deferred until then is granted then).
    prev = croniter(cron, now + timedelta(microseconds=1)).get_prev(datetime)
    nxt = croniter(cron, now).get_next(datetime)
    is_open = now < prev + timedelta(minutes=minutes)
    return WindowState(is_open, prev if is_open else None, nxt)


def net_gain(r: Request, opt: AppOptions, hold_h: float) -> float:
    """The request's gain with the cost of holding cores (`core_hour_cost`): a scale-out's new
    cores are held for `hold_h` hours at least, a scale-in saves holding its cores that long."""
    cores: int | None = r.snapshot.get("cores")
    target = r.target_cores
    if not opt.core_hour_cost or cores is None or target is None:
        return r.gain
    if r.action == SCALE_OUT:
        return r.gain - opt.core_hour_cost * max(0, target - cores) * hold_h
    if r.action == SCALE_IN:
        return r.gain + opt.core_hour_cost * max(0, cores - target) * hold_h
    return r.gain


def _decide(r: Request, outcome: str, reason: str, before: float, after: float, **kw: Any) -> Decision:
    return Decision(r, outcome, reason, round(before, 3), round(after, 3), **kw)


@dataclass
class _Ledger:
    """A cycle's decisions so far, and the stages granted an action (one each per cycle)."""

    decisions: list[Decision] = field(default_factory=list)
    granted_stages: set[str] = field(default_factory=set)
    notes: dict[int, str] = field(default_factory=dict)  # id(request) → what its grant's reason adds

    def grant(self, r: Request, reason: str, before: float, after: float, **kw: Any) -> None:
        note = self.notes.get(id(r))
        self.decisions.append(_decide(r, "granted", f"{reason}; {note}" if note else reason, before, after, **kw))
        self.granted_stages.add(r.stage_id)

    def add(self, r: Request, outcome: str, reason: str, tokens: float, **kw: Any) -> None:
        """A decision that spends no token."""
        self.decisions.append(_decide(r, outcome, reason, tokens, tokens, **kw))

    def stage_taken(self, r: Request, tokens: float) -> bool:
        """Whether another action of r's stage was granted this cycle (then r is declined)."""
        if r.stage_id not in self.granted_stages:
            return False
        self.add(r, "declined", "another action for this stage was granted", tokens)
        return True


def _stable(reconfigs: list[Request], facts: Mapping[str, StageFacts], now: datetime, opt: AppOptions,
            tokens: float, ledger: _Ledger) -> list[Request]:
    """The requests plan.stability lets through; a decision for each one it stops, and a note on
    each reversal it lets through (a stage falling behind), which its grant's reason carries."""
    kept = []
    for r in reconfigs:
        f = facts.get(r.stage_id, StageFacts())
        verdict = stability_verdict(r, f, now, opt)
        if verdict is not None:
            ledger.add(r, verdict[0], verdict[1], tokens)
            continue
        reverses = reversal(r, f, now, opt)
        if reverses is not None:
            ledger.notes[id(r)] = f"it reverses {reverses}, allowed: the stage is falling behind"
        kept.append(r)
    return kept


def _spend_tokens(ledger: _Ledger, reconfigs: list[Request], tokens: float, net: dict[int, float], hold_h: float,
                  urgent: bool, opt: AppOptions) -> float:
    """Scale-outs and new replicas (which cost cores like one), best net gain/cost first: a token
    each while the bucket has one, except that urgent scale-outs after the first ride on its token
    (one episode of change for an app falling behind). Returns the tokens left."""
    shared = False  # an urgent scale-out spent a token this cycle: the other urgent ones ride on it
    for r in (r for r in reconfigs if r.action in (SCALE_OUT, ADD_REPLICA)):
        if ledger.stage_taken(r, tokens):
            continue
        if opt.core_hour_cost and net[id(r)] <= 0 and not urgent:
            ledger.add(r, "declined", f"holding its cores {hold_h:.1f} h until the next window costs "
                                      f"more than the risk it removes (net gain {net[id(r)]:.3g})", tokens)
        elif shared and r.action == SCALE_OUT:
            ledger.grant(r, "urgent: response > R_max and backlog growing; granted with this cycle's first "
                            "urgent scale-out, on its token", tokens, tokens, urgent=urgent)
        elif tokens >= 1.0:
            ledger.grant(r, f"{'urgent: response > R_max and backlog growing; ' if urgent else ''}"
                            f"best gain/cost {net[id(r)] / max(r.cost_ms / 1000.0, 0.001):.3g}, token spent",
                         tokens, tokens - 1.0, urgent=urgent)
            tokens -= 1.0
            shared = urgent and r.action == SCALE_OUT
        else:
            ledger.add(r, "declined", f"no token ({tokens:.2f} < 1); re-proposed while the condition lasts",
                       tokens, urgent=urgent)
    return tokens


def _in_window(ledger: _Ledger, reconfigs: list[Request], tokens: float, app: AppView, window: WindowState,
               used: int) -> int:
    """Disruptive actions: granted while the maintenance window is open and its budget lasts,
    deferred to its next opening otherwise. A scale-in taken live is no disruption: granted now,
    outside the window's budget. Returns the window's actions used."""
    for r in (r for r in reconfigs if r.action in DISRUPTIVE):
        if ledger.stage_taken(r, tokens):
            continue
        if r.live:
            ledger.grant(r, "a live scale-in: executors given back while the query runs, no checkpoint "
                            "involved and no outage, so no maintenance window", tokens, tokens)
        elif window.open and used < app.window_max_actions:
            used += 1
            ledger.grant(r, f"maintenance window open since {window.start:%H:%M}; "
                            f"action {used} of {app.window_max_actions}", tokens, tokens)
        else:
            why = "window budget spent" if window.open else "disruptive action waits for the maintenance window"
            ledger.add(r, "deferred", why, tokens, defer_until=window.next_open)
    return used


def application_cycle(
    app: AppView,
    opt: AppOptions,
    state: AppState,
    requests: list[Request],
    response_ms: float | None,
    backlog_growing: bool,
    now: datetime,
    facts: Mapping[str, StageFacts] | None = None,
) -> tuple[list[Decision], AppState]:
    # End of the previous interval: refill the bucket from the measured response time.
    gen = GENERATORS[opt.generator]
    tokens = min(opt.capacity, state.tokens + gen(response_ms, app.r_max_ms, opt.beta))
    window = maintenance_window(app, now)
    used = state.window_actions if window.start is not None and window.start == state.window_start else 0
    urgent = response_ms is not None and response_ms > app.r_max_ms and (backlog_growing or not opt.urgent_needs_growth)
    ledger = _Ledger()
    for r in (r for r in requests if r.action in LOCAL):
        ledger.add(r, "granted", "local action: no restart, no token", tokens)
    for r in (r for r in requests if r.action == REMOVE_REPLICA):
        ledger.add(r, "granted", "a replica given back: no outage, no token", tokens)

    # Cores added now can be given back at the next window's opening at the earliest.
    hold_h = max(0.0, (window.next_open - now).total_seconds() / 3600.0)
    net = {id(r): net_gain(r, opt, hold_h) for r in requests}
    reconfigs = sorted((r for r in requests if r.action not in LOCAL and r.action != REMOVE_REPLICA),
                       key=lambda r: net[id(r)] / max(r.cost_ms / 1000.0, 0.001), reverse=True)
    if facts is not None:  # refused before the bucket or the window's budget sees them: nothing spent
        reconfigs = _stable(reconfigs, facts, now, opt, tokens, ledger)
    if opt.policy == "accept_all":
        for r in reconfigs:
            if not ledger.stage_taken(r, tokens):
                ledger.grant(r, "accept_all grants every request", tokens, tokens)
        return ledger.decisions, replace(state, tokens=tokens)

    tokens = _spend_tokens(ledger, reconfigs, tokens, net, hold_h, urgent, opt)
    used = _in_window(ledger, reconfigs, tokens, app, window, used)
    new_state = AppState(tokens=tokens, window_start=window.start or state.window_start, window_actions=used)
    return ledger.decisions, new_state
