"""Every bad input of issue 13 run through the CLI, as one script.

Each case must give: exit code 2, exactly one line on stderr naming the path and the cause, no
``Traceback`` anywhere, and nothing left at the output path (an existing file there untouched).
The outputs are checked before any trace is parsed: cases that also hand over a corrupt trace
still report the output.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests._cli import run_cli
from tests._kineto_helpers import kernel, write_trace

BINARY = bytes(range(256)) * 4  # NULs: a binary file
LATIN1 = "step = 1\nname = 'café'\n".encode("latin-1")  # no NUL, but not UTF-8 (0xe9)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> dict[str, Path]:
    """A trace, a small store made from it, side files of every bad kind, and a regular file."""
    root = tmp_path_factory.mktemp("bad")
    trace = write_trace(root / "in" / "rank0.json", [kernel("flash_fwd", 1, 5)], rank=0)
    corrupt = root / "in2" / "rank1.json"
    corrupt.parent.mkdir()
    corrupt.write_text('{"traceEvents": [{"ph": "X", "name": ')  # truncated JSON
    store = root / "run.store"
    made = run_cli("ingest", trace, "-o", store, "-j", "1")
    assert made.code == 0, made
    (root / "binary.dat").write_bytes(BINARY)
    (root / "latin1.txt").write_bytes(LATIN1)
    (root / "a_file").write_text("I am a file\n")
    return {
        "root": root,
        "trace": trace,
        "corrupt": corrupt,
        "store": store,
        "binary": root / "binary.dat",
        "latin1": root / "latin1.txt",
        "file": root / "a_file",
    }


def _fails_cleanly(run, *fragments: str) -> str:
    assert run.code == 2, run
    assert "Traceback" not in run.stdout + run.stderr, run
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, run.stderr
    for frag in fragments:
        assert frag in lines[0], lines[0]
    return lines[0]


# --------------------------------------------------------------------------------- outputs
# (command builder, output path, what the one line must say); the path is always named
def _output_cases(w: dict[str, Path]) -> list[tuple[str, list[object], Path, str]]:
    f, s, t = w["file"], w["store"], w["trace"]
    return [
        (
            "ingest to /proc",
            ["ingest", w["corrupt"], "-o", "/proc/x.store"],
            Path("/proc/x.store"),
            "cannot write in /proc",
        ),
        ("ingest to /sys", ["ingest", t, "-o", "/sys/x.store"], Path("/sys/x.store"), "cannot write in /sys"),
        (
            "ingest under a file",
            ["ingest", w["corrupt"], "-o", f / "sub.store"],
            f / "sub.store",
            "is a file, not a folder",
        ),
        (
            "ingest onto a file --force",
            ["ingest", w["corrupt"], "-o", f, "--force"],
            f,
            "exists and is not a folder",
        ),
        (
            "analyze --csv /proc",
            ["analyze", s, "--csv", "/proc/tables"],
            Path("/proc/tables"),
            "cannot write in /proc",
        ),
        (
            "analyze --csv under a file",
            ["analyze", s, "--csv", f / "tables"],
            f / "tables",
            "is a file, not a folder",
        ),
        (
            "synth -o /proc",
            ["synth", "--preset", "coupled", "-o", "/proc/run"],
            Path("/proc/run"),
            "cannot write in /proc",
        ),
        (
            "synth -o under a file",
            ["synth", "--preset", "coupled", "-o", f / "run"],
            f / "run",
            "is a file, not a folder",
        ),
        (
            "report -o /proc",
            ["report", s, "-o", "/proc/r.html"],
            Path("/proc/r.html"),
            "cannot write in /proc",
        ),
        (
            "report -o under a file",
            ["report", s, "-o", f / "r.html"],
            f / "r.html",
            "is a file, not a folder",
        ),
        (
            "report -o a .pdf (HTML is never written into it)",
            ["report", s, "-o", f.parent / "r.pdf"],
            f.parent / "r.pdf",
            "a report is written as .html or .md (not .pdf)",
        ),
        (
            "report -o without a suffix",
            ["report", s, "-o", f.parent / "report"],
            f.parent / "report",
            "a report is written as .html or .md (the name has no suffix)",
        ),
        (
            "report --format md -o a .html",
            ["report", s, "--format", "md", "-o", f.parent / "r.html"],
            f.parent / "r.html",
            "--format md but the file name says html (.html)",
        ),
        (
            "export -o /sys",
            ["export", s, "-o", "/sys/run.json.gz"],
            Path("/sys/run.json.gz"),
            "cannot write in /sys",
        ),
        (
            "export --per-rank onto a file",
            ["export", s, "--per-rank", "-o", f],
            f,
            "exists and is not a folder",
        ),
        (
            "replay -o /proc",
            ["replay", s, "-o", "/proc/r.store"],
            Path("/proc/r.store"),
            "cannot write in /proc",
        ),
        (
            "sweep -o /proc",
            ["sweep", "-o", "/proc/sweep.json"],
            Path("/proc/sweep.json"),
            "cannot write in /proc",
        ),
        (
            "sweep -o under a file",
            ["sweep", "-o", f / "sweep.json"],
            f / "sweep.json",
            "is a file, not a folder",
        ),
        ("replay -o onto a file --force", ["replay", s, "-o", f, "--force"], f, "exists and is not a folder"),
    ]


def test_every_unwritable_output_is_one_line_before_any_work(work):
    if not Path("/proc/self").exists() or not Path("/sys").is_dir():
        pytest.skip("needs Linux /proc and /sys")
    for label, args, target, cause in _output_cases(work):
        run = run_cli(*args)
        line = _fails_cleanly(run, str(target), cause)
        assert "rank1.json" not in line, (
            f"{label}: the corrupt trace was parsed before the output was checked"
        )
        if target == work["file"]:
            assert target.read_text() == "I am a file\n", f"{label}: the existing file was touched"
        else:
            assert not target.exists(), f"{label}: something was left at {target}"
    leftovers = [p.name for p in work["file"].parent.iterdir() if p.name.startswith(".")]
    assert leftovers == [], f"temporary files left behind: {leftovers}"


@pytest.fixture
def read_only_dir(tmp_path):
    """A read-only tmpfs (root ignores chmod, so a mount is the only honest read-only folder)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    try:
        made = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(ro)], capture_output=True
        )
    except OSError as err:
        pytest.skip(f"cannot make a read-only mount here ({err})")
    if made.returncode != 0:
        pytest.skip(f"cannot make a read-only mount here: {made.stderr.decode().strip()}")
    yield ro
    subprocess.run(["umount", str(ro)], check=False)


def test_a_read_only_mount_is_one_line(work, read_only_dir):
    for args, target in (
        (["ingest", work["trace"], "-o", read_only_dir / "x.store"], read_only_dir / "x.store"),
        (["report", work["store"], "-o", read_only_dir / "r.html"], read_only_dir / "r.html"),
        (["synth", "--preset", "coupled", "-o", read_only_dir / "run"], read_only_dir / "run"),
    ):
        _fails_cleanly(run_cli(*args), str(target), "Read-only file system")
        assert list(read_only_dir.iterdir()) == []


# ------------------------------------------------------------------------------ side files
def test_binary_or_non_utf8_side_files_are_one_line(work, tmp_path):
    t, b, l1, s = work["trace"], work["binary"], work["latin1"], work["store"]
    out = tmp_path / "out.store"
    cases = [
        (["ingest", t, "-o", out, "--taxonomy", b], b, "is a binary file, not a taxonomy file"),
        (["ingest", t, "-o", out, "--taxonomy", l1], l1, "is not UTF-8 text (byte 0xe9 at offset"),
        (["ingest", t, "-o", out, "--batches", b], b, "is a binary file, not a batches file"),
        (["ingest", t, "-o", out, "--batches", l1], l1, "is not UTF-8 text"),
        (["ingest", t, "-o", out, "--rank-map", b], b, "is a binary file, not a rank map"),
        (["ingest", t, "-o", out, "--rank-map", l1], l1, "is not UTF-8 text"),
        (["analyze", s, "--taxonomy", l1], l1, "is not UTF-8 text"),
        (["analyze", s, "--batches", b], b, "is a binary file"),
        (["synth", "--config", b, "-o", tmp_path / "run"], b, "is a binary file, not a configuration file"),
        (["synth", "--config", l1, "-o", tmp_path / "run"], l1, "is not UTF-8 text"),
        (["replay", s, "--costs", b], b, "is a binary file, not a cost file"),
    ]
    for args, path, cause in cases:
        _fails_cleanly(run_cli(*args), str(path), cause)
    assert not out.exists() and not (tmp_path / "run").exists()


def test_a_file_named_on_the_command_line_that_is_not_a_trace_stays_an_error(work, tmp_path):
    truth = tmp_path / "truth.json"
    truth.write_text('{"barrier_wait_ns": 5}')
    _fails_cleanly(
        run_cli("ingest", work["trace"], truth, "-o", tmp_path / "o.store"),
        str(truth),
        "not a recognised profiler trace",
    )
    assert not (tmp_path / "o.store").exists()


def test_the_console_script_shows_no_traceback_either(work):
    # the real entry point (not the test runner): one line, exit 2
    run = subprocess.run(
        [sys.executable, "-m", "asaptrace.cli", "ingest", str(work["trace"]), "-o", "/proc/x.store"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.strip().splitlines() == [
        "error: /proc/x.store: cannot write in /proc (it takes no new files)"
    ]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # a negative --jobs is refused by the option's bound
        (
            ["ingest", "t.json", "-o", "o.store", "--jobs", "-1"],
            "error: asaptrace ingest: Invalid value for '--jobs' / '-j': Input should be greater than or "
            "equal to 1 (see 'asaptrace ingest -h')",
        ),
        # a required option left out
        (
            ["ingest", "t.json"],
            "error: asaptrace ingest: Missing option '-o' / '--output'. (see 'asaptrace ingest -h')",
        ),
        # a command that does not exist
        (["frobnicate"], "error: asaptrace: No such command 'frobnicate'. (see 'asaptrace -h')"),
    ],
)
def test_usage_errors_are_one_line_too(args, expected, tmp_path):
    # click's usage errors come as a multi-line box by default; the console script says them in one
    # line naming the command and where its help is, exit 2, and writes nothing
    run = subprocess.run(
        [sys.executable, "-m", "asaptrace.cli", *args], capture_output=True, text=True, cwd=tmp_path
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.strip().splitlines() == [expected]
    assert list(tmp_path.iterdir()) == []


def test_dashboard_of_a_folder_that_is_not_a_store_is_one_line_before_serving(work):
    # the store is fine, the folder holding the trace is not a store: nothing is served
    run = run_cli("dashboard", work["store"], work["trace"].parent, "--port", "0")
    _fails_cleanly(run, str(work["trace"].parent), "not an asaptrace store (no meta.json)")
    assert "serving" not in run.stdout
    _fails_cleanly(run_cli("dashboard", work["root"] / "nope.store"), "nope.store: no such store directory")


def test_errors_wrap_to_the_terminal_and_stay_one_line_in_a_log(tmp_path):
    """Issue 42: errors ran to ≈ 420 characters on one line. At a known width (a terminal, or
    COLUMNS) a message wraps between words under its text; with none (a log, a pipe) it stays one
    whole line that grep finds."""
    from typer.testing import CliRunner

    from asaptrace.cli import _common, app

    trace = tmp_path / "rank0.json"
    trace.write_text("{}")
    for columns, lines in (("60", None), ("", 1)):
        _common.err._width = None
        r = CliRunner().invoke(app, ["analyze", str(trace)], env={"COLUMNS": columns})
        said = r.stderr.rstrip("\n").splitlines()
        assert r.exit_code == 2 and said[0].startswith("error: ")
        assert "is a file, not a store" in " ".join(r.stderr.split()) and "asaptrace ingest" in r.stderr
        if lines is None:
            assert len(said) > 1 and all(len(s) <= 60 or "/" in s for s in said), said
            assert all(s.startswith("       ") for s in said[1:]), said  # under the text, past "error: "
        else:
            assert len(said) == lines, said
