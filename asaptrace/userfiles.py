"""Files a user names on the command line, other than traces: side files read as text, and outputs.

Two mistakes used to surface as tracebacks deep inside a command, after the work was done: a side
file (``--taxonomy``, ``--batches``, ``--rank-map``, ``synth --config``, ``replay --costs``) that is
binary or not UTF-8, and an output path that cannot be written (``/proc/x``, under a regular file,
a read-only folder, an existing file where a folder goes). Both are checked here, before any trace
is parsed, and become one :class:`~asaptrace.errors.UsageError` / :class:`~asaptrace.errors.OutputError`
naming the path and the cause.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from asaptrace.errors import OutputError, UsageError


def read_text(path: str | Path, what: str) -> str:
    """The UTF-8 text of the side file ``path`` (a ``what``: "taxonomy file", "rank map", …)."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"is a folder, not a {what}", path=path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise UsageError(f"cannot read {what} ({err.strerror or err})", path=path) from None
    if b"\x00" in data[:8192]:
        raise UsageError(f"is a binary file, not a {what} (a {what} is UTF-8 text)", path=path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UsageError(
            f"is not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start}); a {what} is UTF-8 text",
            path=path,
        ) from None


def _nearest_existing(path: Path) -> Path:
    """``path`` or its closest ancestor that exists (what a ``mkdir -p`` would start from)."""
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _probe_writable(folder: Path, target: Path) -> None:
    """Create and remove a temporary entry in ``folder``: the only honest writability test (root
    passes every permission check, /proc and /sys refuse new files whatever their mode says)."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".asaptrace-probe-", dir=folder))
    except OSError as err:
        cause = "it takes no new files" if err.errno == errno.ENOENT else (err.strerror or str(err))
        raise OutputError(f"cannot write in {folder} ({cause})", path=target) from None


def check_output_dir(path: str | Path, *, replace: bool = False, what: str = "store") -> Path:
    """Check that the folder ``path`` (a ``what``) can be created, before any work is done.

    An existing *folder* at ``path`` is left to the caller's own rules (replace with ``--force``,
    refuse a foreign one); anything else in the way is an :class:`OutputError`.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        hint = "; --force replaces only a folder" if replace else ""
        raise OutputError(f"exists and is not a folder (a {what} is a folder){hint}", path=path)
    base = _nearest_existing(path.parent)
    if not base.is_dir():
        raise OutputError(f"cannot create it: {base} is a file, not a folder", path=path)
    _probe_writable(base, path)
    return path


def check_output_file(path: str | Path) -> Path:
    """Check that the file ``path`` can be written (its folder exists and takes new files)."""
    path = Path(path)
    if path.is_dir():
        raise OutputError("is a directory; give a file name", path=path)
    parent = path.parent
    if not parent.exists():
        base = _nearest_existing(parent)
        if not base.is_dir():
            raise OutputError(f"cannot create it: {base} is a file, not a folder", path=path)
        raise OutputError("its folder does not exist", path=path)
    if not parent.is_dir():
        raise OutputError(f"cannot create it: {parent} is a file, not a folder", path=path)
    _probe_writable(parent, path)
    return path


def write_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary sibling renamed into place (never half-written)."""
    path = check_output_file(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as err:
        raise OutputError(f"cannot write ({err.strerror or err})", path=path) from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path
