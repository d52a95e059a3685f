"""The driver's threads share the run's context and queries through one owner (agent/run_state.py)."""

from __future__ import annotations

import dataclasses
import sys
import threading
import time

import pytest

from streamops.agent import run_state
from streamops.agent.metrics import StageContext
from streamops.agent.run_state import RunState


class Query:
    """Stands for a StreamingQuery: says which change started it."""

    def __init__(self, started_by: int) -> None:
        self.started_by = started_by


def _ctx() -> StageContext:
    return StageContext("s", 1, cores=1, state_partitions=1, trigger_interval_ms=1000)


@pytest.fixture(autouse=True)
def _switch_often():
    # Threads switch every few bytecodes: a torn read or a lost update would show within the loop.
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_a_reader_never_sees_the_context_of_one_change_with_the_queries_of_another():
    state, done, torn = RunState(_ctx()), threading.Event(), []

    def change() -> None:  # the command thread: an in-driver change, cores and queries together
        for n in range(2, 3000):
            state.change(cores=n, state_partitions=n, queries=[Query(n), Query(n)])
        done.set()

    def listen() -> None:  # the listener thread: reads one view, every field from it
        while not done.is_set():
            view = state.view
            if view.queries and {q.started_by for q in view.queries} != {view.ctx.cores}:
                torn.append(view)

    threads = [threading.Thread(target=change), threading.Thread(target=listen)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not torn
    assert state.view.ctx.cores == 2999 and [q.started_by for q in state.view.queries] == [2999, 2999]


def test_two_writers_of_different_fields_never_lose_each_other_s_change(monkeypatch):
    """The scale handler changes cores while the supervisor replaces a query: each keeps the other's."""
    def slow_replace(ctx: StageContext, **changes: int) -> StageContext:
        time.sleep(0)  # the other writer runs here, in the middle of this one's change
        return dataclasses.replace(ctx, **changes)

    monkeypatch.setattr(run_state, "replace", slow_replace)
    state, n = RunState(_ctx()), 2000
    seen_cores: list[int] = []

    def scale() -> None:
        for cores in range(2, n):
            state.change(cores=cores)

    def restart_queries() -> None:
        for i in range(2, n):
            view = state.change(queries=[Query(i)])
            seen_cores.append(view.ctx.cores)

    threads = [threading.Thread(target=scale), threading.Thread(target=restart_queries)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert state.view.ctx.cores == n - 1 and [q.started_by for q in state.view.queries] == [n - 1]
    assert seen_cores == sorted(seen_cores)  # no query change ever put back an older context
