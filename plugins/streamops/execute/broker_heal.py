"""The embedded Kafka broker healed like the Spark master: a broker that died (kill -9, OOM) is
restarted on its ports with its data by the supervisor's housekeeping (`kafka_broker.heal`), and
each stage reading it while it ran gets one `broker_lost` failure, timed from the last pass that
saw the broker alive and closed at the stage's first commit after the heal
(failures_close_healed.sql). A broker stopped with `kafka down` has no pid: it is left alone."""

from __future__ import annotations

import logging
import time

from streamops import kafka_broker, registry
from streamops.store import db, failures

log = logging.getLogger("streamops.watchdog")

_SEEN_ALIVE: dict[int, float] = {}  # broker pid → the last pass that saw it alive (time.monotonic())


def _reads_it(reg: registry.Registry, stage_id: str, bootstrap: str) -> bool:
    try:
        source = reg.stage(stage_id)[2].source
    except registry.RegistryError:
        return False
    if source.kind != "kafka":
        return False
    try:
        return kafka_broker.client_settings(source.bootstrap_servers).bootstrap == bootstrap
    except kafka_broker.KafkaBrokerError:
        return False


def heal_broker(reg: registry.Registry, detected_by: str, progress=lambda _: None) -> bool:
    """Restart the embedded broker if it died; whether it was restarted."""
    b = kafka_broker.load_record()
    if b is None or b.pid is None:  # none, or stopped on purpose
        return False
    now = time.monotonic()  # dated by the database's clock only for its failure row (docs/ha.md, "Clocks")
    if kafka_broker.is_alive(b):  # a pid check, no request: cheap every pass
        _SEEN_ALIVE[b.pid] = now
        return False
    since = _SEEN_ALIVE.pop(b.pid, now)
    if not kafka_broker.heal():
        progress(f"action=heal the Kafka broker (pid {b.pid}) is dead and did not come back; tried again next pass")
        return False
    what = f"the embedded Kafka broker (pid {b.pid}, {b.bootstrap}) was dead and restarted on its port"
    progress(f"action=heal {what}")
    for c in failures.watchdog_candidates():
        if c.status != "running" or not _reads_it(reg, c.stage_id, b.bootstrap):
            continue
        fid, _, created = failures.open_failure(c.stage_id, c.app, c.id, "broker_lost", f"{what}; the run went on",
                                                db.time_of(since), role=c.role, detected_by=detected_by)
        if created:
            log.warning("stage %s: action=heal role=%s failure=%d kind=broker_lost: %s", c.stage_id, c.role, fid, what)
    return True
