"""Data quality with Great Expectations (GX Core 1.x): suites as code (`suites`), the nightly
run and the gate after a reconfiguration (`runner`), Spark-side inputs (`spark_frames`, imported
only when files are validated). Results go to `dq_results`; docs/reporting.md "Data quality"."""

from streamops.quality.runner import GateResult, Result, gate_new_run, run_suites

__all__ = ["GateResult", "Result", "gate_new_run", "run_suites"]
