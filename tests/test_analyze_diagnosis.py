"""`asaptrace analyze` and the Diagnosis JSON as a script sees them; `ingest` enriches by default."""

from __future__ import annotations

import json

import polars as pl
import pytest

from asaptrace.analyze.diagnosis import SCHEMA_VERSION
from asaptrace.pipeline import diagnose_store
from asaptrace.store import TraceStore
from tests._analysis_helpers import moe_scenario, write_traces
from tests._cli import run_cli

US = 1000
REQUIRED = {
    "barrier_instances": {
        "step",
        "layer",
        "micro_batch",
        "op",
        "rank",
        "dp_group",
        "arrival_ns",
        "release_ns",
        "wait_ns",
        "transfer_ns",
    },
    "barrier_by_rank": {"rank", "dp_group", "wait_ns", "wait_share"},
    "barrier_by_group": {"dp_group", "wait_ns", "imposed_wait_ns", "last_share"},
    "imbalance_by_step": {"step", "tokens_ratio", "sum_sq_ratio", "attention_ratio"},
    "overlap_by_rank": {
        "rank",
        "compute_ns",
        "comm_ns",
        "overlapped_ns",
        "exposed_comm_ns",
        "idle_ns",
        "overlap_efficiency",
    },
    "stragglers": {"rank", "last_count", "last_share", "cause"},
    "clock": {"rank", "offset_ns", "residual_ns"},
}


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("diag")
    traces = write_traces(
        tmp / "t", moe_scenario(seq_lens={0: [1000, 1000], 1: [2000]}, offsets_us=(0, 300, 0, -70))
    )
    run = run_cli("ingest", traces, "-o", tmp / "s")
    assert run.code == 0, run.stderr
    return tmp / "s"


def test_ingest_enriches_by_default(store_path):
    store = TraceStore.open(store_path)
    assert store.meta["enriched"] is True
    assert store.meta["taxonomy_profile"] == "deepep+common"
    info = json.loads(run_cli("info", store_path, "--json").stdout)
    # dispatch kernels run from each rank's arrival to 20 µs after the last: 220 + 220 + 20 + 40 per layer
    assert info["device_time_by_kind_ns"]["dispatch"] == 2 * (220 + 220 + 20 + 40) * US
    assert [r["clock_offset_ns"] for r in info["ranks"]] == [0, 300 * US, 0, -70 * US]


def test_json_is_the_documented_versioned_object(store_path):
    run = run_cli("analyze", store_path, "--json")
    assert run.code == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["schema_version"] == SCHEMA_VERSION == 1
    for name, columns in REQUIRED.items():
        assert doc["tables"][name], name
        assert columns <= set(doc["tables"][name][0]), name
    assert len(doc["tables"]["barrier_instances"]) == 16  # 4 instances × 4 ranks
    for f in doc["findings"]:
        assert set(f) == {"code", "severity", "cost_ns", "text", "data"}
    # the first finding is the costliest: exposed wait 480 + 480 + 80 + 40 µs of 4 × 850 µs
    top = doc["findings"][0]
    assert top["code"] == "barrier_wait" and top["cost_ns"] == 1080 * US // 4
    assert "32% of step time" in top["text"]
    codes = [f["code"] for f in doc["findings"]]
    assert "straggler_group" in codes and "hot_expert" in codes and "sumsq_imbalance" in codes


def test_findings_name_who_waited_on_whom(store_path):
    run = run_cli("analyze", store_path)
    assert run.code == 0, run.stderr
    text = " ".join(run.stdout.split())
    assert "DP group 1 arrived last at 100% of barriers" in text
    # group 1 = [2000]: Σs² 4e6 vs group 0 = [1000, 1000]: 2e6 → 4e6 / 3e6 = 1.33; tokens 2000 vs 2000
    assert "its Σs² was 1.33× the mean while its token count was 1.00× the mean" in text
    assert "Rank 3 holds a hot expert: its MoE kernels take 1.80× the median" in text


def test_csv_writes_every_table(store_path, tmp_path):
    assert run_cli("analyze", store_path, "--csv", tmp_path / "csv").code == 0
    inst = pl.read_csv(tmp_path / "csv" / "barrier_instances.csv")
    assert inst.height == 16
    assert inst.filter(pl.col("rank") == 0).get_column("wait_ns").sum() == 480 * US
    assert (tmp_path / "csv" / "clock.csv").is_file()


def test_raw_store_is_enriched_in_memory_only(tmp_path):
    traces = write_traces(tmp_path / "t", moe_scenario())
    assert run_cli("ingest", traces, "-o", tmp_path / "raw", "--no-enrich").code == 0
    raw = TraceStore.open(tmp_path / "raw")
    assert raw.meta["enriched"] is False
    diag = diagnose_store(raw)
    assert diag.meta["enriched_in_memory"] is True
    by_rank = diag.tables["barrier_by_rank"].sort("rank")
    assert by_rank.get_column("wait_ns").to_list() == [480 * US, 480 * US, 80 * US, 40 * US]
    assert TraceStore.open(tmp_path / "raw").meta["enriched"] is False  # untouched on disk


def test_options_override_the_store(store_path):
    run = run_cli("analyze", store_path, "--parallel", "dp=4,tp=1,ep=4", "--json")
    assert run.code == 0, run.stderr
    groups = {r["rank"]: r["dp_group"] for r in json.loads(run.stdout)["tables"]["barrier_by_rank"]}
    # the annotations' DP groups still win over --parallel (file names and annotations come first)
    assert groups == {0: 0, 1: 0, 2: 1, 3: 1}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--parallel", "dp=3,tp=1"], "describes 3 devices"),
        (["--parallel", "dp=two"], "cannot read 'dp=two'"),
        (["--batches", "/nonexistent/batches.jsonl"], "cannot read batches file"),
    ],
)
def test_bad_options_are_one_line_errors(store_path, args, message):
    run = run_cli("analyze", store_path, *args)
    assert run.code == 2
    assert message in run.stderr and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


def test_ingest_passes_parallel_and_taxonomy_to_enrichment(tmp_path):
    traces = write_traces(tmp_path / "t", moe_scenario(annotations=False))
    rules = tmp_path / "mine.toml"
    rules.write_text('[profile]\nname = "mine"\n\n[[rule]]\nmatch = "flash_fwd"\nkind = "compute"\n')
    run = run_cli("ingest", traces, "-o", tmp_path / "s", "--parallel", "dp=2,tp=2,ep=4", "--taxonomy", rules)
    assert run.code == 0, run.stderr
    store = TraceStore.open(tmp_path / "s")
    assert store.meta["taxonomy_profile"] == "mine+deepep+common"
    assert store.meta["parallel"]["source"] == "option"
    ranks = store.read("ranks").sort("rank")
    assert ranks.get_column("dp_group").to_list() == [0, 0, 1, 1]
    assert ranks.get_column("role").to_list() == ["fused"] * 4
    kinds = (
        store.read("events").filter(pl.col("is_device")).get_column("kind").cast(pl.String).unique().to_list()
    )
    assert "attention" not in kinds  # the user's rule made flash_fwd plain compute
