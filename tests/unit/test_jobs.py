"""A team's code: found on its declared path, its errors named by file and line, packaged once
per deployment with a content hash (streamops.jobs). No Spark: the contract itself."""

from __future__ import annotations

import sys
import zipfile

import pytest

from streamops.jobs import JobError, check_signature, load_callable, package_code


@pytest.fixture
def code(tmp_path, monkeypatch):
    root = tmp_path / "code"
    (root / "teamjobs").mkdir(parents=True)
    (root / "teamjobs" / "__init__.py").write_text("")
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield root
    for name in [m for m in sys.modules if m.startswith("teamjobs")]:
        del sys.modules[name]


def test_a_job_is_imported_from_its_declared_path(code):
    (code / "teamjobs" / "ok.py").write_text("def build(records, params):\n    return records\n")
    fn = load_callable("teamjobs.ok:build", [str(code)])
    assert fn("r", {}) == "r"


@pytest.mark.parametrize("source, ref, why", [
    ("def build(records, params):\n    return records\n", "teamjobs.nope:build", "no module 'teamjobs.nope'"),
    ("def build(records, params):\n    return records\n", "teamjobs.m:bild", "has no 'bild'"),
    ("build = 3\n", "teamjobs.m:build", "'build' is not a function \\(it is the int 3\\)"),
    ("def build(records, params)\n    return records\n", "teamjobs.m:build", "SyntaxError: .*m.py:1\\)"),
    ("import os\nraise RuntimeError('no config')\n", "teamjobs.m:build", "RuntimeError: no config .*m.py:2\\)"),
    ("from teamjobs import missing_helper\n", "teamjobs.m:build", "ImportError: .*m.py:1\\)"),
])
def test_an_error_in_the_teams_code_names_its_file_and_line(code, source, ref, why):
    (code / "teamjobs" / "m.py").write_text(source)
    with pytest.raises(JobError, match=why):
        load_callable(ref, [str(code)])


def test_a_function_of_the_wrong_shape_is_refused_with_the_shape_expected(code):
    (code / "teamjobs" / "one.py").write_text("def build(records):\n    return records\n")
    fn = load_callable("teamjobs.one:build", [str(code)])
    with pytest.raises(JobError, match=r"expected build\(records, params\).*got build\(records\)"):
        check_signature("teamjobs.one:build", fn, 2, "build(records, params)")


def test_the_code_is_packaged_by_content_and_a_change_is_a_new_hash(code, tmp_path):
    (code / "teamjobs" / "job.py").write_text("def build(records, params):\n    return records\n")
    (code / "teamjobs" / "__pycache__").mkdir()
    (code / "teamjobs" / "__pycache__" / "job.cpython-311.pyc").write_bytes(b"\0")
    first = package_code([str(code)], into=tmp_path / "out")
    again = package_code([str(code)], into=tmp_path / "out")
    assert first == again and len(first.sha256) == 64
    with zipfile.ZipFile(first.archive) as z:
        assert sorted(z.namelist()) == ["teamjobs/__init__.py", "teamjobs/job.py"]
    (code / "teamjobs" / "job.py").write_text("def build(records, params):\n    return records.limit(1)\n")
    changed = package_code([str(code)], into=tmp_path / "out")
    assert changed.sha256 != first.sha256 and changed.archive != first.archive
    assert package_code([str(tmp_path / "empty")], into=tmp_path / "out").archive is None
