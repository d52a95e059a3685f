"""The data-quality suites as code: Great Expectations 1.x `ExpectationSuite` objects.

Each builder returns a fresh suite (GX suites are mutable and bound to a context once added).
Where GX has no expectation for a rule, the query asset (sql/queries/dq_*.sql) or the Spark
DataFrame computes one column and a built-in expectation checks it; the comment says why.
"""

from __future__ import annotations

import great_expectations as gx
import great_expectations.expectations as gxe

from streamops.generator import records


class _Suite:
    """Collects expectations, then builds the suite in one go: `ExpectationSuite.add_expectation`
    needs an active data context, the constructor does not."""

    def __init__(self, name: str) -> None:
        self.name, self.expectations = name, list[gxe.Expectation]()

    def add_expectation(self, e: gxe.Expectation) -> None:
        self.expectations.append(e)

    def build(self) -> gx.ExpectationSuite:
        return gx.ExpectationSuite(name=self.name, expectations=self.expectations)


# Suite names, also the `suite` column of dq_results.
STAGE_METRICS = "stage_metrics"
SINK_OUTPUTS = "sink_outputs"
SINK_PARQUET = "sink_outputs_parquet"
INPUT_RECORDS = "input_records"
GATE_STAGE_METRICS = "gate_stage_metrics"
GATE_SINK_OUTPUTS = "gate_sink_outputs"

METRICS_KEYS = ("stage_id", "run_id", "batch_id", "ts")
RATE_COLUMNS = ("input_rps", "processed_rps")


def stage_metrics_suite(name: str = STAGE_METRICS, min_rows: int = 0) -> gx.ExpectationSuite:
    """stage_metrics rows (a day of an app, or a run's first batches) from dq_stage_metrics_*.sql."""
    s = _Suite(name)
    if min_rows:
        # The gate: a run that has reported no batch has not proven anything.
        s.add_expectation(gxe.ExpectTableRowCountToBeBetween(min_value=min_rows))
    for c in METRICS_KEYS:
        s.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column=c))
    # Batch ids increase within a run: the query pairs each batch with the previous batch of its
    # Spark run (lag() over the run in time order), since GX cannot order within groups; the run's
    # first batch has no predecessor and is skipped.
    s.add_expectation(gxe.ExpectColumnPairValuesAToBeGreaterThanB(
        column_A="batch_id", column_B="prev_batch_id", or_equal=False, ignore_row_if="either_value_is_missing"))
    for c in RATE_COLUMNS:  # NULL (no timing yet) is allowed; GX skips NULLs in between-checks
        s.add_expectation(gxe.ExpectColumnValuesToBeBetween(column=c, min_value=0))
    # Latency percentiles ordered: p50 ≤ p95 ≤ max (all NULL for a batch without output rows).
    s.add_expectation(gxe.ExpectColumnPairValuesAToBeGreaterThanB(
        column_A="latency_p95_ms", column_B="latency_p50_ms", or_equal=True, ignore_row_if="either_value_is_missing"))
    s.add_expectation(gxe.ExpectColumnPairValuesAToBeGreaterThanB(
        column_A="latency_max_ms", column_B="latency_p95_ms", or_equal=True, ignore_row_if="either_value_is_missing"))
    return s.build()


def sink_outputs_suite(name: str = SINK_OUTPUTS, min_rows: int = 0) -> gx.ExpectationSuite:
    """One stage's sink_outputs rows (dq_sink_outputs_*.sql): `count` is `value->>'count'`."""
    s = _Suite(name)
    if min_rows:
        s.add_expectation(gxe.ExpectTableRowCountToBeBetween(min_value=min_rows))
    s.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column="key"))
    # The primary key (stage_id, key) already forbids duplicates in PostgreSQL; the expectation
    # guards the contract the idempotent sink relies on if that ever changes.
    s.add_expectation(gxe.ExpectColumnValuesToBeUnique(column="key"))
    s.add_expectation(gxe.ExpectColumnValuesToBeBetween(column="count", min_value=0))
    s.add_expectation(gxe.ExpectColumnValuesToBeBetween(column="version", min_value=0))
    return s.build()


def parquet_sink_suite(name: str = SINK_PARQUET) -> gx.ExpectationSuite:
    """A Parquet sink's rows (key, value, event_ts, version, batch_id from the `batch_id=N` directories,
    and `count` from the JSON value). The Parquet sink writes one directory per batch, and in update
    mode the same key recurs in later batches with a newer count: a key is unique per batch."""
    s = _Suite(name)
    s.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column="key"))
    s.add_expectation(gxe.ExpectCompoundColumnsToBeUnique(column_list=["batch_id", "key"]))
    s.add_expectation(gxe.ExpectColumnValuesToBeBetween(column="count", min_value=0))
    s.add_expectation(gxe.ExpectColumnValuesToBeBetween(column="version", min_value=0))
    return s.build()


# Spark types of the parsed input columns (a declared schema's, streamops.records), as GX names them.
_SPARK_TYPE = {"string": "StringType", "timestamp": "TimestampType", "double": "DoubleType", "int": "IntegerType",
               "bigint": "LongType", "boolean": "BooleanType"}

# Key cardinality bounds per input kind: the generator draws these fields from fixed universes
# (generator/records.py), so more distinct values than the universe means foreign or corrupt data.
KEY_CARDINALITY: dict[str, dict[str, int]] = records.UNIVERSE_SIZES


def input_records_suite(schema: dict[str, str], event_time: str | None = None, kind: str | None = None, *,
                        max_malformed: float = 0.05, max_skew_s: float = 60.0, max_lag_s: float = 86_400.0,
                        name: str = INPUT_RECORDS) -> gx.ExpectationSuite:
    """Input lines of a declared `schema`, parsed by the stage's own parser (`parse_records`:
    typed columns plus `reason`, NULL when the line is a valid record) and, with an `event_time`,
    two derived columns: `event_age_s` (validation time − event time) and `publish_lag_s` (file
    publication time − event time). `kind`: the generator's record kind the schema is, whose ids
    are unique and whose keys come from fixed universes.

    GX cannot compare a column with "now" or with another column plus a tolerance, hence the
    derived columns. `max_malformed` is the share of malformed lines tolerated (the quarantine
    takes them; more than that is a broken producer)."""
    s = _Suite(name)
    mostly = 1.0 - max_malformed
    # Schema: every column of the declared schema, with the type the parser casts it to, and present.
    derived = ["event_age_s", "publish_lag_s"] if event_time else []
    s.add_expectation(gxe.ExpectTableColumnsToMatchSet(
        column_set=["raw", "source_file", "reason_kind", "reason", *schema, *derived], exact_match=True))
    s.add_expectation(gxe.ExpectColumnValuesToBeNull(column="reason", mostly=mostly))
    for field, typ in schema.items():
        s.add_expectation(gxe.ExpectColumnValuesToBeOfType(column=field, type_=_SPARK_TYPE[typ]))
        s.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column=field, mostly=mostly))
    # Event time: not in the future, and not absurdly old relative to the file (the batch) it came in.
    if event_time:
        s.add_expectation(gxe.ExpectColumnValuesToBeBetween(column="event_age_s", min_value=-max_skew_s))
        s.add_expectation(gxe.ExpectColumnValuesToBeBetween(column="publish_lag_s", min_value=-max_skew_s,
                                                            max_value=max_lag_s))
    if kind is None:
        return s.build()
    # The generator's records: ids are unique; the drawn keys stay within their universes.
    s.add_expectation(gxe.ExpectColumnValuesToBeUnique(column="id"))
    for field, bound in KEY_CARDINALITY[kind].items():
        s.add_expectation(gxe.ExpectColumnUniqueValueCountToBeBetween(column=field, min_value=1, max_value=bound))
    return s.build()
