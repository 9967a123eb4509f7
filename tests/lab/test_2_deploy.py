"""`kvprov deploy` on the lab: a GPU-node VM with real NFS over soft-RoCE and pNFS, and
containers (local storage profile). Runs after test_1_lab (which needs fresh hosts)."""

import json
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from kvprov import mountstats
from kvprov.lab.ssh import ssh, ssh_args
from tests import systemd_verify
from tests.conftest import kvprov, render_one_host

pytestmark = pytest.mark.lab

GPU1 = ("127.0.0.1", 2221)
STORAGE = ("127.0.0.1", 2220)
C1 = ("10.98.1.2", 22)
C2 = ("10.98.2.2", 22)
MNT = "/mnt/kvcache"
ROUNDTRIP = (Path(__file__).parent / "nixl_roundtrip.py").read_text()
# What a deploy may touch: compared before/after a check-mode run.
SNAPSHOT = ("find /etc /opt /srv /usr/local /var/lib -xdev -path /var/lib/systemd/timers -prune -o "
            "-printf '%p %s %m %u %T@\\n' | sort | sha256sum; systemctl list-unit-files --no-legend | sha256sum; "
            "getent passwd | sha256sum; awk '{print $1, $2, $3, $4}' /proc/self/mounts | sort | sha256sum")


def sh(host, command, timeout=120):
    r = ssh(*host, command, timeout=timeout)
    assert r.returncode == 0, f"`{command}` on {host} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def deploy(inventory, *args, timeout=1200):
    out = Path(inventory).parent / "deploy-result.json"
    r = kvprov("deploy", str(inventory), "--json", str(out), *args, timeout=timeout)
    return r, json.loads(out.read_text()) if out.exists() else {}


def with_var(inventory: str, tmp_path: Path, **group_vars) -> Path:
    """A copy of the lab inventory with more settings for the GPU-node VMs."""
    data = yaml.safe_load(Path(inventory).read_text())
    data["all"]["children"]["gpu_nodes"]["children"]["lab_gpu_vms"]["vars"].update(group_vars)
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def live_mount(host=GPU1):
    return mountstats.find(mountstats.parse(sh(host, "cat /proc/self/mountstats")), MNT)


def test_check_mode_on_fresh_hosts_changes_nothing(lab):
    """A fresh GPU-node VM (NFS/RDMA profile) and a fresh container (local profile)."""
    before = {h: sh(h, SNAPSHOT) for h in (GPU1, C2)}
    r, result = deploy(lab["inventory"], "--check", "--limit", "kvlab-gpu1,kvlab-c2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert result["hosts"]["kvlab-gpu1"]["changed"] > 0 and result["hosts"]["kvlab-c2"]["changed"] > 0
    assert {h: sh(h, SNAPSHOT) for h in (GPU1, C2)} == before  # would change things, changed nothing


@pytest.fixture(scope="module")
def deployed(lab, lab_share):
    """kvlab-gpu1 and kvlab-c1 deployed; a milestone for the other lab group (tests/labshare.py)."""
    problem = "the deploy did not finish"
    try:
        r, result = deploy(lab["inventory"], "--limit", "kvlab-gpu1,kvlab-c1")
        problem = None if r.returncode == 0 else f"deploy -> {r.returncode}:\n{r.stdout[-3000:]}"
    finally:
        lab_share.reach("fixture:deployed", problem)
    assert r.returncode == 0, r.stdout + r.stderr
    return result


def test_deploy_reports_every_host(deployed):
    assert set(deployed["hosts"]) == {"kvlab-gpu1", "kvlab-c1"}
    assert deployed["failures"] == []
    assert Path(deployed["artifacts"]).is_dir()


def test_kv_mount_is_rdma_with_a_pnfs_layout_after_a_nixl_write(deployed):
    before = live_mount()
    assert before.opts["proto"] == "rdma" and before.opts["port"] == "20049" and before.opts["vers"] == "4.1"
    assert before.opts["max_connect"] == "16"
    # no host can plant a setuid binary, a device node or a program for another (#24)
    assert {"nosuid", "nodev", "noexec"} <= set(sh(GPU1, f"findmnt -no OPTIONS {MNT}").strip().split(","))
    assert [t.protocol for t in before.transports] == ["rdma"]
    r = subprocess.run([*ssh_args(*GPU1), "/opt/kvprov/nixl/bin/python3", "-", f"{MNT}/kvlab-gpu1/roundtrip.bin"],
                       input=ROUNDTRIP, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1]) == {"write": "DONE", "read": "DONE", "size": 4 << 20, "equal": True}
    after = live_mount()
    assert after.pnfs == "LAYOUT_BLOCK_VOLUME"
    assert after.op_count("LAYOUTGET") > 0
    assert sh(GPU1, "systemctl is-enabled mnt-kvcache.mount kvprov-soft-roce.service nfs-blkmap.service").split() == [
        "enabled"] * 3


# What a second client of the shared tier sees, and when (the engines' cross-host hit on this
# export: tests/lab/test_5_engine.py, through kvlab-gpu1's mounts). On kvlab-gpu1: the export mounted
# twice more with kvprov's own options as mounted (the `reader`) and with lookupcache=all (the
# kernel's default: `stale`), each with nosharecache (its own superblock, dentry and attribute
# caches: what a second client host has). The reader and `stale` look the names up before they
# exist (the miss an engine makes for a prefix nobody stored yet), kvprov's mount writes them,
# and at once: the reader opens and reads the same bytes, `stale` still misses them. Two client
# VMs measured over time: benchmarks/visibility.py.
XHOST = """
set -euo pipefail
unit=/etc/systemd/system/mnt-kvcache.mount
opts=$(sed -n 's/^Options=//p' $unit); src=$(sed -n 's/^What=//p' $unit)
case ",$opts," in *,lookupcache=positive,*) ;; *) echo "kvprov's options have no lookupcache=positive: $opts"; exit 3;; esac
stale_opts=$(echo "$opts" | sed 's/lookupcache=positive/lookupcache=all/')
mkdir -p /mnt/kvprov-xhost/reader /mnt/kvprov-xhost/stale
mount -t nfs4 -o "$opts,nosharecache" "$src" /mnt/kvprov-xhost/reader
mount -t nfs4 -o "$stale_opts,nosharecache" "$src" /mnt/kvprov-xhost/stale
trap 'umount /mnt/kvprov-xhost/reader /mnt/kvprov-xhost/stale; rmdir /mnt/kvprov-xhost/reader /mnt/kvprov-xhost/stale /mnt/kvprov-xhost' EXIT
d=kv/xhost-test; mkdir -p {mnt}/$d
ls /mnt/kvprov-xhost/reader/$d /mnt/kvprov-xhost/stale/$d >/dev/null
for m in reader stale; do test ! -e /mnt/kvprov-xhost/$m/$d/page.bin; done   # the miss, cached where it may be
head -c 1048576 /dev/urandom > {mnt}/$d/page.bin; sync {mnt}/$d/page.bin
want=$(sha256sum < {mnt}/$d/page.bin | cut -d' ' -f1)
got=$(sha256sum < /mnt/kvprov-xhost/reader/$d/page.bin | cut -d' ' -f1 || echo missing)
stale=$(test -e /mnt/kvprov-xhost/stale/$d/page.bin && echo seen || echo missing)
rm -rf {mnt}/$d
grep -E " /mnt/kvprov-xhost/reader " /proc/mounts | tr ' ' '\n' | sed -n 4p
echo "$want" "$got" "$stale"
"""


def test_a_file_one_client_writes_is_found_at_once_by_another_with_kvprovs_options(deployed):
    options, result = sh(GPU1, XHOST.format(mnt=MNT)).strip().splitlines()
    opts = dict(o.partition("=")[::2] for o in options.split(","))
    assert (opts["proto"], opts["lookupcache"], opts["vers"]) == ("rdma", "pos", "4.1"), options
    want, got, stale = result.split()
    assert got == want, "the second client did not read the bytes the first wrote"
    assert stale == "missing", "lookupcache=all should have hidden the new file (the control)"


def test_nixl_config_unit_and_storage_dir_are_in_place(deployed):
    toml = tomllib.loads(sh(GPU1, "cat /etc/kvprov/nixl_backend_config.toml"))
    # SGLang's NIXL L3 cleaner set explicitly: no kvprov evictor for sglang_hicache (evict auto), so
    # SGLang's own cleaner is on, at kvprov's marks (docs/capacity.md); the timeout prefetch policy's
    # deadline (#37: a hung storage delays a request by at most this, never holds it)
    assert toml == {"l3_cleaner_enabled": True, "l3_cleaner_high_watermark": 85, "l3_cleaner_low_watermark": 70,
                    "prefetch_timeout_base": 1.0, "prefetch_timeout_per_ki_token": 0.1,
                    "plugin": {"posix": {"active": True, "use_aio": False}}}
    unit = "/etc/systemd/system/kvprov-sglang-main.service"
    # config only (kvprov_engine_install: false): no engine venv, so verify's one complaint owed is
    # the unit's missing entry point, the venv's `sglang` (exit 1); any other line fails
    assert sh(GPU1, "test -e /opt/kvprov/sglang || echo no-venv").split() == ["no-venv"]
    r = ssh(*GPU1, f"systemd-analyze verify {unit} /etc/systemd/system/mnt-kvcache.mount", timeout=120)
    assert systemd_verify.complaints(r.stdout + r.stderr, ["/opt/kvprov/sglang/bin/sglang"]) == [], r.stderr
    text = sh(GPU1, f"cat {unit}")
    # the instance's own directory, keyed: kvprov-kv-key (deployed, executable) names its subdirectory
    assert "Environment=SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR=/mnt/kvcache/kvlab-gpu1/main\n" in text
    assert "--also=SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR= /mnt/kvcache/kvlab-gpu1/main " in text
    assert "--hicache-storage-backend-extra-config @/etc/kvprov/nixl_backend_config.toml" in text
    assert "RequiresMountsFor=/mnt/kvcache/kvlab-gpu1/main" in text
    # no GPU here: the unit is enabled and starting it is a clean skip, not a crash loop
    assert sh(GPU1, "systemctl is-enabled kvprov-sglang-main").strip() == "enabled"
    state = sh(GPU1, "systemctl start kvprov-sglang-main; systemctl show -p ActiveState -p ConditionResult "
                     "-p NRestarts kvprov-sglang-main").split()
    assert sorted(state) == ["ActiveState=inactive", "ConditionResult=no", "NRestarts=0"]
    assert sh(GPU1, "stat -c '%U %a' /mnt/kvcache/kvlab-gpu1/main").split() == ["kvprov-engine", "750"]


def test_container_gets_the_local_profile(deployed):
    assert sh(C1, "stat -c %F /srv/kvcache; test ! -e /etc/systemd/system/mnt-kvcache.mount && echo no-mount-unit"
              ).split() == ["directory", "no-mount-unit"]
    assert "nixl-cu12==1.5.1" in sh(C1, "/opt/kvprov/nixl/bin/pip freeze")


def test_gds_required_fails_clearly_on_a_host_without_gpu(deployed, lab, tmp_path):
    data = yaml.safe_load(Path(lab["inventory"]).read_text())
    data["all"]["children"]["gpu_nodes"]["children"]["lab_containers"]["vars"]["kvprov_gds_mode"] = "required"
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    r, result = deploy(inventory, "--limit", "kvlab-c1", "--tags", "gds")
    assert r.returncode == 1
    assert "kvprov_gds_mode is 'required' but kvlab-c1 has no NVIDIA GPU" in r.stdout
    assert result["failures"][0]["host"] == "kvlab-c1"


def test_render_writes_what_deploy_wrote(deployed, lab, tmp_path):
    r = kvprov("render", lab["inventory"], "--out", str(tmp_path), "--host", "kvlab-gpu1", check=True)
    rendered = sorted(Path(p).relative_to(tmp_path / "kvlab-gpu1") for p in r.stdout.split())
    assert len(rendered) >= 6
    for rel in rendered:
        if str(rel) == "etc/cufile.json":
            continue  # written only on hosts with a GPU
        live = sh(GPU1, f"cat /{rel}")
        assert live == (tmp_path / "kvlab-gpu1" / rel).read_text(), f"/{rel} differs from its rendering"


def test_second_deploy_audits_clean_runs_nothing_and_a_full_one_changes_nothing(deployed, lab):
    """After a deploy the audit is clean, so a second deploy runs no playbook; --full runs it and
    changes nothing: what the audit calls clean, a full deploy leaves as it is."""
    r, result = deploy(lab["inventory"], "--limit", "kvlab-gpu1,kvlab-c1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert result["clean"] == ["kvlab-c1", "kvlab-gpu1"] and result["artifacts"] is None, result
    assert "audit of 2 host(s)" in r.stderr and "2 clean, 0 to converge" in r.stderr
    r, result = deploy(lab["inventory"], "--limit", "kvlab-gpu1,kvlab-c1", "--full")
    assert r.returncode == 0, r.stdout + r.stderr
    assert result["clean"] == [] and "auditing" not in r.stderr
    assert {h: s["changed"] for h, s in result["hosts"].items()} == {"kvlab-gpu1": 0, "kvlab-c1": 0}


def test_changed_mount_option_needs_allow_remount_and_an_idle_mount(deployed, lab, tmp_path):
    changed = with_var(lab["inventory"], tmp_path, kvprov_storage_rsize=131072)
    r, _ = deploy(changed, "--limit", "kvlab-gpu1", "--tags", "kvcache_mount")
    assert r.returncode == 1
    assert "rsize: live 262144, want 131072" in r.stdout and "--allow-remount" in r.stdout
    assert live_mount().opts["rsize"] == "262144"
    assert "rsize=262144" in sh(GPU1, "cat /etc/systemd/system/mnt-kvcache.mount")  # nothing written

    sh(GPU1, f"systemd-run --unit kvprov-test-busy --working-directory={MNT} sleep 600")
    try:
        r, _ = deploy(changed, "--limit", "kvlab-gpu1", "--tags", "kvcache_mount", "--allow-remount")
        assert r.returncode == 1
        assert "is in use by" in r.stdout and "(sleep)" in r.stdout
        assert live_mount().opts["rsize"] == "262144"
    finally:
        sh(GPU1, "systemctl stop kvprov-test-busy")

    # A running unit that requires the mount (as the engines do) would be restarted with it:
    # refused by name, unless --stop-engines, which stops it, remounts and starts it again.
    unit = "kvprov-test-dependent.service"
    sh(GPU1, f"printf '[Unit]\\nRequiresMountsFor={MNT}\\n[Service]\\nExecStart=/bin/sleep 600\\n' "
             f"> /etc/systemd/system/{unit} && systemctl daemon-reload && systemctl start {unit}")
    try:
        r, _ = deploy(changed, "--limit", "kvlab-gpu1", "--tags", "kvcache_mount", "--allow-remount")
        assert r.returncode == 1 and f"which are running: {unit}" in r.stdout and "--stop-engines" in r.stdout, r.stdout
        assert live_mount().opts["rsize"] == "262144"
        r, _ = deploy(changed, "--limit", "kvlab-gpu1", "--tags", "kvcache_mount", "--allow-remount", "--stop-engines")
        assert r.returncode == 0, r.stdout + r.stderr
        assert live_mount().opts["rsize"] == "131072"
        assert sh(GPU1, f"systemctl is-active {unit}").strip() == "active"  # started again after the remount
    finally:
        sh(GPU1, f"systemctl stop {unit}; rm -f /etc/systemd/system/{unit}; systemctl daemon-reload")
    r, _ = deploy(lab["inventory"], "--limit", "kvlab-gpu1", "--tags", "kvcache_mount", "--allow-remount")
    assert r.returncode == 0, r.stdout + r.stderr  # back to the lab's settings
    assert live_mount().opts["rsize"] == "262144"


def test_the_nfs_tcp_profile_is_a_remount_then_idempotent(deployed, lab, storage_alone, tmp_path):
    """The same roles serve plain NFS over TCP. Alone with the storage: while another mount of
    the export over RDMA is up on kvlab-gpu1 (the engines' cross-host test), the kernel would
    serve a TCP mount through that RDMA client (NFSv4.1 trunking)."""
    tcp = with_var(lab["inventory"], tmp_path, kvprov_storage_profile="nfs_tcp")
    r, _ = deploy(tcp, "--limit", "kvlab-gpu1", "--tags", "kvcache_mount", "--allow-remount")
    assert r.returncode == 0, r.stdout + r.stderr
    m = live_mount()
    assert m.opts["proto"] == "tcp" and m.opts.get("port", "2049") == "2049"  # the kernel hides the default port
    assert [t.protocol for t in m.transports] == ["tcp"] and m.opts["rsize"] == "262144"
    r, result = deploy(tcp, "--limit", "kvlab-gpu1", "--tags", "kvcache_mount")
    assert r.returncode == 0 and result["hosts"]["kvlab-gpu1"]["changed"] == 0, r.stdout + r.stderr
    # and back to the lab's settings
    r, _ = deploy(lab["inventory"], "--limit", "kvlab-gpu1", "--tags", "kvcache_mount", "--allow-remount")
    assert r.returncode == 0, r.stdout + r.stderr
    assert live_mount().opts["proto"] == "rdma" and live_mount().opts["rsize"] == "262144"


def test_systemd_on_the_gpu_node_enforces_the_engine_allow_list_kvprov_renders(deployed, tmp_path):
    """The engine's network fence (#24): an API beyond loopback gets IPAddressDeny=any and
    IPAddressAllow=localhost <kvprov_engine_clients>. The lab's containers cannot enforce it (no
    BPF cgroup firewall in nspawn); kvlab-gpu1's systemd can, but the VM runs no engine. So the
    [Service] fence of the vLLM unit kvprov renders is put on a stand-in server there
    (python3 -m http.server, labelled as such), and the storage VM (10.99.1.1, over the data
    link) calls it: refused when outside the clients, answered when they name it (the control)."""
    def fence(name: str, clients: list[str]) -> list[str]:
        (tmp_path / name).mkdir()
        out = render_one_host(tmp_path / name, "kvprov-lab-key-0123456789abcdef", kvprov_engine="vllm_baseline",
                              kvprov_engine_host="0.0.0.0", kvprov_engine_clients=clients)
        unit = (out / "etc/systemd/system/kvprov-vllm-main.service").read_text()
        lines = [line for line in unit.splitlines() if line.startswith(("IPAddressDeny=", "IPAddressAllow="))]
        assert lines[0] == "IPAddressDeny=any" and len(lines) == 2, lines
        return lines

    call = "python3 -c \"import urllib.request as u; u.urlopen('http://10.99.1.2:18999/', timeout=5)\""
    results = {}
    for name, clients in (("outside", ["10.99.7.0/24"]), ("admitted", ["10.99.1.1/32"])):
        unit = "\n".join(["[Service]", *fence(name, clients), "DynamicUser=yes",  # the unit file's own lines
                          "ExecStart=/usr/bin/python3 -m http.server 18999 --bind 0.0.0.0", ""])
        sh(GPU1, f"printf %s {shlex.quote(unit)} > /run/systemd/system/kvprov-test-fence.service && "
                 "systemctl daemon-reload && systemctl start kvprov-test-fence")
        try:
            assert sh(GPU1, "for i in $(seq 300); do ss -Hltn 'sport = :18999' | grep -q . && break; sleep 0.2; done; "
                            "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:18999/', "
                            "timeout=5).status)\"").strip() == "200"  # localhost: always admitted
            results[name] = ssh(*STORAGE, call, timeout=60).returncode
        finally:
            sh(GPU1, "systemctl stop kvprov-test-fence; rm /run/systemd/system/kvprov-test-fence.service; "
                     "systemctl daemon-reload")
    assert results["admitted"] == 0, "the control: the storage VM is named in the clients and must get through"
    assert results["outside"] != 0, "a client outside kvprov_engine_clients reached the port"
