"""Faults on the lab, each bounded: two deploys at once, the controller killed in the middle
of a deploy, the NFS server gone during a deploy, the KV volume full during the acceptance
test, and links planted on the shared volume where the probe and the acceptance test write.
Runs on the deployed lab (after test_2_deploy) and leaves it as it found it."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kvprov.lab.ssh import ssh
from tests.conftest import ROOT, kvprov

pytestmark = pytest.mark.lab

GPU1 = ("127.0.0.1", 2221)
C1 = ("10.98.1.2", 22)
MNT = "/mnt/kvcache"
STORAGE = ("127.0.0.1", 2220)
TOML = "/etc/kvprov/nixl_backend_config.toml"
HOST_LOCK = "/run/kvprov/deploy.lock"
# Whatever a run may leave half-written: Ansible's temporary files and directories, ours.
LEFTOVERS = ("find /etc/kvprov /etc/systemd/system /var/lib/kvprov /root/.ansible/tmp -xdev "
             "\\( -name '.ansible_tmp*' -o -name 'ansible-tmp-*' -o -name '*.tmp' \\) -print 2>/dev/null; "
             f"ls {HOST_LOCK} 2>/dev/null; true")


def sh(host, command, timeout=120):
    r = ssh(*host, command, timeout=timeout)
    assert r.returncode == 0, f"`{command}` on {host} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def copy_inventory(lab, path: Path, gpu_vars: dict | None = None, container_vars: dict | None = None) -> Path:
    data = yaml.safe_load(Path(lab["inventory"]).read_text())
    groups = data["all"]["children"]["gpu_nodes"]["children"]
    groups["lab_gpu_vms"]["vars"].update(gpu_vars or {})
    groups["lab_containers"]["vars"].update(container_vars or {})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def start_deploy(inventory: Path, *args: str) -> subprocess.Popen:
    """`kvprov deploy` in its own process group, its progress readable line by line."""
    return subprocess.Popen([sys.executable, "-m", "kvprov", "deploy", str(inventory), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            start_new_session=True)


def read_until(proc: subprocess.Popen, *words: str, timeout: float = 600) -> list[str]:
    """The deploy's output up to the first line holding every word (in order of lines read)."""
    seen, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if all(w in line for w in words):
            return seen
    raise AssertionError(f"no line with {words} in the deploy's output:\n{''.join(seen[-40:])}")


def results_of(report: Path, host: str) -> dict:
    return {x["id"]: x for x in json.loads(report.read_text())["hosts"][host]["results"]}


def test_two_deploys_at_once_the_second_is_refused_naming_the_first(lab, tmp_path):
    inv = Path(lab["inventory"])
    first = start_deploy(inv, "--limit", "kvlab-c1", "--full")  # the host is clean: --full runs it
    try:
        read_until(first, "TASK", "Take the host's deploy lock")
        time.sleep(3)  # the first run holds the host lock now
        # the same inventory from this controller: the controller lock refuses it at once
        same = kvprov("deploy", str(inv), "--limit", "kvlab-c1", timeout=120)
        assert same.returncode == 6, same.stdout + same.stderr
        assert "`kvprov deploy` (pid" in same.stderr and "is changing these hosts" in same.stderr
        # another copy of the inventory (another controller, as far as the host can tell): the host lock
        other = kvprov("deploy", str(copy_inventory(lab, tmp_path / "elsewhere/inventory.yml")),
                       "--limit", "kvlab-c1", timeout=300)
        assert other.returncode == 6, other.stdout + other.stderr
        assert "`kvprov deploy` from" in other.stdout and str(inv.resolve()) in other.stdout
        assert "is changing this host" in other.stdout
    finally:
        out, _ = first.communicate(timeout=600)
    assert first.returncode == 0, out[-3000:]
    assert sh(C1, LEFTOVERS).strip() == ""


def test_controller_killed_in_the_middle_of_a_deploy_then_the_rerun_converges(lab, tmp_path):
    """Killed right after the NIXL TOML changed: the rerun takes over the host lock the killed
    run left, finishes the change, and nothing half-written stays."""
    inv = copy_inventory(lab, tmp_path / "inventory.yml",
                         container_vars={"kvprov_nixl_backend_options": {"use_direct_io": True}})
    before = sh(C1, f"cat {TOML}")
    run = start_deploy(inv, "--limit", "kvlab-c1")
    try:
        read_until(run, "TASK nixl", "Write")
        read_until(run, "changed: kvlab-c1")
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=60)
    assert sh(C1, f"cat {HOST_LOCK}"), "the killed run left its host lock"
    changed = sh(C1, f"cat {TOML}")
    assert changed != before and "use_direct_io = true" in changed  # written whole (write + rename), not half

    again = kvprov("deploy", str(inv), "--limit", "kvlab-c1", "--json", str(tmp_path / "again.json"), timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "took over the lock an interrupted run left" in again.stderr
    assert sh(C1, LEFTOVERS).strip() == ""
    audit = kvprov("audit", str(inv), "--limit", "kvlab-c1", timeout=300)
    assert audit.returncode == 0, audit.stdout[-3000:]  # converged: no drift from the inventory

    restore = kvprov("deploy", lab["inventory"], "--limit", "kvlab-c1", timeout=600)
    assert restore.returncode == 0, restore.stdout + restore.stderr
    assert sh(C1, f"cat {TOML}") == before


OUTAGE_UNIT = "/run/systemd/system/kvprov-test-outage.service"


def test_nfs_server_gone_during_a_deploy_fails_that_host_in_bounded_time_and_others_finish(lab, storage_alone, tmp_path):
    """An NFS mount whose server stops answering: the deploy tasks that touch it give up (the soft
    mount's EIO after timeo x (retrans + 1), or kvprov_storage_mount_timeout on a hard one) and say
    why; the other host (local profile) finishes. The testinfra probe of the mount gives up too.
    An engine unit started during the outage starts (#37): systemd sets up its namespace, whose
    ReadWritePaths= names the storage directory, on kvprov's soft,softreval mount. The unit is
    the deployed SGLang unit, hardened and confined as deployed, its process a sleep (no GPU here)."""
    inv = copy_inventory(lab, tmp_path / "inventory.yml", gpu_vars={"kvprov_storage_mount_timeout": 15})
    sh(GPU1, "sed -e '/^ConditionPathExistsGlob=/d' -e '/^ExecStartPre=/d' "
             "-e '/^ExecStart=/,/[^\\\\]$/c ExecStart=/bin/sleep infinity' "
             f"/etc/systemd/system/kvprov-sglang-main.service > {OUTAGE_UNIT} && systemctl daemon-reload")
    assert f"ReadWritePaths={MNT}/kvlab-gpu1/main " in sh(GPU1, f"cat {OUTAGE_UNIT}")
    sh(STORAGE, "systemctl stop nfs-server")
    try:
        t0 = time.monotonic()
        r = kvprov("deploy", str(inv), "--limit", "kvlab-gpu1,kvlab-c1", "--tags", "engine", "--full",
                   "--json", str(tmp_path / "deploy.json"), timeout=600)
        seconds = time.monotonic() - t0
        infra = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                                "--hosts=ansible://kvlab-gpu1", f"--ansible-inventory={inv}", "--kvprov-timeout=5",
                                "--pyargs", "kvprov.checks", "-k", "storage_dirs"],
                               capture_output=True, text=True, cwd=tmp_path, timeout=300)
        # no cached answers: the directory's own calls fail, the unit starts all the same
        statfs = ssh(*GPU1, f"sync; echo 3 > /proc/sys/vm/drop_caches; timeout 60 stat -f {MNT}/kvlab-gpu1/main",
                     timeout=90)
        t0 = time.monotonic()
        started = ssh(*GPU1, "timeout 150 systemctl start kvprov-test-outage; systemctl is-active kvprov-test-outage",
                      timeout=180)
        start_seconds = time.monotonic() - t0
    finally:
        sh(STORAGE, "systemctl start nfs-server")
        sh(GPU1, f"systemctl stop kvprov-test-outage; rm -f {OUTAGE_UNIT}; systemctl daemon-reload")
    print(f"engine unit started during the outage in {start_seconds:.1f}s")
    assert statfs.returncode != 0 and "Input/output error" in statfs.stderr, statfs
    assert started.stdout.strip() == "active" and start_seconds < 120, (started, start_seconds)
    result = json.loads((tmp_path / "deploy.json").read_text())
    assert r.returncode == 1, r.stdout + r.stderr
    assert result["hosts"]["kvlab-c1"]["failed"] == 0 and result["hosts"]["kvlab-gpu1"]["failed"] == 1
    [failure] = result["failures"]
    assert failure["host"] == "kvlab-gpu1" and any(
        why in failure["message"].lower() for why in ("timed out", "input/output error")), failure
    print(f"deploy with the NFS server gone: {seconds:.0f}s")
    assert infra.returncode == 1 and "did not finish within 5s: the KV mount does not answer" in infra.stdout, \
        infra.stdout[-3000:]
    sh(GPU1, "timeout 120 ls /mnt/kvcache/kvlab-gpu1 >/dev/null")  # the mount recovers with its server
    assert sh(GPU1, LEFTOVERS).strip() == ""


def test_kv_volume_full_during_the_acceptance_test_fails_clearly_and_leaves_nothing(lab, storage_alone, tmp_path):
    free = int(sh(STORAGE, "df -B1 --output=avail /kv | tail -1"))
    sh(STORAGE, f"fallocate -l {free - (8 << 20)} /kv/kvprov-test-fill")  # ours: 8 MiB stay free
    try:
        r = kvprov("bench", lab["inventory"], "--limit", "kvlab-gpu1", "--bench-seconds", "3",
                   "--json", str(tmp_path / "bench.json"), timeout=600)
        after = sh(STORAGE, "find /kv/kvlab-gpu1 -mindepth 1 -not -path '/kv/kvlab-gpu1/main*'")
    finally:
        sh(STORAGE, "rm -f /kv/kvprov-test-fill")
    assert r.returncode == 1, r.stdout + r.stderr
    run = results_of(tmp_path / "bench.json", "kvlab-gpu1")["bench.run"]
    assert run["status"] == "fail" and "No space left on device" in run["found"], run
    assert after.strip() == "", f"the acceptance test left files behind:\n{after}"


def test_links_planted_on_the_volume_where_probe_and_bench_write_touch_nothing_outside(lab, tmp_path):
    """Root on a peer (or anyone who can write the export) plants links where this host's
    probe, acceptance test and engine storage directory go: validate and deploy refuse them
    and the targets stay untouched."""
    victim = "/root/kvprov-victim"
    sh(GPU1, f"mkdir -p {victim} && echo keep > {victim}/file && chmod 0644 {victim}/file")
    listing = f"find {victim} -printf '%p %s %m %u %T@\\n' | sort"
    before = sh(GPU1, listing)
    # Planted through the mount itself, as a peer would (a change made on the server directly
    # reaches this client only when its NFS attribute cache expires).
    sh(GPU1, f"cd {MNT} && rm -rf .kvprov-kvlab-gpu1 && ln -s {victim} .kvprov-kvlab-gpu1 && "
             f"mv kvlab-gpu1 kvlab-gpu1.kvprov-test && ln -s {victim} kvlab-gpu1")
    try:
        r = kvprov("validate", lab["inventory"], "--limit", "kvlab-gpu1", "--bench-seconds", "3",
                   "--json", str(tmp_path / "validate.json"), timeout=900)
        # deploy walks each storage directory's path from the mount point without following a link
        # (#24): the engine's <mount>/kvlab-gpu1/<instance> is refused at the planted link
        d = kvprov("deploy", lab["inventory"], "--limit", "kvlab-gpu1", "--tags", "engine", timeout=1200)
    finally:
        sh(GPU1, f"cd {MNT} && rm -f .kvprov-kvlab-gpu1 kvlab-gpu1 && mv kvlab-gpu1.kvprov-test kvlab-gpu1")
    after = sh(GPU1, listing)
    sh(GPU1, f"rm -rf {victim}")
    assert after == before, f"a planted link was followed:\n{before}\n---\n{after}"
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    results = results_of(tmp_path / "validate.json", "kvlab-gpu1")
    assert results["mount.io_probe"]["status"] == "fail" and "a link" in results["mount.io_probe"]["found"]
    assert results["bench.run"]["status"] == "fail" and "is a symbolic link" in results["bench.run"]["found"]
    assert d.returncode != 0 and f"{MNT}/kvlab-gpu1 is a symbolic link: on the shared KV volume" in d.stdout, (
        d.stdout[-3000:] + d.stderr[-2000:])


def test_a_link_the_engine_user_puts_in_its_home_is_refused_by_deploy_and_its_target_keeps_its_owner(lab):
    """#38: the engine's home is the engine user's, so a compromised engine can replace its work
    directory with a link to a root-owned directory (/etc). The next deploy refuses the link,
    naming it, and hands nothing to the engine user; deploy after the link is gone converges."""
    home, victim = "/var/lib/kvprov-engine", "/root/kvprov-victim-home"
    sh(GPU1, f"mkdir -p {victim} && chmod 0755 {victim} && echo keep > {victim}/file")
    listing = f"find {victim} -printf '%p %m %u %g\n' | sort"
    before = sh(GPU1, listing)
    # as the engine user would (its own home): the link is the engine user's
    sh(GPU1, f"cd {home} && mv main main.kvprov-test && ln -s {victim} main && chown -h kvprov-engine: main")
    try:
        d = kvprov("deploy", lab["inventory"], "--limit", "kvlab-gpu1", "--tags", "engine", timeout=1200)
        after = sh(GPU1, listing)
    finally:
        sh(GPU1, f"cd {home} && rm -f main && mv main.kvprov-test main")
    sh(GPU1, f"rm -rf {victim}")
    assert after == before, f"deploy followed the engine's link:\n{before}\n---\n{after}"
    assert d.returncode != 0 and f"{home}/main" in d.stdout and "already exists as a link" in d.stdout, (
        d.stdout[-3000:] + d.stderr[-2000:])


def test_unreachable_and_failing_hosts_are_summarised_by_reason_and_rerun_from_the_retry_file(lab, tmp_path):
    """Partial failure, in small: kvlab-c3 unreachable (a closed port in a copy of the
    inventory), kvlab-c2 failing a task (a lock another controller holds, planted by this
    test), kvlab-c1 fine. The others finish, each reason is one line naming its hosts, the
    exit code is 3 (unreachable), the retry file names exactly c2 and c3, and `--limit @FILE`
    reruns exactly those."""
    inv = copy_inventory(lab, tmp_path / "partial/inventory.yml")
    data = yaml.safe_load(inv.read_text())
    data["all"]["children"]["gpu_nodes"]["children"]["lab_containers"]["hosts"]["kvlab-c3"]["ansible_port"] = 1
    inv.write_text(yaml.safe_dump(data, sort_keys=False))
    c2 = ("10.98.2.2", 22)
    planted = json.dumps({"owner": "kvprov-test-other-controller:/srv/inventory.yml", "command": "kvprov deploy",
                          "run_id": "planted-by-test", "since": "now"})
    sh(c2, f"test ! -e {HOST_LOCK} && mkdir -p -m 0700 /run/kvprov && printf '%s' '{planted}' > {HOST_LOCK}")
    try:
        r = kvprov("deploy", str(inv), "--limit", "kvlab-c1,kvlab-c2,kvlab-c3", "--full",
                   "--json", str(tmp_path / "r.json"), timeout=900)
    finally:
        sh(c2, f"grep -q planted-by-test {HOST_LOCK} && rm {HOST_LOCK}")  # only the lock this test planted
    assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-2000:]
    hosts = json.loads((tmp_path / "r.json").read_text())["hosts"]
    assert hosts["kvlab-c1"]["failed"] == hosts["kvlab-c1"]["unreachable"] == 0, hosts
    lines = r.stdout.splitlines()
    unreachable = [ln for ln in lines if ln.startswith("unreachable (1 host): ")]
    refused = [ln for ln in lines if "(1 host): " in ln and "is changing this host" in ln]
    assert len(unreachable) == 1 and unreachable[0].endswith("\u2014 kvlab-c3"), r.stdout[-3000:]
    assert len(refused) == 1 and refused[0].endswith("\u2014 kvlab-c2"), r.stdout[-3000:]
    assert "kvprov-test-other-controller" in refused[0]
    [retry] = [ln.rsplit("@", 1)[1] for ln in lines if ln.startswith("rerun the failed hosts: kvprov deploy ")]
    assert Path(retry).read_text() == "kvlab-c2\nkvlab-c3\n"

    rerun = kvprov("deploy", lab["inventory"], "--limit", f"@{retry}", "--json", str(tmp_path / "rerun.json"),
                   timeout=900)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-2000:]
    assert sorted(json.loads((tmp_path / "rerun.json").read_text())["hosts"]) == ["kvlab-c2", "kvlab-c3"]
