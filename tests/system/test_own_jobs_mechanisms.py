"""The team's two own jobs (tests/fixtures/jobs/) through every reconfiguration mechanism on the
embedded Spark cluster, in one run each: live scale-out, in-driver repartition, a pre-staged
scale-out, pause–resume scale-in and an active-backup migration to a local pool. The sink equals
the oracle of tests/integration/test_own_jobs.py (plain Python over the lines written), and the
poison lines are in quarantine with their reasons."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta

import pytest
from sqlalchemy import text

from streamops import quality, registry
from streamops.execute import reconfigure, stages
from tests.integration.test_e2e_stage import _commits, eventually
from tests.integration.test_own_jobs import (
    FLUSH_USER,
    POISON,
    ClickFeeder,
    _expected_clicks,
    _quarantined,
    _registry,
    _sessions,
    _sink_sessions,
    _team_clicks,
    _valid,
)

pytestmark = [pytest.mark.e2e, pytest.mark.db]

# (mechanism, action, target): each from where the one before left the stage (1 core, 2 partitions).
STEPS = [("live", "scale_out", {"cores": 2}),
         ("in_driver", "scale_in", {"cores": 1, "partitions": 4}),
         ("prestaged", "scale_out", {"cores": 2}),
         ("pause_resume", "scale_in", {"cores": 1}),
         ("active_backup", "migrate", {"cores": 1, "pool": "p"})]


def _on_the_cluster(stage_name: str) -> registry.Registry:
    data = _registry().model_dump(mode="json", by_alias=True)
    stage = {**data["apps"]["own"]["stages"][stage_name], "pool": "cluster"}
    # the oracle's line limit; and files enough per batch for one core to keep up with the feeder
    # (at 3 the session job fell 400 files behind and the gate rightly refused its scale-in)
    stage["source"].update(path=f"own/mech-{stage_name}", max_record_bytes=1024, max_files_per_trigger=20)
    return registry.parse({
        "pools": {"cluster": {"master": "embedded", "cores": 2, "executor_cores": 1, "executor_memory": "512m"},
                  "p": {"cores": 2}},
        "apps": {"own": {**data["apps"]["own"], "stages": {stage_name: stage}}}})


@pytest.mark.slow  # five reconfigurations on real drivers, 4-6 min a job on 2 cores: make test-all
@pytest.mark.parametrize("job", ["clicks", "sessions"])
def test_an_own_job_goes_through_every_mechanism_and_equals_the_oracle(clean_db, spark_standalone, job):
    reg = _on_the_cluster(job)
    sid = f"own.{job}"
    done = []
    with ClickFeeder(f"own/mech-{job}", seed=7) as feeder:
        stages.start_stage(sid, reg, wait_s=180)
        feeder.write(POISON)
        for mechanism, action, target in STEPS:
            eventually(lambda: _commits(clean_db, sid) >= 2 * (len(done) + 1), 180, f"commits before {mechanism}")
            rid = reconfigure.request(sid, action, mechanism=mechanism, reg=reg, requested_by="test", **target)
            out = reconfigure.execute(rid, gate=quality.gate_new_run, reg=reg)
            assert out.status == "done", (mechanism, out.detail)
            done.append((mechanism, out.downtime_ms))
        feeder.stop.set()
        feeder.thread.join(10)
        last = max(datetime.fromisoformat(r["ts"]) for r in _valid(feeder.lines))
        feeder.write([json.dumps({"user": FLUSH_USER, "url": "https://shop.example",
                                  "ts": (last + timedelta(hours=1)).isoformat()}).encode()])
    print(f"{job}: downtime per mechanism (ms) {done}")
    if job == "clicks":
        want = _expected_clicks(feeder.lines)
        eventually(lambda: _team_clicks(clean_db) == want, 240, "the team's table to equal the oracle")
    else:
        want = _sessions([r for r in _valid(feeder.lines) if r["user"] != FLUSH_USER])
        eventually(lambda: {k: n for k, n in _sink_sessions(clean_db, sid).items() if k[0] != FLUSH_USER} == want,
                   240, "every closed session, exactly once")
    assert len(want) > 10
    assert _quarantined(clean_db, sid) == Counter({"malformed JSON": 1, "missing field": 1, "wrong type": 1,
                                                   "too large": 1, "invalid UTF-8": 1})
    with clean_db.connect() as conn:
        rows = conn.execute(text("SELECT mechanism, status FROM reconfigurations WHERE stage_id = :s ORDER BY id"),
                            {"s": sid}).all()
        live = conn.execute(text("SELECT pool, cores FROM deployments WHERE stage_id = :s AND status = 'running'"),
                            {"s": sid}).all()
    assert [tuple(r) for r in rows] == [(m, "done") for m, _, _ in STEPS]
    assert [tuple(r) for r in live] == [("p", 1)]
    stages.stop_stage(sid, reg, deadline_s=30)
