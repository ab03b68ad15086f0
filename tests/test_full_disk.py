"""Big runs fail cleanly: a full disk is one line and leaves nothing; a killed ingest's temporary
folder is removed by the next run to the same output.

The disk is really full where this machine lets us mount a small tmpfs (we are root here; the
tests say why they skip elsewhere). The same ENOSPC is also produced without a mount, by a
Parquet writer monkeypatched to raise ``OSError(28)`` — what pyarrow raises on a full disk — so
the error path is tested on every machine.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from asaptrace.userfiles import make_tmp_sibling, remove_stale_siblings
from tests._cli import run_cli
from tests.conftest import SAMPLES

COUPLED = SAMPLES / "coupled" / "kineto"


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (a real filesystem that fills up); skipped where mounting is not permitted."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if proc.returncode:
        pytest.skip(
            f"cannot mount a tmpfs here ({proc.stderr.strip() or proc.returncode}); "
            "test_full_disk_by_monkeypatch covers the same path"
        )
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def _one_line_error(run, *words: str) -> None:
    lines = run.stderr.strip().splitlines()
    assert run.code == 2 and len(lines) == 1, run
    assert "Traceback" not in run.stderr and all(w in lines[0] for w in words), lines


def test_ingest_into_a_full_disk_is_one_line_and_leaves_nothing(small_disk):
    # the coupled sample (4.5 MB of traces) makes a store of several MB: it cannot fit in 1 MiB
    out = small_disk / "run.store"
    run = run_cli("ingest", COUPLED, "-o", out)
    _one_line_error(run, str(out), "No space left on device")
    assert list(small_disk.iterdir()) == []


def test_analyze_csv_into_a_full_disk_leaves_no_folder(small_disk, coupled_store):
    # leave 16 KiB free: the CSV tables of the coupled sample are ≈ 100 KB, so a later one fails
    filler = small_disk / "filler"
    free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
    filler.write_bytes(b"\0" * (free - 16 * 1024))
    run = run_cli("analyze", coupled_store.path, "--csv", small_disk / "tables")
    _one_line_error(run, "tables", "No space left on device")
    assert [p.name for p in small_disk.iterdir()] == ["filler"]


def test_analyze_csv_into_an_existing_folder_keeps_its_other_files_on_failure(small_disk, coupled_store):
    tables = small_disk / "tables"
    tables.mkdir()
    (tables / "notes.txt").write_text("mine")
    free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
    (small_disk / "filler").write_bytes(b"\0" * (free - 16 * 1024))
    run = run_cli("analyze", coupled_store.path, "--csv", tables)
    _one_line_error(run, "No space left on device")
    assert [p.name for p in tables.iterdir()] == ["notes.txt"]
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "tables"]


def test_full_disk_by_monkeypatch(tmp_path, monkeypatch):
    """ENOSPC from pyarrow's Parquet writer (the traceback users saw) on any machine: one line,
    no store, no temporary folder."""
    real = pq.write_table
    calls = {"n": 0}

    def full(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 2:  # a few parts fit, then the disk is full
            raise OSError(
                errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device"
            )
        return real(*args, **kwargs)

    monkeypatch.setattr(pq, "write_table", full)
    out = tmp_path / "out" / "run.store"
    run = run_cli("ingest", COUPLED, "-o", out)
    _one_line_error(run, str(out), "No space left on device")
    assert (
        calls["n"] >= 3
    )  # the disk filled mid-ingest (a write already in flight on the writer thread may follow)
    assert list((tmp_path / "out").iterdir()) == []


def _ingest_process(src: Path, out: Path) -> subprocess.Popen:
    cli = Path(sys.executable).with_name("asaptrace")
    return subprocess.Popen([str(cli), "ingest", str(src), "-o", str(out)], stderr=subprocess.DEVNULL)


def test_a_killed_ingest_is_cleaned_up_by_the_next_run(tmp_path):
    out = tmp_path / "run.store"
    proc = _ingest_process(COUPLED, out)
    deadline = time.monotonic() + 60
    while not (left := list(tmp_path.glob(".run.store.tmp-*"))):  # the ingest has started writing
        assert proc.poll() is None and time.monotonic() < deadline, "the ingest ended before writing"
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert [p.name for p in tmp_path.glob(".run.store.tmp-*")] == [left[0].name]  # left behind
    assert str(proc.pid) in left[0].name
    run = run_cli("ingest", COUPLED, "-o", out)
    assert run.code == 0, run
    assert "removed" in run.stderr and left[0].name in run.stderr and f"pid {proc.pid}" in run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.store"]


def test_a_running_ingests_folder_is_left_alone(tmp_path):
    # a folder named for a live process (a sleeping child) and one for a dead pid: only the dead one goes
    out = tmp_path / "run.store"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = make_tmp_sibling(out)
        live = live.rename(Path(str(live).replace(f"-{os.getpid()}-", f"-{child.pid}-")))
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        gone = make_tmp_sibling(out)
        gone = gone.rename(Path(str(gone).replace(f"-{os.getpid()}-", f"-{dead.pid}-")))
        (gone / "events").mkdir()
        (gone / "events" / "part-00000.parquet").write_bytes(b"x" * 1000)
        removed = remove_stale_siblings(out)
        assert [(r.path.name, r.pid, r.size) for r in removed] == [(gone.name, dead.pid, 1000)]
        assert live.is_dir() and not gone.exists()
        assert remove_stale_siblings(tmp_path / "other.store") == []  # another output's are not touched
    finally:
        child.kill()
        child.wait()
