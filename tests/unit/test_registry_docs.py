"""Options declared once (issue 47 item 2): docs/registry.md's option tables are generated from
the declarations, old spellings are read as fallback keys, the passes take the typed options the
registry parsed, and a policy is known by its entry in plan.operator.POLICIES alone."""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass
from pathlib import Path

import pytest

from streamops import registry, registry_docs
from streamops.plan import operator
from streamops.plan.options import AppOptions, OperatorOptions, by_key, declared, option
from streamops.plan.redundancy import RedundancyOptions
from tests.unit.test_registry import GOOD, STAGE, _with

ROOT = Path(__file__).resolve().parents[2]


def test_docs_registry_md_holds_the_generated_option_tables():
    diff = registry_docs.drift()
    assert not diff, f"docs/registry.md differs from the option declarations; run `{registry_docs.REGENERATE}`\n{diff}"


@pytest.mark.parametrize("cls", [OperatorOptions, AppOptions, RedundancyOptions])
def test_every_option_has_a_description_and_a_row(cls):
    rows = {key for key, *_ in registry_docs._rows(cls)}
    assert rows == {f.name for f in declared(cls)}
    assert all(f.metadata["description"] for f in declared(cls))


@dataclass(frozen=True)
class _Renamed:
    catch_up_s: float = option(60.0, "drain within", old=("catchup_s", "catch_up"))


def test_an_old_spelling_is_read_when_the_key_is_absent():
    assert by_key(_Renamed, {"catchup_s": 30}) == {"catch_up_s": 30}
    assert by_key(_Renamed, {"catch_up": 20, "catchup_s": 30}) == {"catch_up_s": 30}, "declared order"
    assert by_key(_Renamed, {"catch_up_s": 10, "catchup_s": 30}) == {"catch_up_s": 10}, "the key wins"
    with pytest.raises(ValueError, match=r"unknown _Renamed option\(s\) \['catchup'\]; valid: \['catch_up_s'\]"):
        by_key(_Renamed, {"catchup": 1})
    assert "(formerly `catchup_s`, `catch_up`)" in registry_docs._rows(_Renamed)[0][3]


def test_a_bad_option_value_names_the_file_the_stage_and_the_field():
    with pytest.raises(registry.RegistryError) as e:
        registry.parse(_with(STAGE + ["policy"], {"params": {"scale_in_to": "all"}}), "apps.yaml")
    assert "apps.yaml: app 'taxi', stage 'top10', field 'policy.params': scale_in_to must be 'one' or 'ds2'" \
        in str(e.value)
    with pytest.raises(registry.RegistryError) as e:
        registry.parse(_with(["apps", "taxi", "control"], {"generator": "steps"}), "apps.yaml")
    assert "apps.yaml: app 'taxi', field 'control': generator must be 'edf_step' or 'proportional'" in str(e.value)
    with pytest.raises(registry.RegistryError) as e:
        registry.parse(_with(STAGE + ["policy"], {"kind": "pid"}), "apps.yaml")
    assert "apps.yaml: app 'taxi', stage 'top10', field 'policy.kind': expected one of 'edf'" in str(e.value)


def test_a_policy_is_known_by_its_entry_in_the_operator_s_policies(monkeypatch):
    monkeypatch.setitem(operator.POLICIES, "hold", lambda s, opt, state, ctx: ([], state))
    data = copy.deepcopy(GOOD)
    data["apps"]["taxi"]["stages"]["top10"]["policy"] = {"kind": "hold", "params": {"window_s": 60}}
    st = registry.parse(data).apps["taxi"].stages["top10"]
    assert (st.policy.kind, st.policy.params.window_s) == ("hold", 60.0)


def test_a_stored_spec_reads_back_as_the_registry_typed_it():
    st = registry.parse(_with(STAGE + ["redundancy"], {"params": {"r_max": 0.5}})).apps["taxi"].stages["top10"]
    stored = st.model_dump(mode="json")
    assert registry.stored(registry.Policy, stored["policy"]) == st.policy
    assert registry.stored(registry.Redundancy, stored["redundancy"]) == st.redundancy
    assert registry.stored(registry.Policy, None) == registry.Policy()
    assert registry.stored_control({"beta": 0.5}) == AppOptions(beta=0.5)


@pytest.mark.parametrize("module", ["control.py", "forecast_pass.py", "redundancy_pass.py", "report/nightly.py"])
def test_the_passes_parse_no_options_themselves(module):
    """They take the typed options (registry.stored_* at the rows' load), never `from_params`."""
    tree = ast.parse((ROOT / "plugins" / "streamops" / module).read_text())
    calls = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "from_params"]
    assert not calls, f"{module} parses options again at lines {calls}"
