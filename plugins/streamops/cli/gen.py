"""`streamops gen`: the load generator feeding a stage's input (files or a Kafka topic), in the
foreground or as a background process (processes.spawn_generator)."""

from __future__ import annotations

import functools
import signal
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import typer

from streamops import registry
from streamops.cli.common import fail, load_registry, say

app = typer.Typer()


@app.command()
def gen(stage: str | None = typer.Argument(None, metavar="STAGE", help="app.stage whose input directory to feed "
                                                                          "(with --stop: the one to stop; none: all)"),
        trace: str = typer.Option("constant:rate=100", help="rate trace, e.g. 'ramp:start_rate=200,doubling_s=500'"),
        duration: float = typer.Option(60, help="seconds to generate"),
        seed: int = typer.Option(1, help="seed: same seed and start, same files"),
        garbage: float = typer.Option(0.0, help="fraction of malformed records (0.01 = 1 %)"),
        tick: float = typer.Option(1.0, help="seconds per published file"),
        fast: bool = typer.Option(False, help="write all files at once instead of pacing in real time"),
        background: bool = typer.Option(False, help="detach and log under .streamops/logs"),
        partitions: int | None = typer.Option(None, min=1, help="a Kafka stage's topic, when gen creates it: its "
                                                                   "partitions (default: source.partitions, else 4)"),
        stop: bool = typer.Option(False, "--stop", help="stop the background generator of STAGE (none: all of them); "
                                                        "the stages keep running")) -> None:
    """Write replayable JSON files into a stage's input directory at a rate that follows a trace; for a
    Kafka stage, produce each line as a message to its topic (keyed by the record's id)."""
    from streamops import processes

    if stop:
        stopped = processes.stop_generators(stage)
        for sid in stopped:
            say(f"generator {sid} stopped")
        if not stopped:
            say(f"no background generator{f' of {stage}' if stage else ''} is running")
        return
    if stage is None:
        fail("STAGE is required (app.stage), unless --stop", 2)
    sid, st, kind = _generated_stage(stage, trace)
    if background:
        args = ["gen", sid, "--trace", trace, "--duration", f"{duration!r}", "--seed", str(seed), "--garbage",
                f"{garbage!r}", "--tick", f"{tick!r}", *(["--fast"] if fast else []),
                *(["--partitions", str(partitions)] if partitions else [])]
        pid = processes.spawn_generator(sid, args)
        say(f"{sid}: generator running in the background (pid {pid}, log {processes.generator_log(sid)})")
        return
    write, where = _writer(st, partitions)
    say(f"{sid}: writing {kind} records to {where} ({trace}, {duration:.0f}s, seed {seed})")

    def on_tick(entry: dict[str, Any]) -> None:
        if entry["tick"] % 10 == 0:
            say(f"{sid}: tick {entry['tick']}: {entry['rows']} rows ({entry['garbage']} malformed) → "
                f"{entry.get('topic') or entry['file']}")

    stop_event = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop_event.set())
    try:
        summary = write(kind, trace, seed=seed, duration_s=duration, tick_s=tick,
                        garbage_fraction=garbage, realtime=not fast, on_tick=on_tick,
                        stop_event=stop_event, start=None if not fast else datetime.now(UTC))
    except KeyboardInterrupt:
        say(f"{sid}: generator interrupted")
        return
    unit = "ticks" if st.source.kind == "kafka" else "files"
    say(f"{sid}: {summary.files} {unit}, {summary.rows} rows ({summary.garbage} malformed) in {summary.elapsed:.1f}s")


def _generated_stage(stage: str, trace: str) -> tuple[str, registry.Stage, str]:
    """The stage's id, spec and record kind; exit 2 for an unknown stage, a bad trace, or a
    source the generator cannot write (not JSON of one of its kinds)."""
    from streamops import generator

    try:
        app_name, name, st = load_registry().stage(stage)
        generator.parse_trace(trace)
    except (registry.RegistryError, ValueError) as e:
        fail(str(e), 2)
    sid = registry.stage_id(app_name, name)
    kind = generator.kind_for(st.record_schema)
    if kind is None or st.record_schema.format != "json":
        fail(f"{sid}: the generator writes JSON records of the kinds {', '.join(generator.KINDS)} "
             f"({', '.join(f'{k}: {s.ddl}' for k, s in generator.SCHEMAS.items())}); this stage's source is "
             f"{st.record_schema.format} of ({st.record_schema.ddl}): feed it with your own producer", 2)
    return sid, st, kind


def _writer(st: registry.Stage, partitions: int | None) -> tuple[Callable[..., Any], str]:
    """The generator's write for the stage's source (files, or its Kafka topic), and where it goes."""
    from streamops import generator

    if st.source.kind != "kafka":
        out = registry.resolve_path(st.source.path)
        return functools.partial(generator.generate, out), str(out)
    from streamops import kafka_broker

    topic = st.source.topic
    out = registry.resolve_path(f"_kafka/{topic}")  # the manifest: the ground truth, and where a resume goes on
    conf = {**kafka_broker.client_settings(st.source.bootstrap_servers).librdkafka(), "log_level": 0}
    n = partitions or st.source.partitions or generator.topic.DEFAULT_PARTITIONS
    write = functools.partial(generator.produce_to_topic, out, conf, topic, partitions=n)
    return write, f"topic {topic} (created with {n} partitions if missing; manifest {out})"
