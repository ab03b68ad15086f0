"""``--csv DIR`` / ``--parquet DIR`` on replay, sweep, compare and advise: each table checked against
the JSON the same command prints, every column documented, and all-or-nothing writes."""

from __future__ import annotations

import errno
import json
import re
from pathlib import Path

import polars as pl
import pytest

from tests._cli import run_cli

DOC = Path(__file__).resolve().parents[1] / "docs" / "reference" / "tables.md"
QUICK_SWEEP = ["--duration", "20s", "--rates", "1,4,16", "--jobs", "1", "--policies", "coupled,asap"]


def _documented(folder: Path, fmt: str, command: str) -> dict[str, pl.DataFrame]:
    """Every table in ``folder``, after checking that docs/reference/tables.md lists it and its columns."""
    doc = DOC.read_text(encoding="utf-8")
    section = doc.split(f"## `{command}`", 1)[1].split("\n## ", 1)[0]
    out = {}
    for path in sorted(folder.glob(f"*.{fmt}")):
        t = pl.read_csv(path) if fmt == "csv" else pl.read_parquet(path)
        assert f"`{path.stem}.{fmt.replace('parquet', 'csv')}`" in section or f"`{path.stem}`" in section, (
            path.name
        )
        missing = [c for c in t.columns if f"`{c}`" not in section]
        assert missing == [], f"docs/reference/tables.md ({command}) lacks {missing} of {path.name}"
        out[path.stem] = t
    return out


def test_replay_tables_are_its_steps_and_causes(coupled_store, tmp_path):
    r = run_cli("replay", coupled_store.path, "--policy", "asap", "--json", "--parquet", tmp_path / "t")
    assert r.code == 0, r.stderr
    j = json.loads(r.stdout)
    t = _documented(tmp_path / "t", "parquet", "replay")
    assert t["steps"].to_dicts() == j["steps"]  # one row per measured step, every number the JSON's
    causes = t["causes"]
    assert causes["cause"].to_list() == [c["cause"] for c in j["counterfactuals"]]
    assert (
        causes["recovered_ns"].sum()
        == sum(j["recovered_ns"].values())
        == j["reference_makespan_ns"] - j["makespan_ns"]
    )


def test_sweep_tables_are_one_row_per_policy_and_rate(tmp_path):
    r = run_cli("sweep", *QUICK_SWEEP, "--json", "--csv", tmp_path / "t")
    assert r.code == 0, r.stderr
    j = json.loads(r.stdout)
    t = _documented(tmp_path / "t", "csv", "sweep")
    curves = t["curves"]
    assert curves.height == sum(len(v) for v in j["curves"].values())
    for row in curves.iter_rows(named=True):
        point = next(p for p in j["curves"][row["policy"]] if p["rate"] == row["rate"])
        assert row["mean_ttft_ns"] == point["mean_ttft_ns"] and row["p99_ttft_ns"] == point["p99_ttft_ns"]
        # the one rule (replay.serving.steady.meets_slo): stable, and its mean TTFT within the SLO
        assert row["meets_slo"] == (
            point["mean_ttft_ns"] <= j["slo_ttft_ns"] and point["stable"] is not False
        )
    slo = {r["policy"]: r for r in t["slo"].iter_rows(named=True)}
    assert {p: slo[p]["slo_rps"] for p in j["policies"]} == j["slo_rps"]


def test_compare_tables_are_the_json_tables(coupled_store, sample_run, tmp_path):
    other = sample_run("coupled-hot-expert")[1].path
    r = run_cli("compare", coupled_store.path, other, "--json", "--csv", tmp_path / "t")
    assert r.code == 0, r.stderr
    j = json.loads(r.stdout)["tables"]
    t = _documented(tmp_path / "t", "csv", "compare")
    assert t["overall"]["metric"].to_list() == [row["metric"] for row in j["compare_overall"]]
    assert t["overall"]["delta"].to_list() == pytest.approx([row["delta"] for row in j["compare_overall"]])
    assert t["by_group"].height == len(j["compare_by_group"])


def test_advise_tables_are_its_whatifs_and_answers(coupled_store, tmp_path):
    r = run_cli("advise", coupled_store.path, "--json", "--parquet", tmp_path / "t")
    assert r.code == 0, r.stderr
    j = json.loads(r.stdout)
    t = _documented(tmp_path / "t", "parquet", "advise")
    assert t["whatifs"]["line"].to_list() == [w["line"] for w in j["whatifs"]]
    assert t["whatifs"]["recovered_ns"].to_list() == [w["recovered_ns"] for w in j["whatifs"]]
    assert t["answers"].height == sum(len(w["answers"]) for w in j["whatifs"])


def test_a_full_disk_leaves_no_folder_and_says_so_in_one_line(monkeypatch, tmp_path):
    from asaptrace.errors import OutputError
    from asaptrace.views.files import write_tables

    calls = {"n": 0}
    real = pl.DataFrame.write_csv

    def second_write_fails(self, file=None, **kw):  # the second table hits ENOSPC
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, file, **kw)

    monkeypatch.setattr(pl.DataFrame, "write_csv", second_write_fails)
    target = tmp_path / "tables"
    tables = {"a": pl.DataFrame({"x": [1]}), "b": pl.DataFrame({"x": [2]})}
    with pytest.raises(
        OutputError, match=r"tables: cannot write \(No space left on device\); nothing was written"
    ):
        write_tables(tables, target, "csv")
    assert not target.exists()  # nothing half-written
    assert [p.name for p in tmp_path.iterdir()] == []  # and no hidden staging folder either


def test_a_file_in_the_way_is_refused_before_the_work(coupled_store, tmp_path):
    blocker = tmp_path / "taken"
    blocker.write_text("x")
    r = run_cli("advise", coupled_store.path, "--csv", blocker)
    assert r.code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert re.search(r"taken.*exists and is not a folder", r.stderr)
