"""The lab image carries the NIXL wheelhouse where the nixl role copies it, and its cache key
follows the wheelhouse (kvprov/lab/image.py)."""

from pathlib import Path

import yaml
from kvprov.lab import image, inventory

ROOT = Path(__file__).resolve().parents[2]


def test_the_image_stages_the_wheelhouse_the_lab_inventory_names_where_the_role_copies_it():
    role_vars = yaml.safe_load((ROOT / "roles/nixl/vars/main.yml").read_text())
    assert "/" + image.HOST_WHEELHOUSE == role_vars["_kvprov_nixl_host_wheelhouse"]
    assert str(image.WHEELHOUSE) == inventory.WHEELHOUSE


def test_the_image_key_changes_with_the_wheelhouse_and_not_without(tmp_path, monkeypatch):
    monkeypatch.setattr(image, "WHEELHOUSE", tmp_path)
    empty = image.recipe_hash("key")
    assert image.recipe_hash("key") == empty
    (tmp_path / "nixl-1.5.1-py3-none-any.whl").write_bytes(b"x" * 10)
    one = image.recipe_hash("key")
    assert one != empty
    (tmp_path / "nixl-1.5.1-py3-none-any.whl").write_bytes(b"x" * 11)  # a different build of it
    assert image.recipe_hash("key") not in (empty, one)
    (tmp_path / "notes.txt").write_text("not a wheel")
    assert image.recipe_hash("key") == image.recipe_hash("key")


def test_configure_copies_each_wheel_root_owned_0644_into_a_0755_directory(tmp_path, monkeypatch):
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    (wheelhouse / "uv-0.1-py3-none-any.whl").write_bytes(b"uv")
    (wheelhouse / "nixl-1.5.1-py3-none-any.whl").write_bytes(b"nixl")
    monkeypatch.setattr(image, "WHEELHOUSE", wheelhouse)
    rootfs = tmp_path / "rootfs"
    for d in ("etc/ssh/sshd_config.d", "root"):
        (rootfs / d).mkdir(parents=True)
    monkeypatch.setattr(image, "run", lambda *a, **k: None)  # the chroot's systemctl calls
    image._configure(rootfs, "ssh-ed25519 AAAA lab", tmp_path / "log")
    staged = rootfs / image.HOST_WHEELHOUSE
    assert sorted(p.name for p in staged.iterdir()) == ["nixl-1.5.1-py3-none-any.whl", "uv-0.1-py3-none-any.whl"]
    assert (staged / "uv-0.1-py3-none-any.whl").read_bytes() == b"uv"
    assert {oct(p.stat().st_mode & 0o777) for p in staged.iterdir()} == {"0o644"}
    assert oct(staged.stat().st_mode & 0o777) == "0o755"
