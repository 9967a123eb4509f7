"""The storage directories on the shared volume are made without following a link at any
component (#24 finding 5): plugins/modules/kvprov_volume_dir.py on a real directory tree,
with links planted at every depth (the review's `<mount>/lnk/etc/cron.d`)."""

import importlib.util
import os
import stat

import pytest

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("kvprov_volume_dir", ROOT / "plugins/modules/kvprov_volume_dir.py")
vd = importlib.util.module_from_spec(spec)
spec.loader.exec_module(vd)

UID, GID = 2001, 2001


def owner_mode(path) -> tuple[int, int, int]:
    st = os.lstat(path)
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def test_it_creates_the_path_sets_the_last_directory_and_a_second_run_changes_nothing(tmp_path):
    base, target = tmp_path / "mnt", tmp_path / "mnt/kv/vllm_offload/model"
    base.mkdir()
    assert vd.ensure(str(base), str(target), UID, GID, 0o750, check=True)  # check mode: says, does nothing
    assert not (base / "kv").exists()
    changes = vd.ensure(str(base), str(target), UID, GID, 0o750, check=False)
    assert f"created {base}/kv" in changes and f"created {target}" in changes
    assert owner_mode(target) == (UID, GID, 0o750)
    assert owner_mode(base / "kv") == owner_mode(base / "kv/vllm_offload") == (0, 0, 0o755)
    assert vd.ensure(str(base), str(target), UID, GID, 0o750, check=False) == []
    os.chmod(target, 0o777)
    assert vd.ensure(str(base), str(target), UID, GID, 0o750, check=False) == [f"mode 0777 -> 0750 on {target}"]


@pytest.mark.parametrize("depth", [0, 1, 2, 3])
def test_a_link_at_any_depth_is_refused_and_nothing_changes_where_it_points(tmp_path, depth):
    base, outside = tmp_path / "mnt", tmp_path / "etc"
    (outside / "cron.d").mkdir(parents=True)
    os.chmod(outside / "cron.d", 0o755)
    parts = ["lnk", "kv", "lmcache_mp", "model"]
    (base / "/".join(parts[:depth])).mkdir(parents=True, exist_ok=True)
    link = base.joinpath(*parts[:depth + 1])
    link.symlink_to(outside / "cron.d" if depth == len(parts) - 1 else outside)
    if depth < len(parts) - 1:  # what the rest of the path would reach through the link
        outside.joinpath(*parts[depth + 1:-1]).mkdir(parents=True, exist_ok=True)
    before = sorted(p.name for p in outside.rglob("*"))
    with pytest.raises(vd.Refused, match=f"{link} is a symbolic link"):
        vd.ensure(str(base), str(base.joinpath(*parts)), UID, GID, 0o750, check=False)
    assert sorted(p.name for p in outside.rglob("*")) == before
    assert owner_mode(outside / "cron.d")[:2] == (0, 0)


def test_a_file_in_the_way_is_refused_and_a_path_outside_the_mount_is_an_error(tmp_path):
    base = tmp_path / "mnt"
    (base / "kv").mkdir(parents=True)
    (base / "kv/file").write_text("x")
    with pytest.raises(vd.Refused, match="kv/file is not a directory"):
        vd.ensure(str(base), str(base / "kv/file/model"), UID, GID, 0o750, check=False)
    for bad in (tmp_path / "elsewhere", base, f"{base}/kv/../../x"):
        with pytest.raises(ValueError):
            vd.ensure(str(base), str(bad), UID, GID, 0o750, check=False)


def test_check_mode_before_the_mount_point_exists_says_what_it_would_create(tmp_path):
    """A fresh host in check mode: the storage role has not made the mount point yet."""
    base, target = tmp_path / "mnt", tmp_path / "mnt/kv/model"
    assert vd.ensure(str(base), str(target), UID, GID, 0o750, check=True) == [
        f"created {target} (the mount point {base} is not there yet)"]
    assert not base.exists()
    with pytest.raises(FileNotFoundError):
        vd.ensure(str(base), str(target), UID, GID, 0o750, check=False)
