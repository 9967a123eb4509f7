"""#41 item 3: no proof passes by absence. Every validate check is run on the lab's bundles (and
the vLLM engines' rewrites of one) with a fresh reader that records which captured files the
check reads; then, for each file a passing check read, the check runs again with that file
missing and with it empty. A check that still passes (or turns to SKIP) proved nothing from the
file it needed, unless the table below says why the file is optional for it. The audit's
checks the same way (they share one reader: a file is credited to the first check that reads
it)."""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

import pytest

from kvprov.validate import bundle as bf
from kvprov.validate import evaluate  # noqa: F401 - registers every check
from kvprov.validate.context import CHECKS, INSTANCE_CHECKS, Context, run_check
from kvprov.validate.result import PASS, SKIP
from tests.conftest import FIXTURES
from tests.unit.test_validate_engines import EngineBundle

BUNDLES = ("lab_gpu1", "local_c1")
ENGINES = ("lmcache_mp", "vllm_offload", "lmcache_inproc")  # the lab bundle, its engine part rewritten
TOML = "files/etc/kvprov/nixl_backend_config.toml"
# (check, file pattern (fnmatch), "missing" / "empty" / None for both, why the check may still
# pass or skip, the check of the same host that fails or warns instead, or None where nothing is
# left unproven)
OPTIONAL: list[tuple[str, str, str | None, str, str | None]] = [
    ("mount.unit", "files/etc/fstab", None,
     "read only to find a second entry mounting the KV mount point; a host without one has none", None),
    ("rdma.link", "proc/mountinfo", None,
     "it tells which port carries the mount; without it every port must be ACTIVE", "mount.present"),
    ("rdma.link", "collect.json", None,
     "the collector's record of the mount, as mountinfo: every port must be ACTIVE", "bundle.collect"),
    ("nixl.config", TOML, "empty", "an empty file is TOML that parses", "nixl.active_plugin"),
    ("nixl.options", TOML, "empty", "nothing set is SGLang's defaults", "nixl.active_plugin"),
    ("engine.main.unit", "collect.json", None,
     "the collector's record of the running process; the unit file and `systemctl show` prove the unit",
     "bundle.collect"),
    ("engine.main.unit", "files/etc/systemd/system/kvprov-*.service", "empty",
     "the unit as systemd loaded it (`systemctl show`, the process's command line) is judged; audit compares "
     "the file's content", None),
    ("engine.main.*", "systemctl/kvprov-*.service.cmdline.json", "missing",
     "without the running process's command line the unit's ExecStart is judged, and the result says so", None),
    ("engine.main.storage_env", "systemctl/kvprov-*.service.txt", "missing",
     "the unit file's Environment= stands in for `systemctl show`", None),
    ("engine.main.state", "gpu.json", None,
     "whether the unit should run is systemd's ConditionResult when gpu.json is unusable", None),
    ("file:*", "collect.json", None,
     "read only to quote the collector's note when the file is missing; the file's content is the proof", None),
    ("engine.main.cache", "metrics/main.txt", "missing",
     "a bundle of `kvprov audit` probes no /metrics (SKIP); LMCache MP's server counters alone show the "
     "connector consulted (PASS)", None),
]


def optional(check_id: str, file: str, label: str) -> tuple[str, str | None] | None:
    for check, pattern, which, why, instead in OPTIONAL:
        if fnmatch(check_id, check) and fnmatch(file, pattern) and which in (None, label):
            return why, instead
    return None


class Recording(bf.Bundle):
    """A bundle (in memory) that records the names read, and can hide or empty one file."""

    def __init__(self, files: dict[str, bytes], hidden: str | None = None, empty: str | None = None):
        shown = {k: (b"" if k == empty else v) for k, v in files.items() if k != hidden}
        super().__init__(files=shown)
        self.read: set[str] = set()

    def raw(self, name: str) -> bytes:
        self.read.add(name)
        return super().raw(name)


def bundle_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def checks(desired: bf.Desired):
    """(check id, function of a Context) for every check and instance check of this host."""
    for check_id, _category, fn in CHECKS:
        yield check_id, fn
    for inst in desired.instances:
        for suffix, fn in INSTANCE_CHECKS:
            yield f"engine.{inst.name}.{suffix}", lambda c, fn=fn, inst=inst: fn(c, inst)


def run(files: dict[str, bytes], desired: bf.Desired, check_id: str, fn, **change) -> tuple[str, set[str]]:
    b = Recording(files, **change)
    result = run_check(check_id, check_id.split(".")[0], lambda: fn(Context(b, desired)))
    return result.status, b.read


@pytest.mark.parametrize("name", BUNDLES + ENGINES)
def test_a_passing_check_fails_without_what_it_read(name, tmp_path):
    root = EngineBundle(tmp_path, name).root if name in ENGINES else FIXTURES / "bundles" / name
    files = bundle_files(root)
    desired = bf.load_desired(bf.Bundle(root))
    every = dict(checks(desired))
    broken, proved = [], 0
    for check_id, fn in every.items():
        status, read = run(files, desired, check_id, fn)
        if status != PASS:
            continue
        for file in sorted(read & set(files) - {bf.DESIRED}):
            for change, label in (({"hidden": file}, "missing"), ({"empty": file}, "empty")):
                got, _ = run(files, desired, check_id, fn, **change)
                proved += 1
                if got not in (PASS, SKIP):
                    continue
                why, instead = optional(check_id, file, label) or ("", None)
                if not why:
                    broken.append(f"{check_id}: {got} with {file} {label}")
                elif instead and run(files, desired, instead, every[instead], **change)[0] in (PASS, SKIP):
                    broken.append(f"{check_id}: {got} with {file} {label}, and {instead} passes too")
    assert proved > 20  # the table reached the checks
    assert broken == [], "\n".join(broken)


@pytest.mark.parametrize("name", BUNDLES)
def test_a_passing_audit_check_fails_without_what_it_read(name, monkeypatch):
    from kvprov import audit

    root = FIXTURES / "bundles" / name
    files = bundle_files(root)
    desired = bf.load_desired(bf.Bundle(root))
    current, reads = [""], {}
    checked = audit.run_check

    def run_check(check_id, category, fn):  # which check is reading
        current[0] = check_id
        return checked(check_id, category, fn)

    class Credited(Recording):
        def raw(self, name_: str) -> bytes:
            reads.setdefault(current[0], set()).add(name_)
            return super().raw(name_)

    monkeypatch.setattr(audit, "run_check", run_check)
    base = {r.id: r.status for r in audit.audit(Credited(files), desired)}
    broken, proved = [], 0
    for check_id, status in base.items():
        for file in sorted(reads.get(check_id, set()) & set(files) - {bf.DESIRED}) if status == PASS else []:
            for change, label in (({"hidden": file}, "missing"), ({"empty": file}, "empty")):
                got = {r.id: r.status for r in audit.audit(Recording(files, **change), desired)}[check_id]
                proved += 1
                if got in (PASS, SKIP) and not optional(check_id, file, label):
                    broken.append(f"{check_id}: {got} with {file} {label}")
    assert proved > 10
    assert broken == [], "\n".join(broken)
