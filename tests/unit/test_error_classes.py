"""Infrastructure errors are judged by the Java exception's class (and Spark's error condition),
not by the data: they are never poison, and a batch is quarantined only for a file that fails
alone in a dry run (issue 44, item 3). Pure: fake py4j objects, no JVM, no database."""

from __future__ import annotations

import pytest

from streamops.agent.errors import is_transient


def classify(e):
    from streamops.agent.errors import classify

    return classify(e)

# Java class → its superclasses, as getClass().getSuperclass() walks them.
HIERARCHY = {
    "java.io.IOException": "java.lang.Exception",
    "java.nio.file.FileSystemException": "java.io.IOException",
    "java.nio.file.AccessDeniedException": "java.nio.file.FileSystemException",
    "java.nio.file.ReadOnlyFileSystemException": "java.lang.UnsupportedOperationException",
    "java.lang.UnsupportedOperationException": "java.lang.RuntimeException",
    "java.util.zip.ZipException": "java.io.IOException",
    "java.lang.IllegalStateException": "java.lang.RuntimeException",
    "java.util.ConcurrentModificationException": "java.lang.RuntimeException",
    "org.apache.spark.SparkConcurrentModificationException": "java.util.ConcurrentModificationException",
    "org.apache.spark.SparkException": "java.lang.Exception",
    "org.apache.spark.SparkRuntimeException": "java.lang.RuntimeException",
    "org.apache.spark.sql.execution.streaming.state.StateStoreSnapshotFileNotFound":
        "org.apache.spark.SparkRuntimeException",
    "org.apache.spark.sql.streaming.StreamingQueryException": "java.lang.Exception",
    "org.apache.spark.api.python.PythonException": "java.lang.RuntimeException",
    "java.lang.RuntimeException": "java.lang.Exception",
    "java.lang.Exception": "java.lang.Throwable",
    "java.lang.Throwable": "java.lang.Object",
}


class JClass:
    def __init__(self, name):
        self.name = name

    def getName(self):
        return self.name

    def getSuperclass(self):
        sup = HIERARCHY.get(self.name)
        return JClass(sup) if sup else None


class JThrowable:
    """What py4j hands over for a Java Throwable: methods called through the gateway."""

    def __init__(self, cls, message=None, cause=None, condition=None):
        self.cls, self.message, self.cause, self.condition = cls, message, cause, condition

    def getClass(self):
        return JClass(self.cls)

    def getMessage(self):
        return self.message

    def getCause(self):
        return self.cause

    def getCondition(self):
        return self.condition

    def toString(self):
        return f"{self.cls}: {self.message}"


class Py4JJavaError(Exception):
    """py4j.protocol.Py4JJavaError's shape: the Java exception in `java_exception`."""

    def __init__(self, java_exception):
        super().__init__("An error occurred while calling o123.awaitTermination")
        self.java_exception = java_exception


def aborted(cause):
    """A task's failure as the driver sees it: the job aborted, the task's exception its cause."""
    return JThrowable("org.apache.spark.sql.streaming.StreamingQueryException", "Query terminated",
                      JThrowable("org.apache.spark.SparkException", "Job aborted due to stage failure", cause))


@pytest.mark.parametrize("java, name", [
    (JThrowable("java.io.IOException", "Stale file handle"), "java.io.IOException"),
    (JThrowable("java.io.IOException", "Input/output error"), "java.io.IOException"),
    (JThrowable("java.nio.file.AccessDeniedException", "/ckpt/offsets/7"), "java.nio.file.AccessDeniedException"),
    (JThrowable("java.nio.file.ReadOnlyFileSystemException"), "java.nio.file.ReadOnlyFileSystemException"),
    (JThrowable("org.apache.spark.sql.execution.streaming.state.StateStoreSnapshotFileNotFound", "no 7.snapshot",
                condition="CANNOT_LOAD_STATE_STORE.CANNOT_READ_MISSING_SNAPSHOT_FILE"),
     "CANNOT_LOAD_STATE_STORE.CANNOT_READ_MISSING_SNAPSHOT_FILE"),
    (JThrowable("org.apache.spark.SparkException", "[CANNOT_LOAD_STATE_STORE.UNCATEGORIZED] An error occurred",
                condition="CANNOT_LOAD_STATE_STORE.UNCATEGORIZED"), "CANNOT_LOAD_STATE_STORE.UNCATEGORIZED"),
    (JThrowable("java.lang.IllegalStateException", "Concurrent update to the log. Multiple streaming jobs "
                "detected for 7"), "java.lang.IllegalStateException"),
    (JThrowable("org.apache.spark.SparkConcurrentModificationException", "Concurrent update to the log.",
                condition="CONCURRENT_STREAM_LOG_UPDATE"), "CONCURRENT_STREAM_LOG_UPDATE"),
])
def test_infrastructure_errors_are_known_by_their_java_class_anywhere_in_the_cause_chain(java, name):
    e = Py4JJavaError(aborted(java))
    assert is_transient(e), "an infrastructure failure is never evidence against the data"
    c = classify(e)
    assert (c.kind, c.name) == ("infrastructure", name)


@pytest.mark.parametrize("java", [
    JThrowable("java.lang.IllegalStateException", "a bug in the job"),  # not the concurrent-update one
    JThrowable("java.util.zip.ZipException", "invalid stored block lengths"),  # a corrupt input file: the data's
    JThrowable("org.apache.spark.api.python.PythonException", "ValueError: bad record"),
])
def test_the_data_s_errors_stay_the_data_s(java):
    e = Py4JJavaError(aborted(java))
    assert not is_transient(e)
    assert classify(e).kind == "data"


def test_the_texts_of_those_errors_alone_prove_nothing():
    """Where the type is gone (text only), a stale handle's text is not taken for the class."""
    assert not is_transient("RuntimeError: something about a Stale file handle in a record")


def test_python_os_errors_of_the_file_system_are_infrastructure():
    import errno

    for code in (errno.ESTALE, errno.EIO, errno.EROFS):
        assert classify(OSError(code, "x")).kind == "infrastructure"
    assert classify(FileNotFoundError(errno.ENOENT, "x")).kind == "data"


def test_a_captured_streaming_query_exception_is_walked_by_its_origin_and_causes():
    """PySpark 4's StreamingQuery.exception(): no `_origin` of its own; its `_cause` holds the Java cause."""

    class Captured(Exception):
        def __init__(self, desc, origin=None, cause=None):
            super().__init__(desc)
            self._desc, self._origin, self._cause = desc, origin, cause

    io = JThrowable("java.io.IOException", "Stale file handle")
    e = Captured("Query terminated", cause=Captured("Job aborted", cause=Captured(io.toString(), origin=io)))
    assert classify(e).kind == "infrastructure"


@pytest.mark.parametrize("poison, blamed", [
    ({"f3"}, {"f3"}),
    (set(), set()),  # none fails alone (only together, or with the run's checkpoint and state): nothing
])
def test_only_a_file_that_fails_alone_is_blamed(poison, blamed):
    from streamops.agent.poison import isolate

    files = tuple(f"f{i}" for i in range(20))
    assert set(isolate(files, "E: x", lambda s: "E: x" if poison & set(s) else None)) == blamed


def test_a_batch_of_one_file_is_blamed_only_if_its_dry_run_fails():
    from streamops.agent.poison import isolate

    assert isolate(("only",), "E: x", lambda s: None) == ()
    assert isolate(("only",), "E: x", lambda s: "E: x") == ("only",)


def test_past_its_budget_the_bisection_blames_only_the_files_proven_so_far():
    from streamops.agent.poison import isolate

    files = tuple(f"f{i}" for i in range(8))
    assert isolate(files, "E: x", lambda s: "E: x", budget=3) == ("f0",)
    assert isolate(files, "E: x", lambda s: "Other: y" if "f3" in s else None) == ()


def test_a_full_disk_under_a_foreach_batch_error_is_what_the_beats_name():
    """The real fault (tests/system/test_outages_counted.py): the checkpoint's disk full under a
    state store's commit reached the driver as the foreachBatch function's error, and the output
    gap said `cause=no_progress` with "An exception was raised by the Python Proxy"."""
    from streamops.agent.poison import error_signature, telling_error
    from streamops.execute.gaps import cause_of

    text = ("[FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach "
            "batch sink. Reason: An exception was raised by the Python Proxy. Return Message: Traceback (most "
            "recent call last):\n  File \"/x/clientserver.py\", line 644, in _call_proxy\n"
            "py4j.protocol.Py4JJavaError: An error occurred while calling o1106.collectToPython.\n"
            ": org.apache.spark.SparkException: [CANNOT_WRITE_STATE_STORE.CANNOT_COMMIT] Error writing state store "
            "files for provider RocksDBStateStore[stateStoreId=StateStoreId[ operatorId=0 ], version=3]\n"
            "\tat org.apache.spark.sql.errors.QueryExecutionErrors$.failedToCommitStateFileError(x.scala:2310)\n"
            "Caused by: org.apache.hadoop.fs.FSError: java.io.IOException: No space left on device\n"
            "Caused by: java.io.IOException: No space left on device\n")
    assert cause_of(error_signature(text), None, False) == "no_progress", "what the beats said before"
    assert telling_error(text) == ("Caused by: org.apache.hadoop.fs.FSError: java.io.IOException: "
                                   "No space left on device")
    assert cause_of(telling_error(text), None, False) == "disk_full"
    plain = "java.lang.IllegalStateException: a bug\n\tat x.y(z.java:1)"
    assert telling_error(plain) == error_signature(plain), "anything else: the root cause, as before"
