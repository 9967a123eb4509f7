"""One version everywhere (#39 item 7, docs/releasing.md): `kvprov --version`, the package's
metadata (pyproject.toml and the installed distribution), the collection (galaxy.yml) and the
changelog's newest release name the same version; the changelog has an `Unreleased` section on
top and its releases newest first, each once."""

import importlib.metadata
import re
import tomllib

import yaml
from packaging.version import Version

import kvprov
from kvprov.cli import main
from tests.conftest import ROOT

RELEASE = re.compile(r"^## (\d+\.\d+\.\d+)(?: — (\d{4}-\d{2}-\d{2}))?$")


def changelog_sections() -> list[str]:
    return re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(), re.M)


def releases() -> list[tuple[str, str | None]]:
    out = []
    for heading in changelog_sections()[1:]:
        m = RELEASE.match(f"## {heading}")
        assert m, f"CHANGELOG.md: '## {heading}' is not a release heading ('## X.Y.Z — YYYY-MM-DD')"
        out.append((m.group(1), m.group(2)))
    return out


def test_kvprov_version_is_the_packages_and_the_collections(capsys):
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert kvprov.__version__ == version
    assert yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"] == version
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"kvprov {version}"
    installed = importlib.metadata.version("kvprov")
    assert installed == version, (f"the installed kvprov's metadata says {installed}, pyproject.toml {version}: "
                                  "reinstall (python3 -m pip install -e .); a kvprov.egg-info an older build left in the "
                                  "checkout shadows it: python3 setup.py egg_info rewrites it")


def test_the_changelogs_newest_release_is_this_version():
    sections = changelog_sections()
    assert sections[0] == "Unreleased", "CHANGELOG.md starts with '## Unreleased' (docs/releasing.md)"
    newest, date = releases()[0]
    assert newest == kvprov.__version__, (f"CHANGELOG.md's newest release is {newest}, kvprov is {kvprov.__version__}: "
                                          "cut the release in the changelog (docs/releasing.md)")
    assert date, f"CHANGELOG.md: the newest release {newest} has no date"


def test_the_changelogs_releases_are_newest_first_and_each_once():
    versions = [Version(v) for v, _ in releases()]
    assert len(versions) >= 2
    assert versions == sorted(set(versions), reverse=True)
    dates = [d for _, d in releases() if d]
    assert dates == sorted(dates, reverse=True)
