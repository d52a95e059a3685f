"""The discrete-time (1 s) simulator. It drives the production control code unchanged:
`plan.operator.operator_cycle` per stage every `local_period_s` and
`plan.application.application_cycle` per app every `control_interval_s`, through in-memory
stores (open requests, operator and app state, the cost model's history).

One simulated second (sim/stage_second.py), stage by stage along the chain (stage k+1 receives what stage k processed):
    capacity  = cores × rate_per_core × (1 + N(0, capacity_noise)) × up_fraction
    available = backlog + arrivals
    processed = min(available, capacity);  backlog' = available − processed
    busy      = min(1, available / capacity) × up_fraction
    latency   = base_latency_ms + queue_ms·ρ/(1−ρ) + 1000·backlog'/nominal_capacity
                + 1000·remaining downtime (a record arriving while the stage is down waits for it)
The app's response time is the sum of the stage latencies (a chain: every stage is on the
critical path). Its per-second p90 uses the backlog 90 % through the second.

With replicas (sim/ha.py) the lines above run for each replica on its own backlog, with the
time its faults block it (sim/faults.py) taken out of up_fraction and remaining downtime. The
stage writes what its furthest-ahead replica wrote (the frontier never moves back), its latency
is its lowest replica's, and it is up while any replica processes. One replica without faults
is exactly the model above.

Micro-batches (StageSpec.trigger_interval_s, batch_overhead_ms, max_batch_rows: model.batch_capacity) take
each batch's overhead out of the capacity, its duration replaces queue_ms, a restart's first batch lands at once.
SimConfig.scripted replays a real run's changes instead of the managers' (sim/calibrate.py, stagerun.apply_scripted).
"""

from __future__ import annotations

import math
import random
from dataclasses import replace
from datetime import timedelta
from typing import Any

import numpy as np

from streamops.analyze.forecast import Forecaster, bucket_means, innovation_sd
from streamops.analyze.season import SkillTracker, season_of
from streamops.analyze.stats import StageStats
from streamops.plan.application import AppView, application_cycle
from streamops.plan.budget import Budget, Seconds, budget, windows
from streamops.plan.change import live_scale_in
from streamops.plan.cost import CostModel, Observation
from streamops.plan.model import LOCAL, MIGRATE, PRESTAGE, RELEASE, REPLICA_ACTIONS, AppState, Request
from streamops.plan.operator import OperatorContext, PoolRoom, operator_cycle
from streamops.plan.options import AppOptions, OperatorOptions
from streamops.plan.stability import LastChange, StageFacts, draining, refreshed_target
from streamops.sim import ha as ha_mod
from streamops.sim import mechanism as sim_mechanism
from streamops.sim.model import SimConfig
from streamops.sim.stage_second import stage_second
from streamops.sim.stagerun import Reconfig, StageRun, apply_scripted
from streamops.sim.traces import SimTrace

# The redundancy manager's forecast buckets (seconds): see Simulation._redundancy_utilization.
REDUNDANCY_BUCKET_S = 10.0


def _slope(y: np.ndarray) -> float:
    if len(y) < 2:
        return 0.0
    x = np.arange(len(y), dtype=float)
    x -= x.mean()
    return float((x * (y - y.mean())).sum() / (x * x).sum())


class Simulation:
    def __init__(self, cfg: SimConfig, operator: str, op_opts: OperatorOptions, app_opts: AppOptions,
                 trace: SimTrace, duration_s: int, seed: int):
        self.cfg, self.operator, self.op_opts, self.app_opts = cfg, operator, op_opts, app_opts
        self.trace, self.T, self.seed = trace, int(duration_s), seed
        master = random.Random(seed)
        # Separate streams, all from random.Random(seed): the load and service noise is the same
        # for every policy (common random numbers); downtimes and migration picks are drawn in order.
        self.noise_rng = random.Random(master.getrandbits(64))
        self.mech_rng = random.Random(master.getrandbits(64))
        self.op_rng = random.Random(master.getrandbits(64))
        self.ha_rng = random.Random(master.getrandbits(64))  # service noise of replicas beyond the first
        self.cost = CostModel()
        self.app = AppView(cfg.app, cfg.r_max_ms, cfg.window_cron, cfg.window_minutes, cfg.window_max_actions)
        self.app_state = AppState()  # as production starts an app: one token
        # pools: the home pool "local" (room for every stage) plus cfg.pools {name: (cores, delay_ms)};
        # the delay between two non-home pools is the sum of their delays to home.
        self.pool_cores = {"local": 10**6, **{n: int(v[0]) for n, v in cfg.pools.items()}}
        self.pool_delay = {"local": 0.0, **{n: float(v[1]) for n, v in cfg.pools.items()}}
        T = self.T
        self.stages = [StageRun(spec=s, n=s.cores, cores=np.zeros(T), backlog=np.zeros(T), latency=np.zeros(T),
                                latency_p90=np.zeros(T), busy=np.zeros(T), processed=np.zeros(T),
                                arrivals=np.zeros(T), up=np.ones(T), ha=ha_mod.build(s, cfg, T, seed))
                       for s in cfg.stages]
        self.rate = np.zeros(T)
        self.response = np.zeros(T)
        self.response_p90 = np.zeros(T)
        self.down = np.zeros(T)  # app: share of the second with some stage down
        self.core_seconds = 0.0
        self.open: dict[tuple[str, str], Request] = {}  # the request store: one open per (stage, action)
        self.next_id = 1
        self.reconfigs: list[Reconfig] = []
        self.decisions: dict[str, dict[str, int]] = {}
        self.requests_made = 0
        self.tokens: list[tuple[int, float]] = []
        # the app's error budget over the trace's (compressed) day, as production's over a UTC day
        self.budget_windows = windows(float(trace.meta.get("day_s", 86400.0)), app_opts.control_interval_s)
        self.forecaster = Forecaster()  # with `forecast`: each stage's input-rate forecast, refitted as it goes
        self.skill = SkillTracker()  # and its recent error against the naive forecast's

    # ------------------------------------------------------------------ the model, one second
    def _step(self, t: int) -> None:
        cfg, rng = self.cfg, self.noise_rng
        rate = self.trace.rows(t)
        self.rate[t] = rate
        inflow = max(0.0, rate * (1.0 + rng.gauss(0.0, cfg.arrival_noise)))
        total_resp = total_p90 = 0.0
        app_down = 0.0
        for st in self.stages:
            noise = max(0.0, 1.0 + rng.gauss(0.0, cfg.capacity_noise))  # drawn every second, always
            out, up, lat, lat90 = self._stage_second(st, t, inflow, noise)
            app_down = max(app_down, 1.0 - up)
            total_resp += lat
            total_p90 += lat90
            inflow = out * st.spec.selectivity
        self.response[t], self.response_p90[t], self.down[t] = total_resp, total_p90, app_down

    def _stage_second(self, st: StageRun, t: int, inflow: float, noise0: float) -> tuple[float, float, float, float]:
        """One second of a stage, every replica (sim/stage_second.py): returns the stage's output
        (rows written), up share, latency and p90 latency."""
        second = stage_second(self.cfg, st, t, inflow, noise0, self.ha_rng)
        self.core_seconds += second.core_seconds
        return second.out, second.up, second.latency, second.latency_p90

    def _caught_up(self, st: StageRun, p: Reconfig, t: int) -> None:
        """The cost model learns change `p`'s output gap plus its catch-up, as production does
        (`reconfigurations.downtime_ms` + caught_up_at − first_batch_done_at)."""
        one_second = st.n * st.spec.rate_per_core
        if st.backlog_now > max(p.backlog_before, one_second) and t + 1 - p.down_end < 600 and st.pending is None:
            return
        st.catching_up = None
        self.cost.add(Observation(st.spec.name, p.action, st.spec.state_bytes, p.downtime_s * 1000.0, p.mechanism,
                                  max(0.0, t + 1 - p.down_end) * 1000.0))

    # ------------------------------------------------------------------ monitor → operator
    def _stats(self, st: StageRun, t: int) -> StageStats:
        opt = self.op_opts
        start = max(0, int(math.ceil(max(t - opt.window_s, st.restart_t + opt.stabilization_s))))
        sp = st.spec
        if st.pending is not None or start >= t:
            return StageStats(sp.name, self.cfg.app, st.pool, st.n, sp.min_cores, sp.max_cores, sp.state_partitions,
                              span_s=0.0, batches=0, input_rows=0, busy_ms=0.0, backlog_rows=st.backlog_now,
                              backlog_growth_rps=0.0, latency_p95_ms=None, state_bytes=sp.state_bytes,
                              host_cpu=None, host_mem=self.cfg.host_mem, busy_source="batch_busy")
        sl = slice(start, t)
        busy = st.busy[sl]
        span = float(t - start)
        return StageStats(
            stage_id=sp.name, app=self.cfg.app, pool=st.pool, cores=st.n, min_cores=sp.min_cores,
            max_cores=sp.max_cores, state_partitions=sp.state_partitions, span_s=span,
            batches=int((st.up[sl] > 0).sum()), input_rows=int(round(st.processed[sl].sum())),
            busy_ms=float(busy.sum() * 1000.0), backlog_rows=float(st.backlog[t - 1]),
            backlog_growth_rps=_slope(st.backlog[sl]), latency_p95_ms=float(np.percentile(st.latency[sl], 95)),
            state_bytes=sp.state_bytes, host_cpu=float(busy.mean()), host_mem=self.cfg.host_mem,
            busy_source="batch_busy", recent_arrival_rate=self._recent(st, start, t), **self._forecast(st, t))

    def _recent(self, st: StageRun, start: int, t: int) -> float:
        """Rows/s arriving over the window's last `recent_s`, as production's stage_windows.sql
        measures them: the rows processed plus the backlog's slope."""
        sl = slice(max(start, t - int(round(self.op_opts.recent_s))), t)
        return max(0.0, float(st.processed[sl].mean()) + _slope(st.backlog[sl]))

    def _fed(self, up: StageRun, stats: StageStats, down: StageRun, t: int) -> float | None:
        """What stage `up` passes on to `down` once it serves all it receives: its arrival rate × its
        selectivity, measured over its window as rows `down` received per row `up` processed."""
        sl = slice(max(0, t - int(self.op_opts.window_s)), t)
        processed = float(up.processed[sl].sum())
        if stats.span_s <= 0 or processed <= 0:
            return None
        return stats.arrival_rate * float(down.arrivals[sl].sum()) / processed

    def _forecast(self, st: StageRun, t: int) -> dict[str, Any]:
        """With `forecast`: the input rate forecast from the stage's own arrivals (complete buckets),
        as StageStats' forecast_rate (its peak), forecast_path and forecast_sd."""
        opt = self.op_opts
        if not opt.forecast:
            return {}
        history = bucket_means(st.arrivals[:t], opt.forecast_bucket_s)
        season = season_of(history, opt)
        f = self.forecaster.forecast(st.spec.name, history, bucket_s=opt.forecast_bucket_s,
                                     season_s=season, horizon_s=opt.forecast_horizon_s)
        if f is None:
            return {}
        skill = self.skill.skill(st.spec.name, history)  # before this forecast joins the record
        self.skill.record(st.spec.name, len(history), f.path)
        return {"forecast_rate": f.peak, "forecast_path": f.path, "forecast_sd": innovation_sd(history),
                "forecast_skill": skill, "forecast_season_s": season}

    def _budget(self, t: int) -> Budget:
        """The app's error budget at t (plan/budget.py): the seconds above R_max in its two burn
        windows and in its period so far; every simulated second is measured."""
        w = self.budget_windows
        above = self.response[:t] > self.cfg.r_max_ms

        def since(lo: float) -> Seconds:
            i = max(0, int(lo))
            return Seconds(t - i, float(above[i:].sum()))

        return budget(self.cfg.slo_target, w, since(t - w.short_s), since(t - w.long_s), since(t - t % w.period_s))

    def _operator_cycles(self, t: int) -> None:
        app_budget = self._budget(t) if self.operator == "mpc" else None  # the one policy with a price
        fed: float | None = None  # the chain: what the stage before passes on (`_fed`)
        for k, st in enumerate(self.stages):
            stats = replace(self._stats(st, t), upstream_arrival_rate=fed)
            fed = self._fed(st, stats, self.stages[k + 1], t) if k + 1 < len(self.stages) else None
            ctx = replace(self._ctx(st), budget=app_budget)
            reqs, st.op_state = operator_cycle(self.operator, stats, self.op_opts, st.op_state, ctx)
            name = st.spec.name
            proposed = set()
            for r in reqs:
                self.requests_made += 1
                key = (name, r.action)
                if r.action in LOCAL:
                    other = (name, RELEASE if r.action == PRESTAGE else PRESTAGE)
                    if other in self.open:  # a release cancels a pending prestage and vice versa
                        del self.open[other]
                        if r.action == RELEASE:
                            continue
                old = self.open.get(key)
                rid = old.id if old is not None else self._new_id()
                since = old.first_made_at if old is not None else self.cfg.start + timedelta(seconds=t)
                target = r.target_cores if old is None else refreshed_target(
                    r.action, r.snapshot.get("cores"), old.target_cores, r.target_cores)
                self.open[key] = replace(r, id=rid, first_made_at=since, target_cores=target)  # refreshed, never twice
                proposed.add(r.action)
            if self.cfg.withdraw_stale:
                for key in [k for k in self.open if k[0] == name and k[1] not in LOCAL and k[1] not in proposed
                            and k[1] not in REPLICA_ACTIONS]:  # the redundancy manager's own
                    del self.open[key]

    def _ctx(self, st: StageRun) -> OperatorContext:
        """The other pools seen from the stage's pool, with the cores they have left."""
        if not self.cfg.pools:
            return OperatorContext(self.cfg.r_max_ms, self.cost, {}, self.op_rng, len(self.stages))
        used: dict[str, int] = {}
        for o in self.stages:
            used[o.pool] = used.get(o.pool, 0) + o.n
        here = self.pool_delay[st.pool]
        rooms = {p: PoolRoom(self.pool_cores[p] - used.get(p, 0),
                             abs(self.pool_delay[p] - here) if "local" in (p, st.pool) else self.pool_delay[p] + here)
                 for p in self.pool_cores if p != st.pool}
        return OperatorContext(self.cfg.r_max_ms, self.cost, rooms, self.op_rng, len(self.stages))

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def _redundancy_utilization(self, st: StageRun, t: int) -> float | None:
        """The input rate forecast over the redundancy manager's next period (and a new replica's
        start-up) over one replica's capacity. The forecaster's own series per stage, in buckets of
        REDUNDANCY_BUCKET_S (a manager steps every minute or so: 60 s buckets would give no forecast
        for the first 10 minutes); before it has MIN_BUCKETS, the last period's mean input rate."""
        m = st.ha.manager
        if m is None or t <= 0:
            return None
        f = self.forecaster.forecast(f"{st.spec.name}#redundancy", bucket_means(st.arrivals[:t], REDUNDANCY_BUCKET_S),
                                     bucket_s=REDUNDANCY_BUCKET_S, season_s=self.op_opts.forecast_season_s,
                                     horizon_s=m.period + self.cfg.restart_s)
        rate = f.peak if f is not None else float(st.arrivals[max(0, t - m.period):t].mean())
        capacity = st.n * st.spec.rate_per_core
        return rate / capacity if capacity > 0 else None

    def _redundancy_cycles(self, t: int) -> None:
        """Each HA stage's redundancy manager, on its period: file, refresh or withdraw its request."""
        for st in self.stages:
            if not ha_mod.due(st.ha, t):
                continue
            util = self._redundancy_utilization(st, t) if st.ha.manager and st.ha.manager.opts.add_violation_rate > 0 \
                else None
            req = ha_mod.redundancy_request(st.ha, t, self.cfg.app, self.cfg.restart_s, util)
            name = st.spec.name
            for key in [(name, a) for a in REPLICA_ACTIONS if req is None or a != req.action]:
                self.open.pop(key, None)  # no longer wanted
            if req is not None:
                self.requests_made += 1
                old = self.open.get((name, req.action))
                self.open[(name, req.action)] = replace(req, id=old.id if old is not None else self._new_id(),
                                                        snapshot={**req.snapshot, "t_s": t})

    # ------------------------------------------------------------------ application manager
    def _app_cycle(self, t: int) -> None:
        T = int(self.app_opts.control_interval_s)
        sl = slice(max(0, t - T), t)
        resp = self.response[sl]
        response_ms = float(np.percentile(resp, 95)) if self.cfg.response_stat == "p95" else float(resp.mean())
        growing = any(_slope(st.backlog[sl]) > 0 for st in self.stages)
        now = self.cfg.start + timedelta(seconds=t)
        order = {st.spec.name: i for i, st in enumerate(self.stages)}
        by_name = {st.spec.name: st for st in self.stages}
        # a scale-in the stage can take live needs no window: production's test (plan.change)
        requests = sorted((replace(r, live=live_scale_in(r, sim_mechanism.stage_now(self.cfg, by_name[r.stage_id])))
                           if r.stage_id in by_name else r for r in self.open.values()),
                          key=lambda r: (order.get(r.stage_id, 0), r.action))
        decisions, self.app_state = application_cycle(self.app, self.app_opts, self.app_state, requests,
                                                      response_ms, growing, now, self._facts(t))
        self.tokens.append((t, self.app_state.tokens))
        for d in decisions:
            r = d.request
            counts = self.decisions.setdefault(r.action, {"granted": 0, "declined": 0, "deferred": 0})
            counts[d.outcome] = counts.get(d.outcome, 0) + 1
            key = (r.stage_id, r.action)
            if d.outcome == "deferred":
                continue  # stays open
            self.open.pop(key, None)
            if d.outcome != "granted":
                continue
            st = by_name[r.stage_id]
            if r.action in REPLICA_ACTIONS:
                ha_mod.resize(st.ha, t, r, d.reason, self.cfg)
            elif r.action == PRESTAGE:
                st.prestage_ready_at = t + self.cfg.prestage_s
            elif r.action == RELEASE:
                st.prestage_ready_at = None
            else:
                self._execute(st, r, t, d.urgent)

    def _facts(self, t: int) -> dict[str, StageFacts]:
        """Each stage's last change and whether its backlog drains, as production reads them."""
        last: dict[str, LastChange] = {}
        for rc in self.reconfigs:  # in grant order: the latest wins
            last[rc.stage] = LastChange(self.cfg.start + timedelta(seconds=rc.t), rc.action, rc.from_cores,
                                        rc.to_cores)
        T = int(self.app_opts.control_interval_s)
        return {st.spec.name: StageFacts(last.get(st.spec.name), draining(
            st.backlog_now, float(st.arrivals[max(0, t - T):t].mean()) if t > 0 else 0.0, self.app_opts))
            for st in self.stages}

    def _execute(self, st: StageRun, r: Request, t: int, urgent: bool) -> None:
        if st.pending is not None:
            return  # cannot happen: a down stage proposes nothing and its requests were withdrawn
        target = st.n if r.action == MIGRATE else int(r.target_cores or st.n)
        target = max(st.spec.min_cores, min(st.spec.max_cores, target))
        ready = st.prestage_ready_at is not None and st.prestage_ready_at <= t
        # production's cost rule over the stage's situation; the simulator's outage for what it picked
        mech, overlap, downtime = sim_mechanism.carry_out(self.cfg, st, r, target, ready, self.mech_rng)
        rc = Reconfig(t=float(t), stage=st.spec.name, action=r.action, from_cores=st.n, to_cores=target,
                      mechanism=mech, downtime_s=downtime, down_start=t + overlap, down_end=t + overlap + downtime,
                      reason=r.reason, pool=r.target_pool if r.action == MIGRATE else None, urgent=urgent,
                      backlog_before=st.backlog_now)
        st.pending = rc
        st.overlap_until = t + overlap
        self.reconfigs.append(rc)
        for key in [k for k in self.open if k[0] == st.spec.name]:
            del self.open[key]  # every other open request of this stage is stale now

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        lp = int(round(self.op_opts.local_period_s))
        ci = int(round(self.app_opts.control_interval_s))
        if lp <= 0 or ci <= 0:
            raise ValueError("local_period_s and control_interval_s must be ≥ 1 s")
        scripted = self.cfg.scripted is not None  # a real run's changes, not the managers' (calibrate.py)
        managed = not scripted and any(st.ha.manager is not None for st in self.stages)
        faulty = [st for st in self.stages if st.ha.events]
        for t in range(self.T):
            for st in self.stages:
                st.advance_reconfig(t)  # restarts that completed by t, before anyone looks
            if scripted:
                apply_scripted(self.cfg.scripted or (), self.stages, self.reconfigs, t)
            if t > 0 and t % lp == 0 and not scripted:
                self._operator_cycles(t)
            if managed:
                self._redundancy_cycles(t)  # before the Application Manager: granted in the same cycle
            if t > 0 and t % ci == 0 and not scripted:
                self._app_cycle(t)
            for st in faulty:
                ha_mod.fire_faults(st.ha, t, st.n, self.cfg)
            self._step(t)
            for st in self.stages:
                if st.catching_up is not None:
                    self._caught_up(st, st.catching_up, t)
        for st in self.stages:
            ha_mod.finish(st.ha, self.T)
