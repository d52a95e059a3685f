"""Background processes with a pid file and a log file: start one detached, ask whether it still
runs, stop it (SIGTERM, a grace period, then SIGKILL). Stage drivers (execute/launcher), the
supervisor, the background generators and the Airflow components are all started and stopped
this way; the pid files live under .streamops/run/."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import psutil

from streamops.paths import state_dir
from streamops.waiting import wait_until

# The data plane (stage drivers, their spares, Spark workers and the executors they fork) can run
# this much nicer than the control plane (supervisor, database, Airflow, broker), so that on a
# saturated machine the processes that detect and repair failures still get the CPU (issue 48
# item 4). Off (0) by default until a clean measurement shows it pays: Airflow at nice 0 would
# then take CPU from the stages' batches too (docs/ha.md).
DATA_PLANE_NICE = int(os.environ.get("STREAMOPS_DATA_PLANE_NICE", "0"))
AUTOGROUP = Path("/proc/sys/kernel/sched_autogroup_enabled")


def spawn_detached(argv: Sequence[str], *, log_path: Path, pid_file: Path | None = None,
                   env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                   stdin_pipe: bool = False, nice: int = 0) -> subprocess.Popen[bytes]:
    """Start `argv` in its own session (it survives its starter, Ctrl-C there does not reach it, and
    it leads a process group that `stop(..., group=True)` takes down whole), stdout and stderr
    appended to `log_path`, stdin closed (or a pipe from us, `stdin_pipe`); its pid is written to
    `pid_file`. `env` None: ours. `nice` > 0: it and its children run that much nicer (through
    nice(1), which execs: the pid is the command's; no preexec_fn, unsafe in a threaded caller)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    argv = ["nice", "-n", str(nice), *argv] if nice > 0 else list(argv)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
                                env=None if env is None else dict(env), cwd=cwd, start_new_session=True)
    if nice > 0:
        _nice_session(proc.pid, nice)
    if pid_file is not None:
        pid_file.parent.mkdir(parents=True, exist_ok=True)
        pid_file.write_text(f"{proc.pid}\n")
    return proc


def _nice_session(pid: int, nice: int) -> None:
    """With the kernel's autogroup scheduling (`kernel.sched_autogroup_enabled`, on by default on
    many distributions) a new session is a scheduling group of its own, and a process's nice value
    weighs only inside its group: the group's niceness is what competes with the other sessions.
    So the session `pid` leads gets `nice` too. Best effort: no autogroup, no file."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(f"{nice}\n")


def may_renice() -> bool:
    """Whether a process niced by `spawn_detached` can be given its CPU back (`renice`): lowering
    a session's autogroup niceness to 0 or above needs no privilege, a thread's nice value does."""
    return os.geteuid() == 0 or AUTOGROUP.exists() and AUTOGROUP.read_text().strip() == "1"


def renice(pid: int, nice: int) -> None:
    """`pid`'s session, and every thread of it and its children, at `nice` (an adopted warm spare:
    built in the background, run at the data plane's priority). Best effort: a thread gone, or a
    nice value this user may not lower, is left as it is."""
    _nice_session(pid, nice)
    with contextlib.suppress(psutil.NoSuchProcess):
        root = psutil.Process(pid)
        for proc in (root, *root.children(recursive=True)):
            with contextlib.suppress(psutil.NoSuchProcess):
                for t in proc.threads():
                    with contextlib.suppress(OSError):
                        os.setpriority(os.PRIO_PROCESS, t.id, nice)


def read_pid(pid_file: Path) -> int | None:
    """The pid in `pid_file`, or None when there is no such file or it holds no number."""
    try:
        return int(pid_file.read_text())
    except (FileNotFoundError, ValueError):
        return None


def is_alive(pid: int) -> bool:
    """Whether `pid` runs. A zombie (exited, not yet reaped by its parent) counts as dead."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)  # psutil has no stubs here
    except psutil.NoSuchProcess:
        return False


def started_at(pid: int | None) -> float | None:
    """The process's start time (epoch seconds), or None when it is gone."""
    try:
        return psutil.Process(pid).create_time() if pid is not None else None
    except psutil.NoSuchProcess:
        return None


def is_same_process(pid: int | None, started: float | None) -> bool:
    """Whether `pid` still runs and is the process that started at `started` (None: not recorded,
    the pid alone decides): a pid the kernel reused since is another process."""
    if pid is None or not is_alive(pid):
        return False
    now = started_at(pid)
    return started is None or (now is not None and abs(now - started) < 1.0)


# A process that cannot run until it is sent SIGCONT or released: SIGSTOP, SIGTSTP, SIGTTIN/SIGTTOU
# ('stopped', T) or a debugger's stop ('tracing-stop', t).
STOPPED_STATES = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)


def is_stopped(pid: int) -> bool:
    """Whether `pid` exists and is stopped (a signal or a debugger); a gone process is not."""
    try:
        return psutil.Process(pid).status() in STOPPED_STATES
    except psutil.NoSuchProcess:
        return False


def children(pid: int) -> list[int]:
    """The pids of `pid`'s direct children (a driver's JVM); none when it is gone."""
    try:
        return [c.pid for c in psutil.Process(pid).children()]
    except psutil.NoSuchProcess:
        return []


def send(pid: int, sig: int, *, group: bool = False) -> bool:
    """Send `sig` to `pid` (to its whole process group with `group`); False when nothing was there."""
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def stop_all(pids: Iterable[int], *, grace_s: float, group: bool = False,
             interval_s: float = 0.5) -> dict[int, str]:
    """SIGTERM every pid, wait up to `grace_s` for all of them to exit, SIGKILL what is left.
    With `group`, both signals go to each pid's process group, and the group gets SIGKILL in any
    case, so that no child survives a leader that did exit. Returns each pid's outcome:
    "exited" (gone before SIGTERM), "sigterm" (exited within the grace period) or "sigkill"."""
    pids = list(pids)
    outcome = {pid: "sigterm" if send(pid, signal.SIGTERM, group=group) else "exited" for pid in pids}
    wait_until(lambda: not any(is_alive(p) for p in pids), grace_s, interval_s)
    for pid in pids:
        alive = is_alive(pid)
        if alive:
            outcome[pid] = "sigkill"
        if alive or group:
            send(pid, signal.SIGKILL, group=group)
    return outcome


def stop(pid: int, *, grace_s: float, group: bool = False, interval_s: float = 0.5) -> str:
    """`stop_all` for one process: "exited", "sigterm" or "sigkill"."""
    return stop_all([pid], grace_s=grace_s, group=group, interval_s=interval_s)[pid]


def stop_pid_file(pid_file: Path, *, grace_s: float) -> int | None:
    """Stop the process `pid_file` names (`stop`) and remove the file, so that nothing restarts
    it: the pid stopped, or None when it was not running."""
    pid = read_pid(pid_file)
    running = pid if pid is not None and is_alive(pid) else None
    if running is not None:
        stop(running, grace_s=grace_s)
    pid_file.unlink(missing_ok=True)
    return running


# -- background generators (`streamops gen --background`): run/gen-<stage>.pid, logs/gen-<stage>.log
_GENERATOR = "gen-"


def generator_log(stage_id: str) -> Path:
    return state_dir() / "logs" / f"{_GENERATOR}{stage_id}.log"


def spawn_generator(stage_id: str, cli_args: Sequence[str]) -> int:
    """Run `streamops CLI_ARGS` (a `gen` of `stage_id` in the foreground) detached: its pid."""
    proc = spawn_detached([sys.executable, "-m", "streamops.cli", *cli_args], log_path=generator_log(stage_id),
                          pid_file=state_dir() / "run" / f"{_GENERATOR}{stage_id}.pid")
    return proc.pid


def stop_generators(stage_id: str | None = None) -> list[str]:
    """SIGTERM the background generator of `stage_id` (None: every one), without waiting: each
    finishes its tick and exits. Their pid files are removed; the stages stopped, by id."""
    run_dir = state_dir() / "run"
    stopped = []
    for pid_file in sorted(run_dir.glob(f"{_GENERATOR}{stage_id or '*'}.pid")) if run_dir.exists() else []:
        pid = read_pid(pid_file)
        if pid is not None and is_alive(pid) and send(pid, signal.SIGTERM):
            stopped.append(pid_file.stem.removeprefix(_GENERATOR))
        pid_file.unlink()
    return stopped
