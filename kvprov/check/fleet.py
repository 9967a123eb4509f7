"""kvprov check: the storage directories of every host and instance, and the fleet rules on
them (one directory per instance or one namespace per model, what keys a namespace's files),
the prefix hash seeds and the rollout settings (pure)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any, Callable

from kvprov import namespace
from kvprov.check.host import HostView, instances_var
from kvprov.check.values import (INSTANCE_NAME, NFS_PROFILES, TIERLESS_ENGINES, VALUE_RULES, mount_point,
                                 storage_dir_errors)
from kvprov.inventory import Problem


@dataclass
class StorageDir:
    """One engine instance's storage directory on a host."""

    host: str
    instance: str
    path: str  # normalized absolute path on the host
    volume: tuple[str, str]  # ("nfs", server) or ("local", host): who else can see it
    volume_path: str  # the path within that volume's namespace (server path for NFS)
    export: str
    location: tuple[str, int]  # file, line to report at
    problems: list[Problem]
    variable: str  # the instance list's variable (instances_var)
    engine: str = "sglang_hicache"
    shared: bool = False  # the engine's tier may be shared with other instances (kvprov/namespace.py)
    view: "HostView | None" = None


def storage_dirs(h: HostView) -> list[StorageDir]:
    """Every valid instance's storage dir, with the problems of the dir on its own."""
    profile, mount = h.get("kvprov_storage_profile"), h.get("kvprov_storage_mount_point")
    name_var = instances_var(h)
    instances = h.get(name_var)
    if (profile is None or not isinstance(mount, str) or mount_point(mount) or not instances
            or h.get("kvprov_engine") in TIERLESS_ENGINES):
        return []
    server = str(h.get("kvprov_storage_server") or "").strip().lower()
    export = posixpath.normpath(h.get("kvprov_storage_export") or "/")
    engine = h.get("kvprov_engine") or "sglang_hicache"
    shares = namespace.shares(engine, h.get)
    default_dir = (namespace.namespace_dir(mount, engine, namespace.namespace(_model_getter(h))) if shares
                   else None)
    out = []
    seen = set()
    for i, inst in enumerate(instances):
        name, given = inst.get("name"), inst.get("storage_dir")
        if not (isinstance(name, str) and INSTANCE_NAME.fullmatch(name)) or name in seen:
            continue  # reported by the setting rules
        seen.add(name)
        if "storage_dir" in inst and storage_dir_errors(given):
            continue
        path = posixpath.normpath(given or default_dir or namespace.instance_dir(mount, h.host.name, name))
        at = (i, "storage_dir") if given else (i,)
        d = StorageDir(h.host.name, name, path, ("local", h.host.name), path, export,
                       h.location(name_var, *at), [], name_var, engine,
                       namespace.per_instance_reason(engine, h.get) is None and engine in namespace.KEYING, h)
        rel = posixpath.relpath(path, mount)
        if rel == "." or rel.startswith(".."):
            d.problems.append(_outside_mount(h, name_var, name, given, path, mount, rel == ".", at))
            out.append(d)
            continue
        if profile in NFS_PROFILES:
            d.volume, d.volume_path = ("nfs", server), posixpath.join(export, rel)
        out.append(d)
    return out


def _model_getter(h: HostView) -> Callable[[str], Any]:
    """h.get, with the model path under its old name where the host still uses it."""
    return lambda n: (h.get("kvprov_sglang_model_path") or h.get(n)) if n == "kvprov_engine_model_path" else h.get(n)


def sharing(h: HostView) -> list[Problem]:
    """kvprov_engine_storage_sharing: namespace only where the engine's tier can be shared."""
    engine = h.get("kvprov_engine") or "sglang_hicache"
    if h.get("kvprov_engine_storage_sharing") != "namespace" or engine in TIERLESS_ENGINES:
        return []
    reason = namespace.per_instance_reason(engine, h.get)
    if reason is None:
        return []
    return [h.problem("kvprov_engine_storage_sharing", f"namespace: this engine's tier cannot be shared: {reason}; "
                                                       "use auto or instance")]


def _outside_mount(h: HostView, var: str, name: str, given: str | None, path: str, mount: str, is_mount: bool,
                   at: tuple) -> Problem:
    shown = f'"{given}"' if given == path else f'"{given}" (that is {path})'
    if is_mount:
        msg = (f"instance {name}: storage_dir {shown} is the mount point itself: NIXL's clear() would wipe "
               f"the whole volume; use a directory below it, e.g. {mount}/{h.host.name}/{name}")
    else:
        msg = (f"instance {name}: storage_dir {shown} is not under kvprov_storage_mount_point {mount}: "
               f"the engine's third tier would be on local disk; use e.g. {mount}/{h.host.name}/{name} "
               "or drop storage_dir")
    return h.problem(var, msg, *at)


def shared_storage_dirs(dirs: list[StorageDir]) -> list[Problem]:
    """Two instances whose storage dirs are the same or nested on the same volume: NIXL's
    clear() in one wipes the other's files. Different NFS servers with the same export path
    may be LIFs of one SVM: a warning."""
    out = []
    usable = [d for d in dirs if not d.problems]
    by_volume: dict[tuple[str, str], list[StorageDir]] = {}
    for d in usable:
        by_volume.setdefault(d.volume, []).append(d)
    for group in by_volume.values():
        out += [_shared(a, b, "error") for a, b in _overlapping(group, lambda d: d.volume_path)
                if not _one_namespace(a, b)]
    by_export: dict[str, list[StorageDir]] = {}
    for d in usable:
        if d.volume[0] == "nfs":
            by_export.setdefault(d.export, []).append(d)
    for group in by_export.values():
        out += [_shared(a, b, "warning") for a, b in _overlapping(group, lambda d: d.volume_path)
                if a.volume != b.volume and not _one_namespace(a, b)]
    return out


def _one_namespace(a: StorageDir, b: StorageDir) -> bool:
    """The same directory, used by two instances of one engine whose tier is shared by design."""
    return a.volume_path == b.volume_path and a.shared and b.shared and a.engine == b.engine


def namespace_keys(dirs: list[StorageDir]) -> list[Problem]:
    """Hosts sharing one namespace must agree on everything that names its files (model, hash
    seed, block/chunk size, dtype, versions, keying engine arguments) and on the engine user's
    uid (the files' owner): else a host never hits another's pages, or cannot read them."""
    out = []
    by_namespace: dict[tuple, list[StorageDir]] = {}
    for d in dirs:
        if not d.problems and d.shared and d.view is not None:
            # one export path on several servers: data LIFs of one SVM, as shared_storage_dirs assumes
            volume = ("nfs", "") if d.volume[0] == "nfs" else d.volume
            by_namespace.setdefault((volume, d.volume_path, d.engine), []).append(d)
    for (volume, _, engine), group in by_namespace.items():
        first = group[0]
        where = f"on {first.volume[1]}:{first.export}" if volume[0] == "nfs" else "on the local disk"
        for d in group[1:]:
            if d.host == first.host:
                continue  # one host's instances read the same variables
            a, b = first.view, d.view
            names = [n for n in (*namespace.KEYING[engine], "kvprov_engine_uid")
                     if not (n == "kvprov_engine_hash_seed" and engine in HASHED_ENGINES and volume[0] == "nfs")]
            for name in names:  # (the hash seed of those engines: hash_seeds, per volume)
                if a.host.var(name) is None or b.host.var(name) is None:
                    continue
                va, vb = a.get(name), b.get(name)
                if va is None or vb is None or va == vb:
                    continue  # a template or a wrong type: not compared (the setting rules report the latter)
                out.append(b.problem(name, f"{vb!r} differs from host {first.host}'s {va!r}{_set_at(a, name)}, which "
                                           f"shares the namespace {d.path} {where}: {_KEYING_WHY.get(name, _KEYED)}; "
                                           "make them equal, or give these hosts their own kvprov_engine_namespace"))
            args_a, args_b = (namespace.keying_args(v.get("kvprov_engine_extra_args")) for v in (a, b))
            for flag in sorted(set(args_a) | set(args_b)):
                if args_a.get(flag) != args_b.get(flag):
                    out.append(b.problem("kvprov_engine_extra_args",
                                         f"{flag} {args_b.get(flag, '(not given)')} differs from host {first.host}'s "
                                         f"{args_a.get(flag, '(not given)')}{_set_at(a, 'kvprov_engine_extra_args')}, "
                                         "which shares the "
                                         f"namespace {d.path} {where}: {_KEYED}; make them equal, or give these "
                                         "hosts their own kvprov_engine_namespace"))
    return out


def _set_at(h: HostView, name: str) -> str:
    """ (file:line) where the host's value is set, (a role default), or nothing when not known."""
    var = h.host.var(name)
    if var is not None and var.origin.default:
        return " (a role default)"
    file, line = h.location(name)
    return f" ({file}:{line})" if file else ""


_KEYED = "the engine names its files by it, so neither host would ever hit the other's pages"
_KEYING_WHY = {"kvprov_engine_uid": "the engine user's uid owns the namespace's files, so one host could not "
                                    "read or evict the other's"}


def _overlapping(dirs: list[StorageDir], key: Callable[[StorageDir], str]):
    """Pairs (a, b) where b's path equals a's or lies inside it."""
    items = sorted(dirs, key=lambda d: key(d).split("/"))
    for i, a in enumerate(items):
        for b in items[i + 1:]:
            pa, pb = key(a), key(b)
            if pb != pa and not pb.startswith(pa + "/"):  # pa is never /: a storage dir lies below its mount
                break
            yield a, b


def _shared(a: StorageDir, b: StorageDir, severity: str) -> Problem:
    if a.volume[0] == "local":
        where = "on the local disk"
    elif severity == "error":
        where = f"on {a.volume[1]}:{a.export}"
    else:
        where = (f"on {b.volume[1]}:{b.export} and {a.volume[1]}:{a.export}, the same volume if both "
                 "servers are data LIFs of one SVM")
    other = f"host {a.host} instance {a.instance}'s storage dir"
    same = a.volume_path == b.volume_path
    relation = f"is also {other}" if same else f"lies inside {other} {a.path}"
    unshared = next((d for d in (b, a) if not d.shared), None)
    if same and unshared is None:
        why = f"engines {a.engine} and {b.engine} name their files differently: a namespace holds one engine's"
    elif unshared is not None and unshared.engine != "sglang_hicache" and unshared.view is not None:
        why = namespace.per_instance_reason(unshared.engine, unshared.view.get) or ""
    else:
        why = "NIXL's clear() would wipe the other's files"
    msg = (f"instance {b.instance}: storage dir {b.path} {relation} {where}: {why}; give every instance its own "
           "directory (without storage_dir each gets <mount point>/<host>/<name>, or the engine's shared "
           "namespace where its tier can be shared)")
    return Problem(b.location[0], b.location[1], b.host, b.variable, msg, severity)


# ---- prefix hash seeds

HASHED_ENGINES = ("vllm_offload", "lmcache_inproc")  # prefix keys hash with Python's hash()


def hash_seeds(hosts: list[HostView]) -> list[Problem]:
    """vLLM's native offloading and LMCache in-process key pages by hashes that depend on
    PYTHONHASHSEED: hosts sharing a volume with different seeds never hit each other's pages."""
    first: dict[tuple, tuple[str, Any]] = {}
    out = []
    for h in hosts:
        server, export, seed = (h.get(n) for n in ("kvprov_storage_server", "kvprov_storage_export",
                                                   "kvprov_engine_hash_seed"))
        if (h.get("kvprov_engine") not in HASHED_ENGINES or h.get("kvprov_storage_profile") not in NFS_PROFILES
                or None in (server, export, seed)):  # a template (only Ansible knows it) or a wrong type
            continue
        volume = (server.lower(), posixpath.normpath(export))
        other = first.setdefault(volume, (h.host.name, seed))
        if seed != other[1]:
            out.append(h.problem("kvprov_engine_hash_seed",
                                 f"{seed} differs from host {other[0]}'s {other[1]} on the same volume "
                                 f"{volume[0]}:{volume[1]}: prefix keys differ, so neither host ever hits the "
                                 "other's pages; use one seed for every host"))
    return out


def rollout_settings(hosts: list[HostView]) -> list[Problem]:
    """serial and max_fail_percentage are play keywords, one value for the whole run: a host
    (or group) with another value than the first host's would be silently ignored."""
    out = []
    for name in ("kvprov_deploy_serial", "kvprov_deploy_max_fail_percentage"):
        valid = [h for h in hosts if h.get(name) is not None and not VALUE_RULES[name](h.get(name))]
        first = valid[0] if valid else None
        for h in valid:
            if h.get(name) != first.get(name):
                out.append(h.problem(name, f"{h.get(name)!r} differs from host {first.host.name}'s "
                                           f"{first.get(name)!r}: a rollout setting is one value for the whole "
                                           "run; set it for all GPU nodes (e.g. in group_vars/gpu_nodes)"))
    return out
