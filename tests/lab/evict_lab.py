"""Two hosts' evictors on one namespace, for a lab test (not collected: no test_ prefix).

`contend(ssh_a, ssh_b, directory)` plants files in a directory both hosts see (a shared
namespace), some of them read a minute ago, and makes the two hosts contend by construction:
host B holds the lease while host A's evictor starts (A must be turned away); then it starts
kvprov-evict on both hosts at the same instant (each sleeps until one agreed epoch second, then
execs the evictor as the engine user) and returns what each did, parsed from its output, and
what is left. A lab test then asserts:

    r = contend(ssh_c1, ssh_c2, "/srv/kvcache/kv/vllm_offload/tiny")
    assert r["a"]["rc"] == 0 and r["b"]["rc"] == 0, r
    assert not r["overlap"], r                      # never at once
    assert r["contended"], r                        # A turned away while B held the lease
    assert r["recent_kept"] == r["recent"], r       # nothing read within the guard time removed
    assert r["under_quota"], r                      # the namespace under its quota's low mark

ssh_a / ssh_b: callables taking one shell command string and returning (rc, stdout, stderr);
they run as root on each host (the commands drop to `user` with runuser). The hosts' clocks
must agree to well under `start_in` (containers share the host's; VMs run chrony). The engine
user must have the same uid on both hosts: the directory and the lease file are its.
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from typing import Callable

Ssh = Callable[[str], "tuple[int, str, str]"]

LEASE = ".kvprov-evict.lock"
T0 = 1_700_000_000  # planted file i was last used at T0 + 60 i: long before any guard time (2023)

# As the engine user on host A: `files` files of `size` bytes written long ago, the first `recent`
# of them the oldest writes of all but read a minute ago (atime now - 60 s: an LRU by write time
# alone would take them first), and `bulk` one-byte files in bulk/ written before the others, so
# that a run removes many of them and lasts long enough for the two evictors to meet. Prints
# the recently read names.
PLANT = """
import json, os, sys, time
d, files, size, recent, bulk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
now = time.time()
names = []
for i in range(files):
    p = os.path.join(d, "page-%04d" % i)
    with open(p, "wb") as f:
        f.write(b"k" * size)
    os.utime(p, (now - 60, T0 - 10**6) if i < recent else (T0 + 60 * i, T0 + 60 * i))
    names.append(p)
os.makedirs(os.path.join(d, "bulk"), exist_ok=True)
for i in range(bulk):
    p = os.path.join(d, "bulk", "b-%05d" % i)
    with open(p, "wb") as f:
        f.write(b"b")
    os.utime(p, (T0 - 10**5 + i, T0 - 10**5 + i))
print(json.dumps({"recent": [os.path.basename(n) for n in names[:recent]], "now": now}))
""".replace("T0", str(T0))

# Every regular file below the directory (links not followed, the evictor's own lease and
# last-use marker left out):
# {relative path: [allocated bytes, atime, mtime]}.
LIST = """
import json, os, stat, sys
d, out = sys.argv[1], {}
for root, dirs, files in os.walk(d):
    for n in files:
        p = os.path.join(root, n)
        st = os.lstat(p)
        if stat.S_ISREG(st.st_mode) and os.path.relpath(p, d) not in %r:
            out[os.path.relpath(p, d)] = [st.st_blocks * 512, st.st_atime, st.st_mtime]
print(json.dumps(out))
""" % ((LEASE, ".kvprov-in-use"),)

# Hold DIR's lease as an evictor does (an fcntl lock on the lease file, opened without following a
# link) until the release file exists (at most `limit` seconds); the held file says it is taken.
HOLD = """
import fcntl, os, sys, time
d, lease, held, release, limit = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
fd = os.open(os.path.join(d, lease), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
fcntl.lockf(fd, fcntl.LOCK_EX)
open(held, "w").close()
end = time.time() + limit
while not os.path.exists(release) and time.time() < end:
    time.sleep(0.1)
os.close(fd)
print("released")
"""

# Sleep until the agreed instant, then become the evictor (same process: no extra start-up).
GO = """
import os, sys, time
at, argv = float(sys.argv[1]), sys.argv[2:]
time.sleep(max(0.0, at - time.time()))
os.execv(argv[0], argv)
"""


def _py(user: str, script: str, *args: str) -> str:
    return "runuser -u {} -- python3 -c {} {}".format(
        shlex.quote(user), shlex.quote(script), " ".join(shlex.quote(a) for a in args))


def _checked(ssh: Ssh, command: str, what: str) -> str:
    rc, out, err = ssh(command)
    if rc != 0:
        raise RuntimeError(f"{what}: `{command[:200]}` -> {rc}\n{out[-2000:]}\n{err[-2000:]}")
    return out


def parse(out: str) -> dict:
    """What one evictor run said (kvprov-evict's own lines): held (start, end) epoch seconds or
    None, refused (another evictor held the lease), removed (files), under_marks."""
    held, removed = None, 0
    for line in out.splitlines():
        if "released the lease, held " in line:
            a, b = line.split("released the lease, held ", 1)[1].split(" (", 1)[0].split(" to ")
            held = (float(a), float(b))
        if ": removed " in line:
            removed += int(line.split(": removed ", 1)[1].split()[0])
    return {"held": held, "refused": "another evictor holds the lease" in out, "removed": removed,
            "under_marks": ": under the marks " in out}


def _turned_away(ssh_a: Ssh, ssh_b: Ssh, user: str, directory: str, argv: list[str]) -> bool:
    """Host B holds the lease (HOLD) while host A's evictor runs: whether A said another evictor
    holds it (and did nothing). Contention by construction, not by two starts meeting in time."""
    held, release = "/tmp/kvprov-evict-test-held", "/tmp/kvprov-evict-test-release"
    _checked(ssh_b, f"rm -f {held} {release}", "clear the hold markers")
    holder: dict = {}
    t = threading.Thread(target=lambda: holder.update(r=ssh_b(_py(user, HOLD, directory, LEASE, held, release, "120"))))
    t.start()
    try:
        end = time.time() + 60
        while ssh_b(f"test -e {held}")[0] != 0:
            if time.time() > end or not t.is_alive():
                raise RuntimeError(f"host B could not take the lease of {directory}: {holder.get('r')}")
            time.sleep(0.2)
        rc, out, err = ssh_a(_py(user, GO, "0", *argv))
        if rc != 0:
            raise RuntimeError(f"host A's evictor under a held lease -> {rc}\n{out[-2000:]}\n{err[-2000:]}")
        result = parse(out)
        return result["refused"] and result["held"] is None and result["removed"] == 0
    finally:
        ssh_b(f"touch {release}")
        t.join(150)
        ssh_b(f"rm -f {held} {release}")


def contend(ssh_a: Ssh, ssh_b: Ssh, directory: str, *, user: str = "kvprov-engine",
            evictor: str = "/usr/local/sbin/kvprov-evict", files: int = 40, size: int = 256 << 10,
            recent: int = 3, bulk: int = 3000, max_bytes: int | None = None, high: int = 85, low: int = 70,
            keep_minutes: int = 60, start_in: float = 3.0, timeout: float = 600.0) -> dict:
    """Plant files in `directory` (from host A, after removing what was there), run both hosts'
    evictors at one instant with the quota `max_bytes` (default: what was planted, i.e. 100 %
    of it, past `high`, down to `low`), and return:
      a, b: {rc, stdout, stderr, held, refused, removed, under_marks} per host (parse());
      overlap: both held the lease and the two intervals overlap (must never be true);
      contended: one of them was turned away by the lease (they did run at the same time);
      recent: the files read within the guard time; recent_kept: those of them still there;
      planted_bytes, quota, low_bytes (low % of the quota), left_bytes, under_quota;
      removed_total: files gone (from the listings), removed_said: what the runs said.
    """
    q = shlex.quote(directory)
    _checked(ssh_a, f"find {q} -mindepth 1 -maxdepth 1 ! -name {shlex.quote(LEASE)} -exec rm -rf {{}} +",
             "empty the directory")
    planted = json.loads(_checked(ssh_a, _py(user, PLANT, directory, str(files), str(size), str(recent), str(bulk)),
                                  "plant the files"))
    before = json.loads(_checked(ssh_a, _py(user, LIST, directory), "list the directory"))
    planted_bytes = sum(v[0] for v in before.values())
    quota = planted_bytes if max_bytes is None else max_bytes
    seen_b = json.loads(_checked(ssh_b, _py(user, LIST, directory), "list the directory from host B"))
    if set(seen_b) != set(before):
        raise RuntimeError(f"host B does not see what host A planted in {directory}: "
                           f"{len(seen_b)} files there, {len(before)} planted")

    argv = [evictor, "--high-percent", str(high), "--low-percent", str(low), "--max-bytes", str(quota),
            "--keep-minutes", str(keep_minutes), directory]
    turned_away = _turned_away(ssh_a, ssh_b, user, directory, argv)

    rc, now, _ = ssh_a("date +%s.%N")
    at = (float(now) if rc == 0 else time.time()) + start_in
    results: dict[str, tuple[int, str, str]] = {}

    def run(name: str, ssh: Ssh) -> None:
        try:
            results[name] = ssh(_py(user, GO, f"{at:.3f}", *argv))
        except Exception as e:  # reported, not raised in the thread
            results[name] = (-1, "", f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=run, args=(n, s)) for n, s in (("a", ssh_a), ("b", ssh_b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    out: dict = {}
    for name in ("a", "b"):
        rc, so, se = results.get(name, (-1, "", "did not finish in time"))
        out[name] = {"rc": rc, "stdout": so, "stderr": se, **parse(so)}

    after = json.loads(_checked(ssh_a, _py(user, LIST, directory), "list the directory after"))
    ha, hb = out["a"]["held"], out["b"]["held"]
    left_bytes = sum(v[0] for v in after.values())
    out.update({
        "overlap": bool(ha and hb and ha[0] < hb[1] and hb[0] < ha[1]),
        "contended": turned_away,
        "recent": planted["recent"],
        "recent_kept": [n for n in planted["recent"] if n in after],
        "planted_bytes": planted_bytes,
        "quota": quota,
        "low_bytes": quota * low // 100,
        "left_bytes": left_bytes,
        "under_quota": left_bytes <= quota * low // 100,
        "removed_total": len(set(before) - set(after)),
        "removed_said": out["a"]["removed"] + out["b"]["removed"],
    })
    return out
