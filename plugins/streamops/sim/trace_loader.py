"""`load_trace`: a simulator trace from any of its textual forms. Above both `traces` and `suite`,
so neither imports the other back.

Accepted forms:
- a built-in name: `diurnal`, `ramp`, `steps`, `spikes` (`traces.BUILTIN`; each comes with a
  default duration);
- any generator spec `kind:name=value,...` of `streamops.generator.traces` (constant, ramp,
  diurnal, step, spike), e.g. `ramp:start_rate=200,doubling_s=500,max_rate=800`;
- a CSV file with columns `t_s,rate` (seconds, rows/s; linearly interpolated, held constant
  before the first and after the last point);
- a replay of a `stage_metrics` export: a CSV with `ts` and `input_rps` or `input_rows`
  (ts: ISO-8601 timestamps or epoch seconds). With `input_rps` the rate is taken as is; with
  `input_rows` a batch's rate is its rows over the time to the next batch (the last batch
  reuses the previous gap). If the file has a `stage_id` column, one stage is replayed: the one
  named after `#` in the path (`export.csv#top10`), else the first stage in the file.
- `suite:FAMILY:SEED` (or `suite:FAMILY`, seed 1): a seeded family of the trace suite (`suite.py`).
"""

from __future__ import annotations

from streamops.sim.suite import load_suite_trace
from streamops.sim.traces import SimTrace, trace_from_text


def load_trace(trace: str | SimTrace) -> SimTrace:
    """A built-in name, a generator spec, a CSV path or `suite:FAMILY:SEED` (see the module docstring)."""
    if isinstance(trace, SimTrace):
        return trace
    text = str(trace).strip()
    if text.startswith("suite:"):
        return load_suite_trace(text)
    return trace_from_text(text)
