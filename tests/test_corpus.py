"""Every real trace (../shared/data/traces) and every bundled sample, used as a user would: ingest →
info → analyze → report → advise → replay → compare with itself, through the CLI at 80 and 120
columns, and every dashboard page's text; the invariants that must hold whatever the trace
(issue 29, "one truth on real traces") and the texts a person reads (issue 42: units, plurals,
widths, no pointer to a repository file).

Each run is ingested once per session (``corpus`` fixture); every test is parametrised over the
runs so a failure names the trace, and every assertion message names the value that broke it.

The grouping is the one a user would ingest: DLRM's folder is one 8-rank run; HTA's two
``sampled_rank-*`` files are two ranks of one job while ``nccl_data`` is rank 0 of another job;
the two TraceLens serving files are two separate one-rank runs (SGLang on MI300X, vLLM on 8
MI300X); the Ascend and Nsight folders hold one run each (a LICENSE beside them is skipped), and
the Ascend folder's ``kernel_details.csv`` (of another run) named alone is a run of its own.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from asaptrace.cli import app
from asaptrace.store import open_store
from tests._step_invariants import step_violations
from tests.conftest import SAMPLE_RUNS, SAMPLES, SHARED_DATA

TRACES = SHARED_DATA / "traces"

#: run name → the paths (relative to ../shared/data/traces) a user ingests together
REAL_RUNS: dict[str, list[str]] = {
    "dlrm-8rank": ["kineto-dlrm-8rank"],
    "hta-sampled": ["kineto-hta-samples/sampled_rank-0.json.gz", "kineto-hta-samples/sampled_rank-1.json.gz"],
    "hta-nccl": ["kineto-hta-samples/nccl_data.json.gz"],
    "sglang": ["tracelens-serving/sglang_Qwen3-8B_prefilldecode.json.gz"],
    "vllm": ["tracelens-serving/vllm_prefilldecode_piecewise_graph_execution.json.gz"],
    "ascend-sample": ["ascend-sample"],
    "ascend-csv": ["ascend-sample/kernel_details.csv"],  # named alone: that CSV, not the timeline
    "nsys-sample": ["nsys-sample"],
}
SAMPLE_NAMES = [f"sample-{name}" for name in SAMPLE_RUNS]
RUNS = [*REAL_RUNS, *SAMPLE_NAMES]

#: the phase every step must have where the trace says it (runs absent here: any known phase).
#: DLRM and HTA's traces are training steps (ProfilerStep#N with backward kernels and an
#: optimizer); the samples are synthetic MoE prefill. SGLang and vLLM are checked in their own tests.
EXPECTED_PHASES: dict[str, set[str]] = {
    "dlrm-8rank": {"training"},
    "hta-sampled": {"training"},
    "hta-nccl": {"training"},
    **{name: {"prefill"} for name in SAMPLE_NAMES},
}
KNOWN_PHASES = {"prefill", "decode", "mixed", "training", "unknown"}


@dataclass
class Step:
    """One command's outcome: exit code, what it printed, its JSON (when --json was asked)."""

    code: int
    out: str
    err: str
    json: Any = None


@dataclass
class Chain:
    """Everything a user sees for one run, plus the store itself for the invariants. ``steps``
    must exit 0; ``shown`` are more of what a person reads (the commands at 120 columns, replay,
    which may refuse a run it does not apply to: in one line, exit 2)."""

    name: str
    store_path: Path
    steps: dict[str, Step] = field(default_factory=dict)
    shown: dict[str, Step] = field(default_factory=dict)
    report_md: str = ""
    report_html: str = ""

    def json(self, command: str) -> Any:
        return self.steps[command].json

    def texts(self) -> dict[str, str]:
        """Every text a user reads: each command's stdout and stderr, and both reports."""
        texts = {}
        for command, step in {**self.steps, **self.shown}.items():
            if "--json" not in command:
                texts[f"{command} stdout"] = step.out
            texts[f"{command} stderr"] = step.err
        texts["report.md"] = self.report_md
        return texts

    def terminal(self) -> dict[str, tuple[int, Step]]:
        """Each command a terminal shows, with its width (the label says it: ``info@120``)."""
        every = {**self.steps, **self.shown}
        return {
            c: (int(c.split("@")[1]) if "@" in c else 80, s) for c, s in every.items() if "--json" not in c
        }


def _run(*args: Any, want_json: bool = False, columns: int = 80) -> Step:
    """Run the CLI in-process at ``columns`` (CliRunner is not a terminal: COLUMNS sets the width)."""
    from asaptrace.cli import _common

    _common.out._width = _common.err._width = None  # rich reads COLUMNS on each print
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    step = Step(result.exit_code, result.stdout, result.stderr)
    if want_json and result.exit_code == 0:
        step.json = json.loads(result.stdout)
    return step


def _inputs(name: str) -> list[Path]:
    if name.startswith("sample-"):
        sample = name.removeprefix("sample-")
        folder = SAMPLES / sample / SAMPLE_RUNS[sample]
        if not folder.is_dir():
            pytest.skip(
                f"sample trace {folder} is absent (regenerate with `asaptrace synth --preset {sample}`)"
            )
        return [folder]
    if not TRACES.is_dir():
        pytest.skip(f"real traces not available: {TRACES} is absent")
    return [TRACES / p for p in REAL_RUNS[name]]


def _build(name: str, root: Path) -> Chain:
    store = root / "run.store"
    chain = Chain(name, store)
    chain.steps["ingest"] = _run("ingest", *_inputs(name), "-o", store, "--jobs", "2")
    if chain.steps["ingest"].code != 0:
        return chain
    for command in ("info", "analyze", "advise"):
        chain.steps[command] = _run(command, store)
        chain.steps[f"{command} --json"] = _run(command, store, "--json", want_json=True)
    chain.steps["compare"] = _run("compare", store, store)
    chain.steps["compare --json"] = _run("compare", store, store, "--json", want_json=True)
    chain.shown["replay"] = _run("replay", store)
    for command in ("info", "analyze", "advise"):
        chain.shown[f"{command}@120"] = _run(command, store, columns=120)
    chain.shown["compare@120"] = _run("compare", store, store, columns=120)
    chain.shown["replay@120"] = _run("replay", store, columns=120)
    for fmt in ("md", "html"):
        out = root / f"report.{fmt}"
        chain.steps[f"report {fmt}"] = _run("report", store, "-o", out, "--format", fmt)
        if out.is_file():
            setattr(chain, f"report_{fmt}", out.read_text())
    return chain


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """``get(name) -> Chain``: each run ingested and taken through every command once per session."""
    cache: dict[str, Chain] = {}

    def get(name: str) -> Chain:
        if name not in cache:
            cache[name] = _build(name, tmp_path_factory.mktemp(name))
        return cache[name]

    return get


@pytest.fixture(params=RUNS)
def chain(request, corpus) -> Chain:
    return corpus(request.param)


# ---------------------------------------------------------------------------------------------
# helpers that name fields: adapt here when a field is renamed


def step_phases(chain: Chain) -> dict[Any, set[str]]:
    """step → the phases its rows carry, read from ``analyze --json``'s step breakdown (field
    ``phase``; "<no phase field>" when absent so the failure says so)."""
    phases: dict[Any, set[str]] = defaultdict(set)
    for row in chain.json("analyze --json")["tables"]["step_breakdown"]:
        phases[row["step"]].add(row.get("phase", "<no phase field>"))
    return dict(phases)


def step_batch(chain: Chain, step: Any) -> tuple[int, int]:
    """(batch size, new tokens) of ``step`` from the store's batches table: one row per request,
    new tokens = seq_len − cached_len (the prompt part not served from cache)."""
    batches = open_store(chain.store_path).read("batches").filter(pl.col("step") == step)
    new = batches.select((pl.col("seq_len") - pl.col("cached_len").fill_null(0)).sum()).item()
    return batches.height, int(new or 0)


def _by_rank(rows: list[dict], key: str) -> dict[Any, float]:
    total: dict[Any, float] = defaultdict(float)
    for row in rows:
        total[row["rank"]] += row[key] or 0
    return dict(total)


# ---------------------------------------------------------------------------------------------
# the corpus covers every trace


def test_every_shared_trace_is_in_the_corpus():
    """A trace dropped into ../shared/data/traces is exercised, not silently left out."""
    if not TRACES.is_dir():
        pytest.skip(f"real traces not available: {TRACES} is absent")
    covered = set()
    for paths in REAL_RUNS.values():
        for p in paths:
            covered |= (
                {f for f in (TRACES / p).rglob("*") if f.is_file()} if (TRACES / p).is_dir() else {TRACES / p}
            )
    files = {f for f in TRACES.rglob("*") if f.is_file() and f.name != "LICENSE" and f.name != "SOURCES.md"}
    assert files <= covered, f"traces no corpus run ingests: {sorted(str(f) for f in files - covered)}"


# ---------------------------------------------------------------------------------------------
# every command exits 0


def test_every_command_exits_zero(chain):
    failed = {c: (s.code, (s.err or s.out).strip()[-300:]) for c, s in chain.steps.items() if s.code != 0}
    assert not failed, f"{chain.name}: commands that failed (exit code, last output): {failed}"


# ---------------------------------------------------------------------------------------------
# phases as annotated


def test_steps_have_the_phase_the_trace_says(chain):
    _need(chain, "analyze --json")
    phases = step_phases(chain)
    assert phases, f"{chain.name}: analyze --json has no step in its step_breakdown"
    allowed = EXPECTED_PHASES.get(chain.name, KNOWN_PHASES)
    wrong = {step: sorted(p) for step, p in phases.items() if not p <= allowed or len(p) != 1}
    assert not wrong, (
        f"{chain.name}: step → phase {wrong}, expected each step exactly one of {sorted(allowed)}"
    )


def test_sglang_one_extend_prefill_step_of_15_requests_and_15360_tokens(corpus):
    """SGLang's own annotation ``step[EXTEND bs=15 toks=15360]`` makes one prefill step; whatever
    else the trace holds is decode (the brief), never a second prefill step found from gaps."""
    chain = corpus("sglang")
    _need(chain, "analyze --json")
    analysis = chain.json("analyze --json")
    source = analysis["meta"]["segmentation"]["step_source"]
    assert source != "gaps", (
        f"sglang: steps found from idle gaps (step_source {source!r}), not from its annotation"
    )
    phases = step_phases(chain)
    prefill = [s for s, p in phases.items() if "prefill" in p]
    assert len(prefill) == 1, (
        f"sglang: prefill steps {prefill} (phases {phases}), expected exactly one (EXTEND)"
    )
    others = {s: sorted(p) for s, p in phases.items() if s != prefill[0] and p != {"decode"}}
    assert not others, f"sglang: steps other than the EXTEND one that are not decode: {others}"
    assert step_batch(chain, prefill[0]) == (15, 15_360), (
        f"sglang: prefill step {prefill[0]} batch (requests, tokens) = {step_batch(chain, prefill[0])}, "
        "expected (15, 15360) from `step[EXTEND bs=15 toks=15360]`"
    )


def test_vllm_step_read_from_the_new_annotation_form(corpus):
    """``execute_8192_context_9(sq8155sk8430…)_generation_37(sq37…)``: one step scheduling 9 context
    requests (8,155 new tokens) and 37 generation requests (37 tokens): 8,192 tokens, a mixed step."""
    chain = corpus("vllm")
    _need(chain, "analyze --json")
    source = chain.json("analyze --json")["meta"]["segmentation"]["step_source"]
    assert source == "annotations", (
        f"vllm: step_source {source!r}, expected 'annotations' (execute_8192_context_9…)"
    )
    phases = step_phases(chain)
    assert list(phases.values()) == [{"mixed"}], f"vllm: step → phase {phases}, expected one mixed step"
    (step,) = phases
    assert step_batch(chain, step) == (9 + 37, 8_155 + 37), (
        f"vllm: step {step} batch (requests, new tokens) = {step_batch(chain, step)}, expected (46, 8192): "
        "9 context requests of 8,155 new tokens and 37 generation requests of one token each"
    )


# ---------------------------------------------------------------------------------------------
# steps


@pytest.mark.parametrize(
    ("name", "phrase"), [("hta-nccl", "1 of 2 devices traced"), ("hta-sampled", "2 of 128 devices traced")]
)
def test_a_partial_trace_says_how_many_of_its_ranks_were_traced(corpus, name, phrase):
    """HTA's nccl_data is rank 0 of a 2-rank job and the sampled files 2 ranks of 128
    (``distributedInfo.world_size``): 'single device' or '2 devices' would be untrue of them."""
    chain = corpus(name)
    _need(chain, "analyze", "advise --json")
    head = " ".join(chain.steps["analyze"].out.split("\n\n")[0].split())  # the header, unwrapped
    assert phrase in head
    assert phrase in chain.json("advise --json")["deployment_phrase"]


def test_every_step_starts_at_an_annotation(chain):
    """Steps are the trace's own (DOMAIN.md §9): tests/_step_invariants.py says what must hold."""
    _need(chain, "ingest")
    assert step_violations(open_store(chain.store_path)) == [], chain.name


def test_no_step_is_shorter_than_its_longest_kernel(chain):
    _need(chain, "analyze --json")
    rows = chain.json("analyze --json")["tables"]["step_breakdown"]
    nulls = [r for r in rows if r["step"] is None]
    assert not nulls, (
        f"{chain.name}: {len(nulls)} step_breakdown rows with step null (work outside steps as a step)"
    )
    longest = (
        open_store(chain.store_path)
        .events()
        .filter(
            pl.col("is_device"), pl.col("kind").cast(pl.String) != "annotation", pl.col("step").is_not_null()
        )
        .group_by("rank", "step")
        .agg(pl.col("dur_ns").max().alias("longest"), pl.col("name").sort_by("dur_ns").last().alias("kernel"))
        .collect()
    )
    kernel = {(r["rank"], r["step"]): (r["longest"], r["kernel"]) for r in longest.iter_rows(named=True)}
    short = [
        f"rank {r['rank']} step {r['step']}: {r['step_time_ns']} ns < {kernel[(r['rank'], r['step'])]}"
        for r in rows
        if (r["rank"], r["step"]) in kernel and r["step_time_ns"] < kernel[(r["rank"], r["step"])][0]
    ]
    assert not short, (
        f"{chain.name}: steps shorter than their longest kernel (ns, (kernel ns, name)): {short[:5]}"
    )


# ---------------------------------------------------------------------------------------------
# one number, one meaning


def test_exposed_transfer_within_exposed_comm_within_comm(chain):
    """Per rank: exposed transfer (step breakdown, summed over steps) ≤ exposed communication ≤
    communication (overlap), and exposed barrier wait + exposed transfer ≤ exposed communication
    (the overlap finding says "X is exposed, of which W is barrier wait and T transfer")."""
    _need(chain, "analyze --json")
    tables = chain.json("analyze --json")["tables"]
    transfer = _by_rank(tables["step_breakdown"], "transfer_ns")
    overlap = {r["rank"]: r for r in tables["overlap_by_rank"]}
    wait = _by_rank(tables["barrier_by_rank"], "exposed_wait_ns")
    tolerance = 1_000  # 1 µs of rounding
    broken = []
    for rank, o in overlap.items():
        t, w, exposed, comm = transfer.get(rank, 0), wait.get(rank, 0), o["exposed_comm_ns"], o["comm_ns"]
        if not (t <= exposed + tolerance and exposed <= comm + tolerance and w + t <= exposed + tolerance):
            broken.append(
                f"rank {rank}: transfer {t:.0f}, exposed wait {w:.0f}, exposed comm {exposed}, comm {comm}"
            )
    assert not broken, f"{chain.name}: exposed transfer ≤ exposed comm ≤ comm broken (ns): {broken[:5]}"


def test_device_time_per_stream_within_its_span(chain):
    """A stream runs one thing at a time: its busy time cannot exceed first start → last end."""
    _need(chain, "info --json")
    per_stream = (
        open_store(chain.store_path)
        .events()
        .filter(pl.col("is_device"), pl.col("kind").cast(pl.String) != "annotation")
        .group_by("rank", "pid", "stream")
        .agg(
            pl.col("dur_ns").sum().alias("busy"),
            ((pl.col("ts_ns") + pl.col("dur_ns")).max() - pl.col("ts_ns").min()).alias("span"),
        )
        .filter(pl.col("busy") > pl.col("span"))
        .collect()
    )
    assert per_stream.is_empty(), (
        f"{chain.name}: streams busier than their span (ns): {per_stream.head(5).rows()}"
    )


def test_info_does_not_count_annotations_as_device_time(chain):
    """An annotation spans the kernels it names; counting it as device time double-counts them
    (issue 29 item 7: "annotation 46,208 events, 997.156 s" on a 14 s, 32-rank run)."""
    _need(chain, "info --json")
    device = chain.json("info --json")["device_time_by_kind_ns"]
    assert device.get("annotation", 0) == 0, (
        f"{chain.name}: info counts {device['annotation']} ns of annotations as device time"
    )


def test_views_agree_on_ranks_steps_and_deployment(chain):
    _need(chain, "info --json", "analyze --json", "advise --json", "compare --json")
    n_ranks = chain.json("info --json")["n_ranks"]
    overall = {r["metric"]: r for r in chain.json("compare --json")["tables"]["compare_overall"]}
    assert overall["n_ranks"]["a"] == n_ranks, (
        f"{chain.name}: compare n_ranks {overall['n_ranks']['a']} ≠ info {n_ranks}"
    )
    advise = chain.json("advise --json")
    assert advise["devices"] == n_ranks, (
        f"{chain.name}: advise devices {advise['devices']} ≠ info n_ranks {n_ranks}"
    )
    steps = set(step_phases(chain))
    assert overall["n_steps"]["a"] == len(steps), (
        f"{chain.name}: compare n_steps {overall['n_steps']['a']} ≠ {len(steps)} steps in the step breakdown"
    )
    deployment = chain.json("analyze --json")["meta"]["parallel"]["deployment"]
    header = chain.steps["advise"].out.splitlines()[0] if chain.steps["advise"].out else ""
    assert deployment == "coupled" or "coupled run" not in header, (
        f"{chain.name}: analyze says {deployment!r} deployment, advise says {header!r}"
    )


def test_compare_with_itself_is_all_zero(chain):
    _need(chain, "compare --json")
    tables = chain.json("compare --json")["tables"]
    nonzero = [
        (r["metric"], r["delta"], r["ratio"])
        for r in tables["compare_overall"]
        if r["delta"] not in (0, None) or r["ratio"] not in (1, None)
    ]
    for row in tables["compare_by_group"]:
        nonzero += [
            (f"group {row['dp_group']} {k}", v)
            for k, v in row.items()
            if k.endswith("_delta") and v not in (0, None)
        ]
    assert not nonzero, f"{chain.name}: a store compared with itself differs: {nonzero[:5]}"
    assert chain.steps["compare"].err.strip() == "", (
        f"{chain.name}: compare with itself warns: {chain.steps['compare'].err!r}"
    )


# ---------------------------------------------------------------------------------------------
# text a person can read

#: pattern → what is wrong with it
TEXT_RULES = {
    r"(?<![\d,.])1 (?:\w+ )?(?:devices|ranks|steps|groups|layers|instances|requests|files|barriers|lanes|"
    r"events|tables|kernels|streams|seeds|points|batches|collectives)\b": "plural after 1",
    r"\b\d[\d,]{4,}(?:\.\d+)? ns\b": "raw nanoseconds",
    r"\(ns\)": "a table column in raw nanoseconds",
    r"\b\d[\d,]{3,} bytes\b|\| bytes \|": "a raw byte count",
    r"\bmakespan 0 ns\b": "a makespan of nothing (say there is no device work)",
    r"\bstatus (?:single_rank|not_run|impossible)\b": "a code word for the clock's status",
    r"\b(?:DOMAIN|DESIGN|STYLE)\.md\b|(?<![\w/])(?:docs|tests|benchmarks|asaptrace)/[\w/.-]+\.(?:md|py)\b": "a pointer to a repository file",
    r"\b(?:nan|NaN|inf)%?(?!\w)": "nan/inf shown as a number",
    r"\bat unknown of\b": "an unknown where a number belongs",
    r"\b\w+_ns\s+-?[\d.,]+ (?:s|ms|µs)\b": "a *_ns name beside a value in another unit",
}


def test_text_has_no_raw_units_bad_plurals_or_internal_pointers(chain):
    broken = []
    for where, text in chain.texts().items():
        for pattern, why in TEXT_RULES.items():
            for m in re.finditer(pattern, text):
                broken.append(f"{where}: {why}: {text[max(0, m.start() - 30) : m.end() + 10]!r}")
    assert not broken, f"{chain.name}: {len(broken)} bad phrases, e.g. " + " | ".join(broken[:8])


def test_dashboard_pages_text_has_no_raw_units_bad_plurals_or_internal_pointers(chain):
    """Every dashboard page's text (bodies built in-process, as Dash sends them) on every run."""
    from asaptrace_dashboards.pages import barriers, compare, imbalance, overlap, overview, replay, sweep
    from asaptrace_dashboards.state import Stores
    from tests._dashboard_helpers import page_texts

    stores = Stores([chain.store_path])
    pages = {
        "overview": overview.overview_body(stores, "0"),
        "advice": overview.advice_body(stores, "0"),
        "barriers": barriers.barriers_body(stores, "0", "all"),
        "imbalance": imbalance.imbalance_body(stores, "0", "all"),
        "overlap": overlap.overlap_body(stores, "0"),
        "compare": compare.compare_body(stores, "0", "0"),
        "replay": replay.layout(stores),
        "sweep": sweep.layout(),
    }
    broken = []
    for page, body in pages.items():
        for text in page_texts(body):
            for pattern, why in TEXT_RULES.items():
                if re.search(pattern, text):
                    broken.append(f"{page}: {why}: {text[:120]!r}")
    assert not broken, f"{chain.name}: {len(broken)} bad texts on the dashboard, e.g. " + " | ".join(
        broken[:6]
    )


def test_cli_text_is_whole_and_within_the_terminal(chain):
    """At 80 and 120 columns no cell is cut to "expo…" and no line of stdout or stderr (tables,
    prose, errors and warnings) runs past the width unless a long path makes it (issue 29 item 9,
    issue 42); "… and N more rows" is fine."""
    cut = []
    for command, (width, step) in chain.terminal().items():
        for line in (step.out + step.err).splitlines():
            if re.search(r"\w…", line):
                cut.append(f"{command}: {line.strip()[:80]!r}")
            elif len(re.sub(r"/\S+", "/…", line)) > width:
                # a long path may overflow; prose and tables wrap
                cut.append(f"{command}: {len(line)} columns: {line.strip()[:60]!r}")
    assert not cut, f"{chain.name}: {len(cut)} truncated or over-wide lines, e.g. {cut[:6]}"


def test_replay_runs_or_says_why_not_in_one_message(chain):
    for command in ("replay", "replay@120"):
        step = chain.shown.get(command)
        assert step is not None and step.code in (0, 2), f"{chain.name}: {command} exit {step and step.code}"
        if step.code == 2:
            assert step.err.startswith("error: ") and "Traceback" not in step.err, step.err
            assert step.err.count("error: ") == 1, f"{chain.name}: {command} said {step.err!r}"


def test_every_key_table_has_rows_or_a_reason(chain):
    """In the report (md) a key table with headers and no rows is a question left open; in
    ``analyze``'s text "TITLE: none" says nothing about why."""
    _need(chain, "report md", "analyze")
    key = chain.report_md.split("## Key tables", 1)[-1].split("\n## ", 1)[0]
    empty = []
    for section in key.split("\n### ")[1:]:
        title, _, body = section.partition("\n")
        table = [line for line in body.splitlines() if line.startswith("|")]
        prose = [line for line in body.splitlines() if line.strip() and not line.startswith(("|", "_"))]
        if (table and len(table) <= 2) or (not table and not prose):
            empty.append(f"report: {title!r}")
    for line in chain.steps["analyze"].out.splitlines():
        if re.fullmatch(r"\S.*: none\s*", line):
            empty.append(f"analyze: {line.strip()!r}")
    assert not empty, f"{chain.name}: key tables with no rows and no reason: {empty}"


def _need(chain: Chain, *commands: str) -> None:
    """Fail (not skip) when a command this test reads did not run to exit 0."""
    for command in commands:
        step = chain.steps.get(command)
        assert step is not None and step.code == 0, (
            f"{chain.name}: `{command}` did not run to exit 0: {(step.err or step.out).strip()[-300:] if step else 'ingest failed'}"
        )


# ---------------------------------------------------------------------------------------------
# a folder of separate runs


def test_folder_of_two_separate_runs_is_named_not_merged(tmp_path):
    """tracelens-serving holds an SGLang run (1 MI300X) and a vLLM run (one of 8 MI300X), each
    world size 1, rank 0: a user ingesting the folder is told in one line that these are separate
    runs to ingest alone, exit 2, and never advised to merge them with ``--rank-from order``."""
    if not TRACES.is_dir():
        pytest.skip(f"real traces not available: {TRACES} is absent")
    step = _run("ingest", TRACES / "tracelens-serving", "-o", tmp_path / "s.store")
    said = (step.err + step.out).strip()
    assert step.code == 2, f"tracelens-serving folder: exit {step.code}, expected 2; said {said!r}"
    assert "separate" in said and "--rank-from order" not in said, f"tracelens-serving folder said {said!r}"
    # one message (wrapped to the 80 columns _run gives it, its later lines indented under it)
    assert said.count("error: ") == 1 and all(line.startswith("       ") for line in said.splitlines()[1:]), (
        said
    )
