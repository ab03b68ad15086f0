"""What a wheel installs: ``asaptrace`` and the dashboard as ``asaptrace_dashboards``, nothing else.

The repository keeps the dashboard in a folder named ``dashboards/`` (docs/layout.md); installed
under that name it would be a top-level package ``dashboards`` that any other distribution could
also ship (one overwrites the other in site-packages). pyproject.toml maps the folder to
``asaptrace_dashboards`` and lists the packages, since a mapped folder cannot be found: this test
builds the wheel from a copy of the checkout and checks both the names and that no package or asset
was left out (a new sub-package missing from that list would install a broken asaptrace).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the repository folder → the name it installs under
INSTALLED_AS = {"asaptrace": "asaptrace", "dashboards": "asaptrace_dashboards"}
#: setuptools reads ext-modules from pyproject.toml from this version on (its build-system line)
SETUPTOOLS_MIN = (74, 1)


def _setuptools_too_old() -> str | None:
    if importlib.util.find_spec("setuptools") is None:
        return "setuptools is not importable here (pip install -e '.[test]' brings it)"
    found = version("setuptools")
    if tuple(int(p) for p in found.split(".")[:2]) < SETUPTOOLS_MIN:
        return f"building the wheel needs setuptools>=74.1 (pyproject.toml), found {found}"
    return None


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory) -> set[str]:
    """The files of a wheel built (no dependencies, no isolation) from a copy of the checkout."""
    if reason := _setuptools_too_old():
        pytest.skip(reason)
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc")
    for folder in INSTALLED_AS:
        shutil.copytree(ROOT / folder, src / folder, ignore=skip)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("asaptrace-*.whl")
    with zipfile.ZipFile(wheel) as z:
        return {n for n in z.namelist() if not n.split("/")[0].endswith(".dist-info")}


def test_the_wheel_installs_two_top_level_packages_that_cannot_clash(wheel_names):
    assert {n.split("/")[0] for n in wheel_names} == {"asaptrace", "asaptrace_dashboards"}
    # the dashboard's stylesheet, which Dash serves from the package's assets/ folder
    assert "asaptrace_dashboards/assets/dashboard.css" in wheel_names


def test_the_wheel_holds_every_package_and_data_file_of_the_checkout(wheel_names):
    """Each ``.py`` and package-data file under asaptrace/ and dashboards/, at its installed name."""
    kinds = {".py", ".toml", ".json", ".j2", ".css"}
    expected = {
        "/".join((INSTALLED_AS[folder], *p.relative_to(ROOT / folder).parts))
        for folder in INSTALLED_AS
        for p in (ROOT / folder).rglob("*")
        if p.suffix in kinds and "__pycache__" not in p.parts
    }
    assert expected - wheel_names == set()
