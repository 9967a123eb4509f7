"""A Linux NFS server (knfsd) over ssh: read its state through Ansible with the inventory's
connection settings (playbooks/storage.yml; I/O: `collect`) and judge it (pure: `evaluate`):
NFS versions, the RDMA listener, the export (pnfs for block layouts, access for every GPU
node), free space and inodes of the exported file system."""

from __future__ import annotations

import base64
import binascii
import sys
from dataclasses import dataclass, field

from kvprov import runner
from kvprov.storage import access, knfsd
from kvprov.storage.systems import Client, System
from kvprov.validate.result import FAIL, PASS, WARN, Result

CAPTURE_TASK = "Capture the NFS server's state"
NFSD = "/proc/fs/nfsd"


@dataclass
class State:
    """What one server said: each file's text, or why it could not be read."""

    versions: str | None = None
    portlist: str | None = None
    exports: str | None = None
    statfs: dict[str, str] = field(default_factory=dict)  # path -> stat -f output
    errors: dict[str, str] = field(default_factory=dict)  # what -> why it could not be read


# ---------------------------------------------------------------------------- reading (I/O)

def _slurped(res: dict) -> str | None:
    try:
        return base64.b64decode(res["content"]).decode(errors="replace") if res.get("content") else None
    except (binascii.Error, TypeError):
        return None


def state_of(captured: dict) -> State:
    """The State from the capture task's result (pure)."""
    data = (captured.get("ansible_facts") or {}).get("kvprov_storage_state") or {}
    st = State()
    for key, path in (("versions", f"{NFSD}/versions"), ("portlist", f"{NFSD}/portlist")):
        res = data.get(key) or {}
        text = _slurped(res)
        if text is None:
            st.errors[key] = f"cannot read {path}: {' '.join(str(res.get('msg') or 'no content').split())}"
        setattr(st, key, text)
    res = data.get("exports") or {}
    if res.get("rc") == 0:
        st.exports = str(res.get("stdout") or "")
    else:
        why = " ".join(str(res.get("stderr") or res.get("msg")).split())
        st.errors["exports"] = f"exportfs -v failed (rc {res.get('rc')}): {why}"
    for item in data.get("statfs") or []:
        path = str(item.get("item"))
        if item.get("rc") == 0:
            st.statfs[path] = str(item.get("stdout") or "")
        else:
            st.errors[f"statfs {path}"] = " ".join(str(item.get("stderr") or item.get("msg")).split())
    return st


def collect(inventory: str, systems: dict[str, list[str]], stream=None) -> tuple[dict[str, State], runner.RunResult]:
    """Read each Linux system ({name: paths to stat}); ({name: State}, the run)."""
    result = runner.run("storage.yml", inventory, name="storage-check", limit=",".join(sorted(systems)),
                        extravars={"kvprov_storage_check_paths": systems}, stream=stream or sys.stderr,
                        capture=CAPTURE_TASK)
    return {host: state_of(res) for host, res in result.captured.items()}, result


# ---------------------------------------------------------------------------- judging (pure)

def evaluate(system: System, st: State, clients: list[Client]) -> list[Result]:
    """Every knfsd check of one server for the GPU nodes that mount from it."""
    out = _versions(system, st)
    if any(c.rdma for c in clients):
        out += _rdma(system, st, clients)
    for export in sorted({c.export for c in clients}):
        out += _export(system, st, export, [c for c in clients if c.export == export])
    return out


def _unread(system: System, id_: str, expected: str, why: str, fix: str) -> Result:
    return access.result(system, id_, FAIL, expected, why, fix)


def _versions(system: System, st: State) -> list[Result]:
    if st.versions is None:
        return [_unread(system, "nfs.v4.1", "NFS 4.1 served", st.errors.get("versions", ""),
                        "start the NFS server (systemctl start nfs-server)")]
    enabled = knfsd.versions(st.versions)
    found = f"{NFSD}/versions: {st.versions.strip()}"
    v41 = knfsd.version_enabled(enabled, "4.1")
    out = [access.result(system, "nfs.v4.1", PASS if v41 else FAIL, "NFS 4.1 served (the GPU nodes mount "
                         "vers=4.1)", found, "" if v41 else
                         "vers4=y and vers4.1=y in [nfsd] of /etc/nfs.conf, then systemctl restart nfs-server")]
    v40 = knfsd.version_enabled(enabled, "4.0")
    out.append(access.result(system, "nfs.v4.0", WARN if v40 else PASS, "NFS 4.0 off (a client that does not "
                             "pin vers= silently gets 4.0: no pNFS, no sessions)", found,
                             "vers4.0=n in [nfsd] of /etc/nfs.conf, then systemctl restart nfs-server" if v40 else ""))
    return out


def _rdma(system: System, st: State, clients: list[Client]) -> list[Result]:
    ports = sorted({c.port for c in clients if c.rdma})
    expected = ", ".join(f"rdma {p}" for p in ports) + f" in {NFSD}/portlist (the GPU nodes mount proto=rdma)"
    if st.portlist is None:
        return [_unread(system, "nfs.rdma", expected, st.errors.get("portlist", ""),
                        "start the NFS server (systemctl start nfs-server)")]
    listening = knfsd.portlist(st.portlist)
    found = f"{NFSD}/portlist: " + (", ".join(f"{p} {n}" for p, n in sorted(listening)) or "empty")
    missing = [p for p in ports if ("rdma", p) not in listening]
    if missing:
        fix = (f"echo 'rdma {missing[0]}' > {NFSD}/portlist (now; needs the svcrdma/rpcrdma module and an RDMA "
               f"link), and rdma=y, rdma-port={missing[0]} in [nfsd] of /etc/nfs.conf (at boot)")
        return [access.result(system, "nfs.rdma", FAIL, expected, f"{found}: knfsd does not listen for RPC/RDMA "
                              f"on {', '.join(map(str, missing))}", fix)]
    return [access.result(system, "nfs.rdma", PASS, expected, found)]


def _export(system: System, st: State, export: str, clients: list[Client]) -> list[Result]:
    hosts = ", ".join(c.host for c in clients)
    if st.exports is None:
        return [_unread(system, f"export.{export}", f"{export} exported", st.errors.get("exports", ""),
                        "install nfs-utils / nfs-kernel-server and start the NFS server")]
    entries = [e for e in knfsd.exports(st.exports) if e.path.rstrip("/") == export.rstrip("/")]
    if not entries:
        listed = ", ".join(sorted({e.path for e in knfsd.exports(st.exports)})) or "none"
        return [access.result(system, f"export.{export}", FAIL, f"{export} exported (mounted by {hosts})",
                              f"exportfs -v lists no {export} (exports: {listed})",
                              f"add {export} to /etc/exports and run exportfs -ra")]
    out = [access.result(system, f"export.{export}", PASS, f"{export} exported",
                         "; ".join(f"{e.client}({','.join(e.options)})" for e in entries))]
    layouts = sorted({c.layout for c in clients if c.layout != "none"})
    if layouts:
        without = [e.client for e in entries if not e.has("pnfs")]
        expected = f"the pnfs export option (the GPU nodes expect {'/'.join(layouts)} layouts)"
        out.append(access.result(
            system, f"export.{export}.pnfs", FAIL if without else PASS, expected,
            f"exported without pnfs to {', '.join(without)}" if without else "pnfs on every entry",
            f"add pnfs to the options of {export} in /etc/exports and run exportfs -ra" if without else ""))
    out.append(access.access_result(
        system, export, clients, lambda c: _entry_verdict(entries, c),
        f"export {export} to the GPU nodes with rw,no_root_squash in /etc/exports, then exportfs -ra"))
    stat = knfsd.statfs(st.statfs.get(export, ""))
    if stat is None:
        why = st.errors.get(f"statfs {export}") or f"no statfs of {export}"
        out += [access.result(system, f"volume.{export}.{k}", WARN, "its free space and inodes known", why, "")
                for k in ("space", "inodes")]
    else:
        out += access.capacity(system, export, stat.size, stat.available, stat.files, stat.files_free,
                               f"file system of {export}")
    return out


def _specificity(client: str) -> int:
    """knfsd's order: a single host before a network, a network before a wildcard."""
    if client == "*":
        return 3
    if "/" in client or client.startswith("@") or "*" in client or "?" in client:
        return 2
    return 1


def _entry_verdict(entries: list[knfsd.Export], client: Client) -> tuple[bool | None, str]:
    for e in sorted(entries, key=lambda e: _specificity(e.client)):
        verdict = access.matches(e.client, client.address)
        if verdict is False:
            continue
        if verdict is None:
            return None, f"{e.client} may apply"
        missing = [o for o, bad in (("rw", "ro"), ("no_root_squash", "root_squash")) if e.has(bad) or not e.has(o)]
        if e.has("all_squash"):
            missing.append("no all_squash")
        if missing:
            return False, f"{e.client}({','.join(e.options)}) lacks {', '.join(missing)}"
        return True, f"{e.client}"
    return False, "no entry of the export matches it"
