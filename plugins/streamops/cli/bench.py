"""`streamops bench`: the benchmarks of bench/, each a script run with this interpreter."""

from __future__ import annotations

import subprocess
import sys

import typer

from streamops.cli.common import fail

app = typer.Typer()


@app.command()
def bench(what: str = typer.Argument("all", help="policies | suite | scale | reconfig | reporting | sink | ha | "
                                                  "ha-sim | jvm-archive | spark-ui | rpc-crypto | upgrade | kafka | "
                                                  "soak | all "
                                                  "(soak is not in all: it takes an hour)"),
          quick: bool = typer.Option(False, help="fewer seeds, a smaller scale run, 10k state keys only"),
          cluster: bool = typer.Option(False, help="reconfig and ha on the embedded Spark cluster: live and "
                                                   "in-driver changes, first batches, executor kills, MTTR on "
                                                   "a cluster pool")) -> None:
    """Benchmarks: the policy comparison in the simulator, the trace suite (tuned on training
    seeds, reported on test seeds, each configuration's regret against the clairvoyant bound),
    replicas and the redundancy manager in the simulator (ha-sim), one control cycle over 10 000 stages
    in PostgreSQL, reconfiguration downtime per mechanism and state size, the sink's staged
    write against a direct upsert, failover and replicas under injected faults (the last
    two long: real drivers), cold Spark JVMs with and without the class archive, and a stage's
    batch time, memory and CPU with its Spark UI on and off (spark-ui), the cost of Spark RPC
    encryption on the embedded cluster (rpc-crypto: shuffle and result throughput, a stage's
    batch time), the Kafka demo app's drain rate and latency at 1, 2 and 4 cores against the
    same job on files (kafka). `soak`
    runs two stages on the embedded cluster for an hour of random real faults (--quick: 5
    minutes). Results go to bench/results/*.json; a table is printed."""
    from streamops.paths import REPO_ROOT

    scripts = {"policies": ["bench/policies.py"] + (["--seeds", "1"] if quick else []),
               "scale": ["bench/scale.py"] + (["--apps", "100", "--runs", "3"] if quick else []),
               "reconfig": ["bench/reconfig.py"] + (["--quick"] if quick else []),
               "reporting": ["bench/reporting.py"] + (["--stages", "10,50", "--runs", "1"] if quick else []),
               "sink": ["bench/sink.py"] + (["--sizes", "2000,20000"] if quick else []),
               "ha": ["bench/ha.py"] + (["--quick"] if quick else []),
               "ha-sim": ["bench/ha_sim.py"],
               "suite": ["bench/suite.py"] + (["--quick"] if quick else []),
               "jvm-archive": ["bench/jvm_archive.py"] + (["--runs", "2"] if quick else []),
               "spark-ui": ["bench/spark_ui.py"] + (["--runs", "1", "--batches", "10"] if quick else []),
               "rpc-crypto": ["bench/rpc_crypto.py"] + (["--rounds", "2", "--runs", "1"] if quick else []),
               "upgrade": ["bench/upgrade.py"] + (["--runs", "2"] if quick else []),
               "kafka": ["bench/kafka.py"] + (["--quick"] if quick else []),
               "soak": ["bench/soak.py"] + (["--minutes", "5", "--fault-every", "40"] if quick else [])}
    if cluster:
        scripts["reconfig"].append("--cluster")
        scripts["ha"].append("--cluster")
        scripts["jvm-archive"].append("--cluster")
    if what not in (*scripts, "all"):
        fail(f"unknown benchmark {what!r}; choose {', '.join(scripts)} or all", 2)
    for name, cmd in scripts.items():
        if what == name or (what == "all" and name != "soak"):
            rc = subprocess.call([sys.executable, *cmd], cwd=REPO_ROOT)
            if rc:
                raise typer.Exit(rc)
