"""Stores that know their version: the format version moves with the schema and meta.json's keys,
and a store of an older version is one line naming both versions and the command that rebuilds it,
exit 2, on every command that opens a store."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from asaptrace.cli import app
from asaptrace.schema import META_KEYS, STORE_FINGERPRINTS, STORE_FORMAT_VERSION, store_fingerprint


def test_the_schema_and_meta_keys_have_not_changed_without_a_version_bump():
    assert store_fingerprint() == STORE_FINGERPRINTS.get(STORE_FORMAT_VERSION), (
        "the store's tables, enums or meta.json keys (asaptrace/schema.py) changed: bump "
        f"STORE_FORMAT_VERSION (now {STORE_FORMAT_VERSION}) and record the new fingerprint "
        f"{store_fingerprint()!r} under the new version in STORE_FINGERPRINTS"
    )
    # each version its own fingerprint: a bump that kept the old one would say nothing
    assert len(set(STORE_FINGERPRINTS.values())) == len(STORE_FINGERPRINTS)


def _undeclared(meta: dict) -> list[str]:
    """meta.json keys (top level, and each block's) that META_KEYS does not list."""
    wrong = [k for k in meta if k not in META_KEYS]
    for key, allowed in META_KEYS.items():
        block = meta.get(key)
        if allowed is not None and isinstance(block, dict):
            wrong += [f"{key}.{k}" for k in block if k not in allowed]
    return wrong


def _cli(*args) -> tuple[int, str, str]:
    # COLUMNS unset and no terminal: every message is its one whole line
    r = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": ""})
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A fresh enriched store (ingested through the CLI with --parallel), a raw one and a replay."""
    from tests.conftest import SAMPLES

    folder = SAMPLES / "coupled" / "kineto"
    if not folder.is_dir():
        pytest.skip(f"sample trace {folder} is absent")
    root = tmp_path_factory.mktemp("version")
    made = {"enriched": root / "e.store", "raw": root / "r.store", "replayed": root / "a.store"}
    assert _cli("ingest", folder, "-o", made["enriched"], "--parallel", "dp=8,tp=4,ep=32")[0] == 0
    assert _cli("ingest", folder, "-o", made["raw"], "--no-enrich")[0] == 0
    assert _cli("replay", made["enriched"], "--policy", "asap", "-o", made["replayed"])[0] == 0
    return made, folder


def test_every_meta_key_a_store_is_written_with_is_declared(stores):
    made, _ = stores
    for kind, path in made.items():
        meta = json.loads((path / "meta.json").read_text())
        assert meta["format_version"] == STORE_FORMAT_VERSION
        assert not _undeclared(meta), (
            f"{kind} store: meta.json keys not in schema.META_KEYS: {_undeclared(meta)}"
        )


def test_a_store_records_how_it_was_ingested(stores):
    made, folder = stores
    said = json.loads((made["enriched"] / "meta.json").read_text())["ingest"]
    assert said == {"inputs": [str(folder.absolute())], "parallel": "dp=8,tp=4,ep=32"}


def _aged(path, tmp_path, *, version=1):
    old = tmp_path / "old.store"
    shutil.copytree(path, old)
    meta = json.loads((old / "meta.json").read_text())
    meta.update(format_version=version, asaptrace_version="0.0.9")
    (old / "meta.json").write_text(json.dumps(meta))
    return old


def _opening(old, other, tmp_path) -> dict[str, list]:
    """Every command that opens a store, each with the old store in a store's place."""
    return {
        "info": ["info", old],
        "analyze": ["analyze", old],
        "advise": ["advise", old],
        "replay": ["replay", old, "--policy", "asap"],
        "report": ["report", old, "-o", tmp_path / "r.html"],
        "report --compare": ["report", other, "--compare", old, "-o", tmp_path / "r2.html"],
        "export": ["export", old, "-o", tmp_path / "t.json.gz"],
        "compare (base)": ["compare", old, other],
        "compare (new)": ["compare", other, old],
        "sweep --workload": ["sweep", "--workload", old, "--rates", "1"],
        "dashboard": ["dashboard", old, "--port", "0"],
    }


def test_an_older_store_is_one_line_with_both_versions_and_the_rebuild_command(stores, tmp_path):
    made, folder = stores
    old = _aged(made["enriched"], tmp_path)
    rebuild = f"`asaptrace ingest {folder.absolute()} -o {old} --force --parallel dp=8,tp=4,ep=32`"
    expected = (
        f"error: {old}: written by asaptrace 0.0.9 in store format v1; this asaptrace "
        f"({__import__('asaptrace').__version__}) reads v{STORE_FORMAT_VERSION}; rebuild it with {rebuild}"
    )
    for command, args in _opening(old, made["enriched"], tmp_path).items():
        code, out, err = _cli(*args)
        assert code == 2, f"{command}: exit {code}, expected 2; said {err or out!r}"
        assert err.strip() == expected, f"{command}: said {err.strip()!r}"
        assert "Traceback" not in out + err


def test_the_rebuild_command_rebuilds_a_store_this_version_reads(stores, tmp_path):
    import shlex

    made, _ = stores
    old = _aged(made["enriched"], tmp_path)
    err = _cli("info", old)[2]
    command = shlex.split(err.split("rebuild it with `", 1)[1].rstrip().rstrip("`"))
    assert command[0] == "asaptrace"
    code, _, said = _cli(*command[1:])
    assert code == 0, said
    assert _cli("info", old)[0] == 0


def test_a_store_written_before_the_ingest_block_names_its_sources_folder(stores, tmp_path):
    made, folder = stores
    old = _aged(made["enriched"], tmp_path)
    meta = json.loads((old / "meta.json").read_text())
    del meta["ingest"]
    (old / "meta.json").write_text(json.dumps(meta))
    assert f"`asaptrace ingest {folder.absolute()} -o {old} --force`" in _cli("analyze", old)[2]


def test_an_older_replayed_store_names_its_replay(stores, tmp_path):
    made, _ = stores
    old = _aged(made["replayed"], tmp_path)
    assert f"`asaptrace replay {made['enriched']} --policy asap -o {old} --force`" in _cli("info", old)[2]


def test_a_newer_store_says_to_upgrade(stores, tmp_path):
    made, _ = stores
    old = _aged(made["raw"], tmp_path, version=STORE_FORMAT_VERSION + 1)
    code, _, err = _cli("info", old)
    assert code == 2 and "(upgrade asaptrace, or with `asaptrace ingest" in err


def test_info_shows_the_version(stores):
    made, _ = stores
    code, out, _ = _cli("info", made["enriched"])
    assert code == 0 and f"store format v{STORE_FORMAT_VERSION} (asaptrace " in " ".join(out.split())
