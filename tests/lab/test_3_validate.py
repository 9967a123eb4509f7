"""`kvprov validate` on the deployed lab: everything passes, then each sabotage is caught
by the right check with the right message. Runs after test_2_deploy."""

import json
import time

import pytest

from kvprov.lab.ssh import ssh
from tests.conftest import kvprov

pytestmark = pytest.mark.lab

GPU1 = ("127.0.0.1", 2221)
STORAGE = ("127.0.0.1", 2220)
TOML = "/etc/kvprov/nixl_backend_config.toml"
UNIT = "/etc/systemd/system/kvprov-sglang-main.service"
DEADLINE_SLACK = 15  # #28: validate --timeout T names dead storage within T + 15 s (ssh, Ansible, the report)


def sh(host, command, timeout=120):
    r = ssh(*host, command, timeout=timeout)
    assert r.returncode == 0, f"`{command}` on {host} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def validate(lab, tmp_path, *args):
    out = tmp_path / "results.json"
    r = kvprov("validate", lab["inventory"], "--limit", "kvlab-gpu1,kvlab-c1", "--json", str(out), *args,
               timeout=900)
    data = json.loads(out.read_text()) if out.exists() else {"hosts": {}}
    return r, {(h, x["id"]): x for h, v in data["hosts"].items() for x in v["results"]}


@pytest.fixture(scope="module")
def clean(lab, tmp_path_factory):
    """The deployed lab validates clean, acceptance test included (test_2_deploy left it deployed)."""
    r, results = validate(lab, tmp_path_factory.mktemp("clean"))
    return r, results


def test_deployed_lab_passes_every_applicable_check(clean):
    r, results = clean
    failed = {k: v for k, v in results.items() if v["status"] == "fail"}
    assert r.returncode == 0 and not failed, r.stdout[-4000:] + r.stderr[-2000:]
    assert results[("kvlab-gpu1", "mount.transport")]["status"] == "pass"
    assert results[("kvlab-gpu1", "mount.pnfs_layout")]["status"] == "pass"
    assert results[("kvlab-gpu1", "mount.layoutget")]["status"] == "pass"
    assert results[("kvlab-gpu1", "nixl.backend")]["status"] == "pass"
    gds = results[("kvlab-gpu1", "gds.gpu")]
    assert gds["status"] == "skip" and "no NVIDIA GPU" in gds["found"] + gds.get("fix", "") + gds.get("expected", "")


def test_acceptance_test_runs_through_nixl_on_the_tier(clean):
    """The lab's KV-page files (Qwen3-8B defaults: 18 MiB) through NIXL POSIX from DRAM, judged
    against the lab inventory's thresholds; figures and latency percentiles reported."""
    _, results = clean
    for host in ("kvlab-gpu1", "kvlab-c1"):
        for op in ("write", "read"):
            r = results[(host, f"bench.{op}")]
            assert r["status"] == "pass" and r["expected"] == f">= 0.005 GB/s (kvprov_bench_min_{op}_gbps)", r
            assert "(16 files, 288 MiB in" in r["found"] and "latency ms p50" in r["found"]
            assert "POSIX from DRAM, 18 MiB files, concurrency 8, O_DIRECT" in r["found"]
    # it left nothing behind in the host's directory on the mount
    assert sh(GPU1, "ls -A /mnt/kvcache/kvlab-gpu1").split() == ["main"]


def test_bench_threshold_missed_together_with_aggregate(lab, tmp_path):
    from tests.lab.test_2_deploy import with_var

    inv = with_var(lab["inventory"], tmp_path, kvprov_bench_min_read_gbps=1000)
    out = tmp_path / "bench.json"
    r = kvprov("bench", str(inv), "--limit", "kvlab-gpu1,kvlab-c1", "--together", "--bench-files", "8",
               "--json", str(out), timeout=900)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    data = json.loads(out.read_text())["hosts"]
    by_id = {(h, x["id"]): x for h, v in data.items() for x in v["results"]}
    read = by_id[("kvlab-gpu1", "bench.read")]
    assert read["status"] == "fail" and read["expected"] == ">= 1000 GB/s (kvprov_bench_min_read_gbps)"
    assert "(8 files, 144 MiB in" in read["found"]
    assert by_id[("kvlab-c1", "bench.read")]["status"] == "pass"  # the threshold was set for the VMs only
    agg = by_id[("(all hosts)", "bench.aggregate.write")]
    assert agg["expected"] == "2 hosts started together" and "start skew" in agg["found"]


def test_tcp_remount_is_caught(lab, storage_alone, tmp_path):
    sh(GPU1, "systemctl stop mnt-kvcache.mount && mount -t nfs4 -o vers=4.1,proto=tcp,port=2049 10.99.1.1:/kv /mnt/kvcache")
    try:
        r, results = validate(lab, tmp_path, "--no-bench")
    finally:
        sh(GPU1, "umount /mnt/kvcache; systemctl start mnt-kvcache.mount")
    assert r.returncode == 1
    t = results[("kvlab-gpu1", "mount.transport")]
    assert t["status"] == "fail" and "tcp" in t["found"]


def test_inactive_plugin_in_the_toml_is_caught(lab, tmp_path):
    sh(GPU1, f"cp {TOML} /root/toml.bak && sed -i '/^active = /d' {TOML}")
    try:
        r, results = validate(lab, tmp_path, "--no-bench")
    finally:
        sh(GPU1, f"mv /root/toml.bak {TOML}")
    assert r.returncode == 1
    assert results[("kvlab-gpu1", "nixl.active_plugin")]["status"] == "fail"


def test_storage_dir_on_tmp_is_caught(lab, tmp_path):
    sh(GPU1, f"cp {UNIT} /root/unit.bak && sed -i 's|STORAGE_DIR=/mnt/kvcache/kvlab-gpu1/main|STORAGE_DIR=/tmp/hicache|' "
             f"{UNIT} && systemctl daemon-reload")
    try:
        r, results = validate(lab, tmp_path, "--no-bench")
    finally:
        sh(GPU1, f"mv /root/unit.bak {UNIT} && systemctl daemon-reload")
    assert r.returncode == 1
    env = results[("kvlab-gpu1", "engine.main.storage_env")]
    assert env["status"] == "fail" and "/tmp/hicache" in env["found"]


def test_stopped_knfsd_is_caught_within_the_timeout(lab, storage_alone, tmp_path):
    """With the storage gone, `validate --timeout T` names it within T + 15 s (#28): once the volume
    did not answer the I/O probe, the collector probes it no further (one deadline, not one a probe).
    The mount is soft (#37): each of the probe's calls gets EIO after timeo x (retrans + 1)."""
    sh(STORAGE, "systemctl stop nfs-server")
    try:
        t0 = time.monotonic()
        r, results = validate(lab, tmp_path, "--timeout", "10", "--no-bench")
        seconds = time.monotonic() - t0
    finally:
        sh(STORAGE, "systemctl start nfs-server")
    print(f"\nvalidate --timeout 10 of kvlab-gpu1 and kvlab-c1, the storage gone: {seconds:.1f} s")
    assert r.returncode == 1
    probe = results[("kvlab-gpu1", "mount.io_probe")]
    # the soft mount's EIO, or no answer within the timeout when the probe's calls add up past it
    # before the soft mount gives up on each: either way the tier is named degraded
    assert probe["status"] == "fail" and "the KV tier is degraded" in probe["found"], probe
    storage = results[("kvlab-gpu1", "engine.main.storage_dir")]
    assert storage["status"] == "fail" and "did not answer the I/O probe" in storage["found"], storage
    assert seconds <= 10 + DEADLINE_SLACK, f"{seconds:.1f} s"
