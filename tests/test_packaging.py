"""The two pyproject.toml files build without setuptools deprecation banners, license included."""

from __future__ import annotations

import os
import tomllib
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECTS = [ROOT, ROOT / "trainer_agent"]


@pytest.mark.parametrize("project", PROJECTS, ids=["ett-observability", "ett-agent"])
def test_setuptools_reads_the_project_without_deprecation_warnings(project: Path) -> None:
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    here = Path.cwd()
    os.chdir(project)  # license-files and package-dir are relative to the project
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dist = apply_configuration(Distribution(), project / "pyproject.toml")
    finally:
        os.chdir(here)
    messages = [str(w.message) for w in caught if "Deprecation" in w.category.__name__]
    assert messages == []
    assert dist.metadata.license_expression == "Apache-2.0"


def test_license_is_an_spdx_string_whose_files_ship_in_the_image() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = data["project"]
    assert project["license"] == "Apache-2.0"
    # SPDX `license` and `license-files` need setuptools 77; the build isolation installs this.
    assert "setuptools>=77" in data["build-system"]["requires"]
    copied = {
        src
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("COPY ")
        for src in line.split()[1:-1]
    }
    for name in project["license-files"]:
        assert (ROOT / name).is_file()
        assert name in copied, f"the Dockerfile's `pip install .` needs {name}"
    agent = tomllib.loads((ROOT / "trainer_agent" / "pyproject.toml").read_text())
    assert agent["project"]["license"] == "Apache-2.0"
    assert "setuptools>=77" in agent["build-system"]["requires"]
