"""A sixth mechanism, registered by this test alone (issue 47 item 1): the control plane's cost
rule, its request check and the DAG forms, the simulator and the CLI's help all offer it, and no
file of the platform names it. docs/architecture.md ("Adding a mechanism") lists the files a real
one touches."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from streamops import registry
from streamops.execute import mechanisms as executors
from streamops.execute import reconfigure
from streamops.paths import REPO_ROOT
from streamops.plan import mechanisms as rules
from streamops.plan.change import InvalidChange
from streamops.plan.mechanisms import Estimate, Refusal, Situation
from streamops.sim import run_simulation

NAME = "teleport"


class TeleportRule:
    """Scale-outs only, no new driver, no outage: cheaper than anything that starts a driver."""

    name = NAME
    new_driver = False

    def refusal(self, s: Situation) -> str | None:
        return None if s.action == "scale_out" and s.running else "it teleports running stages' scale-outs only"

    def estimated_outage(self, s: Situation) -> Estimate | Refusal:
        why = self.refusal(s)
        return Refusal(why) if why else Estimate(0.0, "the state teleports")


class Teleport:
    """What carries it out: never asked to here."""

    name = NAME

    def run(self, ex):
        raise NotImplementedError

    def rollback(self, ex, reason):
        raise NotImplementedError

    def recover(self, ex, live):
        raise NotImplementedError


@pytest.fixture
def teleport(monkeypatch):
    monkeypatch.setitem(rules.RULES, NAME, TeleportRule())
    monkeypatch.setitem(executors.MECHANISMS, NAME, Teleport())


def _situation(action: str = "scale_out") -> Situation:
    # A local pool with room beside the run: active_backup's, before the sixth mechanism came
    return Situation(action=action, running=True, pool="p", pool_kind="local", executor_cores=1, current_cores=1,
                     target_pool=None, target_cores=2, target_partitions=None, state_partitions=4,
                     target_pool_free=4, target_pool_total=4, staged_ready=False)


def test_the_control_plane_offers_a_registered_sixth_mechanism(teleport, monkeypatch):
    s = _situation()
    assert reconfigure._choose(s)[0] == NAME, "0 s and no new driver: it beats active_backup's 0 s"
    assert "not teleport" in reconfigure._choose(_situation("scale_in"))[1], "its refusal is given as a reason"
    assert reconfigure._choose(_situation("scale_in"))[0] == "pause_resume"
    assert rules.RULES[NAME].refusal(s) is None and executors.MECHANISMS[NAME].name == NAME  # what _run asks
    # A person may name it: the request's check lists it among the known ones.
    reg = registry.parse({"pools": {"p": {"cores": 4}}, "apps": {}})
    with pytest.raises(InvalidChange, match=f"unknown mechanism 'nonesuch'; available: auto, .*{NAME}"):
        reconfigure.request("a.s", "scale_out", mechanism="nonesuch", reg=reg)
    with pytest.raises(InvalidChange, match="stage"):  # past the mechanism check, refused for the stage
        reconfigure.request("a.s", "scale_out", mechanism=NAME, reg=reg)
    # The DAG forms' mechanism enum.
    from streamops.orchestrate import tasks

    monkeypatch.setattr(registry, "load", lambda *a, **k: reg)
    assert NAME in tasks.choices()["mechanisms"]


def test_the_simulator_chooses_a_registered_sixth_mechanism(teleport):
    summary = run_simulation("edf_b075", "steps", seed=1, plot=False)
    assert summary["mechanisms"].get(NAME, 0) > 0, summary["mechanisms"]
    assert "active_backup" not in summary["mechanisms"] and "prestaged" not in summary["mechanisms"], \
        "every scale-out teleports"


def test_the_cli_help_offers_a_registered_sixth_mechanism():
    """The CLI's help is built when it is imported: a fresh interpreter registers the mechanism first."""
    code = ("from streamops.plan import mechanisms\n"
            "from tests.unit.test_mechanism_registry import TeleportRule\n"
            "mechanisms.RULES['teleport'] = TeleportRule()\n"
            "from streamops.cli import app\n"
            "app(['reconfigure', '--help'], prog_name='streamops')\n")
    path = os.pathsep.join([str(Path(rules.__file__).parents[2]), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
                         env={**os.environ, "PYTHONPATH": path, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    flat = " ".join(out.stdout.replace("│", " ").split())  # rich's box and wrapping undone
    assert "| prestaged | active_backup | teleport (docs/reconfiguration.md)" in flat, out.stdout


def test_architecture_lists_the_at_most_three_files_a_mechanism_touches():
    text = (REPO_ROOT / "docs" / "architecture.md").read_text()
    section = text.split("### Adding a mechanism", 1)[1].split("\n#", 1)[0]
    files = re.findall(r"^\d\. `([^`]+)`", section, re.M)
    assert 1 <= len(files) <= 3, files
    for f in files:
        assert (REPO_ROOT / f.replace("<name>", "live")).exists(), f
