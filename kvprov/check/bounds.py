"""kvprov check: what the engine may be given (pure). Secrets never in a unit's lines; no
code loaded from a place other hosts or users can write; the engine's account and home
kvprov's own, away from the system's files and the shared volume."""

from __future__ import annotations

import posixpath
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvprov.check.host import HostView
    from kvprov.check.values import Finding
    from kvprov.inventory import Problem

# A name that holds a secret: one of these words as a whole part of it (HF_TOKEN, VLLM_API_KEY,
# DB_PASSWORD, --admin-api-key, --hf-token); TOKENIZERS_PARALLELISM or --max-num-batched-tokens
# are not.
_SECRET_WORDS = r"(?:token|secret|password|passwd|pass|pwd|credentials?|key|apikey|auth)"
SECRET_ENV = re.compile(rf"(?:^|_){_SECRET_WORDS}(?:_|$)", re.I)
SECRET_FLAG = re.compile(rf"--(?:[a-z0-9]+[-_])*{_SECRET_WORDS}(?:[-_][a-z0-9]+)*(?==|$)", re.I)
URL_PASSWORD = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@", re.I)
_NOT_SECRETS = {"", "0", "1", "true", "false", "yes", "no", "on", "off", "none"}  # HF_HUB_DISABLE_IMPLICIT_TOKEN=1
SECRET_HOME = ("the API key goes in kvprov_engine_api_key_file, a Hugging Face token in kvprov_engine_hf_token_file, "
               "S3 keys in kvprov_engine_s3_credentials_file: deploy writes them to the root-only "
               "/etc/kvprov/secrets/engine.env")
# Environment variables that make the engine load code or libraries from the paths they name.
LOADERS = ("LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP",
           "PYTHONUSERBASE", "PYTHONPYCACHEPREFIX", "PATH", "CUDA_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
           "VLLM_CACHE_ROOT", "HF_HOME", "HF_MODULES_CACHE")
WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/shm")
# What kvprov's engine units set or guard (roles/*/vars/main.yml, engine.service.j2), with the
# variable that sets it (managed_args: per engine). Given again in kvprov_engine_extra_args the
# engine takes the last one, and kvprov_engine_environment comes last in the unit: the
# inventory's would silently replace kvprov's -- the listen address past the exposure rule and
# IPAddressAllow=, TLS, the key guard, the KV tier, a keying value, the code kvprov loads
# (PYTHONPATH). --revision and --max-model-len, which the unit carries only when their variable
# is set, stay the inventory's to give (the namespace keys them); PYTHONHASHSEED is refused where
# it matters, on a shared namespace (kvprov/namespace.py REFUSED_ENV).
_SGLANG = "sglang_hicache"
_MANAGED_BY_ALL = {
    "--host": "kvprov_engine_host", "--port": "kvprov_engine_instances, port",
    "--ssl-certfile": "kvprov_engine_tls_cert_file", "--ssl-keyfile": "kvprov_engine_tls_key_file",
    "--ssl-ca-certs": "kvprov_engine_tls_cert_file", "--ssl-cert-reqs": "kvprov_engine_tls_cert_file",
    "--served-model-name": "kvprov_engine_served_model_name",
}
_MANAGED_BY_VLLM = {
    "--uds": "kvprov_engine_host: a Unix socket would replace the listener",
    "--middleware": "kvprov's key guard, with kvprov_engine_api_key_file",
    "--root-path": "the routes kvprov's key guard protects",
    "--model": "kvprov_engine_model_path", "--dtype": "kvprov_vllm_dtype", "--block-size": "kvprov_vllm_block_size",
    "--tensor-parallel-size": "kvprov_vllm_tensor_parallel_size", "-tp": "kvprov_vllm_tensor_parallel_size",
    "--gpu-memory-utilization": "kvprov_vllm_gpu_memory_utilization",
}
_MANAGED_BY_SGLANG = {
    "--model-path": "kvprov_engine_model_path", "--tp-size": "kvprov_sglang_tp_size",
    "--page-size": "kvprov_sglang_page_size", "--enable-hierarchical-cache": "kvprov_engine sglang_hicache",
    **dict.fromkeys(("--hicache-size", "--hicache-io-backend", "--hicache-mem-layout", "--hicache-storage-backend",
                     "--hicache-storage-backend-extra-config", "--hicache-storage-prefetch-policy",
                     "--hicache-write-policy"), "kvprov_sglang_hicache_*"),
}


def managed_args(engine: str) -> dict[str, str]:
    """The flags `engine`'s unit sets, with the variable that sets each."""
    return {**_MANAGED_BY_ALL, **(_MANAGED_BY_SGLANG if engine == _SGLANG else _MANAGED_BY_VLLM)}


MANAGED_ENV = {
    "PYTHONPATH": "kvprov's unit sets it for the code it loads (the vLLM key guard, SGLang's key redaction, "
                  "LMCache's socket and fail-open adapter)",
    "KVPROV_LMCACHE_URL": "kvprov sets it: the LMCache server's request channel, a Unix socket only the engine user "
                          "reaches",
    "CUDA_VISIBLE_DEVICES": "kvprov_engine_instances sets it (cuda_visible_devices)",
    "CREDENTIALS_DIRECTORY": "systemd sets it for the credentials kvprov hands the unit",
    "LMCACHE_CONFIG_FILE": "kvprov's LMCache configuration sets it",
    "LMCACHE_TRACK_USAGE": "kvprov keeps LMCache's usage reporting off", "DO_NOT_TRACK": "kvprov sets it",
    "SGLANG_HICACHE_NIXL_BACKEND_STORAGE_DIR": "the instance's storage directory sets it",
}
# Homes that would hand the engine user (ReadWritePaths=) the system's own files.
SYSTEM_DIRS = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/proc", "/sys",
               "/dev", "/run", "/root", "/var/lib/dpkg", "/var/lib/apt", "/var/log", "/var/spool", "/var/cache",
               "/opt/nvidia", "/tmp", "/var/tmp")
# Where root writes what these variables name (#38): in a directory of kvprov's own, or the one
# place a tool reads its file from by default; never elsewhere in the system's directories, where
# other programs read their files (/etc/profile.d/x.sh runs in every root login shell).
KVPROV_PARENTS = ("/etc", "/opt", "/srv", "/var/lib")
ROOT_DESTINATIONS = {"kvprov_nixl_config_path": (), "kvprov_gds_cufile_path": ("/etc/cufile.json",),
                     "kvprov_nixl_venv": (), "kvprov_sglang_venv": (), "kvprov_vllm_venv": ()}
# Accounts of the base system (Debian's base-passwd, RHEL's setup) and common daemons: deploy
# would take one over (home, shell, groups) and the engine would own what it owns.
SYSTEM_ACCOUNTS = frozenset({
    "root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp", "proxy", "www-data",
    "backup", "list", "irc", "gnats", "nobody", "nogroup", "systemd-network", "systemd-resolve",
    "systemd-timesync", "systemd-journal", "messagebus", "sshd", "_apt", "adm", "shutdown", "halt", "operator",
    "ftp", "polkitd", "dbus", "rpc", "rpcuser", "statd", "_rpc", "nfsnobody", "postfix", "chrony", "ntp",
    "tss", "admin", "ubuntu", "debian", "ec2-user", "centos", "cloud-user", "ansible"})


def _finding(message: str, *path) -> "Finding":
    from kvprov.check.values import Finding  # values imports this module for its rules
    return Finding(message, tuple(path))


def secret_environment(value: dict) -> list["Finding"]:
    """kvprov_engine_environment: no secret by name, no URL with a password (Environment= is in
    a 0644 unit, `systemctl show`, bundles, diffs)."""
    out = []
    for key, v in value.items():
        if str(key).upper() in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            continue  # check.s3_secrets_in_environment says where those go
        if SECRET_ENV.search(str(key)) and str(v).strip().lower() not in _NOT_SECRETS:
            out.append(_finding(f"{key} looks like a secret: an Environment= line of the unit is readable by every "
                                f"user (`systemctl show`) and lands in bundles and diffs; {SECRET_HOME}", key))
        elif isinstance(v, str) and URL_PASSWORD.search(v):
            out.append(_finding(f"{key} holds a URL with a password: it would be readable by every user (`systemctl "
                                f"show`) and land in bundles and diffs; {SECRET_HOME}", key))
    return out


def secret_arguments(value: list) -> list["Finding"]:
    """kvprov_engine_extra_args: no flag that takes a secret, no URL with a password (argv is
    readable by every local user in /proc/PID/cmdline)."""
    out = []
    for i, arg in enumerate(value):
        arg = str(arg)
        if SECRET_FLAG.match(arg.partition("=")[0] if "=" in arg else arg):
            out.append(_finding(f'item {i + 1}: "{arg.partition("=")[0]}" takes a secret: on the command line it is '
                                f"readable by every local user (/proc/PID/cmdline, ps) and lands in the unit, bundles "
                                f"and diffs; {SECRET_HOME}", i))
        elif URL_PASSWORD.search(arg):
            out.append(_finding(f"item {i + 1}: a URL with a password on the command line is readable by every local "
                                f"user (/proc/PID/cmdline); {SECRET_HOME}", i))
    return out


def plain(path: str) -> str:
    """A path as Linux resolves it: normpath, and a leading // as / (POSIX leaves "//" to the
    system, so normpath keeps it: //etc would not be under /etc)."""
    return posixpath.normpath("/" + path.lstrip("/") if path.startswith("/") else path)


def _under(path: str, top: str) -> bool:
    path, top = plain(path), plain(top)
    return top == "/" or path == top or path.startswith(top + "/")


def loader_paths(h: "HostView") -> list["Problem"]:
    """LD_PRELOAD, PYTHONPATH and the like must not name the shared volume (any host's root
    writes it) or a world-writable directory, nor a relative path."""
    env = h.get("kvprov_engine_environment") or {}
    mount = h.get("kvprov_storage_mount_point")
    out = []
    for key, value in env.items():
        if str(key) not in LOADERS or str(key) in MANAGED_ENV or not isinstance(value, str):
            continue
        for part in re.split(r"[:\s]+", value):
            if not part:
                continue
            where = ("a relative path" if not part.startswith("/") else
                     "on the shared KV volume, which every host's root writes" if mount and _under(part, mount) else
                     "in a world-writable directory" if any(_under(part, d) for d in WORLD_WRITABLE) else None)
            if where:
                out.append(h.problem("kvprov_engine_environment",
                                     f"{key}: {part} is {where}: the engine would load code from it; name a "
                                     "root-owned directory", key))
                break
    return out


def engine_home(h: "HostView") -> list["Problem"]:
    """The engine's home is writable by it (ReadWritePaths=): never a system directory nor on
    the shared volume."""
    home, mount = h.get("kvprov_engine_home"), h.get("kvprov_storage_mount_point")
    if not isinstance(home, str) or not home.startswith("/"):
        return []
    if mount == "/":  # check.mount_point refuses it
        mount = None
    if plain(home) == "/" or any(_under(home, d) for d in SYSTEM_DIRS):
        return [h.problem("kvprov_engine_home", f"{home} is a system directory: the engine user would own and "
                                                "write it; use a directory of its own, e.g. /var/lib/kvprov-engine")]
    if mount and _under(home, mount):
        return [h.problem("kvprov_engine_home", f"{home} is on the shared KV volume ({mount}): any host's root could "
                                                "plant the engine's Python packages or configuration there; use a "
                                                "local directory, e.g. /var/lib/kvprov-engine")]
    return []


def in_kvprov_directory(path: str) -> bool:
    """Below /etc, /opt, /srv or /var/lib in a directory whose name starts with kvprov."""
    path = plain(path)
    return any(path.startswith(parent + "/") and path[len(parent) + 1:].startswith("kvprov")
               for parent in KVPROV_PARENTS)


def root_destinations(h: "HostView") -> list["Problem"]:
    """Files and venvs root writes where the inventory says: in kvprov's own directories (or the
    named default place); the acceptance test's directory on the KV mount."""
    from kvprov.check.values import absolute_path

    out = []
    for name, also in ROOT_DESTINATIONS.items():
        path = h.get(name)
        if isinstance(path, str) and not absolute_path(path) and not (
                in_kvprov_directory(path) or plain(path) in also):
            out.append(h.problem(name, f"{path} is not in a directory of kvprov's: root writes it there, where other "
                                       "programs read their files; put it in a directory whose name starts with "
                                       f"kvprov under {', '.join(KVPROV_PARENTS)} (e.g. /opt/kvprov/…)"
                                       + "".join(f", or use {a}" for a in also)))
    bench, mount = h.get("kvprov_bench_dir"), h.get("kvprov_storage_mount_point")
    if isinstance(bench, str) and isinstance(mount, str) and mount != "/" and not absolute_path(bench) \
            and not _under(bench, mount):
        out.append(h.problem("kvprov_bench_dir", f"{bench} is not on the KV mount ({mount}): the acceptance test "
                                                 "writes its files there as root; use a directory on the mount, e.g. "
                                                 f"{mount}/<host>"))
    return out


def engine_user(value: Any) -> list["Finding"]:
    if isinstance(value, str) and value in SYSTEM_ACCOUNTS and value != "root":  # check.user_name: not root
        return [_finding(f'"{value}" is an account of the system or of another service: deploy would take it over '
                         "(home, shell, groups) and the engine would own its files; name kvprov's own account, e.g. "
                         "kvprov-engine (deploy creates it and refuses an existing account it did not create)")]
    return []


def managed_flag(arg: str, managed: dict[str, str]) -> str | None:
    """The flag of `managed` that `arg` sets: --flag, --flag=value, --flag_name (both engines read
    _ as -), or a prefix of it, which argparse expands; None for any other argument."""
    name = arg.split("=", 1)[0].replace("_", "-")
    if name in managed:
        return name
    if not name.startswith("--") or len(name) < 5:  # --xyz at least: shorter ones are ambiguous
        return None
    return next((flag for flag in managed if flag.startswith(name)), None)


def managed_settings(h: "HostView") -> list["Problem"]:
    """kvprov_engine_extra_args and kvprov_engine_environment cannot set what kvprov's units set."""
    from kvprov.check.fleet import engine_getter

    args = engine_getter(h)("kvprov_engine_extra_args")
    variable = "kvprov_sglang_extra_args" if h.get("kvprov_sglang_extra_args") else "kvprov_engine_extra_args"
    managed = managed_args(h.get("kvprov_engine") or _SGLANG)
    out = []
    for i, arg in enumerate(args if isinstance(args, list) else []):
        flag = managed_flag(str(arg), managed)
        if flag:
            out.append(h.problem(variable, f'item {i + 1}: "{arg}" sets {flag}, which kvprov manages '
                                           f"({managed[flag]}): the engine takes the last one, so it would replace "
                                           "kvprov's", i))
    environment = h.get("kvprov_engine_environment")
    for name in environment if isinstance(environment, dict) else {}:
        if str(name) in MANAGED_ENV:
            out.append(h.problem("kvprov_engine_environment", f"{name}: {MANAGED_ENV[str(name)]}, and the "
                                                              "inventory's would replace it in the unit", name))
    return out


def rules(h: "HostView") -> list["Problem"]:
    return loader_paths(h) + engine_home(h) + managed_settings(h) + root_destinations(h)
