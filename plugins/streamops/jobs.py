"""A team's own job: where its code is, how it is imported, and how it reaches the executors.

A stage names its transform as an import path (`job: my_team.sessions:build`) found on the
stage's code path (apps.yaml's `code`). The platform imports nothing of it at module import
time and knows no job by name: `load_callable` imports what the registry names, and an error in
the team's code is reported with the team's file and line (`JobError`).

The code path is packaged once per deployment (`package_code`): a zip of its Python files whose
content hash is recorded in the deployment, and which the driver ships to every executor with
`addPyFile`, so a worker on another host runs the same code without a copy of its own.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import sys
import traceback
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamops.paths import data_dir

# Deterministic zip entries (the hash is of the content, not of when it was packed).
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_SKIP_DIRS = {"__pycache__", ".git", ".venv", ".pytest_cache", ".mypy_cache"}


class JobError(RuntimeError):
    """The job cannot be imported or run: the message names the import path and, where the error
    is in the team's code, its file and line."""


@dataclass(frozen=True)
class CodeBundle:
    """The stage's code path packaged for one deployment: the zip the driver ships with
    `addPyFile`, and the sha256 of its content (recorded in the deployment)."""

    archive: str | None
    sha256: str | None


def _where_in_user_code(e: BaseException, paths: Iterable[str]) -> str:
    """' (file:line)' of the innermost frame inside the job's code, or of a SyntaxError."""
    if isinstance(e, SyntaxError) and e.filename:
        return f" ({e.filename}:{e.lineno})"
    roots = [str(Path(p).resolve()) for p in paths]
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if not roots or any(f.filename.startswith(r) for r in roots)]
    return f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def user_error(ref: str, e: BaseException, paths: Iterable[str] = ()) -> JobError:
    """`e`, raised by the job `ref`, as a JobError that names the team's file and line."""
    first = str(e).splitlines()[0] if str(e) else ""
    return JobError(f"job {ref}: {type(e).__name__}: {first}{_where_in_user_code(e, paths)}")


def on_path(paths: Iterable[str]) -> None:
    """Put the stage's code directories first on sys.path (once each)."""
    for p in reversed([str(Path(p).resolve()) for p in paths]):
        if p not in sys.path:
            sys.path.insert(0, p)


def load_callable(ref: str, paths: Iterable[str] = ()) -> Callable[..., Any]:
    """`package.module:function` imported from `paths` (then the installed packages)."""
    paths = list(paths)
    module_name, _, attr = ref.partition(":")
    on_path(paths)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            where = ", ".join(paths) or "the installed packages"
            raise JobError(f"job {ref}: no module {e.name!r} on the code path ({where})") from None
        raise user_error(ref, e, paths) from e
    except Exception as e:  # noqa: BLE001 - whatever the team's module raised at import
        raise user_error(ref, e, paths) from e
    fn = getattr(module, attr, None)
    if fn is None:
        raise JobError(f"job {ref}: module {module_name!r} ({getattr(module, '__file__', '?')}) has no {attr!r}")
    if not callable(fn):
        raise JobError(f"job {ref}: {attr!r} is not a function (it is the {type(fn).__name__} {fn!r})")
    job: Callable[..., Any] = fn
    return job


def check_signature(ref: str, fn: Callable[..., Any], arity: int, shape: str) -> None:
    """Refuse a function that cannot take `arity` positional arguments, naming the expected shape."""
    try:
        inspect.signature(fn).bind(*range(arity))
    except TypeError:
        raise JobError(f"job {ref}: expected {shape}, got {attr_signature(fn)}") from None
    except ValueError:  # a builtin without a signature: let the call decide
        return


def attr_signature(fn: Callable[..., Any]) -> str:
    try:
        return f"{getattr(fn, '__name__', 'function')}{inspect.signature(fn)}"
    except (TypeError, ValueError):
        return repr(fn)


def _python_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py")
                  if not _SKIP_DIRS.intersection(part for part in p.relative_to(root).parts[:-1]))


def package_code(paths: Iterable[str], into: Path | None = None) -> CodeBundle:
    """Zip the Python files of the code directories (paths inside each relative to it, so its
    top-level packages are at the zip's root). The zip is named by its content's hash, so equal
    code is packed once, and a changed job is a new hash (an upgrade)."""
    roots = [Path(p).resolve() for p in paths]
    files = [(root, f) for root in roots if root.is_dir() for f in _python_files(root)]
    if not files:
        return CodeBundle(None, None)
    digest = hashlib.sha256()
    for root, f in files:
        digest.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    sha = digest.hexdigest()
    out_dir = into or data_dir() / "jobs"
    out_dir.mkdir(parents=True, exist_ok=True)
    archive = out_dir / f"code-{sha[:16]}.zip"
    if not archive.exists():
        tmp = archive.with_suffix(".zip.tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for root, f in files:
                info = zipfile.ZipInfo(str(f.relative_to(root)), _ZIP_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, f.read_bytes())
        tmp.replace(archive)  # atomic: a reader never sees half a zip
    return CodeBundle(str(archive), sha)
