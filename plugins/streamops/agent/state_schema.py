"""A job's new code whose state the checkpoint cannot hold (Spark's state schema check): an
aggregate added to a session window, a key column changed, an operator removed. Spark fails the
query's first batch with one of the conditions below; no retry or quarantine can help, so the run
fails at once (`errors.classify` kind `incompatible`), and its reason names the operator and the
fields, for an upgrade's rollback and for `status` (docs/jobs.md, "Upgrading").
"""

from __future__ import annotations

import json
import re
from pathlib import Path

MARKER = "state incompatible:"  # how a run's stop reason says it

# Spark's error conditions (error-conditions.json) of a state the new plan cannot read.
CONDITIONS = ("STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE",
              "STATE_STORE_COLUMN_FAMILY_SCHEMA_INCOMPATIBLE", "STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION",
              "STATE_STORE_INVALID_VARIABLE_TYPE_CHANGE", "STATE_STORE_VALUE_SCHEMA_EVOLUTION_THRESHOLD_EXCEEDED",
              "STATE_STORE_INVALID_CONFIG_AFTER_RESTART", "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA",
              "STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY")

# "Existing value_schema=StructType(...) and new value_schema=StructType(...)." (key_schema alike)
_SCHEMAS = re.compile(r"Existing (key|value)_schema=(StructType\(.*?\)) and new \1_schema=(StructType\(.*?\))\.?\s*$",
                      re.MULTILINE)


def is_incompatible(condition: str | None, text: str) -> bool:
    return bool(condition and condition.split(".")[0] in CONDITIONS) or any(c in text for c in CONDITIONS)


def top_fields(struct: str) -> list[str]:
    """The top-level field names of Spark's StructType(...) string (nested structs skipped)."""
    body = struct[len("StructType("):-1] if struct.startswith("StructType(") else struct
    names, depth, i = [], 0, 0
    while i < len(body):
        if depth == 0 and body.startswith("StructField(", i):
            i += len("StructField(")
            end = body.index(",", i)
            names.append(body[i:end])
            depth = 1
            continue
        depth += {"(": 1, ")": -1}.get(body[i], 0)
        i += 1
    return names


def field_changes(text: str) -> list[str]:
    """What Spark's message says changed: "value fields added: chars", per key and value schema."""
    out = []
    for m in _SCHEMAS.finditer(text):
        old, new = top_fields(m.group(2)), top_fields(m.group(3))
        added, gone = [f for f in new if f not in old], [f for f in old if f not in new]
        if added:
            out.append(f"{m.group(1)} fields added: {', '.join(added)}")
        if gone:
            out.append(f"{m.group(1)} fields removed: {', '.join(gone)}")
        if not added and not gone:
            out.append(f"{m.group(1)} field types or order changed: {', '.join(new)}")
    return out


def operators(query_ckpt: Path) -> list[str]:
    """The checkpoint's state operators as "0 (sessionWindowStateStoreSaveExec)", from Spark's
    operator metadata (state/<op>/_metadata/metadata: a version line, then one JSON line)."""
    out = []
    for meta in sorted(Path(query_ckpt).glob("state/*/_metadata/metadata")):
        try:
            info = json.loads(meta.read_text().splitlines()[1]).get("operatorInfo", {})
            out.append(f"{info.get('operatorId', meta.parent.parent.name)} ({info.get('operatorName', '?')})")
        except (OSError, IndexError, ValueError):
            out.append(f"{meta.parent.parent.name} (unreadable metadata)")
    return out


def reason(condition: str, text: str, query_ckpt: Path | None = None) -> str:
    """The run's stop reason: the condition, the checkpoint's operators and the fields."""
    ops = operators(query_ckpt) if query_ckpt is not None else []
    what = "; ".join(field_changes(text)) or (text.splitlines() or [""])[0][:300]
    return (f"{MARKER} the job's code cannot read the checkpoint's state ({condition}"
            f"{'; operator ' + ', '.join(ops) if ops else ''}): {what}. "
            "Deploy code that keeps the state's schema, or deploy the change as a new stage (a new checkpoint)")
