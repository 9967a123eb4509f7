"""The AWX execution environment builds from a checkout as a clean clone has it (#25):
scripts/build-ee builds the collection tarball and kvprov's wheel, then ansible-builder writes
the build context with both in it. The image itself needs a container engine, which this
machine does not run (the script says so and stops there)."""

import shutil
import subprocess
import zipfile

import pytest

from tests.conftest import ROOT


@pytest.mark.skipif(shutil.which("ansible-builder") is None, reason="ansible-builder not installed (pip install -e '.[dev]')")
def test_build_ee_writes_a_context_with_the_collection_and_the_wheel(tmp_path):
    r = subprocess.run([str(ROOT / "scripts/build-ee"), "--out", str(tmp_path)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    build = tmp_path / "context/_build"
    [tarball] = (build / "collections").glob("kvprov-kvprov-*.tar.gz")
    [wheel] = (build / "wheels").glob("kvprov-*-py3-none-any.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "kvprov/cli.py" in names and "kvprov/collection/ansible_collections/kvprov/kvprov/galaxy.yml" in names
    containerfile = next(p for p in (tmp_path / "context").iterdir() if p.name in ("Containerfile", "Dockerfile"))
    text = containerfile.read_text()
    assert "pip install --no-cache-dir /tmp/kvprov-wheels/*.whl" in text
    assert "ansible-galaxy collection install -p /usr/share/ansible/collections" in text
    assert tarball.stat().st_size > 10_000
    assert "context is ready" in r.stdout or "== the image" in r.stdout
