"""What a running driver is right now, shared between its threads: the run's context (cores,
state partitions) and the queries started with it.

The command thread (an in-driver change, a `scale`) and the driver's main loop (the supervisor
restarting a query) change it; Spark's listener thread, the heartbeat and the periodic threads
read it. They share it through one `RunState`: a reader takes one frozen `RunView` and reads
both fields from it, a writer publishes a new view by one assignment under the lock, so a reader
never sees a context from one change with queries from another, and two writers never lose each
other's field.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from streamops.agent.metrics import StageContext

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery


@dataclass(frozen=True)
class RunView:
    """One consistent moment of a run: its context and its queries (in `QUERIES` order)."""

    ctx: StageContext
    queries: tuple[StreamingQuery, ...] = ()


class RunState:
    """The owner of a run's `RunView`: the only place it is replaced."""

    def __init__(self, ctx: StageContext) -> None:
        self._lock = threading.Lock()
        self._view = RunView(ctx)

    @property
    def view(self) -> RunView:
        """The current view: read it once and take every field from it."""
        return self._view

    def change(self, *, cores: int | None = None, state_partitions: int | None = None,
               queries: Sequence[StreamingQuery] | None = None) -> RunView:
        """Publish a view with the given fields changed and the others as they are now; the new view."""
        with self._lock:
            now = self._view
            ctx = now.ctx
            if cores is not None or state_partitions is not None:
                ctx = replace(ctx, cores=ctx.cores if cores is None else cores,
                              state_partitions=ctx.state_partitions if state_partitions is None else state_partitions)
            self._view = RunView(ctx, now.queries if queries is None else tuple(queries))
            return self._view
