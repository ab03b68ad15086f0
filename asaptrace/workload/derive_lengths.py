"""Rebuild the shipped prompt-length quantile tables (``workload/data/lengths.toml``) from public traces.

The tables are derived figures, not the data: the traces themselves stay outside the repository
(``../shared/data/workloads/``). Run ``python -m asaptrace.workload.derive_lengths DIR`` to regenerate
the TOML from DIR; tests use :func:`read_source_lengths` to compare sampled lengths with the source.

Sources and licences (repeated in the TOML next to each table):

* Azure LLM inference trace 2023 (code, conversation) — Azure/AzurePublicDataset, CC-BY-4.0;
  attribute "Azure LLM inference trace 2023".
* Mooncake conversation trace — kvcache-ai/Mooncake ``FAST25-release/traces``, Apache-2.0.
  Its ``hash_ids`` (512-token prefix blocks) give the prefix-cache hit of every request.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from statistics import NormalDist

import numpy as np

#: The probability grid of every table: 0.5 % steps plus a finer upper tail.
PROBABILITIES: tuple[float, ...] = tuple([round(i * 0.005, 4) for i in range(200)] + [0.9975, 0.999, 1.0])

MOONCAKE_BLOCK_TOKENS = 512

SOURCES = {
    "azure-code": {
        "file": "AzureLLMInferenceTrace_code.csv",
        "source": "Azure LLM inference trace 2023 (code): Azure/AzurePublicDataset "
        "@ b469a113cedca53ddc3bdea71a143dc4b7d8700c data/AzureLLMInferenceTrace_code.csv",
        "licence": 'CC-BY-4.0; attribution: "Azure LLM inference trace 2023"',
    },
    "azure-conv": {
        "file": "AzureLLMInferenceTrace_conv.csv",
        "source": "Azure LLM inference trace 2023 (conversation): Azure/AzurePublicDataset "
        "@ b469a113cedca53ddc3bdea71a143dc4b7d8700c data/AzureLLMInferenceTrace_conv.csv",
        "licence": 'CC-BY-4.0; attribution: "Azure LLM inference trace 2023"',
    },
    "mooncake-conv": {
        "file": "mooncake_conversation_trace.jsonl",
        "source": "Mooncake (Kimi) conversation trace: kvcache-ai/Mooncake "
        "@ 3b5a594133958449a1feaf1c9e0fc1b553e34a28 FAST25-release/traces/conversation_trace.jsonl",
        "licence": "Apache-2.0",
    },
}

#: The production-like profile of the ASAP paper (Huawei Cloud prompts): min 31,
#: mean ≈ 5K, truncated at 32K. No public file holds it, so it is a lognormal clipped to
#: [PROD_MIN, PROD_MAX] with PROD_SIGMA fixed and mu solved for the target mean.
PROD_MIN, PROD_MAX, PROD_MEAN, PROD_SIGMA = 31, 32768, 5000.0, 1.0


def read_source_lengths(workloads: Path, profile: str) -> np.ndarray:
    """Prompt lengths (tokens) of every request in a source trace, in file order."""
    path = Path(workloads) / SOURCES[profile]["file"]
    if path.suffix == ".csv":
        return np.loadtxt(path, delimiter=",", skiprows=1, usecols=1, dtype=np.int64)
    return np.array(
        [json.loads(line)["input_length"] for line in path.open() if line.strip()], dtype=np.int64
    )


def mooncake_cached_lengths(rows: list[dict]) -> np.ndarray:
    """Cached prefix tokens per request: leading ``hash_ids`` blocks already seen, × 512, < length."""
    seen: set[int] = set()
    out = np.zeros(len(rows), dtype=np.int64)
    for i, row in enumerate(rows):
        hit = 0
        for block in row["hash_ids"]:
            if block not in seen:
                break
            hit += 1
        seen.update(row["hash_ids"])
        out[i] = max(0, min(hit * MOONCAKE_BLOCK_TOKENS, int(row["input_length"]) - 1))
    return out


def read_mooncake(workloads: Path) -> list[dict]:
    path = Path(workloads) / SOURCES["mooncake-conv"]["file"]
    return [json.loads(line) for line in path.open() if line.strip()]


def table(values: np.ndarray) -> list[float]:
    return [round(float(v), 3) for v in np.quantile(values.astype(np.float64), PROBABILITIES)]


def production_table() -> tuple[list[float], float]:
    """Quantiles of the clipped lognormal whose table-sampled mean is PROD_MEAN; returns (table, mu)."""
    z = np.array([NormalDist().inv_cdf(min(max(p, 1e-6), 1 - 1e-6)) for p in PROBABILITIES])

    def tab(mu: float) -> np.ndarray:
        return np.clip(np.exp(mu + PROD_SIGMA * z), PROD_MIN, PROD_MAX)

    def mean(mu: float) -> float:  # mean of the piecewise-linear inverse CDF
        q, p = tab(mu), np.array(PROBABILITIES)
        return float(np.sum((q[1:] + q[:-1]) / 2 * np.diff(p)))

    lo, hi = 4.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean(mid) < PROD_MEAN else (lo, mid)
    q = tab(lo)
    q[0], q[-1] = PROD_MIN, PROD_MAX
    return [round(float(v), 3) for v in q], lo


def _fmt(values: list[float]) -> str:
    lines = []
    for i in range(0, len(values), 10):
        lines.append("  " + ", ".join(repr(v) for v in values[i : i + 10]) + ",")
    return "[\n" + "\n".join(lines) + "\n]"


def render(workloads: Path) -> str:
    """The TOML text of every profile."""
    out = [
        "# Prompt-length quantile tables for `asaptrace synth` (sampled by inverse CDF, linear between points).",
        "# Generated by `python -m asaptrace.workload.derive_lengths ../shared/data/workloads`; do not edit by hand.",
        "# Derived figures only: the source traces are not part of this repository. Sources and licences:",
        '#   Azure LLM inference trace 2023 (Azure/AzurePublicDataset), CC-BY-4.0, attribute "Azure LLM inference',
        '#   trace 2023"; Mooncake conversation trace (kvcache-ai/Mooncake), Apache-2.0.',
        "",
        f"probabilities = {_fmt(list(PROBABILITIES))}",
        "",
    ]
    for name, src in SOURCES.items():
        lengths = read_source_lengths(workloads, name)
        out += [
            f'[profiles."{name}"]',
            f'source = "{src["source"]}"',
            f"licence = '{src['licence']}'",
            f"requests = {len(lengths)}",
            f"mean = {round(float(lengths.mean()), 1)}",
            f"quantiles = {_fmt(table(lengths))}",
        ]
        if name == "mooncake-conv":
            rows = read_mooncake(workloads)
            frac = mooncake_cached_lengths(rows) / np.array(
                [r["input_length"] for r in rows], dtype=np.float64
            )
            out.append(
                "# prefix-cache hit: fraction of the prompt covered by leading hash_ids blocks seen earlier"
            )
            out.append(f"cached_fraction = {_fmt(table(frac))}")
        out.append("")
    q, mu = production_table()
    out += [
        '[profiles."production"]',
        f'source = "parametric: lognormal(mu={mu:.4f}, sigma={PROD_SIGMA}) clipped to [{PROD_MIN}, {PROD_MAX}]; '
        'the ASAP paper (Huawei Cloud prompts: min 31, mean ~5K, truncated at 32K)"',
        "licence = 'n/a (parametric)'",
        f"mean = {PROD_MEAN}",
        f"quantiles = {_fmt(q)}",
        "",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m asaptrace.workload.derive_lengths WORKLOADS_DIR", file=sys.stderr)
        return 2
    target = Path(__file__).parent / "data" / "lengths.toml"
    target.write_text(render(Path(argv[0])))
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
