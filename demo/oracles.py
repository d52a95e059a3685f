"""Expected outputs computed in plain Python from the generator's ground truth (its valid records)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, text

from streamops.generator import taxi_cell


def _ts(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def _floor(ts: datetime, seconds: int) -> datetime:
    epoch = int(ts.timestamp())
    return datetime.fromtimestamp(epoch - epoch % seconds, tz=UTC)


def expected(workload: str, records: Iterable[dict], params: dict | None = None) -> dict:
    """key → the comparable part of the sink value, as `actual()` returns it."""
    params = params or {}
    records = list(records)
    if workload in ("identity", "repartition"):
        return {r["id"]: r["id"] for r in records}
    if workload == "wordcount":
        return dict(Counter(w for r in records for w in r["words"].split(" ") if w))
    if workload == "patterns":
        return dict(Counter(r["pattern"] for r in records))
    if workload == "keycount" and not params.get("key_modulo"):
        return dict(Counter(r["id"] for r in records))
    if workload == "fixwindow":
        size = int(params.get("window_s", 30))
        groups: dict = defaultdict(list)
        for r in records:
            groups[(_floor(_ts(r["ts"]), size), r["ip"])].append(_ts(r["ts"]))
        return {(w, ip): (len(t), min(t), max(t)) for (w, ip), t in groups.items()}
    if workload == "taxi_top10":
        window, slide = int(params.get("window_min", 30)) * 60, int(params.get("slide_min", 5)) * 60
        counts: Counter = Counter()
        for r in records:
            px, py = taxi_cell(r["pickup_lon"], r["pickup_lat"])
            dx, dy = taxi_cell(r["dropoff_lon"], r["dropoff_lat"])
            route = f"{px}.{py}>{dx}.{dy}"
            last = _floor(_ts(r["ts"]), slide)
            start = last
            while start > _ts(r["ts"]) - timedelta(seconds=window):
                counts[(start, route)] += 1
                start -= timedelta(seconds=slide)
        return dict(counts)
    raise ValueError(workload)


def actual(engine: Engine, stage_id: str, workload: str) -> dict:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT key, value FROM sink_outputs WHERE stage_id = :s"), {"s": stage_id}).all()
    values = [(k, v if isinstance(v, dict) else json.loads(v)) for k, v in rows]
    if workload in ("identity", "repartition"):
        return {k: v["id"] for k, v in values}
    if workload == "wordcount":
        return {v["word"]: v["count"] for _, v in values}
    if workload == "patterns":
        return {v["pattern"]: v["count"] for _, v in values}
    if workload == "keycount":
        return {v["key"]: v["count"] for _, v in values}
    if workload == "fixwindow":
        return {(_ts(v["window_start"]), v["ip"]): (v["count"], _ts(v["first_ts"]), _ts(v["last_ts"]))
                for _, v in values}
    if workload == "taxi_top10":
        return {(_ts(v["window_start"]), v["route"]): v["count"] for _, v in values}
    raise ValueError(workload)
