"""The AWX execution environment (execution-environment.yml) builds with plain ansible-builder in
a checkout (#25; #39, item 6): `ansible-builder create` with no argument, in a copy of the
checkout's files (git's tracked and not ignored ones, as a clean clone has them, with a
__pycache__ as a used checkout has), writes a complete context: the source kvprov's wheel and
the collection are built from, and a Containerfile that installs both. The image itself needs
a container engine, which this machine does not run; the Containerfile's install steps are
run here instead, on a copy of the context's source as its COPY makes one: the wheel is built
as its pip install builds it (`pip wheel --no-deps --no-build-isolation`: no index here), and
the collection step runs as written, into a directory of the test's in place of
/usr/share/ansible/collections."""

import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("ansible-builder") is None,
                                reason="ansible-builder not installed (pip install -e '.[dev]')")
SOURCE = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "galaxy.yml", "LICENSE", "ansible.cfg",
          "docs/collection.md", "kvprov/cli.py", "kvprov/lab/guest/nfs.conf", "meta/runtime.yml",
          "playbooks/site.yml", "plugins/modules/kvprov_collect.py", "roles/engine/tasks/main.yml")
BUNDLE = "kvprov/collection/ansible_collections/kvprov/kvprov/"


def checkout_copy(dest: Path) -> Path:
    """The checkout's files as git knows them (tracked, or new and not ignored), links as links."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, names):
        source, target = ROOT / name, dest / name
        if source.is_symlink() or source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)
    return dest


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    """(the checkout's copy, its context made by plain `ansible-builder create`, create's output)."""
    repo = checkout_copy(tmp_path_factory.mktemp("ee") / "repo")
    for stale in ("kvprov/__pycache__/cli.cpython-311.pyc", "roles/engine/files/__pycache__/x.pyc"):
        (repo / stale).parent.mkdir(parents=True, exist_ok=True)
        (repo / stale).write_bytes(b"stale")  # a used checkout's byte code: it must not reach the image
    r = subprocess.run(["ansible-builder", "create"], cwd=repo, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return repo, repo / "context", r.stdout + r.stderr


def containerfile(context: Path) -> str:
    [path] = [p for p in context.iterdir() if p.name in ("Containerfile", "Dockerfile")]
    return path.read_text()


def test_plain_create_copies_the_source_and_nothing_else(context):
    repo, ctx, output = context
    assert "No matches" not in output and "does not exist" not in output, output  # every src found
    src = ctx / "_build/src"
    for name in SOURCE:
        assert (src / name).is_file(), name
        assert (src / name).read_bytes() == (repo / name).read_bytes(), name
    assert os.readlink(src / "kvprov/bench_worker.py") == os.readlink(repo / "kvprov/bench_worker.py")
    assert (src / "kvprov/bench_worker.py").is_file()  # the link resolves in the context too
    assert (src / "roles/desired_state/defaults/main/engine.yml").is_file()
    tops = sorted(p.name for p in src.iterdir())
    assert tops == sorted({n.split("/")[0] for n in SOURCE}), tops  # no tests, awx, benchmarks, build, context...
    assert not list(src.glob("**/context")) and not list(src.glob("**/*.egg-info"))


def test_the_containerfile_installs_the_wheel_and_the_collection_from_the_source(context):
    text = containerfile(context[1])
    final = text.split("FROM base AS final", 1)[1]
    steps = final[final.index("COPY _build/src/"):].splitlines()
    assert steps[:3] == [
        "COPY _build/src/ /tmp/kvprov-src/",
        "RUN $PYCMD -m pip install --no-cache-dir /tmp/kvprov-src",
        "RUN ansible-galaxy collection build --output-path /tmp/kvprov-dist /tmp/kvprov-src"
        " && ansible-galaxy collection install -p /usr/share/ansible/collections /tmp/kvprov-dist/kvprov-kvprov-*.tar.gz"
        " && rm -rf /tmp/kvprov-src /tmp/kvprov-dist"], steps[:3]
    assert "USER 1000" in final.split(steps[2], 1)[1]  # the steps run as root, before the image's user


def test_the_install_steps_work_on_the_context(context, tmp_path):
    """pip install's wheel, then the collection step as written (pip's build/ and egg-info left
    in the source before it, as in the image)."""
    ctx = context[1]
    src = tmp_path / "kvprov-src"
    shutil.copytree(ctx / "_build/src", src, symlinks=True)  # the Containerfile's COPY
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "--wheel-dir", str(tmp_path / "wheels"), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    [wheel] = (tmp_path / "wheels").glob("kvprov-*-py3-none-any.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "kvprov/cli.py" in names and "kvprov/bench_worker.py" in names and BUNDLE + "galaxy.yml" in names
    assert BUNDLE + "roles/engine/tasks/main.yml" in names and BUNDLE + "plugins/modules/kvprov_collect.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]

    [step] = [line for line in containerfile(ctx).splitlines() if "ansible-galaxy collection build" in line]
    collections = tmp_path / "collections"
    command = (step.removeprefix("RUN ").replace("/tmp/kvprov-src", str(src))
               .replace("/tmp/kvprov-dist", str(tmp_path / "dist"))
               .replace("/usr/share/ansible/collections", str(collections)))
    keep = tmp_path / "dist-kept"
    r = subprocess.run(["bash", "-c", command.replace(" && rm -rf ", f" && cp -r {tmp_path / 'dist'} {keep} && rm -rf ")],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path,  # no ansible.cfg of the checkout's
                       env={**{k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
                            "ANSIBLE_COLLECTIONS_PATH": str(collections)})  # as in the image: the only one configured
    assert r.returncode == 0, r.stdout + r.stderr
    installed = collections / "ansible_collections/kvprov/kvprov"
    assert (installed / "MANIFEST.json").is_file() and (installed / "roles/engine/tasks/main.yml").is_file()
    assert (installed / "plugins/modules/kvprov_collect.py").is_file() and not src.exists()  # the step cleaned up
    [tarball] = keep.glob("kvprov-kvprov-*.tar.gz")
    members = tarfile.open(tarball).getnames()
    assert not [m for m in members if re.match(r"(kvprov|build|kvprov\.egg-info)/", m) or "__pycache__" in m], members


def test_build_ee_writes_the_context_afresh(tmp_path):
    """scripts/build-ee: the same context in DIR/context, a file of an earlier one gone; no
    container engine answers here, so it stops there and says so."""
    (tmp_path / "context/_build/src/roles").mkdir(parents=True)
    (tmp_path / "context/_build/src/roles/removed.yml").write_text("stale")
    r = subprocess.run([str(ROOT / "scripts/build-ee"), "--out", str(tmp_path)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "context/_build/src/kvprov/cli.py").is_file()
    assert not (tmp_path / "context/_build/src/roles/removed.yml").exists()
    assert "context is ready" in r.stdout or "== the image" in r.stdout
