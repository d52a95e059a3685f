"""Replayable-source generator: traces, records, atomic publishing, manifest, resume."""

from __future__ import annotations

import json
import math
import os
import random
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from streamops.generator import (
    KINDS,
    REQUIRED_FIELDS,
    TraceSpec,
    garbage_line,
    generate,
    make_records,
    make_trace,
    parse_trace,
    read_manifest,
    read_valid_records,
    taxi_cell,
)

START = datetime(2026, 11, 21, 20, 0, 0, tzinfo=UTC)
_TYPES = {"str": (str,), "int": (int,), "float": (int, float)}


def _gen(out: Path, **kw):
    args = dict(kind="web", trace="constant:rate=100", seed=7, duration_s=5, start=START, realtime=False)
    args.update(kw)
    return generate(out, args.pop("kind"), args.pop("trace"), **args)


def _visible(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if not p.name.startswith(("_", ".")))


def _snapshot(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in _visible(out)}


def _is_malformed(kind: str, line: str) -> bool:
    """Independent of the library: invalid JSON, or a REQUIRED field missing or mis-typed."""
    try:
        obj = json.loads(line)
    except ValueError:
        return True
    for name, tname in REQUIRED_FIELDS[kind].items():
        if name not in obj or isinstance(obj[name], bool) or not isinstance(obj[name], _TYPES[tname]):
            return True
    return False


# --- traces -------------------------------------------------------------------


def test_ramp_doubles_and_caps():
    tr = make_trace(parse_trace("ramp:start_rate=200,doubling_s=500"))
    assert tr(0) == pytest.approx(200)
    assert tr(500) == pytest.approx(400)
    assert tr(1000) == pytest.approx(800)
    capped = make_trace(TraceSpec("ramp", {"start_rate": 200, "doubling_s": 500, "max_rate": 300}))
    assert capped(1000) == 300
    # Exact integral of the capped ramp = exponential part + flat part.
    t_cap = 500 * math.log2(1.5)
    expected = 200 * 500 / math.log(2) * (1.5 - 1) + 300 * (1000 - t_cap)
    assert capped.integral(0, 1000) == pytest.approx(expected)


def test_step_holds_last_rate():
    tr = make_trace("step:rates=10/20/30,step_s=5")
    assert [tr(t) for t in (0, 4.9, 5, 10, 15, 1000)] == [10, 10, 20, 30, 30, 30]
    assert tr.integral(0, 20) == pytest.approx(10 * 5 + 20 * 5 + 30 * 10)
    assert parse_trace("step:rates=[10,20,30],step_s=5") == parse_trace("step:rates=10/20/30,step_s=5")


def test_spike_is_periodic():
    tr = make_trace("spike:base=10,spike_rate=100,every_s=60,duration_s=5")
    assert tr(0) == 100 and tr(4.9) == 100 and tr(5) == 10 and tr(59) == 10 and tr(61) == 100
    assert tr.integral(0, 120) == pytest.approx(2 * (5 * 100 + 55 * 10))


def test_diurnal_stays_within_bounds():
    tr = make_trace(TraceSpec("diurnal", {"base": 50, "peak": 500, "period_s": 1000}))
    values = [tr(t) for t in range(0, 2000, 7)]
    assert min(values) >= 50 - 1e-9 and max(values) <= 500 + 1e-9
    assert tr(0) == pytest.approx(50) and tr(500) == pytest.approx(500)
    assert tr.integral(0, 1000) == pytest.approx(275 * 1000)


def test_parse_trace_defaults_roundtrip_and_errors():
    assert parse_trace("ramp").params == {"start_rate": 200.0, "doubling_s": 500.0, "max_rate": None}
    assert make_trace("constant:rate=500")(123) == 500
    spec = parse_trace("spike:base=1,spike_rate=2.5,every_s=10,duration_s=1")
    assert parse_trace(str(spec)) == spec and hash(parse_trace(str(spec))) == hash(spec)
    with pytest.raises(ValueError, match=r"'doubling'.*start_rate, doubling_s, max_rate"):
        parse_trace("ramp:start_rate=200,doubling=500")
    with pytest.raises(ValueError, match=r"'sine'.*constant, ramp, diurnal, step, spike"):
        parse_trace("sine:rate=1")
    with pytest.raises(ValueError, match="'rate'"):
        parse_trace("constant:rate=fast")
    with pytest.raises(ValueError, match="'doubling_s'"):
        parse_trace("ramp:doubling_s=0")
    with pytest.raises(ValueError, match="'bogus'"):
        TraceSpec("step", {"bogus": 1})


# --- rate integration -----------------------------------------------------------


def test_half_row_per_second_gives_one_row_every_two_ticks(tmp_path):
    summary = _gen(tmp_path, trace="constant:rate=0.5", duration_s=10)
    assert summary.files == 10 and summary.rows == 5
    assert [e["rows"] for e in read_manifest(tmp_path)] == [0, 1] * 5


def test_ramp_total_matches_integral(tmp_path):
    trace = make_trace("ramp:start_rate=20,doubling_s=10")
    summary = _gen(tmp_path, trace=trace, duration_s=30, kind="patterns")
    assert abs(summary.rows - trace.integral(0, 30)) < 1  # only the carried fraction is missing
    rows = [e["rows"] for e in read_manifest(tmp_path)]
    assert rows[-1] > 3 * rows[0]


def test_plain_callable_trace(tmp_path):
    summary = _gen(tmp_path, trace=lambda t: 10.0 * t, duration_s=4, tick_s=0.5)
    assert summary.files == 8 and abs(summary.rows - 80) < 1


# --- records ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_records_schema_ids_and_event_times(kind):
    lo, hi = START, START + timedelta(seconds=2)
    recs = make_records(kind, 300, rng=random.Random(1), start_seq=42, run="r", ts_from=lo, ts_to=hi)
    assert [r["id"] for r in recs] == [f"r-{s:012d}" for s in range(42, 342)]
    for r in recs:
        assert list(r)[: len(REQUIRED_FIELDS[kind])] == list(REQUIRED_FIELDS[kind])
        assert not _is_malformed(kind, json.dumps(r))
        ts = datetime.fromisoformat(r["ts"].replace("Z", "+00:00"))
        assert lo <= ts < hi and r["ts"].endswith("Z") and len(r["ts"]) == 24
    assert make_records(kind, 300, rng=random.Random(1), start_seq=42, run="r", ts_from=lo, ts_to=hi) == recs


def test_taxi_geometry_and_route_skew():
    recs = make_records("taxi", 4000, rng=random.Random(3), start_seq=0, run="t", ts_from=START,
                        ts_to=START + timedelta(seconds=60))
    routes = Counter()
    for r in recs:
        assert -74.05 <= r["pickup_lon"] <= -73.75 and 40.60 <= r["dropoff_lat"] <= 40.90
        assert r["ts"] == r["dropoff_ts"] and r["pickup_ts"] < r["dropoff_ts"]
        routes[(taxi_cell(r["pickup_lon"], r["pickup_lat"]), taxi_cell(r["dropoff_lon"], r["dropoff_lat"]))] += 1
    counts = sorted(routes.values(), reverse=True)
    assert counts[0] > 20 * counts[len(counts) // 2]


def test_web_words_and_keys_are_skewed():
    recs = make_records("web", 3000, rng=random.Random(5), start_seq=0, run="w", ts_from=START,
                        ts_to=START + timedelta(seconds=10))
    words = Counter(w for r in recs for w in r["words"].split())
    assert all(3 <= len(r["words"].split()) <= 8 for r in recs)
    assert words.most_common(1)[0][1] > 10 * sorted(words.values())[len(words) // 2]
    assert {r["status"] for r in recs} == {200, 404, 500}
    assert all(r["ip"].startswith("10.") and r["user"].startswith("u") for r in recs)


@pytest.mark.parametrize("kind", KINDS)
def test_garbage_line_is_malformed_and_keeps_id(kind):
    rng = random.Random(11)
    recs = make_records(kind, 200, rng=rng, start_seq=0, run="g", ts_from=START, ts_to=START + timedelta(seconds=1))
    reasons = Counter()
    for r in recs:
        line, reason = garbage_line(rng, r)
        assert _is_malformed(kind, line), (reason, line)
        assert f'"id":"{r["id"]}"' in line and "\n" not in line
        reasons[reason.split(":")[0]] += 1
    assert set(reasons) == {"truncated_json", "wrong_type", "missing_field"}


# --- writer ---------------------------------------------------------------------------


def test_same_seed_is_byte_identical_and_other_seed_differs(tmp_path):
    a, b, c = (tmp_path / n for n in "abc")
    _gen(a, garbage_fraction=0.05, kind="taxi")
    _gen(b, garbage_fraction=0.05, kind="taxi")
    _gen(c, garbage_fraction=0.05, kind="taxi", seed=8, run="s7")  # same names, other seed
    assert _snapshot(a) == _snapshot(b) and len(_snapshot(a)) == 5
    assert _snapshot(a).keys() == _snapshot(c).keys() and _snapshot(a) != _snapshot(c)
    strip = lambda es: [{k: v for k, v in e.items() if k != "published_at"} for e in es]  # noqa: E731
    assert strip(read_manifest(a)) == strip(read_manifest(b))


def test_garbage_fraction_matches_manifest(tmp_path):
    summary = _gen(tmp_path, trace="constant:rate=1000", garbage_fraction=0.01)
    manifest = read_manifest(tmp_path)
    assert summary.rows == 5000 and 20 <= summary.garbage <= 90
    assert sum(e["garbage"] for e in manifest) == summary.garbage
    for e in manifest:
        lines = (tmp_path / e["file"]).read_text().splitlines()
        assert len(lines) == e["rows"] == e["valid"] + e["garbage"]
        bad = [ln for ln in lines if _is_malformed("web", ln)]
        assert len(bad) == e["garbage"] == len(e["garbage_ids"]) == len(e["garbage_reasons"])
        assert all(gid in ln for gid, ln in zip(e["garbage_ids"], bad, strict=True))


def test_garbage_does_not_change_valid_records(tmp_path):
    _gen(tmp_path / "clean", seed=3)
    _gen(tmp_path / "dirty", seed=3, garbage_fraction=0.2)
    clean = {r["id"]: r for r in read_valid_records(tmp_path / "clean")}
    dirty = list(read_valid_records(tmp_path / "dirty"))
    assert dirty and all(clean[r["id"]] == r for r in dirty)


def test_read_valid_records_yields_exactly_the_valid_ids(tmp_path):
    _gen(tmp_path, kind="patterns", trace="constant:rate=300", garbage_fraction=0.05)
    manifest = read_manifest(tmp_path)
    all_ids = {f"s7-{s:012d}" for s in range(sum(e["rows"] for e in manifest))}
    garbage = {g for e in manifest for g in e["garbage_ids"]}
    ids = [r["id"] for r in read_valid_records(tmp_path)]
    assert len(ids) == len(set(ids)) == sum(e["valid"] for e in manifest)
    assert set(ids) == all_ids - garbage and garbage <= all_ids
    for e in manifest:
        assert e["ts_min"] >= e["window_start"][:23] and e["ts_max"] < e["window_end"][:23] + "Z"


def test_publish_is_atomic_and_hidden(tmp_path, monkeypatch):
    real_replace = os.replace
    seen = []

    def checked_replace(src, dst):
        src, dst = Path(src), Path(dst)
        rel = src.relative_to(tmp_path)
        assert rel.parts[0].startswith(("_", ".")), "temp file must be invisible to Spark"
        data = src.read_text()
        assert data == "" or data.endswith("\n")
        assert all(not _is_malformed("web", ln) or '"id":"' in ln for ln in data.splitlines())
        assert not dst.exists()
        for p in _visible(tmp_path):  # everything already visible is complete and listed
            assert p.read_text().endswith("\n")
        seen.append(dst.name)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", checked_replace)
    _gen(tmp_path, garbage_fraction=0.05)
    assert seen == [p.name for p in _visible(tmp_path)] == [e["file"] for e in read_manifest(tmp_path)]


def test_crash_mid_run_then_resume_continues_without_duplicates(tmp_path, monkeypatch):
    out, reference = tmp_path / "out", tmp_path / "ref"
    real_replace = os.replace
    calls = {"n": 0}

    def flaky_replace(src, dst):
        calls["n"] += 1
        if calls["n"] == 4:
            raise OSError("disk went away")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", flaky_replace)
    with pytest.raises(OSError):
        _gen(out, duration_s=10)
    monkeypatch.setattr(os, "replace", real_replace)
    assert [p.name for p in _visible(out)] == [e["file"] for e in read_manifest(out)]
    assert len(_visible(out)) == 3

    summary = _gen(out, duration_s=7)
    assert summary.first_tick == 3 and summary.next_tick == 10
    assert not list((out / "_staging").iterdir())
    _gen(reference, duration_s=10)
    assert _snapshot(out) == _snapshot(reference)  # resume == uninterrupted run


def test_resume_continues_ids(tmp_path):
    first = _gen(tmp_path, duration_s=3, garbage_fraction=0.1)
    second = _gen(tmp_path, duration_s=4, garbage_fraction=0.1)
    assert (first.next_tick, second.first_tick, second.next_tick) == (3, 3, 7)
    manifest = read_manifest(tmp_path)
    assert [e["tick"] for e in manifest] == list(range(7))
    ids = [json.loads(ln)["id"] for e in manifest for ln in (tmp_path / e["file"]).read_text().splitlines()
           if ln.endswith("}")]
    all_seq = [e["seq_start"] + j for e in manifest for j in range(e["rows"])]
    assert all_seq == list(range(first.rows + second.rows))
    assert len(ids) == len(set(ids))
    other = _gen(tmp_path, duration_s=2, run="b")  # a different run prefix never collides
    assert other.first_tick == 0
    assert not {r["id"] for r in read_valid_records(tmp_path, "b")} \
        & {r["id"] for r in read_valid_records(tmp_path, "s7")}
    with pytest.raises(ValueError, match="kind"):
        _gen(tmp_path, kind="taxi", duration_s=1)


def test_published_but_unlisted_file_is_recovered(tmp_path):
    _gen(tmp_path, duration_s=4, garbage_fraction=0.1)
    mpath = tmp_path / "_manifest" / "s7.jsonl"
    lines = mpath.read_text().splitlines(keepends=True)
    lost = json.loads(lines[-1])
    mpath.write_text("".join(lines[:-1]) + lines[-1][:20])  # crash: last append half-written
    summary = _gen(tmp_path, duration_s=1, garbage_fraction=0.1)
    assert summary.first_tick == 4
    recovered = read_manifest(tmp_path)[3]
    for key in ("file", "tick", "rows", "valid", "garbage", "first_id", "last_id", "garbage_ids", "seq_start",
                "ts_min", "ts_max"):
        assert recovered[key] == lost[key], key
    assert recovered["carry"] == pytest.approx(lost["carry"])


def test_realtime_paces_ticks_and_tracks_wall_clock(tmp_path):
    before = datetime.now(UTC)
    ticks = []
    summary = generate(tmp_path, "web", "constant:rate=200", seed=1, duration_s=0.2, tick_s=0.05, realtime=True,
                       on_tick=ticks.append)
    after = datetime.now(UTC)
    assert summary.files == 4 and len(ticks) == 4 and summary.elapsed >= 0.19
    stamps = [datetime.fromisoformat(r["ts"].replace("Z", "+00:00")) for r in read_valid_records(tmp_path)]
    assert before - timedelta(milliseconds=1) <= min(stamps) and max(stamps) <= after
    for e in ticks:  # published only after the tick's event-time window closed
        assert e["published_at"] >= e["ts_max"]


def test_stop_event_ends_run_early(tmp_path):
    stop = threading.Event()

    def on_tick(entry):
        if entry["tick"] == 1:
            stop.set()

    summary = generate(tmp_path, "taxi", "constant:rate=10", seed=2, duration_s=5, tick_s=0.02, on_tick=on_tick,
                       stop_event=stop)
    assert summary.stopped and summary.files == 2 and summary.next_tick == 2
    assert len(_visible(tmp_path)) == 2 and not list((tmp_path / "_staging").iterdir())


def test_second_writer_on_same_run_is_refused(tmp_path):
    errors = []

    def on_tick(entry):
        if entry["tick"] == 0:
            with pytest.raises(RuntimeError, match="another generator") as exc:
                _gen(tmp_path, duration_s=1)
            errors.append(exc.value)

    _gen(tmp_path, duration_s=2, on_tick=on_tick)
    assert len(errors) == 1


def test_bad_arguments_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="valid kinds"):
        _gen(tmp_path, kind="clicks")
    with pytest.raises(ValueError, match="garbage_fraction"):
        _gen(tmp_path, garbage_fraction=1.5)
    with pytest.raises(ValueError, match="timezone-aware"):
        _gen(tmp_path, start=datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="run"):
        _gen(tmp_path, run="../x")
