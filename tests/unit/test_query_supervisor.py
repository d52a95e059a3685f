"""The driver's query supervisor with fake queries and a fake poison book: an infrastructure
error is never counted against a batch, and a batch that no file fails alone is not quarantined:
the run fails with the error's class for the supervisor to restart (issue 44, item 3)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from spark_apps import query_supervisor as qs
from streamops.agent.poison import Verdict
from streamops.registry import Stage
from tests.unit.test_error_classes import JThrowable, Py4JJavaError, aborted


class Book:
    def __init__(self, action="quarantine"):
        self.action, self.recorded, self.quarantined, self.notes = action, [], [], []

    def excluded_files(self):
        return {"main": [], "quarantine": []}

    def record(self, fb, poison_after):
        self.recorded.append(fb)
        return Verdict(self.action, len(self.recorded), "test")

    def quarantine(self, fb, attempts, files=None):
        self.quarantined.append(files)
        return 1

    def not_blamed(self, fb, why):
        self.notes.append(why)


class Query:
    name = "main"

    def __init__(self, exc, active=False):
        self.exc, self.isActive = exc, active

    def exception(self):
        return self.exc


@pytest.fixture
def supervisor(monkeypatch):
    def make(book, fails_alone=None):
        monkeypatch.setattr(qs.checkpoint, "last_planned_batch", lambda _: 7)
        monkeypatch.setattr(qs.checkpoint, "last_committed_batch", lambda _: 6)
        monkeypatch.setattr(qs.checkpoint, "batch_files", lambda _, __: [f"/in/f{i}.json" for i in range(20)])
        stage = Stage.__new__(Stage)
        object.__setattr__(stage, "poison_after_failures", 3)
        sup = qs.QuerySupervisor(stage, Path("/nowhere"), book, lambda which, excluded: Query(None),
                                 threading.Event(), fails_alone=fails_alone)
        sup.stopping.wait = lambda s: False  # no backoff in a test
        return sup
    return make


def test_an_infrastructure_error_is_never_a_batch_s_fault_and_ends_the_run_with_its_class(supervisor):
    book = Book()
    sup = supervisor(book, fails_alone=lambda files: None)
    stale = Py4JJavaError(aborted(JThrowable("java.io.IOException", "Stale file handle")))
    whys = [sup.check([Query(stale), Query(None, active=True)]) for _ in range(sup.GENERIC_LIMIT)]
    assert book.recorded == [] and book.quarantined == [], "an infrastructure error is not counted against a batch"
    assert whys[:-1] == [None, None] and "java.io.IOException" in whys[-1]


def test_a_batch_no_file_of_which_fails_alone_is_not_quarantined_and_the_run_fails(supervisor):
    book = Book()
    sup = supervisor(book, fails_alone=lambda files: None)  # the dry run (no checkpoint, no state) passes
    err = Py4JJavaError(aborted(JThrowable("org.apache.spark.api.python.PythonException", "ValueError: bad")))
    why = sup.check([Query(err), Query(None, active=True)])
    assert book.quarantined == [], "20 of 20 files blamed: valid records quarantined"
    assert why and "no file" in why and "fails alone" in why
    assert book.notes and "nothing quarantined" in book.notes[0]
