#!/usr/bin/python
"""Ansible module: capture one host's KV-cache tier as a validation bundle (docs/bundle.md).

Stdlib only. Everything that could block on a hard NFS mount that lost its server (I/O,
stat, the NIXL probe) runs in a child process under a timeout; a child stuck in the
kernel is abandoned, never waited for. Returns {"files": {bundle name: text}}; the
controller writes them, and desired.json (which this module never sees whole: its
arguments travel to the target in its text), to DIR/<host>/.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: kvprov_collect
short_description: Capture the live KV-cache tier state of a host for kvprov validate
description:
  - Captures one host's KV-cache tier as the files of a validation bundle (kvprov docs/bundle.md), stdlib only.
  - Whatever could block on a hard NFS mount runs in a child process under a timeout.
author: kvprov maintainers (!UNKNOWN)
options:
  desired:
    type: dict
    required: true
    description: >-
      what to probe: desired.json without the managed files' content (`files` is the list of
      their paths). Module arguments travel to the target in the module's text, so no file
      content is ever passed; the controller writes desired.json into the bundle.
  probes: {type: bool, default: true, description: "false: no I/O probe, NIXL probe, gdscheck or health call (audit)"}
  io_bytes: {type: int, default: 4194304, description: size of the I/O probe file}
  timeout: {type: int, default: 30, description: seconds for each probe}
  kvprov_version: {type: str, default: unknown, description: the collecting kvprov's version}
  restart_pending_dir:
    type: str
    description: >-
      where deploy notes the engine restarts it owes (the engine role's restart-pending
      directory): its entries are listed as restart_pending.json (default: the desired
      state's engine.restart_pending_dir)
attributes:
  check_mode:
    description: Runs as in a normal run and never reports a change.
    support: partial
    details: >-
      The module does not read Ansible's check-mode flag. With O(probes=true) the I/O probe writes a
      file into a root-only C(.kvprov-<host>) directory at the mount root (made if missing) and
      removes it, as in a normal run; with O(probes=false) it writes nothing.
  diff_mode:
    description: No diff.
    support: none
  platform:
    description: Linux (C(/proc), C(systemctl), C(runuser)); the host's Python runs it, standard library only.
    support: full
    platforms: posix
"""

EXAMPLES = r"""
- name: Probe the live state
  kvprov.kvprov.kvprov_collect:
    desired: "{{ kvprov_desired | combine({'files': kvprov_desired.files.keys() | sort}) }}"
    probes: false
"""

RETURN = r"""
files:
  description:
    - The bundle's files (kvprov docs/bundle.md) for this host, by their name in its bundle directory, each with its text.
    - C(collect.json) lists the files that could not be captured (C(errors)) or were not looked for (C(skipped)), with why.
    - The controller writes them, and C(desired.json), to C(DIR/<host>/).
  returned: success
  type: dict
  sample:
    collect.json: >-
      {"format": 4, "host": "gpu1", "time": "2026-01-01T00:00:00Z", "kvprov_version": "0.2.0",
      "errors": {}, "skipped": {"gdscheck.txt": "no NVIDIA GPU"}}
    proc/mountinfo: "..."
    files/etc/systemd/system/kvprov-vllm-main.service: "..."
    systemctl/kvprov-vllm-main.service.txt: "..."
"""

import grp
import json
import os
import pwd
import re
import subprocess
import sys
import time

FORMAT = 4  # collect.json's; 4: /etc/fstab filtered and redacted, desired.json written by the controller

# The bundle's file names (docs/bundle.md), each spelled once: this module writes them and
# kvprov/validate/bundle.py, which loads this file, reads them (this module travels to the host
# alone, stdlib only, so the list lives here). desired.json is the controller's.
FILE_COLLECT = "collect.json"
FILE_MOUNTINFO = "proc/mountinfo"
FILE_MOUNTSTATS = "proc/mountstats"
FILE_MODULES = "proc/modules"
FILE_RDMA_LINK = "rdma_link.txt"
FILE_IP_ADDR = "ip_addr.txt"
FILE_IO_PROBE = "io_probe.json"
# What a soft NFS mount answers when its server does not (EIO; ETIMEDOUT with softerr); validate reads it too.
NOT_ANSWERING = re.compile(r"\[Errno (5|110)\]")
FILE_GDSCHECK = "gdscheck.txt"
FILE_GPU = "gpu.json"
FILE_CUFILE = "cufile.json"
FILE_UDEV = "udev.json"
FILE_NIXL_PROBE = "nixl_probe.json"
FILE_STORAGE_DIRS = "storage_dirs.json"
FILE_HEALTH = "health.json"
FILE_PACKAGES = "packages.txt"
FILE_MANAGED_DIRS = "managed_dirs.json"
FILE_FILE_MODES = "file_modes.json"
FILE_RESTART_PENDING = "restart_pending.json"
FILE_DEPLOY_LOCK = "deploy_lock.json"
FILE_VENVS = "venvs.json"
FILE_DIR_MODES = "dir_modes.json"
FILE_ENGINE_USER = "engine_user.json"
FILE_NAMESPACES = "namespaces.json"
DIR_FILES = "files"  # files/<absolute path>: live copies of the managed files
DIR_SYSTEMCTL = "systemctl"  # systemctl/<unit>.txt, systemctl/<unit>.cmdline.json
DIR_METRICS = "metrics"  # metrics/<instance>.txt, metrics/<instance>-server.txt
MAX_FILE = 1 << 20
# A credential-like name (kvprov.redact.SECRET_NAME; a unit test keeps the two equal).
SECRET_NAME = r"[A-Za-z0-9_.-]*(?:pass|secret|token|key|cred)[A-Za-z0-9_.-]*"

NIXL_PROBE = r"""
import json, sys
out = {"import_ok": False, "version": None, "plugins": [], "backend": sys.argv[1], "backend_ok": False, "error": None}
try:
    from importlib.metadata import version
    from nixl._api import nixl_agent, nixl_agent_config
    out["import_ok"] = True
    out["version"] = version("nixl")
    agent = nixl_agent("kvprov-validate", nixl_agent_config(backends=[]))
    out["plugins"] = sorted(agent.get_plugin_list())
    agent.create_backend(sys.argv[1], {})
    out["backend_ok"] = True
except Exception as e:  # report, never raise: this is a probe
    out["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""

# The probe runs as root on a volume other hosts (and anyone who can write the export) share:
# it never follows a link. Its file gets a random name, created exclusively, inside a root-owned
# 0700 directory of this host at the mount root, and is removed relative to that directory.
IO_PROBE = r"""
import json, os, secrets, stat, sys, time
mp, host, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
t0 = time.monotonic()
d = os.path.join(mp, ".kvprov-" + host)
try:
    os.mkdir(d, 0o700)
except FileExistsError:
    pass
st = os.lstat(d)
if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or stat.S_IMODE(st.st_mode) & 0o077:
    sys.exit(f"{d} is not a root-owned 0700 directory (a link or someone else's): refusing to write there")
dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
name = "probe-" + secrets.token_hex(8)
buf = os.urandom(size)
same = False
try:
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
    try:
        os.write(fd, buf)
        os.fsync(fd)
    finally:
        os.close(fd)
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_DIRECT", 0), dir_fd=dfd)
    try:
        import mmap
        m = mmap.mmap(-1, size)  # page-aligned buffer for O_DIRECT
        got = os.readv(fd, [m])
        same = got == size and m[:] == buf
    finally:
        os.close(fd)
finally:
    try:
        os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:
        pass
    os.close(dfd)
print(json.dumps({"ok": same, "seconds": round(time.monotonic() - t0, 3), "error": None if same else "read back differs",
                  "path": os.path.join(d, name)}))
"""

STAT_PROBE = r"""
import grp, json, os, pwd, stat, sys
out = {}
for path in sys.argv[1:]:
    e = {"path": path, "exists": False, "is_dir": False, "is_link": False, "owner": None, "group": None, "mode": None, "error": None}
    try:
        st = os.lstat(path)  # a link is not the directory it names
        e.update(exists=True, is_dir=stat.S_ISDIR(st.st_mode), is_link=stat.S_ISLNK(st.st_mode), mode=format(stat.S_IMODE(st.st_mode), "04o"))
        try: e["owner"] = pwd.getpwuid(st.st_uid).pw_name
        except KeyError: e["owner"] = str(st.st_uid)
        try: e["group"] = grp.getgrgid(st.st_gid).gr_name
        except KeyError: e["group"] = str(st.st_gid)
    except FileNotFoundError:
        pass
    except OSError as err:
        e["error"] = str(err)
    out[path] = e
print(json.dumps(out))
"""

# The walk USAGE_PROBE and NAMESPACES_PROBE share: a directory's size on a shared volume, never
# through a link (O_NOFOLLOW, lstat), on that filesystem only, one open directory per level. A
# directory too large to walk within argv[1] seconds gives the figures so far, marked incomplete
# (the parent's timeout, a little longer, catches a hung mount).
WALK = r"""
import json, os, re, stat, sys, time
deadline = time.monotonic() + float(sys.argv[1])
FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
def walk(fd, dev, acc):
    with os.scandir(fd) as it:
        entries = list(it)
    for e in entries:
        if time.monotonic() > deadline:
            acc["complete"] = False
            return
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            acc["unreadable"] += 1
            continue
        if stat.S_ISDIR(st.st_mode):
            if st.st_dev != dev:
                continue
            try:
                child = os.open(e.name, FLAGS, dir_fd=fd)
            except OSError:
                acc["unreadable"] += 1
                continue
            try:
                walk(child, dev, acc)
            except OSError:
                acc["unreadable"] += 1
            finally:
                os.close(child)
        else:
            acc["bytes"] += st.st_blocks * 512
            acc["files"] += 1
def size(fd):
    acc = {"bytes": 0, "files": 0, "unreadable": 0, "complete": time.monotonic() <= deadline}
    if acc["complete"]:
        walk(fd, os.fstat(fd).st_dev, acc)
    return acc
"""

# The volume's use (statvfs, as df counts it) and each instance directory's size (WALK).
USAGE_PROBE = WALK + r"""
out = {}
try:
    v = os.statvfs(sys.argv[2])
    unit = v.f_frsize or v.f_bsize
    used = (v.f_blocks - v.f_bfree) * unit
    out[sys.argv[2]] = {"size_bytes": used + v.f_bavail * unit, "used_bytes": used, "avail_bytes": v.f_bavail * unit,
                        "inodes": v.f_files, "inodes_used": v.f_files - v.f_ffree}
except OSError as err:
    out[sys.argv[2]] = {"error": str(err)}
for path in sys.argv[3:]:
    try:
        fd = os.open(path, FLAGS)
        try:
            acc = size(fd)
        finally:
            os.close(fd)
    except OSError as err:
        acc = {"error": str(err)}
    out[path] = acc
print(json.dumps(out))
"""

# A model's namespaces on the volume (#37): for each shared namespace DIR the host uses (argv[3:]),
# its siblings in DIR's parent named like it, PREFIX-<12 hex> (argv[2], the evictor's pattern), and
# DIR itself; each with its .kvprov-in-use mtime (the last run of any host's evictor for it) and,
# but for the host's own (measured by USAGE_PROBE), its size (WALK, one deadline for all). A
# sibling that is a link is listed, never followed; one on another filesystem is listed, not
# walked; anything else (a file named so) is not listed.
NAMESPACES_PROBE = WALK + r"""
IN_USE = ".kvprov-in-use"
mine = {os.path.normpath(p) for p in sys.argv[3:]}
out = {}
for path in sorted(mine):
    parent, own = os.path.split(path)
    m = re.fullmatch(sys.argv[2], own)
    entry = {"listed_at": time.time(), "namespaces": {}}
    try:
        top = os.open(parent, FLAGS)
        try:
            dev = os.fstat(top).st_dev
            with os.scandir(top) as it:
                names = sorted(e.name for e in it)
            for name in names:
                n = re.fullmatch(sys.argv[2], name)
                if not (m and n and n.group(1) == m.group(1)):
                    continue
                e = {"current": os.path.join(parent, name) in mine, "skipped": None, "in_use": None, "usage": None}
                try:
                    st = os.stat(name, dir_fd=top, follow_symlinks=False)
                except OSError as err:
                    e["usage"] = {"error": str(err)}
                    entry["namespaces"][name] = e
                    continue
                if stat.S_ISLNK(st.st_mode):
                    e["skipped"] = "a link, not followed"
                elif not stat.S_ISDIR(st.st_mode):
                    continue
                elif st.st_dev != dev:
                    e["skipped"] = "on another filesystem, not walked"
                else:
                    try:
                        fd = os.open(name, FLAGS, dir_fd=top)
                    except OSError as err:
                        e["usage"] = {"error": str(err)}
                    else:
                        try:
                            if os.fstat(fd).st_dev != dev:
                                e["skipped"] = "on another filesystem, not walked"
                            else:
                                try:
                                    mark = os.stat(IN_USE, dir_fd=fd, follow_symlinks=False)
                                    e["in_use"] = mark.st_mtime if stat.S_ISREG(mark.st_mode) else None
                                except OSError:
                                    pass
                                if not e["current"]:
                                    try:
                                        e["usage"] = size(fd)
                                    except OSError as err:
                                        e["usage"] = {"error": str(err)}
                        finally:
                            os.close(fd)
                entry["namespaces"][name] = e
        finally:
            os.close(top)
    except OSError as err:
        entry = {"error": str(err)}
    out[path] = entry
print(json.dumps(out))
"""
# A shared namespace's directory name: PREFIX-<12 hex fingerprint> (kvprov/namespace.py, the evictor's FINGERPRINTED).
FINGERPRINTED = r"(.+)-[0-9a-f]{12}"


def run(cmd: list, timeout: float, stdin: str | None = None) -> tuple:
    """(rc, stdout, stderr, timed_out). A child that will not die is left behind."""
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    except OSError as e:
        return 127, "", str(e), False
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
        return proc.returncode, out, err, False
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            proc.communicate(timeout=2)
        except subprocess.TimeoutExpired:
            pass  # stuck in the kernel (a hung hard mount): abandon it
        return -9, "", f"timed out after {timeout}s", True


def read(path: str, limit: int = MAX_FILE) -> str:
    with open(path, "rb") as fh:
        return fh.read(limit).decode(errors="replace")


def mount_of(path: str, mountinfo: str) -> dict:
    """The mount (longest mount point prefix) holding `path`, from mountinfo text alone."""
    best = {"mount": None, "fstype": None, "device": None, "dev": None}
    for line in mountinfo.splitlines():
        f = line.split()
        if "-" not in f:
            continue
        sep = f.index("-")
        if sep < 5 or len(f) < sep + 3:
            continue
        mp = f[4].replace("\\040", " ")
        if (path == mp or path.startswith(mp.rstrip("/") + "/")) and len(mp) >= len(best["mount"] or ""):
            best = {"mount": mp, "fstype": f[sep + 1], "device": f[sep + 2], "dev": f[2]}
    return best


def venv_versions(venv: str) -> dict:
    """{distribution name (lower case): version} from the venv's *.dist-info/METADATA."""
    out = {}
    lib = os.path.join(venv, "lib")
    for pyver in sorted(os.listdir(lib)) if os.path.isdir(lib) else []:
        site = os.path.join(lib, pyver, "site-packages")
        for entry in sorted(os.listdir(site)) if os.path.isdir(site) else []:
            if not entry.endswith(".dist-info"):
                continue
            try:
                meta = read(os.path.join(site, entry, "METADATA"), 64 << 10)
            except OSError:
                continue
            head = dict(line.split(": ", 1) for line in meta.split("\n\n")[0].splitlines() if ": " in line)
            if "Name" in head and "Version" in head:
                out[head["Name"].strip().lower().replace("_", "-")] = head["Version"].strip()
    return out


# The cache counters validate and loadtest read: vLLM's prefix and external (connector)
# caches, LMCache MP's L1/L2 lookups and stores, kvprov's fail-open L2 adapter's state.
METRIC_PREFIXES = ("vllm:prefix_cache_", "vllm:external_prefix_cache_", "vllm:prompt_tokens_cached",
                   "vllm:cache_config_info", "lmcache_mp_", "kvprov_l2_",
                   # SGLang (--enable-metrics): tokens per tier served, and the storage (L3) tier's own
                   "sglang:prompt_tokens_total", "sglang:cached_tokens_total", "sglang:prefetched_tokens_total",
                   "sglang:backuped_tokens_total", "sglang:storage_prefetch_")


def pinned_tls(cert: str):
    """A TLS context that trusts exactly the certificate deployed for the engine (the first of its
    file on this host, the leaf: a chain's intermediates after it are not trusted, or any other
    certificate they issued would pass): the engine on this host's own address must present it; no
    CA or name is involved."""
    import ssl
    with open(cert) as f:
        leaf = re.search(r"-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----", f.read())
    if leaf is None:
        raise ValueError("no PEM certificate in it")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False  # pinned: the certificate itself is the identity
    ctx.load_verify_locations(cadata=leaf.group(0))
    ctx.verify_flags |= getattr(ssl, "VERIFY_X509_PARTIAL_CHAIN", 0x80000)  # a leaf trusted alone
    return ctx


def http_get(url: str, timeout: float = 5, tls=None) -> tuple:
    """(status, body, error) of a GET on the host itself (`tls`: the context of an https URL)."""
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=tls) as resp:
            return resp.status, resp.read(4 << 20).decode("utf-8", "replace"), None
    except urllib.error.HTTPError as e:
        return e.code, "", str(e)
    except Exception as e:
        return None, "", str(e)


def _unescape(field: str) -> str:
    """fstab's octal escapes (\\040 is a space), as the kernel and mount(8) read them."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def fstab_lines(text: str, mount_point: str, source: str) -> str:
    """What validate needs of /etc/fstab, and nothing else: the lines that mount on the KV mount
    point, mount its export, or are NFS; no comments; credential-like option values (password=,
    credentials=, token=, anything named like pass|secret|token|key|cred; user=name%password)
    and a password in the source (//user:pass@host) as ***. sec= is kept."""
    secret = re.compile(rf"^{SECRET_NAME}$", re.I)
    want = os.path.normpath(mount_point)
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3 or fields[0].startswith("#"):
            continue
        if not (os.path.normpath(_unescape(fields[1])) == want or fields[0] == source
                or fields[2] in ("nfs", "nfs4")):
            continue
        fields[0] = re.sub(r"(://[^/:@\s]*:)[^@\s]*@", r"\1***@", fields[0])
        if len(fields) > 3:
            opts = []
            for opt in fields[3].split(","):
                name, eq, value = opt.partition("=")
                if eq and (secret.match(name) or (name in ("user", "username") and "%" in value)):
                    opt = f"{name}=***"
                opts.append(opt)
            fields[3] = ",".join(opts)
        out.append(" ".join(fields) + "\n")
    return "".join(out)


def redact(argv: list) -> list:
    """A command line without the secrets it carries (an engine's --api-key)."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--api-key" and i + 1 < len(out):
            out[i + 1] = "<redacted>"
        elif arg.startswith("--api-key="):
            out[i] = "--api-key=<redacted>"
    return out


def probe_service(unit: str, host: str, port, path: str, tls_cert: str | None = None) -> tuple:
    """({unit, running, url, status, ok, error}, the cache metrics or None) of one engine unit
    (`tls_cert`: it serves https with this certificate)."""
    active = run(["systemctl", "is-active", "--quiet", unit], 10)[0] == 0
    base = f"{'https' if tls_cert else 'http'}://{host}:{port}"
    url = base + path
    h = {"unit": unit, "running": active, "url": url, "status": None, "ok": False,
         "error": None if active else "not running"}
    if not active:
        return h, None
    try:
        tls = pinned_tls(tls_cert) if tls_cert else None
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
        h["error"] = f"the deployed certificate {tls_cert}: {e}"
        return h, None
    h["status"], body, h["error"] = http_get(url, tls=tls)
    h["ok"] = h["status"] == 200
    if path != "/metrics":
        body = http_get(f"{base}/metrics", tls=tls)[1]
    metrics = "".join(line + "\n" for line in body.splitlines() if line.startswith(METRIC_PREFIXES))
    return h, metrics if body else None


def list_dirs(paths: list) -> dict:
    """{directory: sorted names of its non-directory entries} for each managed file's directory."""
    out = {}
    for d in sorted({os.path.dirname(p) for p in paths}):
        try:
            out[d] = sorted(e.name for e in os.scandir(d) if not e.is_dir(follow_symlinks=False))[:10000]
        except OSError as e:
            out[d] = {"error": str(e)}
    return out


def file_modes(paths: list) -> dict:
    """{path: {"mode": "0644", "uid": 0, "link": bool}} of each managed file there is (lstat: a link is not followed)."""
    out = {}
    for path in paths:
        try:
            st = os.lstat(path)
        except OSError:
            continue  # missing: the file's own capture says so
        out[path] = {"mode": "%04o" % (st.st_mode & 0o7777), "uid": st.st_uid, "link": os.path.islink(path)}
    return out


DEPLOY_LOCK = "/run/kvprov/deploy.lock"  # kvprov_host_lock's default path


def deploy_lock(path: str = DEPLOY_LOCK) -> dict | None:
    """Who holds the host's deploy lock (None: nobody): a deploy running now, or one that was interrupted."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:
        return {"error": str(e)}
    with os.fdopen(fd) as f:
        try:
            data = json.loads(f.read(65536) or "{}")
        except ValueError:
            data = {}
    return {k: str(v)[:300] for k, v in data.items()} if isinstance(data, dict) else {}


def stat_paths(paths: list, timeout: int, hung: str | None = None) -> tuple[dict, bool]:
    """({path: STAT_PROBE's entry}, timed out) (lstat in a child process: a hung mount cannot hang
    the collector). `hung`: the mount already did not answer; nothing is run, each entry says why."""
    if not paths:
        return {}, False
    rc, so, se, to = run([sys.executable, "-c", STAT_PROBE, *paths], timeout) if hung is None else (1, "", "", False)
    stats = json.loads(so) if rc == 0 else {}
    error = hung or ("stat timed out (hung mount?)" if to else se.strip() or f"exited {rc}")
    return {p: stats.get(p) or {"path": p, "exists": False, "is_dir": False, "is_link": False, "owner": None,
                                "group": None, "mode": None, "error": error} for p in paths}, to


def namespace_dirs(desired: dict) -> list:
    """The shared namespaces the host's instances use, <mount>/kv/<engine>/PREFIX-<12 hex>
    (kvprov/namespace.py, namespace_dir), normalized; a directory of an instance's own is none."""
    parent = os.path.join(os.path.normpath(desired["storage"]["mount_point"]), "kv", str(desired["engine"].get("name")))
    dirs = {os.path.normpath(i["storage_dir"]) for i in desired["engine"]["instances"] if i.get("storage_dir")}
    return sorted(d for d in dirs if os.path.dirname(d) == parent and re.fullmatch(FINGERPRINTED, os.path.basename(d)))


def with_own_usage(listing: dict, usage: dict) -> dict:
    """NAMESPACES_PROBE's listing with the host's own namespaces' sizes from USAGE_PROBE's (each
    directory is walked once)."""
    measured = {os.path.normpath(p): u for p, u in usage.items()}
    for path, entry in listing.items():
        for name, e in (entry.get("namespaces") or {}).items():
            if e.get("current") and e.get("skipped") is None and e.get("usage") is None:
                e["usage"] = measured.get(os.path.join(os.path.dirname(path), name))
    return listing


def account(user: str) -> dict:
    """The user's account as deploy's user module sets it: {exists, uid, group, home, shell}."""
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return {"exists": False}
    try:
        group = grp.getgrgid(pw.pw_gid).gr_name
    except KeyError:
        group = str(pw.pw_gid)
    return {"exists": True, "uid": pw.pw_uid, "group": group, "home": pw.pw_dir, "shell": pw.pw_shell}


def list_pending(path: str | None) -> list | dict:
    """The units a deploy noted for a restart it has not done yet (none when the directory is missing)."""
    try:
        return sorted(os.listdir(path)) if path else []
    except FileNotFoundError:
        return []
    except OSError as e:
        return {"error": str(e)}


def collect(desired: dict, probes: bool, io_bytes: int, timeout: int, version: str,
            restart_pending_dir: str | None = None) -> dict:
    out: dict[str, str] = {}
    errors: dict[str, str] = {}
    skipped: dict[str, str] = {}
    storage, nixl, engine, gds = desired["storage"], desired["nixl"], desired["engine"], desired["gds"]
    mp = storage["mount_point"]
    restart_pending_dir = restart_pending_dir or engine.get("restart_pending_dir")

    no_probe = "not probed (kvprov audit reads configuration only)"
    hung = None  # why the volume is not probed further: it already did not answer within the timeout
    if not probes:
        skipped[FILE_IO_PROBE] = skipped[FILE_NIXL_PROBE] = skipped[FILE_HEALTH] = no_probe
        skipped[DIR_METRICS] = no_probe
        skipped[FILE_GDSCHECK] = no_probe
    # A real write + read-back on the KV tier (NFS or local directory): it proves the tier
    # answers, and makes the pNFS layout counters in mountstats mean something.
    if probes:
        host = re.sub(r"[^A-Za-z0-9_.-]", "_", desired["host"])
        rc, so, se, to = run([sys.executable, "-c", IO_PROBE, mp, host, str(io_bytes)], timeout)
        result = {"ok": False, "seconds": None, "error": None, "timed_out": to, "bytes": io_bytes,
                  "path": f"{mp}/.kvprov-{host}/"}
        if to:  # one deadline: the probes of the volume after this one would each wait as long
            hung = f"not run: the KV mount did not answer the I/O probe within {timeout}s (hung mount?)"
        if rc == 0:
            result.update(json.loads(so))
        else:
            result["error"] = (se.strip().splitlines() or ["failed"])[-1]
            if NOT_ANSWERING.search(result["error"]):  # a soft mount gave up on its server: as good as hung
                hung = f"not run: the KV mount's server did not answer the I/O probe ({result['error'][-120:]})"
        out[FILE_IO_PROBE] = json.dumps(result, indent=2)

    for name, path in ((FILE_MOUNTINFO, "/proc/self/mountinfo"), (FILE_MOUNTSTATS, "/proc/self/mountstats")):
        try:
            out[name] = read(path, 16 << 20)
        except OSError as e:
            errors[name] = str(e)
    mountinfo = out.get(FILE_MOUNTINFO, "")

    if storage["transport"] == "rdma":
        try:
            out[FILE_MODULES] = read("/proc/modules", 4 << 20)
        except OSError as e:
            errors[FILE_MODULES] = str(e)
        # the RDMA links, and the interfaces' addresses: which port carries the mount (clientaddr)
        for name, argv in ((FILE_RDMA_LINK, ["rdma", "link"]), (FILE_IP_ADDR, ["ip", "-o", "addr", "show"])):
            rc, so, se, _ = run(argv, 10)
            if rc == 0:
                out[name] = so
            else:
                errors[name] = se.strip() or f"{' '.join(argv)} exited {rc}"
    else:
        skipped[FILE_MODULES] = skipped[FILE_RDMA_LINK] = skipped[FILE_IP_ADDR] = \
            f"storage profile {storage['profile']}: no RDMA"

    gpus_dir = "/proc/driver/nvidia/gpus"
    gpus = sorted(os.listdir(gpus_dir)) if os.path.isdir(gpus_dir) else []
    driver = None
    if os.path.exists("/proc/driver/nvidia/version"):
        first = read("/proc/driver/nvidia/version").split()
        driver = next((w for w in first if w[:1].isdigit() and "." in w), None)
    out[FILE_GPU] = json.dumps({"present": bool(gpus), "driver": driver, "gpus": gpus, "error": None}, indent=2)
    if gpus:
        if probes:
            tool = next((p for p in ("/usr/local/cuda/gds/tools/gdscheck", "/usr/local/cuda/gds/tools/gdscheck.py")
                         if os.path.exists(p)), "gdscheck")
            rc, so, se, _ = run([tool, "-p"], 60)
            if so:
                out[FILE_GDSCHECK] = so
            else:
                errors[FILE_GDSCHECK] = se.strip() or f"gdscheck exited {rc}"
        # cuFile reads a local filesystem's volume attributes from udev's record of its
        # block device; without it (no udevd, or a container without /run/udev) GDS
        # registers no file, even in compat mode.
        where = mount_of(mp, mountinfo)
        record = f"/run/udev/data/b{where['dev']}" if where["dev"] else None
        out[FILE_UDEV] = json.dumps({**where, "record": record, "exists": bool(record) and os.path.exists(record),
                                       "udev_dir": os.path.isdir("/run/udev/data")}, indent=2)
        try:
            out[FILE_CUFILE] = read(gds["cufile_path"])
        except OSError as e:
            errors[FILE_CUFILE] = str(e)
    else:
        skipped[FILE_GDSCHECK] = skipped[FILE_CUFILE] = skipped[FILE_UDEV] = "no NVIDIA GPU"

    files = sorted(desired["files"])
    for path in files:
        if path == gds["cufile_path"] and not gpus:
            continue  # kvprov writes cufile.json only on GPU hosts (already in `skipped`)
        try:
            out[DIR_FILES + os.path.normpath(path)] = read(path)
        except FileNotFoundError:
            errors[DIR_FILES + path] = "does not exist on the host"
        except OSError as e:
            errors[DIR_FILES + path] = str(e)
    if os.path.exists("/etc/fstab"):
        try:
            out[DIR_FILES + "/etc/fstab"] = fstab_lines(read("/etc/fstab"), mp,
                                                        f"{storage['server']}:{storage['export']}")
        except OSError as e:
            errors[DIR_FILES + "/etc/fstab"] = str(e)

    out[FILE_MANAGED_DIRS] = json.dumps(list_dirs(files), indent=2)
    out[FILE_FILE_MODES] = json.dumps(file_modes(files), indent=2)
    out[FILE_RESTART_PENDING] = json.dumps(list_pending(restart_pending_dir))
    out[FILE_DEPLOY_LOCK] = json.dumps(deploy_lock())
    out[FILE_VENVS] = json.dumps({venv: venv_versions(venv) for venv in sorted(desired["venvs"])}, indent=2)

    for unit in [u["unit"] for u in desired["units"]]:
        rc, so, se, _ = run(["systemctl", "show", "--no-pager", unit], 15)
        if rc == 0:
            out[f"{DIR_SYSTEMCTL}/{unit}.txt"] = so
        else:
            errors[f"{DIR_SYSTEMCTL}/{unit}.txt"] = se.strip()
        # The command line the running process really has (not what the unit file says).
        pid = next((line[len("MainPID="):] for line in so.splitlines() if line.startswith("MainPID=")), "0")
        if rc == 0 and pid.isdigit() and pid != "0":
            try:
                argv = read(f"/proc/{pid}/cmdline").split("\0")[:-1]
                out[f"{DIR_SYSTEMCTL}/{unit}.cmdline.json"] = json.dumps(redact(argv))
            except OSError:
                pass  # it just exited

    if probes:
        python = os.path.join(nixl["venv"], "bin", "python3")
        rc, so, se, to = run([python, "-c", NIXL_PROBE, nixl["plugin"].upper()], 120)
        if rc == 0 and so.strip():
            out[FILE_NIXL_PROBE] = so.strip().splitlines()[-1]
        else:
            out[FILE_NIXL_PROBE] = json.dumps({"import_ok": False, "version": None, "plugins": [],
                                                 "backend": nixl["plugin"].upper(), "backend_ok": False,
                                                 "error": se.strip()[-500:] or f"exited {rc}"})

    paths = {"": mp, **{i["name"]: i["storage_dir"] for i in engine["instances"] if i["storage_dir"]}}  # "": no KV tier
    dirs = sorted(desired.get("dirs") or {})  # every directory deploy creates
    volume = [*paths.values(), *(d for d in dirs if d == mp or d.startswith(mp.rstrip("/") + "/"))]
    others = [d for d in dirs if d not in volume]
    stats, to = stat_paths(volume + others, timeout) if hung is None else stat_paths(volume, timeout, hung)
    if to:
        hung = f"not run: stat() on the KV mount did not answer within {timeout}s (hung mount?)"
    if hung:  # the others apart: a hung mount hides none of them
        stats.update(stat_paths(others, timeout)[0])
    out[FILE_DIR_MODES] = json.dumps({d: stats[d] for d in dirs}, indent=2)
    out[FILE_ENGINE_USER] = json.dumps(account(engine["user"]), indent=2)
    entries = {}
    for name, path in paths.items():
        e = dict(stats[path])
        e.update(mount_of(path, mountinfo))
        e["is_on_kv_mount"] = e["mount"] == mp if storage["profile"] != "local" else path.startswith(mp)
        w_rc = run(["runuser", "-u", engine["user"], "--", "test", "-w", path], timeout)[0] if e["exists"] else 1
        e["writable_by_service_user"] = w_rc == 0
        entries[name] = e
    # As the engine user: what it can read is what its engine and evictor use (root may be squashed on
    # the export); the walk's own budget leaves the child time to report before the timeout kills it.
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable  # the user can run it
    rc, so, se, to = (run(["runuser", "-u", engine["user"], "--", python, "-c", USAGE_PROBE,
                           str(max(1, timeout * 0.8)), *paths.values()], timeout) if hung is None
                      else (1, "", hung, False))
    usage = json.loads(so) if rc == 0 and so.strip() else {}
    for name, path in paths.items():
        error = f"timed out after {timeout}s (hung mount?)" if to else (se.strip()[-300:] or f"exited {rc}")
        entries[name]["usage"] = usage.get(path) or {"error": error}
    out[FILE_STORAGE_DIRS] = json.dumps({"mount_point": entries.pop(""), "instances": entries}, indent=2)
    # The model's namespaces beside each shared one the host uses (#37): old ones the evictor retires.
    shared, listing = namespace_dirs(desired), {}
    if shared and (hung or to):
        listing = {p: {"error": hung or f"not run: the usage walk did not answer within {timeout}s (hung mount?)"}
                   for p in shared}
    elif shared:
        rc, so, se, to = run(["runuser", "-u", engine["user"], "--", python, "-c", NAMESPACES_PROBE,
                              str(max(1, timeout * 0.8)), FINGERPRINTED, *shared], timeout)
        found = json.loads(so) if rc == 0 and so.strip() else {}
        error = f"timed out after {timeout}s (hung mount?)" if to else (se.strip()[-300:] or f"exited {rc}")
        listing = {p: found.get(p) or {"error": error} for p in shared}
    out[FILE_NAMESPACES] = json.dumps(with_own_usage(listing, usage), indent=2)

    if probes:
        health = {}
        for inst in engine["instances"]:
            health[inst["name"]], metrics = probe_service(inst["unit"], engine["connect_host"], inst["port"], "/health",
                                                         engine.get("tls_cert"))
            if metrics is not None:
                out[f"{DIR_METRICS}/{inst['name']}.txt"] = metrics
            for unit in inst["units"]:
                if unit != inst["unit"]:  # lmcache_mp's server: its Prometheus port is all it serves over HTTP
                    health[f"{inst['name']}/server"], metrics = probe_service(unit, "127.0.0.1",
                                                                              inst["metrics_port"], "/metrics")
                    if metrics is not None:
                        out[f"{DIR_METRICS}/{inst['name']}-server.txt"] = metrics
        out[FILE_HEALTH] = json.dumps(health, indent=2)

    rc, so, se, _ = run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\n"], 30)
    if rc != 0:
        rc, so, se, _ = run(["rpm", "-qa", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\n"], 30)
    if rc == 0:
        out[FILE_PACKAGES] = so
    else:
        errors[FILE_PACKAGES] = se.strip()

    out[FILE_COLLECT] = json.dumps({"format": FORMAT, "host": desired["host"],
                                      "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                      "kvprov_version": version,
                                      "errors": errors, "skipped": skipped}, indent=2)
    return out


# The task's arguments: Ansible writes them in place of the marker, as JSON (its "JSON args"
# module format). Unlike an AnsiballZ module this one travels alone, and imports nothing of
# Ansible's module utilities on the host: half the start-up of an AnsibleModule there, which is
# most of what an audit of many hosts spends on each (kvprov's issue #28).
ARGUMENTS = r"""<<INCLUDE_ANSIBLE_MODULE_JSON_ARGS>>"""
TRUE, FALSE = ("yes", "on", "1", "true", "y", "t"), ("no", "off", "0", "false", "n", "f")
SPEC = {"desired": (dict, None), "probes": (bool, True), "io_bytes": (int, 4 << 20), "timeout": (int, 30),
        "kvprov_version": (str, "unknown"), "restart_pending_dir": (str, None)}


def _typed(name: str, value, kind):
    """value as `kind`, converted as AnsibleModule would from a string; ValueError naming the argument."""
    if kind is dict and isinstance(value, dict) or kind is str and isinstance(value, str):
        return value
    if kind is bool:
        if isinstance(value, bool):
            return value
        if str(value).lower() in TRUE + FALSE:
            return str(value).lower() in TRUE
    if kind is int and not isinstance(value, bool):
        try:
            return int(value)
        except (TypeError, ValueError):
            pass
    raise ValueError(f"argument '{name}' is of type {type(value).__name__} and we were unable to convert to "
                     f"{kind.__name__}")


def parameters(arguments: dict) -> dict:
    """The task's parameters with their defaults, typed as SPEC says (Ansible's own `_ansible_*`
    settings ignored); ValueError for a missing, unknown or unconvertible one."""
    unknown = sorted(k for k in arguments if k not in SPEC and not k.startswith("_ansible_"))
    if unknown:
        raise ValueError(f"Unsupported parameters: {', '.join(unknown)}; supported: {', '.join(SPEC)}")
    if arguments.get("desired") is None:
        raise ValueError("missing required arguments: desired")
    return {k: default if arguments.get(k) is None else _typed(k, arguments[k], kind)
            for k, (kind, default) in SPEC.items()}


def main(arguments: str = ARGUMENTS) -> None:
    try:
        p = parameters(json.loads(arguments))
    except ValueError as e:
        print(json.dumps({"failed": True, "msg": str(e)}))
        sys.exit(1)
    files = collect(p["desired"], p["probes"], p["io_bytes"], p["timeout"], p["kvprov_version"],
                    p["restart_pending_dir"])
    print(json.dumps({"changed": False, "files": files}))
    sys.exit(0)


if __name__ == "__main__":
    main()
