"""Capacity on the lab (docs/capacity.md): kvprov-evict as deployed, for real, on a container.

vllm_offload (its fs tier never deletes a file) config-and-units-only on the second container
(free after test_2 and test_5), with a 4 MiB limit per instance: the instance directory is
filled past the mark as the engine user, with files of known ages, a link to a directory
outside and a link to a file outside, all older than anything inside; the evictor's service,
started once by hand, must bring the directory under the low mark (70% of the limit) by
removing the oldest files first, follow neither link, and say in the journal what it removed.
"""

import json
import shlex

import pytest
import yaml
from kvprov.lab import inventory
from kvprov.lab.ssh import ssh
from tests.conftest import kvprov

pytestmark = pytest.mark.lab

HOST, ADDR = "kvlab-c2", ("10.98.2.2", 22)
INST_DIR = f"/srv/kvcache/{HOST}/main"
OUTSIDE = f"/srv/kvcache/{HOST}-outside"  # the engine user's files, beside the instance's directory
LIMIT = 4 << 20
FILES, SIZE = 40, 256 << 10  # 10 MiB: past 85% of the limit
EVICT = "kvprov-evict-main.service"

# Run on the container as the engine user: FILES files of SIZE bytes, file i last used (atime
# and mtime) i minutes after a fixed start, then the links; prints nothing.
FILL = f"""
import os
d = {INST_DIR!r}
for i in range({FILES}):
    p = os.path.join(d, "page-%03d" % i)
    with open(p, "wb") as f:
        f.write(b"k" * {SIZE})
    os.utime(p, (1700000000 + 60 * i, 1700000000 + 60 * i))
os.symlink({OUTSIDE!r}, os.path.join(d, "zz-dir-link"))
os.symlink({OUTSIDE + "/victim"!r}, os.path.join(d, "zz-file-link"))
"""

# What is left: [name, allocated bytes] of every regular file (links not followed).
LIST = f"""
import json, os, stat
out = []
for e in os.scandir({INST_DIR!r}):
    st = e.stat(follow_symlinks=False)
    if stat.S_ISREG(st.st_mode) and e.name not in (".kvprov-evict.lock", ".kvprov-in-use"):  # the evictor's own
        out.append([e.name, st.st_blocks * 512])
print(json.dumps(sorted(out)))
"""


def sh(command: str, timeout: int = 60) -> str:
    r = ssh(*ADDR, command, timeout=timeout)
    assert r.returncode == 0, f"`{command}` on {HOST} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def as_engine(script: str) -> str:
    return sh(f"runuser -u kvprov-engine -- python3 -c {shlex.quote(script)}")


def test_the_evictor_keeps_the_directory_under_its_mark_oldest_first_and_follows_no_link(lab, tmp_path):
    data = inventory.build_engine(2)
    group = data["all"]["children"]["gpu_nodes"]["children"]["lab_engine"]
    group["vars"] = {k: v for k, v in group["vars"].items() if not k.startswith("kvprov_lmcache_mp_")}
    group["vars"].update({"kvprov_engine": "vllm_offload", "kvprov_engine_install": False,
                          "kvprov_vllm_offload_cpu_bytes_to_use": 1073741824, "kvprov_vllm_offload_block_size": 128,
                          "kvprov_engine_evict_max_bytes": LIMIT,
                          "kvprov_engine_storage_sharing": "instance"})  # the directory of one instance
    inv = tmp_path / "capacity.yml"
    inv.write_text(yaml.safe_dump(data, sort_keys=False))
    r = kvprov("deploy", str(inv), "--tags", "engine", timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert sh("systemctl is-enabled kvprov-evict-main.timer").strip() == "enabled"

    sh(f"rm -rf {INST_DIR}/* {OUTSIDE} && install -d -o kvprov-engine -g kvprov-engine -m 0750 {OUTSIDE} "
       f"&& install -o kvprov-engine -g kvprov-engine -m 0640 /dev/null {OUTSIDE}/victim "
       f"&& touch -d @1600000000 {OUTSIDE}/victim")
    as_engine(FILL)
    before = json.loads(as_engine(LIST))
    assert len(before) == FILES and sum(b for _, b in before) > LIMIT * 85 // 100

    since = sh("date +%s").strip()
    sh(f"systemctl start {EVICT}", timeout=120)  # a oneshot: returns when the run is over

    left = json.loads(as_engine(LIST))
    assert sum(b for _, b in left) <= LIMIT * 70 // 100, left
    names = [n for n, _ in left]
    assert names == [f"page-{i:03d}" for i in range(FILES - len(names), FILES)], names  # the newest stayed
    sh(f"test -f {OUTSIDE}/victim && test -L {INST_DIR}/zz-dir-link && test -L {INST_DIR}/zz-file-link")
    journal = sh(f"journalctl -u {EVICT} --since @{since} --no-pager -o cat")
    assert f"removed {FILES - len(names)} files" in journal and ">= 85% of 4.0 MiB" in journal, journal
    assert sh(f"systemctl show -p Result --value {EVICT}").strip() == "success"
