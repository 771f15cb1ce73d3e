"""Files the tools read and write, with typed errors naming the path and the fix.

Reading: every file a door reads (lineup, context, key, latency-model and settings files, a
model's ``config.json`` and safetensors headers, records and datasets) goes through
:func:`open_regular`, :func:`read_bytes` or :func:`read_text`:

- the file is opened without blocking and checked with ``fstat`` on the open descriptor: a
  named pipe (FIFO), a device (``/dev/zero``), a socket or a folder is refused before a byte
  is read, whatever it is reached through (links are followed, their target is checked);
- a whole-file read is capped (:data:`MAX_READ_BYTES` unless the caller names its own cap);
  streaming readers of large files (records, datasets) take the open file and read on;
- a missing, unreadable or undecodable file is a :class:`~mai_graph.errors.ConfigError`
  naming the flag, the path and the fix, never a Python traceback or a hang.

Writing: only new or empty places, or the tools' own earlier output.

A command that writes (``eval --out``, ``calibrate --out``, ``synth-data DIR``, ``build-tiny
DIR``, ``profile --out FILE``, ``train-pair OUT``) checks its target before any work: a target
that is a file where a folder is meant (or the reverse), a folder holding someone else's files,
or a place the process cannot create is refused with a :class:`~mai_graph.errors.ConfigError`
naming the path and the fix. Nothing the user owns is written unless it is the tool's own
earlier output (which it resumes or replaces, as each command documents).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from mai_graph.errors import ConfigError

__all__ = [
    "MAX_READ_BYTES",
    "open_regular",
    "output_file",
    "output_folder",
    "read_bytes",
    "read_text",
]

MAX_READ_BYTES = 16 * 1024 * 1024
"""Largest file read whole (16 MiB): settings, lineups, key files, a model's JSON files. The
largest of these in practice, a big checkpoint's ``model.safetensors.index.json``, is a few
MB; a larger file is a mistake (or ``/dev/zero`` behind a link) and is refused unread."""

_KINDS = (
    (stat.S_ISDIR, "is a folder, not a file", "give the path of a file"),
    (stat.S_ISFIFO, "is a named pipe (FIFO), not a regular file", ""),
    (stat.S_ISCHR, "is a character device, not a regular file", ""),
    (stat.S_ISBLK, "is a block device, not a regular file", ""),
    (stat.S_ISSOCK, "is a socket, not a regular file", ""),
)
_REGULAR_FIX = "give the path of a regular file (not a pipe, device or socket)"


def _refuse(file: Path, flag: str, what: str, problem: str, fix: str) -> ConfigError:
    if file.is_symlink():
        problem += f" (the path is a link to {os.path.realpath(file)})"
    return ConfigError(f"{flag}: {what} {problem}: {file}", parameter=flag, value=str(file),
                       fix=fix)  # fmt: skip


def open_regular(path: str | os.PathLike[str], *, flag: str, what: str) -> BinaryIO:
    """An input file opened for binary reading, once it is known to be a regular file.

    The file is opened with ``O_NONBLOCK`` (opening a FIFO then returns at once instead of
    waiting for a writer) and its kind read from the open descriptor, so what is checked is
    what is read. The caller closes it (``with open_regular(...) as fh``).

    Args:
        path: The file (``~`` expanded; links followed).
        flag: How errors name it (``--lineup``, ``MAI_GRAPH_LINEUP``, ``model``).
        what: What it is (``lineup file``).

    Raises:
        ConfigError: Missing, a folder, a FIFO, a device or a socket, or unreadable.

    >>> open_regular("/dev/null", flag="--context", what="context file")
    Traceback (most recent call last):
        ...
    mai_graph.errors.ConfigError: --context: context file is a character device, not a regular file: /dev/null. Fix: give the path of a regular file (not a pipe, device or socket)
    """  # noqa: E501
    file = Path(os.fspath(path)).expanduser()
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(file, flags)
    except FileNotFoundError:
        raise _refuse(file, flag, what, "not found", "give the path of an existing file") from None
    except PermissionError:
        raise _refuse(file, flag, what, "cannot be read (permission denied)",
                      "give a file this user can read") from None  # fmt: skip
    except OSError as exc:
        problem = ("is a socket, not a regular file" if exc.errno == errno.ENXIO
                   else f"cannot be read ({exc.strerror or exc})")  # fmt: skip
        raise _refuse(file, flag, what, problem, _REGULAR_FIX) from None
    try:
        mode = os.fstat(fd).st_mode
        for test, problem, fix in _KINDS:
            if test(mode):
                raise _refuse(file, flag, what, problem, fix or _REGULAR_FIX)
        if not stat.S_ISREG(mode):
            raise _refuse(file, flag, what, "is not a regular file", _REGULAR_FIX)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(
    path: str | os.PathLike[str], *, flag: str, what: str, limit: int = MAX_READ_BYTES
) -> bytes:
    """The bytes of an input file of at most ``limit`` bytes (see :func:`open_regular`).

    Raises:
        ConfigError: As :func:`open_regular`, or the file is over ``limit`` bytes.
    """
    file = Path(os.fspath(path)).expanduser()
    with open_regular(file, flag=flag, what=what) as fh:
        size = os.fstat(fh.fileno()).st_size
        try:
            data = fh.read(limit + 1) if size <= limit else b""
        except OSError as exc:
            raise _refuse(file, flag, what, f"cannot be read ({exc.strerror or exc})",
                          "give a file this user can read") from None  # fmt: skip
    if size > limit or len(data) > limit:
        raise _refuse(
            file, flag, what, f"is {_size(max(size, len(data)))}, over the limit of "
            f"{_size(limit)} for a {what}", f"give the {what} itself (a few KB)",
        )  # fmt: skip
    return data


def _size(n: int) -> str:
    return f"{n:,} bytes" if n < 1 << 20 else f"{n / (1 << 20):,.1f} MiB"


def read_text(
    path: str | os.PathLike[str], *, flag: str, what: str, limit: int = MAX_READ_BYTES
) -> str:
    """The text of an input file (UTF-8) of at most ``limit`` bytes (see :func:`open_regular`).

    Raises:
        ConfigError: The file is missing, not a regular file, over ``limit``, unreadable or not
            UTF-8 text.

    >>> try:
    ...     read_text("/nonexistent/x.json", flag="--context", what="context file")
    ... except ConfigError as exc:
    ...     print(exc.parameter, "not found" in str(exc))
    --context True
    """
    data = read_bytes(path, flag=flag, what=what, limit=limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        file = Path(os.fspath(path)).expanduser()
        raise _refuse(file, flag, what, f"is not UTF-8 text (byte {exc.start})",
                      f"give a text {what}") from None  # fmt: skip


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
