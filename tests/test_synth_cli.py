"""`asaptrace synth`: presets, a run from a TOML file, and one-line user errors (exit 2)."""

from __future__ import annotations

import gzip

from asaptrace.synth import presets
from asaptrace.synth.config import config_toml, load_config
from tests._cli import run_cli
from tests._synth_helpers import tiny


def test_list_presets_names_the_required_ones():
    res = run_cli("synth", "--list-presets")
    assert res.code == 0
    for name in ("coupled", "disaggregated", "coupled-ascend", "coupled-hot-expert"):
        assert name in res.stdout


def test_list_presets_gives_every_preset_one_line_with_its_description():
    # DeepSeek-V3's DP4×TP8 / EP32 and the 384-rank run among them, each "name  description" (a
    # description wrapped to the terminal goes on in indented lines)
    lines: dict[str, str] = {}
    for line in run_cli("synth", "--list-presets").stdout.splitlines():
        if line.startswith(" ") and lines:
            last = next(reversed(lines))
            lines[last] += " " + line.strip()
        elif line.strip():
            name, text = line.split("  ", 1)
            lines[name] = text
    assert "DP4xTP8 / EP32" in lines["coupled-tp8"]
    assert "DP96xTP4 / EP384" in lines["coupled-384"]
    assert set(lines) == set(presets()) and all(text.strip() for text in lines.values())
    assert load_config("coupled-tp8").deployment.world_size == 32
    assert load_config("coupled-384").deployment.world_size == 384


def test_run_from_a_config_file_then_rerun_from_the_written_config_is_identical(tmp_path):
    cfg_file = tmp_path / "tiny.toml"
    cfg_file.write_text(config_toml(tiny("coupled", run={"steps": 1, "format": "both"})))
    res = run_cli("synth", "--config", cfg_file, "-o", tmp_path / "a", "--seed", "9")
    assert res.code == 0, res.stderr
    assert "4 ranks, 1 step," in " ".join(res.stdout.split())  # plural only from 2 on
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        "README.md",
        "ascend",
        "config.toml",
        "kineto",
        "truth.json",
    ]
    res = run_cli("synth", "--config", tmp_path / "a" / "config.toml", "-o", tmp_path / "b")
    assert res.code == 0, res.stderr
    for rel in ("kineto/rank002.pt.trace.json.gz", "truth.json"):
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
    assert b'"seed": 9' not in gzip.decompress((tmp_path / "a/kineto/rank000.pt.trace.json.gz").read_bytes())
    assert "seed = 9" in (tmp_path / "a" / "config.toml").read_text()


def test_user_errors_are_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[deployment]\ndpp = 3\n")
    for args, message in [
        (("--preset", "nope", "-o", tmp_path / "x"), "unknown preset 'nope'"),
        (("--preset", "coupled", "--format", "xml", "-o", tmp_path / "x"), "run.format must be one of"),
        (("--config", bad, "-o", tmp_path / "x"), "unknown setting 'deployment.dpp'"),
        (("--config", tmp_path / "missing.toml", "-o", tmp_path / "x"), "cannot read configuration"),
    ]:
        res = run_cli("synth", *args)
        assert res.code == 2
        assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not (tmp_path / "x").exists()


def test_refuses_to_replace_a_folder_that_is_not_a_synth_output(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    cfg_file = tmp_path / "tiny.toml"
    cfg_file.write_text(config_toml(tiny("coupled", run={"steps": 1})))
    res = run_cli("synth", "--config", cfg_file, "-o", tmp_path / "mine")
    assert res.code == 2 and "not an asaptrace synth output" in res.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
