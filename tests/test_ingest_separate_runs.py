"""Folders that are not one run (issue 29): separate one-rank runs, device types mixed, and a
folder with unreadable files kept with --skip-bad."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from tests._cli import run_cli
from tests._kineto_helpers import kernel, write_trace


def _one_rank_run(path: Path, device: str | None, *, world_size: int | None = 1) -> Path:
    """A whole run on one device: rank 0 of a world of ``world_size`` (None: no world size)."""
    dist = {"backend": "nccl", "rank": 0} | ({"world_size": world_size} if world_size is not None else {})
    props = [{"id": 0, "name": device}] if device else []
    return write_trace(path, [kernel("k", 1, 10)], rank=None, distributedInfo=dist, deviceProperties=props)


def _lines(text: str) -> list[str]:
    return text.strip().splitlines()


def _info(store: Path) -> dict:
    run = run_cli("info", store, "--json")
    assert run.code == 0, run
    return json.loads(run.stdout)


def test_a_folder_of_separate_one_rank_runs_is_said_in_one_line(tmp_path):
    # two B300 runs and one MI300X run say world size 1, a fourth says no world size: all rank 0
    _one_rank_run(tmp_path / "in" / "a.json", "NVIDIA B300")
    _one_rank_run(tmp_path / "in" / "b.json", "NVIDIA B300")
    _one_rank_run(tmp_path / "in" / "c.json", "AMD Instinct MI300X")
    _one_rank_run(tmp_path / "in" / "d.json", "AMD Instinct MI300X", world_size=None)
    run = run_cli("ingest", tmp_path / "in", "-o", tmp_path / "o.store", "-j", "1")
    assert run.code != 0 and len(_lines(run.stderr)) == 1, run
    assert run.stderr.startswith(
        "error: 4 separate one-rank runs (on AMD Instinct MI300X, NVIDIA B300): each of a.json, b.json, c.json "
        "and 1 more says it is rank 0 of a one-rank world; ingest each alone"
    ), run.stderr
    assert "--rank-from order" not in run.stderr  # never advised across device types
    assert not (tmp_path / "o.store").exists()


def test_ordering_runs_of_other_device_types_needs_mix_devices(tmp_path):
    _one_rank_run(tmp_path / "in" / "b300.json", "NVIDIA B300")
    _one_rank_run(tmp_path / "in" / "mi300x.json", "AMD Instinct MI300X")
    out = tmp_path / "o.store"
    refused = run_cli("ingest", tmp_path / "in", "-o", out, "--rank-from", "order", "-j", "1")
    assert refused.code == 2 and len(_lines(refused.stderr)) == 1, refused
    # each device with its files, sorted by device name
    assert (
        "the files ran on different device types (AMD Instinct MI300X: mi300x.json; NVIDIA B300: b300.json); "
        "ingest each run alone, or pass --mix-devices to make them ranks of one store"
    ) in refused.stderr
    assert not out.exists()
    # said explicitly, the order makes them ranks 0 and 1 (sorted by path: b300.json, mi300x.json)
    mixed = run_cli("ingest", tmp_path / "in", "-o", out, "--rank-from", "order", "--mix-devices", "-j", "1")
    assert mixed.code == 0, mixed
    info = _info(out)
    assert [(r["rank"], Path(r["source_file"]).name) for r in info["ranks"]] == [
        (0, "b300.json"),
        (1, "mi300x.json"),
    ]
    assert any("profiled on different devices" in w for w in info["discovery"]["warnings"])


def test_one_rank_runs_of_one_device_type_may_be_ordered(tmp_path):
    # the user says they are the ranks of one run: same device type, so no flag is needed
    _one_rank_run(tmp_path / "in" / "x.json", "NVIDIA H100")
    _one_rank_run(tmp_path / "in" / "y.json", "NVIDIA H100")
    run = run_cli("ingest", tmp_path / "in", "-o", tmp_path / "o.store", "--rank-from", "order", "-j", "1")
    assert run.code == 0 and "2 ranks" in run.stdout, run


def test_ranks_claimed_twice_by_runs_of_other_world_sizes_do_not_advise_an_order(tmp_path):
    # a.json: rank 0 of 2; b.json: rank 0 of 8 (the helper's world size): two jobs
    write_trace(
        tmp_path / "in" / "a.json",
        [kernel("k", 1, 10)],
        rank=None,
        distributedInfo={"backend": "nccl", "rank": 0, "world_size": 2},
    )
    write_trace(tmp_path / "in" / "b.json", [kernel("k", 1, 10)], rank=0)
    run = run_cli("ingest", tmp_path / "in", "-o", tmp_path / "o.store", "-j", "1")
    assert run.code == 2 and len(_lines(run.stderr)) == 1, run
    assert "rank 0 is also claimed by" in run.stderr
    assert "they say world sizes 2 and 8: separate runs; ingest each run's files alone" in run.stderr
    assert "--rank-from order" not in run.stderr


def test_run_refusal_by_hand():
    from asaptrace.ingest.discovery import SourceFacts, run_refusal

    def facts(path: str, model: str | None, world: int | None, rank: int = 0, src: str = "distributedInfo"):
        return SourceFacts(path, "h" + path, 0, 10, world, model, rank, src)

    # one run of two ranks on H100s: nothing to refuse
    assert run_refusal([facts("r0", "H100", 2, 0), facts("r1", "H100", 2, 1)]) is None
    # a lone one-rank run is a store of its own
    assert run_refusal([facts("r0", "H100", 1)]) is None
    # two one-rank runs, one device type
    assert run_refusal([facts("x", "H100", 1), facts("y", "H100", None)]) == (
        "2 separate one-rank runs: each of x, y says it is rank 0 of a one-rank world; ingest each alone"
    )
    # rank 0 by order (not by content) is the user's say: only the device types are checked
    ordered = [facts("x", "H100", 1, 0, "order"), facts("y", "MI300X", 1, 1, "order")]
    assert run_refusal(ordered) == (
        "the files ran on different device types (H100: x; MI300X: y); ingest each run alone, or pass "
        "--mix-devices to make them ranks of one store"
    )
    assert run_refusal(ordered, mix_devices=True) is None
    # a file without a device name does not make a second device type
    assert run_refusal([facts("r0", "H100", 2, 0), facts("r1", None, 2, 1)]) is None


# ------------------------------------------------------------------------------------------ real folders
def test_the_real_serving_folder_is_two_separate_runs(shared_data, tmp_path):
    # SGLang on an MI300X and vLLM (device name empty): each rank 0 of world size 1
    run = run_cli("ingest", shared_data / "traces" / "tracelens-serving", "-o", tmp_path / "s.store")
    assert run.code == 2 and len(_lines(run.stderr)) == 1, run
    assert run.stderr.startswith(
        "error: 2 separate one-rank runs: each of sglang_Qwen3-8B_prefilldecode.json.gz, "
        "vllm_prefilldecode_piecewise_graph_execution.json.gz says it is rank 0 of a one-rank world; "
        "ingest each alone"
    ), run.stderr
    assert not (tmp_path / "s.store").exists()


def test_the_real_hta_samples_are_said_to_be_separate_runs(shared_data, tmp_path):
    # nccl_data.json.gz is rank 0 of 2; sampled_rank-0.json.gz rank 0 of 128
    run = run_cli("ingest", shared_data / "traces" / "kineto-hta-samples", "-o", tmp_path / "h.store")
    assert run.code == 2 and len(_lines(run.stderr)) == 1, run
    assert "they say world sizes 2 and 128: separate runs" in run.stderr
    assert "--rank-from order" not in run.stderr


# ------------------------------------------------------------------------------------------ --skip-bad
def _folder_with_bad_files(root: Path) -> Path:
    """rank0.json and rank1.json (one kernel each: 1 event read, 1 kept), a truncated rank2.json,
    and rank3.json.gz whose gzip stream is corrupt (found bad while the folder is walked)."""
    write_trace(root / "rank0.json", [kernel("k", 1, 10)], rank=0)
    write_trace(root / "rank1.json", [kernel("k", 3, 10)], rank=1)
    good = (root / "rank1.json").read_bytes()
    (root / "rank2.json").write_bytes(good[: len(good) // 2])
    (root / "rank3.json.gz").write_bytes(gzip.compress(good)[:12] + b"garbage")
    return root


def test_one_unreadable_file_fails_the_folder_by_default(tmp_path):
    folder = _folder_with_bad_files(tmp_path / "in")
    run = run_cli("ingest", folder, "-o", tmp_path / "o.store", "-j", "1")
    assert run.code == 2 and len(_lines(run.stderr)) == 1, run
    assert "rank3.json.gz: corrupt gzip stream" in run.stderr
    assert not (tmp_path / "o.store").exists()


def test_skip_bad_keeps_the_readable_files_and_lists_the_rest(tmp_path):
    folder = _folder_with_bad_files(tmp_path / "in")
    out = tmp_path / "o.store"
    run = run_cli("ingest", folder, "-o", out, "-j", "2", "--skip-bad")
    assert run.code == 0, run
    assert "2 ranks" in run.stdout and "(2 unreadable files left out)" in run.stdout
    said = [line for line in _lines(run.stderr) if line.startswith("skipped rank")]
    assert said[0] == "skipped rank2.json, unreadable: invalid JSON (input is truncated)", said
    assert said[1].startswith("skipped rank3.json.gz, unreadable: corrupt gzip stream"), said
    meta = json.loads((out / "meta.json").read_text())
    assert [Path(u["path"]).name for u in meta["discovery"]["unreadable"]] == ["rank2.json", "rank3.json.gz"]
    # the accounting counts the two readable files' events (the header's metadata rows aside) and
    # says how many files it left out
    acc = meta["accounting"]
    assert (acc["files_read"], acc["files_unreadable"]) == (2, 2)
    assert acc["kept_by_table"]["events"] == 2 and acc["read"] == acc["kept"] + sum(acc["rejected"].values())
    assert [s["rank"] for s in meta["sources"]] == [0, 1]
    assert "2 unreadable files left out" in run_cli("info", out).text


def test_skip_bad_with_no_readable_file_is_one_line(tmp_path):
    good = write_trace(tmp_path / "x.json", [kernel("k", 1, 10)], rank=0).read_bytes()
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_bytes(good[:20])
    run = run_cli("ingest", tmp_path / "in", "-o", tmp_path / "o.store", "--skip-bad")
    assert run.code == 2 and len(_lines(run.stderr)) == 1, run
    assert "no file could be read: a.json (invalid JSON" in run.stderr
    assert not (tmp_path / "o.store").exists()
