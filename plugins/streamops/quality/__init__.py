"""Data quality with Great Expectations (GX Core 1.x): suites as code (`suites`), the nightly
run and the gate after a reconfiguration (`runner`). The suites that need Spark run as a job of
their own, `spark_apps/quality_files.py`. Results go to `dq_results`; docs/reporting.md "Data quality"."""

import logging

# GX logs a line per public function it registers at import (about 200 lines of "Skipping
# registering function …" in a task log) and more per validation: keep its warnings only.
logging.getLogger("great_expectations").setLevel(logging.WARNING)

from streamops.quality.runner import GateResult, Result, gate_new_run, run_suites  # noqa: E402

__all__ = ["GateResult", "Result", "gate_new_run", "run_suites"]
