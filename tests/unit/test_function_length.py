"""No function over 60 lines outside bench/ (issue 47): a long function hides its phases; split
it into the steps it takes. Lines are counted from the `def` to the last line of the body
(decorators excluded), on the AST. Pure: no database."""

from __future__ import annotations

import ast

from streamops.paths import REPO_ROOT

ROOTS = [REPO_ROOT / "plugins", REPO_ROOT / "spark_apps", REPO_ROOT / "dags"]
MAX_FUNCTION_LINES = 60


def _long_functions() -> list[str]:
    found = []
    for root in ROOTS:
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(REPO_ROOT).as_posix()
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length <= MAX_FUNCTION_LINES:
                    continue
                found.append(f"{rel}:{node.lineno} {node.name} {length}")
    return found


def test_no_function_over_60_lines():
    long = _long_functions()
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them into their phases):\n" + "\n".join(long)
