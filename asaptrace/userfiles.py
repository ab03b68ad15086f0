"""Files a user names on the command line, other than traces: side files read as text, and outputs.

Two mistakes used to surface as tracebacks deep inside a command, after the work was done: a side
file (``--taxonomy``, ``--batches``, ``--rank-map``, ``synth --config``, ``replay --costs``) that is
binary or not UTF-8, and an output path that cannot be written (``/proc/x``, under a regular file,
a read-only folder, an existing file where a folder goes). Both are checked here, before any trace
is parsed, and become one :class:`~asaptrace.errors.UsageError` / :class:`~asaptrace.errors.OutputError`
naming the path and the cause.

Outputs that are folders (a store, a folder of CSV tables) are built in a hidden temporary
sibling, ``.NAME.tmp-HOST-PID-XXXXXXXX``, renamed into place when complete: a full disk or an
error leaves nothing, and the host and pid in the name let the next run to the same output
remove the folders a killed (``kill -9``) run left behind (:func:`remove_stale_siblings`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import socket
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
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


def write_error(err: OSError) -> str:
    """The cause of a failed write in a few words ("No space left on device"), for an OSError from
    Python or from pyarrow (whose ``strerror`` is a long sentence, while its ``errno`` is right)."""
    if err.errno:
        return os.strerror(err.errno)
    text = " ".join(str(err).split())
    return text or type(err).__name__


_HOST = re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())[:64] or "host"


def make_tmp_sibling(path: Path) -> Path:
    """Create the hidden temporary sibling folder an output ``path`` is built in (see the module
    docstring); it records this host and process, so a later run can tell a stale one."""
    tmp = path.parent / f".{path.name}.tmp-{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    return tmp


@dataclass(frozen=True)
class StaleFolder:
    """A temporary folder left by a run that no longer runs, removed by :func:`remove_stale_siblings`."""

    path: Path
    pid: int
    size: int  # bytes it held


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def _folder_size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # removed meanwhile
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def remove_stale_siblings(path: str | Path) -> list[StaleFolder]:
    """Remove the temporary siblings of ``path`` whose process, on this host, is gone.

    Only folders named by :func:`make_tmp_sibling` are considered, and only those written on this
    host by a process that no longer exists (a live run's folder, or one from another machine on a
    shared filesystem, is left alone). Returns what was removed, so a face can say so.
    """
    path = Path(path)
    pattern = re.compile(rf"^\.{re.escape(path.name)}\.tmp-(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]{{8}}$")
    removed: list[StaleFolder] = []
    try:
        entries = list(path.parent.iterdir()) if path.parent.is_dir() else []
    except OSError:
        return removed
    for entry in entries:
        m = pattern.match(entry.name)
        if not m or m["host"] != _HOST or not entry.is_dir() or entry.is_symlink():
            continue
        pid = int(m["pid"])
        if pid == os.getpid() or _alive(pid):
            continue
        size = _folder_size(entry)
        shutil.rmtree(entry, ignore_errors=True)
        if not entry.exists():
            removed.append(StaleFolder(entry, pid, size))
    return removed


def write_folder_files(folder: str | Path, files: dict[str, Callable[[], bytes]]) -> list[Path]:
    """Write ``files`` (name → a function giving its bytes) into ``folder``, all or nothing.

    They are written in a temporary sibling first, then moved into ``folder`` (created only then),
    so a full disk halfway leaves neither a partial file nor a new empty folder; files already in
    ``folder`` under other names are left as they are.
    """
    folder = Path(folder)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = make_tmp_sibling(folder)
    except OSError as err:
        raise OutputError(f"cannot create the folder ({write_error(err)})", path=folder) from None
    try:
        for name, data in files.items():
            (tmp / name).write_bytes(data())
            os.chmod(tmp / name, 0o644)
        if not folder.exists():
            os.replace(tmp, folder)
        else:
            for name in files:
                os.replace(tmp / name, folder / name)
    except OSError as err:
        raise OutputError(f"cannot write ({write_error(err)}); nothing was written", path=folder) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [folder / name for name in files]
