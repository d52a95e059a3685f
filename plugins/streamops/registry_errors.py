"""The registry's validation errors as a reader wants them: each names the app, the stage and the
field (`app 'taxi', stage 'top10', field 'cores.min': ...`), and all of them come at once."""

from __future__ import annotations

import copy
from typing import Any

from pydantic import ValidationError


def _where(loc: tuple[Any, ...]) -> str:
    """('apps', 'taxi', 'stages', 'top10', 'cores', 'min') → "app 'taxi', stage 'top10', field 'cores.min'"."""
    parts, rest = [], list(loc)
    if rest[:1] == ["apps"] and len(rest) >= 2:
        parts.append(f"app {rest[1]!r}")
        rest = rest[2:]
        if rest[:1] == ["stages"] and len(rest) >= 2:
            parts.append(f"stage {rest[1]!r}")
            rest = rest[2:]
    elif rest[:1] == ["pools"] and len(rest) >= 2:
        parts.append(f"pool {rest[1]!r}")
        rest = rest[2:]
    # Discriminated unions add the tag ("files", "postgres") to the path; it is noise to a reader.
    rest = [str(r) for r in rest
            if r not in ("files", "kafka", "postgres", "parquet", "foreach_batch", "function-after")]
    if rest:
        parts.append(f"field {'.'.join(rest)!r}")
    return ", ".join(parts) or "top level"


def validation_problems(e: ValidationError, source: str) -> str:
    lines = []
    for err in e.errors():
        msg = err["msg"].removeprefix("Value error, ")
        got = "" if err["type"] == "missing" else f" (got {err['input']!r})"
        if err["type"] == "extra_forbidden":
            msg, got = "unknown field (check the spelling)", ""
        lines.append(f"{source}: {_where(err['loc'])}: {msg}{got}")
    return "\n".join(lines)


def without_what_failed(data: dict[str, Any], e: ValidationError) -> dict[str, Any] | None:
    """The registry minus what a validation error points at (an unknown field is dropped, a stage
    with another error is left out), so the cross-checks still judge the rest and every problem
    is reported at once; None when an error is outside a stage."""
    out = copy.deepcopy(data)
    broken: set[tuple[str, str]] = set()
    for err in e.errors():
        loc = [str(x) for x in err["loc"]]
        if loc[:1] != ["apps"] or len(loc) < 4 or loc[2] != "stages":
            return None
        if err["type"] != "extra_forbidden":
            broken.add((loc[1], loc[3]))
            continue
        node = out
        for key in loc[:-1]:  # a discriminated union's tag is in the path but not in the data
            node = node.get(key, node) if isinstance(node, dict) else node
        if isinstance(node, dict):
            node.pop(loc[-1], None)
    for a, st in broken:
        out["apps"][a]["stages"].pop(st, None)
    return out
