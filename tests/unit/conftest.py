"""Fixtures several unit test files share."""

import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

import pytest

WHEELHOUSE = Path("/var/lib/kvprov/wheelhouse")


@pytest.fixture(scope="session")
def nixl_python(tmp_path_factory) -> str:
    """A venv with nixl-cu12, nixl and numpy installed offline from the wheelhouse, once per session."""
    if not WHEELHOUSE.is_dir():
        pytest.skip(f"no wheelhouse at {WHEELHOUSE} (scripts/install-deps creates it)")
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    wheels = [w for name in ("nixl_cu12-*", "nixl-*", "numpy-*") for w in sorted(WHEELHOUSE.glob(f"{name}.whl"))
              if name == "nixl-*" or f"-{tag}-" in w.name]
    if len(wheels) != 3:
        pytest.skip(f"the wheelhouse {WHEELHOUSE} lacks nixl-cu12/nixl/numpy wheels for {tag}")
    home = tmp_path_factory.mktemp("nixl-venv")
    venv.EnvBuilder(with_pip=False).create(home)
    python = str(home / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", site,
                    *map(str, wheels)], check=True, capture_output=True, timeout=600)
    return python


@pytest.fixture
def short_tmp(monkeypatch):
    """tempfile's directory, short enough for a socket's path wherever pytest keeps tmp_path
    (xdist's are too long for kvprov's tunnel sockets, which then go to /tmp): its `tmp` is the directory the
    test looks into."""
    d = Path(tempfile.mkdtemp(prefix="kvt-", dir="/tmp"))
    (d / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d / "tmp"))
    yield d
    shutil.rmtree(d)
