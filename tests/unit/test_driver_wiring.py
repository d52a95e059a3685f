"""How the control plane hands a driver its parts without the driver importing it: the Operator
Manager is named in the run's row and resolved in the driver. Pure: no database, no Spark."""

from __future__ import annotations

import pytest

from spark_apps.run_stage import resolve_operator_manager
from streamops import control
from streamops.execute import stages


def test_the_operator_manager_named_in_a_run_s_row_is_the_control_plane_s():
    assert resolve_operator_manager(stages.OPERATOR_MANAGER) is control.request_for_stage


def test_a_run_without_one_makes_no_requests_and_a_wrong_name_fails_at_start():
    assert resolve_operator_manager(None) is None
    with pytest.raises(AttributeError):
        resolve_operator_manager("streamops.control:no_such_function")
