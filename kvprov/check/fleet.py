"""kvprov check: the storage directories of every host and instance, and the fleet rules on
them (one directory per instance or one namespace per model, what keys a namespace's files),
the prefix hash seeds and the rollout settings (pure)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any, Callable

from kvprov import namespace
from kvprov.check.bounds import plain
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
    export = plain(h.get("kvprov_storage_export") or "/")  # //kvcache is /kvcache: one volume
    engine = h.get("kvprov_engine") or "sglang_hicache"
    shares = namespace.shares(engine, h.get)
    default_dir = (namespace.namespace_dir(mount, engine, namespace.namespace(engine, engine_getter(h))) if shares
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


def engine_getter(h: HostView) -> Callable[[str], Any]:
    """h.get, with the model path and extra arguments under their old names where the host still uses them."""
    old = {"kvprov_engine_model_path": "kvprov_sglang_model_path", "kvprov_engine_extra_args": "kvprov_sglang_extra_args"}
    return lambda n: (h.get(old[n]) or h.get(n)) if n in old else h.get(n)


def sharing(h: HostView) -> list[Problem]:
    """kvprov_engine_storage_sharing: namespace only where the engine's tier can be shared; what a
    shared namespace cannot take: a hub id without a pinned revision, extra arguments or
    environment whose effect on the files kvprov cannot key by, the engine user's uid left to
    chance on a volume other hosts share."""
    engine = h.get("kvprov_engine") or "sglang_hicache"
    if engine in TIERLESS_ENGINES:
        return []
    if h.get("kvprov_engine_storage_sharing") == "namespace":
        reason = namespace.per_instance_reason(engine, h.get)
        if reason is not None:
            return [h.problem("kvprov_engine_storage_sharing", f"namespace: this engine's tier cannot be shared: "
                                                               f"{reason}; use auto or instance")]
    if not namespace.shares(engine, h.get) or any(i.get("storage_dir") for i in h.get(instances_var(h)) or []
                                                  if isinstance(i, dict)):
        return []
    get = engine_getter(h)
    out = []
    model = get("kvprov_engine_model_path")
    if isinstance(model, str) and model and namespace.is_hub_id(model) and not namespace.pinned_revision(get):
        out.append(h.problem("kvprov_engine_model_revision",
                             f"the model {model} is a hub id without a pinned revision, on the shared namespace: a new "
                             "upstream commit would load new weights under the same name and serve KV the old ones "
                             "computed; set kvprov_engine_model_revision to a commit (or use "
                             "kvprov_engine_storage_sharing: instance)"))
    args = "kvprov_sglang_extra_args" if h.get("kvprov_sglang_extra_args") is not None else "kvprov_engine_extra_args"
    for flag, why in namespace.refused_args(get("kvprov_engine_extra_args")):
        out.append(h.problem(args, f"{flag} on the shared namespace: it {why}; set what it holds with "
                                   "kvprov's variables or kvprov_engine_extra_args, or use "
                                   "kvprov_engine_storage_sharing: instance"))
    environment = h.get("kvprov_engine_environment")
    for name, why in namespace.REFUSED_ENV.items():
        if isinstance(environment, dict) and name in environment:
            out.append(h.problem("kvprov_engine_environment", f"{name} {why}"))
    if h.get("kvprov_storage_profile") in NFS_PROFILES and h.get("kvprov_engine_uid") == 0:
        out.append(h.problem("kvprov_engine_uid", "0 (any) on a namespace shared over NFS: every host's engine user "
                                                  "must have one uid, or hosts cannot read or evict each other's files "
                                                  "(the units write them 0600); pin a uid > 0, the same on every host"))
    return out


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
    """Hosts of one engine and model on one volume whose keying values differ land in different
    namespaces (kvprov/namespace.py): safe, but they never share a prefix; a warning names the
    values. Hosts in one namespace must agree on the engine user's uid (the files' owner)."""
    out = []
    by_base: dict[tuple, list[StorageDir]] = {}
    for d in dirs:
        if not d.problems and d.shared and d.view is not None:
            # one export path on several servers: data LIFs of one SVM, as shared_storage_dirs assumes
            volume = ("nfs", "") if d.volume[0] == "nfs" else d.volume
            parent, name = posixpath.split(d.volume_path)
            by_base.setdefault((volume, parent, namespace.split(name)[0], d.engine), []).append(d)
    for (volume, _, _, engine), group in by_base.items():
        where = f"on {group[0].volume[1]}:{group[0].export}" if volume[0] == "nfs" else "on the local disk"
        first_of: dict[str, StorageDir] = {}
        for d in group:
            first = first_of.setdefault(d.volume_path, d)
            if d.host == first.host:
                continue  # one host's instances read the same variables
            a, b = first.view, d.view
            if a.get("kvprov_engine_uid") != b.get("kvprov_engine_uid") and None not in (
                    a.get("kvprov_engine_uid"), b.get("kvprov_engine_uid")):
                out.append(b.problem("kvprov_engine_uid", f"{b.get('kvprov_engine_uid')!r} differs from host "
                                     f"{first.host}'s {a.get('kvprov_engine_uid')!r}{_set_at(a, 'kvprov_engine_uid')}, "
                                     f"which shares the namespace {d.path} {where}: the engine user's uid owns the "
                                     "namespace's files, so one host could not read or evict the other's; make "
                                     "them equal"))
        if len(first_of) < 2:
            continue
        known = [d for d in first_of.values() if not _templated(d.view, engine)]
        reference = known[0] if known else None
        for path, d in first_of.items():
            if reference is None or d is reference or d not in known:
                continue  # a value only Ansible knows (a template): not compared
            ka, kb = (namespace.keys(engine, engine_getter(x.view)) for x in (reference, d))
            differ = [k for k in sorted(set(ka) | set(kb)) if ka.get(k) != kb.get(k)]
            shown = "; ".join(f"{k} {kb.get(k, '(not given)')!r} (host {reference.host}: {ka.get(k, '(not given)')!r})"
                              for k in differ)
            out.append(d.view.problem("kvprov_engine_namespace",
                                      f"{d.path} is not host {reference.host}'s namespace {reference.path} {where}, "
                                      f"though both serve {namespace.split(posixpath.basename(path))[0]} with "
                                      f"{engine}: {shown}; the engine writes different bytes or names for these, so "
                                      "the hosts share no KV; make them equal to share", severity="warning"))
    return out


def _templated(h: HostView, engine: str) -> bool:
    """Whether a value that keys the host's namespace is a template (or of a wrong type)."""
    names = (*namespace.KEYING.get(engine, {}), "kvprov_engine_extra_args", "kvprov_engine_environment",
             "kvprov_storage_server", "kvprov_storage_export")  # which volume: unknown
    return any(h.host.var(n) is not None and h.get(n) is None for n in names)


def namespaces(dirs: list[StorageDir]) -> list[dict]:
    """The shared namespaces of a fleet: [{path, engine, instances, keys}], keys being what put its
    hosts there (kvprov/namespace.py), for `kvprov check --namespaces`."""
    out: dict[str, dict] = {}
    for d in dirs:
        if d.problems or not d.shared or d.view is None or not namespace.shares(d.engine, d.view.get):
            continue
        entry = out.setdefault(d.path, {"path": d.path, "engine": d.engine, "instances": [],
                                        "keys": namespace.keys(d.engine, engine_getter(d.view))})
        entry["instances"].append(f"{d.host}/{d.instance}")
    return list(out.values())


def _set_at(h: HostView, name: str) -> str:
    """ (file:line) where the host's value is set, (a role default), or nothing when not known."""
    var = h.host.var(name)
    if var is not None and var.origin.default:
        return " (a role default)"
    file, line = h.location(name)
    return f" ({file}:{line})" if file else ""


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
