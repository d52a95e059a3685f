"""Seeded, deterministic record factories for the three record kinds the demo declares.

All randomness comes from the caller's `random.Random`; the "universes" (IP pool, URL
set, vocabulary, taxi routes, patterns) are built once from a fixed seed so they are
the same in every run and every process, and only the draws from them vary with the seed.
Skew uses precomputed cumulative Zipf tables + bisect (no numpy dependency).
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import random
import re
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from streamops.records import RecordSchema, check_line

KINDS: tuple[str, ...] = ("web", "taxi", "patterns")

# The DEBS 2015 grid the taxi trips are drawn on: 500 m cells from this corner.
TAXI_LON_MIN, TAXI_LON_MAX = -74.05, -73.75
TAXI_LAT_MIN, TAXI_LAT_MAX = 40.60, 40.90
CELL_LON_DEG = 0.005986  # 500 m east-west at NYC latitude
CELL_LAT_DEG = 0.004491556  # 500 m north-south

# The schema each kind's lines are written to, as a stage declares it in apps.yaml
# (`source.schema`); the demo's registry declares these three.
SCHEMAS: dict[str, RecordSchema] = {
    "web": RecordSchema.of("id STRING, ts TIMESTAMP, ip STRING, url STRING, status INT, user STRING, words STRING"),
    "taxi": RecordSchema.of(
        "id STRING, ts TIMESTAMP, medallion STRING, pickup_ts TIMESTAMP, dropoff_ts TIMESTAMP, pickup_lon DOUBLE, "
        "pickup_lat DOUBLE, dropoff_lon DOUBLE, dropoff_lat DOUBLE, fare DOUBLE",
        ranges={"pickup_lon": (-180.0, 180.0), "dropoff_lon": (-180.0, 180.0), "pickup_lat": (-90.0, 90.0),
                "dropoff_lat": (-90.0, 90.0)}),
    "patterns": RecordSchema.of("id STRING, ts TIMESTAMP, user STRING, pattern STRING"),
}


def kind_for(schema: RecordSchema) -> str | None:
    """The kind whose records fit `schema` (same columns and types), or None: the generator then
    writes records drawn from the schema alone (`make_schema_records`)."""
    return next((k for k, s in SCHEMAS.items() if s.fields == schema.fields), None)

# Schema per kind: field -> python type name. "float" fields accept JSON integers too.
REQUIRED_FIELDS: dict[str, dict[str, str]] = {
    "web": {"id": "str", "ts": "str", "ip": "str", "url": "str", "status": "int", "user": "str", "words": "str"},
    "taxi": {
        "id": "str",
        "ts": "str",
        "medallion": "str",
        "pickup_ts": "str",
        "dropoff_ts": "str",
        "pickup_lon": "float",
        "pickup_lat": "float",
        "dropoff_lon": "float",
        "dropoff_lat": "float",
        "fare": "float",
    },
    "patterns": {"id": "str", "ts": "str", "user": "str", "pattern": "str"},
}

_UNIVERSE_SEED = 20151  # fixed: universes must not depend on the run's seed

# ---------------------------------------------------------------------------
# Time helpers (event time is integer epoch milliseconds internally)
# ---------------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _as_utc(dt: datetime) -> datetime:
    if dt.tzinfo is None:
        raise ValueError(f"datetime must be timezone-aware (UTC), got naive {dt!r}")
    return dt.astimezone(UTC)


def epoch_ms_ceil(dt: datetime) -> int:
    """Smallest whole millisecond >= dt, so a window [a, b) never yields a ts < a."""
    delta = _as_utc(dt) - _EPOCH
    us = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return -(-us // 1000)


def format_ts(ms: int) -> str:
    """ISO-8601 UTC with milliseconds, e.g. 2026-11-21T20:38:07.123Z."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def parse_ts(text: str) -> datetime:
    """Inverse of `format_ts` (accepts any ISO-8601 string with an offset or Z)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def ts_to_ms(text: str) -> int:
    return epoch_ms_ceil(parse_ts(text))


# ---------------------------------------------------------------------------
# Zipf sampling
# ---------------------------------------------------------------------------


class Zipf:
    """Draw items with probability ~ 1/rank**s (rank 1 = items[0])."""

    def __init__(self, items: Sequence[Any], s: float) -> None:
        self.items = list(items)
        acc, cum = 0.0, []
        for rank in range(1, len(self.items) + 1):
            acc += 1.0 / rank**s
            cum.append(acc)
        self._cum, self._total = cum, acc

    def sample(self, rng: random.Random) -> Any:
        i = bisect.bisect_right(self._cum, rng.random() * self._total)
        return self.items[min(i, len(self.items) - 1)]


def _unique(rng: random.Random, n: int, make: Any) -> list[Any]:
    seen: dict[Any, None] = {}
    while len(seen) < n:
        seen.setdefault(make(rng), None)
    return list(seen)


# ---------------------------------------------------------------------------
# web: HiBench web-access records
# ---------------------------------------------------------------------------

_SYLLABLES = ["ka", "lo", "mi", "te", "su", "ra", "no", "vi", "de", "po",
              "an", "el", "is", "or", "un", "ba", "ge", "hu", "ji", "ze"]


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3)))


def _ip(rng: random.Random) -> str:
    return f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randint(1, 254)}"


def _build_web_universe() -> tuple[Zipf, Zipf, Zipf, Zipf]:
    rng = random.Random(_UNIVERSE_SEED)
    vocab = _unique(rng, 500, _word)
    ips = _unique(rng, 1000, _ip)
    refs = ["home", "search", "ad", "mail", "social"]

    def url(r: random.Random) -> str:
        choice = r.randrange(5)
        if choice == 0:
            return f"/shop/item/{r.randrange(1, 5000)}?ref={r.choice(refs)}"
        if choice == 1:
            return f"/shop/category/{r.choice(vocab)}"
        if choice == 2:
            return f"/search?q={r.choice(vocab)}"
        if choice == 3:
            return f"/blog/{r.choice(vocab)}-{r.choice(vocab)}"
        return r.choice(["/", "/cart", "/checkout", "/login", "/help"])

    urls = _unique(rng, 2000, url)
    users = [f"u{n}" for n in range(1, 5001)]
    rng.shuffle(users)  # so the hottest user is not literally "u1"
    return Zipf(ips, 1.0), Zipf(urls, 1.1), Zipf(users, 0.8), Zipf(vocab, 1.0)


_WEB_IPS, _WEB_URLS, _WEB_USERS, _WEB_WORDS = _build_web_universe()
_WEB_STATUS = (200, 200, 200, 404, 500)


def _web_record(rng: random.Random, rid: str, ts_ms: int) -> dict[str, Any]:
    return {
        "id": rid,
        "ts": format_ts(ts_ms),
        "ip": _WEB_IPS.sample(rng),
        "url": _WEB_URLS.sample(rng),
        "status": rng.choice(_WEB_STATUS),
        "user": _WEB_USERS.sample(rng),
        "words": " ".join(_WEB_WORDS.sample(rng) for _ in range(rng.randint(3, 8))),
    }


# ---------------------------------------------------------------------------
# taxi: DEBS 2015 style NYC trips on a 500 m grid
# ---------------------------------------------------------------------------

_NX = int((TAXI_LON_MAX - TAXI_LON_MIN) / CELL_LON_DEG)  # 50 cells
_NY = int((TAXI_LAT_MAX - TAXI_LAT_MIN) / CELL_LAT_DEG)  # 66 cells

# (lon, lat, weight): where demand concentrates, so a few routes dominate.
_HOTSPOTS = [
    (-73.985, 40.755, 8.0),  # Midtown
    (-74.009, 40.707, 4.0),  # Financial District
    (-73.958, 40.773, 4.0),  # Upper East Side
    (-73.975, 40.787, 3.0),  # Upper West Side
    (-73.874, 40.774, 2.0),  # LaGuardia
    (-73.785, 40.645, 2.0),  # JFK
    (-73.957, 40.714, 1.5),  # Williamsburg
    (-73.945, 40.810, 1.0),  # Harlem
]


def taxi_cell(lon: float, lat: float) -> tuple[int, int]:
    """500 m grid cell (x, y) of a coordinate, counted from the box's south-west corner."""
    return math.floor((lon - TAXI_LON_MIN) / CELL_LON_DEG), math.floor((lat - TAXI_LAT_MIN) / CELL_LAT_DEG)


def _hot_cell(rng: random.Random) -> tuple[int, int]:
    lon, lat, _ = rng.choices(_HOTSPOTS, weights=[h[2] for h in _HOTSPOTS])[0]
    cx, cy = taxi_cell(lon, lat)
    x = min(_NX - 1, max(0, round(rng.gauss(cx, 1.5))))
    y = min(_NY - 1, max(0, round(rng.gauss(cy, 1.5))))
    return x, y


def _build_taxi_universe() -> tuple[Zipf, Zipf]:
    rng = random.Random(_UNIVERSE_SEED + 1)

    def route(r: random.Random) -> tuple[tuple[int, int], tuple[int, int]]:
        src = _hot_cell(r)
        dst = _hot_cell(r)
        while dst == src:
            dst = _hot_cell(r)
        return src, dst

    routes = _unique(rng, 3000, route)
    medallions = [hashlib.md5(f"medallion-{i}".encode()).hexdigest().upper() for i in range(4000)]
    return Zipf(routes, 1.0), Zipf(medallions, 0.6)


_TAXI_ROUTES, _TAXI_MEDALLIONS = _build_taxi_universe()
_TAXI_TAIL = 0.15  # share of trips between uniformly random cells (the long tail)


def _point_in(rng: random.Random, cell: tuple[int, int]) -> tuple[float, float]:
    # Stay 5% away from cell borders so rounding to 6 decimals never changes the cell.
    lon = TAXI_LON_MIN + (cell[0] + rng.uniform(0.05, 0.95)) * CELL_LON_DEG
    lat = TAXI_LAT_MIN + (cell[1] + rng.uniform(0.05, 0.95)) * CELL_LAT_DEG
    return round(lon, 6), round(lat, 6)


def _trip_km(lon1: float, lat1: float, lon2: float, lat2: float) -> float:
    dx = (lon2 - lon1) * 111.32 * math.cos(math.radians((lat1 + lat2) / 2))
    dy = (lat2 - lat1) * 110.57
    return math.hypot(dx, dy) * 1.3  # street grid detour


def _taxi_record(rng: random.Random, rid: str, ts_ms: int) -> dict[str, Any]:
    if rng.random() < _TAXI_TAIL:
        src = (rng.randrange(_NX), rng.randrange(_NY))
        dst = (rng.randrange(_NX), rng.randrange(_NY))
    else:
        src, dst = _TAXI_ROUTES.sample(rng)
    plon, plat = _point_in(rng, src)
    dlon, dlat = _point_in(rng, dst)
    km = _trip_km(plon, plat, dlon, dlat)
    duration_s = max(60.0, km / rng.uniform(12.0, 25.0) * 3600.0 + rng.uniform(60.0, 180.0))
    fare = round(2.5 + 1.55 * km + 0.35 * duration_s / 60.0 + 0.5, 2)
    dropoff = format_ts(ts_ms)
    return {
        "id": rid,
        "ts": dropoff,  # event time = dropoff, as in DEBS 2015
        "medallion": _TAXI_MEDALLIONS.sample(rng),
        "pickup_ts": format_ts(ts_ms - int(duration_s * 1000)),
        "dropoff_ts": dropoff,
        "pickup_lon": plon,
        "pickup_lat": plat,
        "dropoff_lon": dlon,
        "dropoff_lat": dlat,
        "fare": float(fare),
    }


# ---------------------------------------------------------------------------
# patterns: frequent-pattern events
# ---------------------------------------------------------------------------


def _build_patterns_universe() -> tuple[Zipf, Zipf]:
    rng = random.Random(_UNIVERSE_SEED + 2)
    events = "ABCDEFGHIJ"
    patterns = _unique(rng, 200, lambda r: ">".join(r.choice(events) for _ in range(r.randint(2, 5))))
    users = [f"u{n}" for n in range(1, 2001)]
    rng.shuffle(users)
    return Zipf(patterns, 1.0), Zipf(users, 0.8)


_PATTERNS, _PATTERN_USERS = _build_patterns_universe()

# How many distinct values the generator draws each key field from (the data-quality suites
# bound key cardinality by it: more distinct values means foreign or corrupt data).
UNIVERSE_SIZES: dict[str, dict[str, int]] = {
    "web": {"ip": len(_WEB_IPS.items), "url": len(_WEB_URLS.items), "user": len(_WEB_USERS.items)},
    "taxi": {"medallion": len(_TAXI_MEDALLIONS.items)},
    "patterns": {"pattern": len(_PATTERNS.items), "user": len(_PATTERN_USERS.items)},
}


def _patterns_record(rng: random.Random, rid: str, ts_ms: int) -> dict[str, Any]:
    return {"id": rid, "ts": format_ts(ts_ms), "user": _PATTERN_USERS.sample(rng), "pattern": _PATTERNS.sample(rng)}


_FACTORIES = {"web": _web_record, "taxi": _taxi_record, "patterns": _patterns_record}


# ---------------------------------------------------------------------------
# Public factory
# ---------------------------------------------------------------------------


def check_kind(kind: str) -> str:
    if kind not in _FACTORIES:
        raise ValueError(f"unknown record kind {kind!r}; valid kinds: {', '.join(KINDS)}")
    return kind


def record_id(run: str, seq: int) -> str:
    return f"{run}-{seq:012d}"


def make_records(
    kind: str,
    n: int,
    *,
    rng: random.Random,
    start_seq: int,
    run: str,
    ts_from: datetime,
    ts_to: datetime,
) -> list[dict[str, Any]]:
    """`n` records with ids run-{start_seq..} and event times (ms, sorted) in [ts_from, ts_to)."""
    factory = _FACTORIES[check_kind(kind)]
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if n == 0:
        return []
    lo, hi = epoch_ms_ceil(ts_from), epoch_ms_ceil(ts_to)
    if hi <= lo:
        raise ValueError(f"event-time window [{ts_from}, {ts_to}) holds no whole millisecond")
    stamps = sorted(rng.randrange(lo, hi) for _ in range(n))
    return [factory(rng, record_id(run, start_seq + j), ms) for j, ms in enumerate(stamps)]


def dumps(record: dict[str, Any]) -> str:
    """The exact line format of published files (compact, key order preserved)."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


# ---------------------------------------------------------------------------
# Validation and malformed records
# ---------------------------------------------------------------------------


def kind_of(record: dict[str, Any]) -> str:
    """Infer the kind from a record's distinctive field."""
    for kind, marker in (("web", "url"), ("taxi", "medallion"), ("patterns", "pattern")):
        if marker in record:
            return kind
    raise ValueError(f"cannot tell the kind of record with fields {sorted(record)}")


def parse_valid(kind: str, line: str) -> dict[str, Any] | None:
    """The record if `line` is one by the input record contract (streamops.records), else None."""
    if not check_line(SCHEMAS[check_kind(kind)], line.encode("utf-8")).valid:
        return None
    record: dict[str, Any] = json.loads(line)
    return record


_ID_RE = re.compile(r'"id"\s*:\s*"([^"\\]*)"')


def line_id(line: str) -> str | None:
    """The id text of a (possibly malformed) line, if it still contains one."""
    m = _ID_RE.search(line)
    return m.group(1) if m else None


# Per kind: fields that get a value of the wrong type, and fields that may be dropped.
_WRONG_TYPE_FIELDS = {"web": ("ts", "status"), "taxi": ("ts", "fare"), "patterns": ("ts", "pattern")}
_BAD_VALUES: dict[str, Any] = {"status": "abc", "fare": "x", "pattern": 42}
_DROPPABLE_FIELDS = {
    "web": ("ts", "ip", "url", "words"),
    "taxi": ("ts", "medallion", "pickup_lon", "dropoff_lat"),
    "patterns": ("ts", "user", "pattern"),
}


def _truncated(rng: random.Random, record: dict[str, Any]) -> str:
    line = dumps(record)
    # Keep the complete id value so the line stays unique; any proper prefix of an object is invalid JSON.
    m = _ID_RE.search(line)
    keep_from = m.end() if m else 1
    return line[: rng.randint(min(keep_from, len(line) - 1), len(line) - 1)]


def garbage_line(rng: random.Random, record: dict[str, Any], kind: str | None = None) -> tuple[str, str]:
    """Corrupt `record` into one malformed line; reason is "truncated_json",
    "wrong_type:<field>" or "missing_field:<field>". The id is always kept."""
    kind = check_kind(kind) if kind else kind_of(record)
    mode = rng.choice(("truncated_json", "wrong_type", "missing_field"))
    if mode == "truncated_json":
        return _truncated(rng, record), "truncated_json"
    bad = dict(record)
    if mode == "wrong_type":
        name = rng.choice(_WRONG_TYPE_FIELDS[kind])
        # A producer sending epoch millis instead of ISO text is the classic ts type bug.
        bad[name] = ts_to_ms(record["ts"]) if name == "ts" else _BAD_VALUES[name]
        return dumps(bad), f"wrong_type:{name}"
    name = rng.choice(_DROPPABLE_FIELDS[kind])
    del bad[name]
    return dumps(bad), f"missing_field:{name}"
