"""The `streamops status` table (status_view): pure, rows as stage_status gives them."""

from __future__ import annotations

from types import SimpleNamespace

from streamops.status_view import cells, status_table

ROW = dict(stage_id="a.s", status="running", health="ok", health_reason=None, poison_24h=None, input_24h=None,
           heartbeat_age_s=1.0, pool="p", cores=1, partitions=2, in_rps=10.0, out_rps=10.0, latency_p95_ms=900,
           backlog_files=0, quarantine_backlog_files=None, batch_id=7, quarantined=0, failures_24h=0, plan=None,
           replicas=1, live_replicas=1, leader=None, ui_url="http://127.0.0.1:4711")


def test_wide_status_links_the_live_run_s_spark_ui_and_a_narrow_terminal_drops_it_first():
    on, off = SimpleNamespace(**ROW), SimpleNamespace(**{**ROW, "stage_id": "a.t", "ui_url": None})
    assert cells(on)[0]["spark ui"] == "[link=http://127.0.0.1:4711]http://127.0.0.1:4711[/link]"
    assert cells(off)[0]["spark ui"] == "–"
    wide = status_table([on, off], None)
    assert wide.columns[-1].header == "spark ui"
    narrow = status_table([on, off], 110)
    assert "spark ui" not in [c.header for c in narrow.columns] and "spark ui" in str(narrow.caption)


def test_a_stage_s_last_change_is_a_note_with_the_reason_its_policy_gave():
    row = SimpleNamespace(**{**ROW, "last_change": "scale_out 1→2 live done 07:12",
                             "last_change_reason": "DS2 n* 2 > n 1 (load 2.90; backlog [bold] rows to catch up)"})
    _, notes = cells(row)
    assert notes == ["a.s: last change scale_out 1→2 live done 07:12: DS2 n* 2 > n 1 "
                     "(load 2.90; backlog \\[bold] rows to catch up)"]  # escaped: not rich markup
    assert cells(SimpleNamespace(**ROW))[1] == []


def test_the_checkpoint_column_gives_a_human_size_and_wide_shows_it():
    from streamops.status_view import human_bytes

    assert [human_bytes(n) for n in (None, 0, 999, 756_000, 2_900_000, 118_000_000, 728_400_000, 1_234_000_000)] == \
        ["–", "0 B", "999 B", "756 kB", "2.9 MB", "118 MB", "728 MB", "1.2 GB"]
    row = SimpleNamespace(**{**ROW, "checkpoint_bytes": 728_400_000})
    assert cells(row)[0]["ckpt"] == "728 MB"
    assert cells(SimpleNamespace(**ROW))[0]["ckpt"] == "–"  # never measured (no supervisor yet)
    assert "ckpt" in [c.header for c in status_table([row], None).columns]


APP = dict(app="b", r_max_ms=1000, slo_target=0.9, budget_s=8640.0, spent_s=540.0, short_s=300.0, long_s=3600.0,
           short_burn=8.0, long_burn=1.5254, price=488.1, rule="burning faster than the budget allows",
           left_ratio=1 - 540 / 8640, budget_age_s=20.0)


def test_an_app_s_budget_reads_left_burn_and_price_and_says_when_it_is_old_or_missing():
    from streamops.status_view import app_cells, apps_table

    cells_ = app_cells(SimpleNamespace(**APP), 0.99)
    assert cells_["budget left"] == "94% (540/8,640 s)" and cells_["SLO"] == "90 %"
    assert cells_["burn"] == "[red]8 / 1.5[/]", "both windows burn faster than the budget allows"
    assert cells_["price"] == "488 core-s" and cells_["why"] == "burning faster than the budget allows"
    stale = app_cells(SimpleNamespace(**{**APP, "budget_age_s": 1800.0, "short_s": 600.0, "long_burn": 0.5}), 0.99)
    assert stale["burn"] == "8 / 0.5 (10 min / 1 h)" and "as of 30 min ago" in stale["why"]
    spent = app_cells(SimpleNamespace(**{**APP, "spent_s": 9000.0, "left_ratio": 1 - 9000 / 8640}), 0.99)
    assert spent["budget left"] == "[red]-4% (9,000/8,640 s)[/]"
    none = SimpleNamespace(**{**APP, **{k: None for k in APP if k not in ("app", "r_max_ms")}})
    unmeasured = app_cells(none, 0.99)
    assert unmeasured["SLO"] == "99 %" and unmeasured["price"] == "–" and "not measured" in unmeasured["why"]
    table = apps_table([SimpleNamespace(**APP), none], None, 0.99)
    assert table is not None and [c.header for c in table.columns][:4] == ["app", "R_max", "SLO", "budget left"]
    assert apps_table([], 80, 0.99) is None
