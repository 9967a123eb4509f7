"""`kvprov render` from the roles' own templates, without contacting any host."""

import json
import tomllib

import yaml

from tests.conftest import ROOT, kvprov

PRODUCTION = ROOT / "inventory/example.yml"


def render(tmp_path, inventory, *args):
    r = kvprov("render", str(inventory), "--out", str(tmp_path), *args)
    assert r.returncode == 0, r.stdout + r.stderr
    return [p for p in r.stdout.split()]


def test_lab_render_lists_every_managed_file(tmp_path):
    files = render(tmp_path, ROOT / "inventory/lab.yml")
    host = tmp_path / "kvlab-gpu1"
    assert sorted(str(p.relative_to(host)) for p in host.rglob("*") if p.is_file()) == sorted([
        "etc/idmapd.conf", "etc/modules-load.d/kvprov-nfs.conf", "etc/modules-load.d/kvprov-rdma.conf",
        "etc/systemd/system/mnt-kvcache.mount", "etc/systemd/system/kvprov-soft-roce.service",
        "etc/systemd/system/kvprov-sglang-main.service", "etc/kvprov/nixl_backend_config.toml",
        "etc/cufile.json", "usr/local/sbin/kvprov-kv-key",  # SGLang's directory is keyed
        "usr/local/lib/kvprov-sglang/sitecustomize.py"])  # SGLang always has a key: its admin routes' own
    assert len(files) == 10
    mount = (host / "etc/systemd/system/mnt-kvcache.mount").read_text()
    assert "What=10.99.1.1:/kv" in mount
    assert "Options=vers=4.1,proto=rdma,port=20049,rsize=262144,wsize=262144,soft,timeo=20,retrans=1,softreval,max_connect=16,lookupcache=positive,write=eager,nosuid,nodev,noexec,_netdev" in mount
    assert "blocklayoutdriver" in (host / "etc/modules-load.d/kvprov-nfs.conf").read_text()
    assert tomllib.loads((host / "etc/kvprov/nixl_backend_config.toml").read_text()) == {
        "plugin": {"posix": {"active": True, "use_aio": False}},
        # SGLang's L3 cleaner, on at kvprov's marks (no kvprov evictor for sglang_hicache)
        "l3_cleaner_enabled": True, "l3_cleaner_high_watermark": 85, "l3_cleaner_low_watermark": 70,
        # the timeout prefetch policy's deadline: a hung storage delays a request, never holds it
        "prefetch_timeout_base": 1.0, "prefetch_timeout_per_ki_token": 0.1}


def test_production_render_uses_gds_mt_files_layout_and_per_host_dirs(tmp_path):
    render(tmp_path, PRODUCTION)
    inv = yaml.safe_load(PRODUCTION.read_text())
    hosts = sorted(p.name for p in tmp_path.iterdir())
    assert len(hosts) >= 2
    for h in hosts:
        d = tmp_path / h
        toml = tomllib.loads((d / "etc/kvprov/nixl_backend_config.toml").read_text())
        active = [name for name, t in toml["plugin"].items() if t.get("active") is True]
        assert active == ["gds_mt"]
        cufile = json.loads((d / "etc/cufile.json").read_text())
        assert list(cufile["fs"]["nfs"]["mount_table"]) == ["/mnt/kvcache"]
        assert "nfs_layout_nfsv41_files" in (d / "etc/modules-load.d/kvprov-nfs.conf").read_text()
        units = list((d / "etc/systemd/system").glob("kvprov-sglang-*.service"))
        assert bool(units) == (not h.startswith("gpu-c"))  # rack C runs the vLLM-based engines
        for unit in units:
            # the instance's own directory, keyed: kvprov-kv-key makes its subdirectory and sets the variable
            pre = [l for l in unit.read_text().splitlines() if l.startswith("ExecStartPre=/usr/local/sbin/kvprov-kv-key ")]
            assert pre and pre[0].split()[-2].startswith(f"/mnt/kvcache/{h}/"), pre
            assert "--also=SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR=" in pre[0]
    assert inv  # the fixture is a real YAML inventory


def test_render_one_host_and_refuse_an_unknown_one(tmp_path):
    files = render(tmp_path, ROOT / "inventory/lab.yml", "--host", "kvlab-gpu1")
    assert all("/kvlab-gpu1/" in f for f in files)
    r = kvprov("render", str(ROOT / "inventory/lab.yml"), "--out", str(tmp_path), "--host", "nope")
    assert r.returncode == 2 and "no host 'nope'" in r.stderr


def test_render_refuses_a_bad_inventory_before_anything(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        g1:\n          kvprov_storage_nfs_port: '20049x'\n")
    r = kvprov("render", str(bad), "--out", str(tmp_path / "out"))
    assert r.returncode == 2
    assert "kvprov_storage_nfs_port" in r.stderr and "no host was contacted" in r.stderr
    assert not (tmp_path / "out").exists()


def test_render_host_on_a_multi_host_inventory_writes_that_host_only(tmp_path):
    """inventory/lab.yml has one GPU node, so --host is only proven on a fleet."""
    host = "gpu-b01.corp.example.com"
    files = render(tmp_path, PRODUCTION, "--host", host)
    assert [p.name for p in tmp_path.iterdir()] == [host]
    assert all(f.startswith(f"{tmp_path}/{host}/") for f in files)
    assert f"{tmp_path}/{host}/etc/cufile.json" in files and len(files) >= 6


def test_render_json_lists_each_file_with_its_mode_and_digest(tmp_path):
    """#39: render --json for a CI: every file as the host gets it (path, mode, sha256), to a
    0600 file or, with -, to stdout alone (no path lines)."""
    import hashlib

    host = "gpu-a01.corp.example.com"
    r = kvprov("render", str(ROOT / "inventory/example.yml"), "--host", host, "--out", str(tmp_path / "out"),
               "--json", "-")
    assert r.returncode == 0, r.stderr
    files = json.loads(r.stdout)["files"]  # stdout is the JSON alone
    written = sorted(p for p in (tmp_path / "out" / host).rglob("*") if p.is_file())
    assert sorted(f["written"] for f in files) == [str(p) for p in written]
    for f in files:
        p = tmp_path / "out" / host / f["path"].lstrip("/")
        assert f["host"] == host and f["sha256"] == hashlib.sha256(p.read_bytes()).hexdigest()
        assert int(f["mode"], 8) == p.stat().st_mode & 0o7777
    assert any(f["path"] == "/etc/systemd/system/mnt-kvcache.mount" and f["mode"] == "0644" for f in files)
    report = tmp_path / "render.json"
    r = kvprov("render", str(ROOT / "inventory/example.yml"), "--host", host, "--out", str(tmp_path / "two"),
               "--json", str(report))
    assert r.returncode == 0 and r.stdout.count("\n") == len(files)  # the paths, as without --json
    assert len(json.loads(report.read_text())["files"]) == len(files) and report.stat().st_mode & 0o777 == 0o600
