#!/usr/bin/python3
# Managed by kvprov (roles/engine/files/kvprov-kv-key.py): local changes are overwritten.
"""kvprov-kv-key: the part of a shared KV namespace's key only the host knows, at each start.

Usage: kvprov-kv-key --model MODEL [--revision REV] [--venv VENV] [--cache FILE]
                     [--timeout S] [--when-down off|keyed] [--key NAME] [--also NAME=PREFIX ...]
                     NAMESPACE ENVFILE

The namespace's name (NAMESPACE, <mount>/kv/<engine>/<name>-<fingerprint>) hashes what the
inventory says shapes the KV files (kvprov/namespace.py). Three things that shape them too are
known only on the host, and only when the engine starts: the model's files (weights replaced in
place at the same path), the GPU architecture (vLLM picks another attention backend, and KV
layout, on Hopper than on Blackwell) and the engine's installed version (a hand upgrade of the
venv). This runs as the unit's first ExecStartPre, as the engine user, and hashes them:

  - a local MODEL (a directory or file): the sha256 of every regular file in it (links
    followed, as the engine loads them; names starting with "." left out), cached in FILE by
    device, inode, size, mtime and ctime, so only a changed file is read again;
    a hub id: the id and --revision (the pinned commit names the content);
  - every GPU's compute capability (nvidia-smi; "none" without a GPU);
  - the versions of vllm*, lmcache, sglang and torch installed in VENV.

It makes NAMESPACE/fp-<12 hex of that hash> (mode 0750) and writes ENVFILE (in the unit's
RuntimeDirectory) with KVPROV_KV_DIR=<that directory>; the unit reads ENVFILE
(EnvironmentFile=) and its ExecStart names ${KVPROV_KV_DIR} as the tier's directory, so the
engine reads and writes only that subdirectory (an engine that reads its directory from a file
gets it as an environment variable that overrides the file: --also LMCACHE_REMOTE_URL=fs://localhost:0
writes LMCACHE_REMOTE_URL=fs://localhost:0<that directory>): hosts whose model files, GPU architecture or
engine version differ never read each other's files, and a change moves the host to a new
subdirectory. A directory of one instance, not named by the inventory's fingerprint (SGLang's,
whose backend deletes its whole directory), passes that name with --key: it is hashed with the
rest, so a change the inventory makes moves the instance to a new subdirectory too. The evictor
works on NAMESPACE as a whole and ages the old subdirectories' files out. The engine follows nothing root resolved: a link a writer of the volume plants in the
subdirectory's place is refused here, and followed, if at all, by the engine user alone.

It never stops the engine from starting: when NAMESPACE cannot be reached within S seconds
(the storage is down) or the subdirectory cannot be made, KVPROV_KV_DIR is an empty directory
of its own that the engine cannot write (the tier is off for this run: its stores fail and
every request is computed; the engine's own fail-open settings apply), never NAMESPACE itself,
whose files other keys wrote. With --when-down keyed (an engine whose own fail-open L2 adapter
waits for the storage and makes the subdirectory itself, refusing a link as this does: LMCache MP
under kvprov's adapter), a storage that does not answer in time names the keyed subdirectory all
the same: the engine starts with its tier bypassed and takes it into use when the storage answers,
with no restart. The key is known without the storage; only the subdirectory needs it. Exit 0
unless its arguments are wrong (2).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

FORMAT = 1  # bumped when what is hashed changes: every host then moves to a new subdirectory
PREFIX = "fp-"
DIGITS = 12
ENGINE_DISTS = re.compile(r"(vllm[a-z0-9_]*|lmcache|sglang|torch)-[^-]+\.dist-info", re.I)
CHUNK = 8 << 20


def log(message: str) -> None:
    print(f"kvprov-kv-key: {message}", file=sys.stderr, flush=True)


def model_files(model: str) -> list[tuple[str, Path]] | None:
    """(name relative to MODEL, path) of every regular file of a local model, sorted; None for a
    hub id (no such path on the host)."""
    root = Path(model)
    if not root.is_absolute() or not root.exists():
        return None
    if root.is_file():
        return [(root.name, root)]
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            path = Path(dirpath, name)
            if not name.startswith(".") and path.is_file():
                out.append((str(path.relative_to(root)), path))
    return sorted(out)


def file_digest(path: Path, cache: dict) -> str:
    """The sha256 of a file's content, from the cache while its identity and times are unchanged
    (a write changes ctime, which no user can set back)."""
    st = path.stat()
    key = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
    if cache.get(str(path), {}).get("key") == key:
        return cache[str(path)]["sha256"]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    cache[str(path)] = {"key": key, "sha256": h.hexdigest()}
    return h.hexdigest()


def gpu_arch(timeout: float = 20) -> list[str]:
    """The compute capability of every GPU, sorted and unique; ["none"] without one."""
    if not shutil.which("nvidia-smi") or not os.path.exists("/dev/nvidiactl"):
        return ["none"]
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        r = None
    if r is None or r.returncode != 0:  # a GPU host whose driver does not answer: unlike any other
        return ["unknown"]
    return sorted({line.strip() for line in r.stdout.splitlines() if line.strip()}) or ["none"]


def engine_versions(venv: str) -> list[str]:
    """The engine distributions installed in the venv, as name-version (dist-info names)."""
    if not venv:
        return []
    found = set()
    for site in Path(venv).glob("lib/python*/site-packages"):
        found.update(p.name[:-len(".dist-info")].lower() for p in site.iterdir() if ENGINE_DISTS.fullmatch(p.name))
    return sorted(found)


def host_key(model: str, revision: str, venv: str, cache: dict, inventory: str = "") -> dict:
    files = model_files(model)
    return {"format": FORMAT,
            "model": ({name: file_digest(path, cache) for name, path in files} if files is not None
                      else {"hub": model, "revision": revision}),
            "gpu": gpu_arch(), "engine": engine_versions(venv),
            **({"inventory": inventory} if inventory else {})}


def digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:DIGITS]


def describe(key: dict) -> str:
    model = key["model"]
    what = f"hub {model['hub']} @ {model['revision'] or '?'}" if "hub" in model else f"{len(model)} files"
    return (f"model: {what}; gpu {','.join(key['gpu'])}; engine {' '.join(key['engine']) or '-'}"
            + (f"; inventory {key['inventory']}" if "inventory" in key else ""))


class NoAnswer(str):
    """make_dir's answer when the storage did not answer in time (not when it refused)."""


def make_dir(path: str, timeout: float) -> str | None:
    """Make the subdirectory (0750) in a child that may hang on a dead mount; None when it exists
    as a directory (not a link) afterwards, else why not (a NoAnswer when the storage did not
    answer within `timeout`)."""
    code = ("import os, stat, sys\np = sys.argv[1]\ntry:\n    os.mkdir(p, 0o750)\nexcept FileExistsError:\n    pass\n"
            "if not stat.S_ISDIR(os.lstat(p).st_mode):\n    sys.exit(p + ' is not a directory')\n")
    try:
        child = subprocess.Popen([sys.executable, "-c", code, path], stderr=subprocess.PIPE, text=True)
    except OSError as e:
        return str(e)
    try:
        _, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()  # on a hard mount it may stay in the kernel; this process goes on
        return NoAnswer(f"no answer from the storage within {timeout:g}s")
    return None if child.returncode == 0 else (err.strip().splitlines() or [f"exit {child.returncode}"])[-1]


def write_env(path: str, directory: str, also: list[str]) -> None:
    """ENVFILE with KVPROV_KV_DIR (and NAME=PREFIX<directory> for each --also), replaced
    atomically (a new file renamed over the old)."""
    tmp = f"{path}.new-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write("".join(f"{line}{directory}\n" for line in ["KVPROV_KV_DIR=", *also]))
    os.replace(tmp, path)


def load_cache(path: str) -> dict:
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def save_cache(path: str, cache: dict) -> None:
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".kvprov-kv-key-")
        with os.fdopen(fd, "w") as f:
            json.dump(cache, f)
        os.replace(tmp, path)
    except OSError as e:
        log(f"cache {path} not written: {e}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kvprov-kv-key", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--revision", default="")
    ap.add_argument("--venv", default="")
    ap.add_argument("--cache", default="", help="the file digests' cache (default: none)")
    ap.add_argument("--timeout", type=float, default=15, help="seconds the storage may take to answer")
    ap.add_argument("--when-down", choices=("off", "keyed"), default="off",
                    help="what KVPROV_KV_DIR names when the storage does not answer in time: an empty "
                         "directory (off, the default) or the keyed subdirectory, for an engine that makes "
                         "it once the storage answers (keyed)")
    ap.add_argument("--key", default="", metavar="NAME",
                    help="the inventory's part of the key, for a directory not named by it (hashed with the rest)")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=PREFIX",
                    help="also write NAME=PREFIX<directory> (repeatable)")
    ap.add_argument("namespace")
    ap.add_argument("envfile")
    a = ap.parse_args(argv)
    if not (os.path.isabs(a.namespace) and os.path.isabs(a.envfile)):
        ap.error("NAMESPACE and ENVFILE must be absolute paths")
    if not all(re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", x) for x in a.also):
        ap.error("--also takes NAME=PREFIX (an environment variable name, a prefix without spaces)")
    off = os.path.join(os.path.dirname(a.envfile), "off")
    try:
        cache = load_cache(a.cache) if a.cache else {}
        key = host_key(a.model, a.revision, a.venv, cache, a.key)
        if a.cache:
            save_cache(a.cache, {k: v for k, v in cache.items() if os.path.exists(k)})
        target = os.path.join(a.namespace, PREFIX + digest(key))
        why = make_dir(target, a.timeout)
    except Exception as e:  # whatever goes wrong, the engine starts (with its tier off)
        target, why = a.namespace, f"{type(e).__name__}: {e}"
    if why is None:
        write_env(a.envfile, target, a.also)
        log(f"{target} ({describe(key)})")
        return 0
    if isinstance(why, NoAnswer) and a.when_down == "keyed":
        write_env(a.envfile, target, a.also)
        log(f"{target} ({describe(key)}): {why}; the engine makes it when the storage answers")
        return 0
    os.makedirs(off, exist_ok=True)
    os.chmod(off, stat.S_IRUSR | stat.S_IXUSR)  # 0500: empty, and the engine cannot write into it
    write_env(a.envfile, off, a.also)
    log(f"the KV tier is off for this run: {target}: {why}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
