"""Files the tools read and write, with typed errors naming the path and the fix.

Reading (:func:`read_text`): a missing file, a folder, an unreadable or undecodable file is a
:class:`~mai_graph.errors.ConfigError`, never a Python traceback.

Writing: only new or empty places, or the tools' own earlier output.

A command that writes (``eval --out``, ``calibrate --out``, ``synth-data DIR``, ``build-tiny
DIR``, ``profile --out FILE``, ``train-pair OUT``) checks its target before any work: a target
that is a file where a folder is meant (or the reverse), a folder holding someone else's files,
or a place the process cannot create is refused with a :class:`~mai_graph.errors.ConfigError`
naming the path and the fix. Nothing the user owns is written unless it is the tool's own
earlier output (which it resumes or replaces, as each command documents).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from mai_graph.errors import ConfigError

__all__ = ["output_file", "output_folder", "read_text"]


def read_text(path: str | os.PathLike[str], *, flag: str, what: str) -> str:
    """The text of an input file (UTF-8).

    Raises:
        ConfigError: The file is missing, a folder, unreadable or not UTF-8 text.

    >>> try:
    ...     read_text("/nonexistent/x.json", flag="--context", what="context file")
    ... except ConfigError as exc:
    ...     print(exc.parameter, "not found" in str(exc))
    --context True
    """
    file = Path(path).expanduser()
    problem, fix = None, "give the path of an existing file"
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError:
        problem = "not found"
    except IsADirectoryError:
        problem, fix = "is a folder, not a file", "give the path of a file"
    except PermissionError:
        problem, fix = "cannot be read (permission denied)", "give a file this user can read"
    except UnicodeDecodeError as exc:
        problem, fix = f"is not UTF-8 text (byte {exc.start})", f"give a text {what}"
    except OSError as exc:
        problem = f"cannot be read ({exc.strerror or exc})"
    raise ConfigError(f"{flag}: {what} {problem}: {file}", parameter=flag, value=str(file),
                      fix=fix)  # fmt: skip


def _create(folder: Path, flag: str) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".mai-graph-write-check-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise ConfigError(
            f"{flag} {folder}: cannot write there ({exc.strerror or exc})",
            parameter=flag,
            value=str(folder),
            fix="give a folder this user can create and write",
        ) from None


def output_folder(
    path: str | os.PathLike[str],
    *,
    flag: str,
    what: str,
    owns: Callable[[Path], bool],
) -> Path:
    """Check (and create) an output folder; returns it.

    Args:
        path: The folder.
        flag: How the caller names it in errors (``--out``).
        what: What the command writes there (``evaluation records``).
        owns: Whether an existing, non-empty folder is this command's own output.

    Raises:
        ConfigError: ``path`` is a file, a non-empty folder the command does not own, or cannot
            be created or written.

    >>> import tempfile
    >>> output_folder(tempfile.mkdtemp(), flag="--out", what="x", owns=lambda p: False).is_dir()
    True
    """
    folder = Path(path).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ConfigError(
            f"{flag} {folder} is a file, not a folder: refusing to write the {what} into it",
            parameter=flag,
            value=str(folder),
            fix=f"give a new folder for the {what} (the file is left as it is)",
        )
    if folder.is_dir() and any(folder.iterdir()) and not owns(folder):
        raise ConfigError(
            f"{flag} {folder} holds other files (it is not the folder of an earlier {what}): "
            "refusing to write into it",
            parameter=flag,
            value=str(folder),
            fix="give a new or empty folder (or the folder of an earlier run of this command)",
        )
    _create(folder, flag)
    return folder


def output_file(
    path: str | os.PathLike[str],
    *,
    flag: str,
    what: str,
    owns: Callable[[Path], bool],
) -> Path:
    """Check an output file's place (its folder is created); returns it.

    Raises:
        ConfigError: ``path`` is a folder, an existing file the command does not own, or its
            folder cannot be created or written.
    """
    file = Path(path).expanduser()
    if file.is_dir():
        raise ConfigError(
            f"{flag} {file} is a folder; {what} is written to a file",
            parameter=flag,
            value=str(file),
            fix=f"give a file name, e.g. {file / 'out.json'}",
        )
    if file.exists() and not owns(file):
        raise ConfigError(
            f"{flag} {file} exists and is not a {what} mai-graph wrote: refusing to overwrite it",
            parameter=flag,
            value=str(file),
            fix="give a new file name",
        )
    _create(file.parent, flag)
    return file
