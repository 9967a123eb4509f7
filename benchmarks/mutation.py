#!/usr/bin/env python3
"""Mutation score of the checking code against the unit suite (prints figures; not a test).

    python3 benchmarks/mutation.py [--module PATH ...] [--stale] [--jobs N] [--json FILE] [--survivors-of JSON]

Each mutant is one small deliberate bug (an operator, a comparison, a constant, a
condition, a returned value, a dropped call) planted in one of the modules below; the
unit tests that execute the mutated line run against it, and the mutant is killed when
one of them fails (or runs past its timeout). The score is killed / scored, where scored
= mutants - the equivalent ones listed (with why) in benchmarks/mutation-equivalent.txt:
a module's mutants no unit test executes ("not covered") and those the harness could not
plant or run ("error") count in the denominator, never as kills.

Control: the unit tests are first run unmutated (while tracing, and again in each job
through the same fork as a mutant's): if any fails, the run stops, since a failing test
would "kill" every mutant it runs. A mutant whose function cannot be swapped in place (its
code needs other free variables, e.g. a dropped super() call) is imported anew from its
mutated copy instead; anything else that goes wrong while planting is an error.

The record (benchmarks/results/mutation-record.json, committed) keeps, per target file, the
hash of what was mutated, its figures and its survivors; every run updates the files it ran
and rewrites benchmarks/results/mutation.txt from the whole record. `--stale` runs only the
files whose hash no longer matches (tests/unit/test_mutation_record.py fails until then).

Everything runs on private copies of the checkout in a temporary directory, one per job:
the checkout itself is never written to, even if the run is interrupted.

How it stays fast on two cores: the unit tests are run once with line tracing (in-process
and in the `kvprov` subprocesses they start) to learn which tests execute which line; then
each job imports the tests once and, per mutant, forks: the child swaps the mutated
function's code object in place (or, for a mutant outside any function, re-imports the
project from its copy, where the mutated file was written) and runs only the tests that
execute the mutated line (the module's own test files first, then the fastest), stopping at
the first failure.

Strings containing whitespace (messages, help texts) and docstrings are not mutated: the
mutants are the code's decisions and the names it looks up, not its prose.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULES = ["kvprov/mountstats.py", "kvprov/validate", "kvprov/audit.py", "kvprov/check",
           "kvprov/inventory.py", "plugins/modules/kvprov_mount_state.py", "kvprov/storage", "kvprov/redact.py",
           "kvprov/bench.py", "kvprov/lock.py", "plugins/modules/kvprov_collect.py",
           "kvprov/loadtest_metrics.py", "kvprov/namespace.py", "roles/engine/files/kvprov-evict.py",
           "kvprov/sinks.py", "kvprov/tunnel.py", "kvprov/vault.py", "kvprov/deployed_secrets.py", "kvprov/converge.py",
           "roles/engine/files/kvprov-kv-key.py", "kvprov/specs.py"]
# Files of which only some functions are checking code: only those are mutated (and hashed).
ONLY = {
    "kvprov/loadtest_metrics.py": ("parse_prometheus", "_labels", "cache_counters", "counter_delta", "cache_summary",
                                   "_storage_hits", "replay_rows", "cross_host_rows", "measure_point"),
}
EQUIVALENT = ROOT / "benchmarks/mutation-equivalent.txt"
RESULTS = ROOT / "benchmarks/results"
# The committed record: per target file, the hash of what was mutated and that file's figures
# and survivors. Every run updates the files it ran; --stale runs the files whose hash changed;
# tests/unit/test_mutation_record.py fails while a target file differs from its record.
RECORD = RESULTS / "mutation-record.json"
SUMMARY = RESULTS / "mutation.txt"
REFRESH = "python3 benchmarks/mutation.py --stale --jobs 1"
# The unit test files that may run against each module's mutants (fnmatch patterns under
# tests/unit); of these, each mutant runs only the tests that execute its line. A test file
# that exercises a module but is not listed here never runs against its mutants (until #27,
# test_host_tiers.py was missing for kvprov/check: tiers.py's mutants looked unkilled).
TESTS_FOR = {
    "kvprov/mountstats.py": ["test_mountstats*.py", "test_validate_*.py", "test_audit*.py", "test_testinfra_checks.py"],
    "kvprov/validate/": ["test_validate_*.py", "test_audit*.py", "test_mount_state*.py", "test_mountstats*.py",
                         "test_testinfra_checks.py", "test_collect*.py", "test_bundle*.py", "test_report*.py",
                         "test_checks_*.py", "test_parsers*.py", "test_security_review2_deploy_json.py"],
    "kvprov/audit.py": ["test_audit*.py", "test_validate_*.py", "test_capacity.py", "test_collect_bundle_names.py",
                        "test_config_only_engine.py", "test_volume_namespaces.py"],
    "kvprov/check": ["test_check*.py", "test_inventory*.py", "test_preflight.py", "test_storage_check_rules.py",
                     "test_secrets.py", "test_engine_configs.py", "test_host_tiers.py", "test_lmcache_tiers.py",
                     "test_ansible_cli.py", "test_evict_units.py", "test_namespace.py", "test_type_conversion.py",
                     "test_sinks.py", "test_engine_tls.py", "test_volume_identity_properties.py", "test_secret_values.py"],
    "kvprov/inventory.py": ["test_inventory*.py", "test_limit_file.py", "test_check*.py", "test_preflight.py",
                            "test_storage_check_rules.py", "test_secrets.py", "test_engine_configs.py",
                            "test_host_tiers.py", "test_lab_inventory.py", "test_type_conversion.py", "test_sinks.py",
                            "test_vault*.py"],
    "plugins/modules/kvprov_mount_state.py": ["test_mount_state*.py", "test_validate_*.py",
                                              "test_audit*.py", "test_testinfra_checks.py",
                                              "test_parsers*.py", "test_checks_*.py"],
    "kvprov/storage/": ["test_storage*.py", "test_security_review2_ontap.py", "test_capacity.py", "test_check.py",
                        "test_check_rules.py", "test_preflight.py", "test_secrets.py", "test_audit_gauges.py",
                        "test_lab_inventory.py"],
    "kvprov/redact.py": ["test_redact.py", "test_audit*.py", "test_collect*.py", "test_sglang_log_redact.py",
                         "test_security_review2_*.py", "test_validate_*.py", "test_checks_*.py"],
    "kvprov/bench.py": ["test_bench*.py", "test_validate_cli_live.py", "test_secrets.py"],
    "kvprov/lock.py": ["test_lock*.py", "test_inventory_sources.py", "test_collection.py"],
    "plugins/modules/kvprov_collect.py": ["test_collect*.py", "test_security_review2_collect.py", "test_redact.py",
                                          "test_audit*.py", "test_capacity.py", "test_validate_*.py", "test_bundle*.py",
                                          "test_checks_*.py", "test_engine_tls.py", "test_volume_namespaces.py"],
    "kvprov/loadtest_metrics.py": ["test_loadtest*.py", "test_sglang_metrics.py", "test_security_review2_loadtest.py",
                                   "test_engine_tls.py"],
    "kvprov/namespace.py": ["test_namespace*.py", "test_check*.py", "test_evict_units.py", "test_engine_configs.py"],
    "roles/engine/files/kvprov-evict.py": ["test_evict.py", "test_evict_edges.py"],
    "roles/engine/files/kvprov-kv-key.py": ["test_kv_key.py"],
    "kvprov/sinks.py": ["test_sinks*.py", "test_render_fuzz.py"],
    "kvprov/tunnel.py": ["test_tunnel*.py"],
    "kvprov/vault.py": ["test_vault*.py", "test_inventory*.py", "test_runner.py", "test_check.py", "test_hash_behaviour.py",
                        "test_ansible_cli.py", "test_secret_values.py"],
    "kvprov/deployed_secrets.py": ["test_deployed_secrets*.py", "test_security_review2_deploy_json.py",
                                   "test_secret_values.py"],
    "kvprov/specs.py": ["test_type_conversion.py", "test_check*.py", "test_ansible_cli.py", "test_preflight.py",
                        "test_secret_values.py", "test_inventory*.py"],
    "kvprov/converge.py": ["test_converge*.py", "test_failure_summary.py"],
}
# Functions that only run against live hosts (Ansible, systemctl, a real /proc/self/mountinfo):
# the lab tests exercise them, the unit suite cannot, so they are not mutated (listed in the
# result). Argparse wiring (add_parser) is not mutated either.
LIVE = {
    "kvprov/audit.py": {"cmd_audit": "the CLI on live hosts"},
    "kvprov/validate/collect.py": {"collect": "captures every host through Ansible",
                                   "cmd_collect": "the CLI on live hosts"},
    "plugins/modules/kvprov_mount_state.py": {
        "main": "the Ansible module's entry: AnsibleModule on the host, its real mountinfo"},
}
SLOW = 3.0  # seconds (traced): a test this slow runs ansible or an engine; it is left out of the mutant runs
PYTEST_ARGS = ["-q", "-x", "--no-header", "-p", "no:cacheprovider", "-p", "no:randomly", "-o", "addopts="]


# ---------------------------------------------------------------------------- mutants

@dataclass
class Mutant:
    path: str           # relative to the checkout
    line: int
    scope: str          # qualname of the outermost function or method holding it, or "<module>"
    change: str         # "`a == b` -> `a != b`"
    source: str = field(repr=False, default="")
    id: str = ""
    status: str = ""    # killed | timeout | survived | not covered | equivalent | error
    tests: int = 0      # the tests that execute its line (in a function: at most --max-tests of them run)
    seconds: float = 0.0
    run: list = field(repr=False, default_factory=list)  # the tests to run, fastest first
    again: list | None = field(repr=False, default=None)  # module-level statements to run again to plant it

    def where(self) -> str:
        return f"{self.path}:{self.line} ({self.scope}): {self.change}"


BINOPS = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "/"), ast.Div: ("/", "*"),
          ast.FloorDiv: ("//", "/"), ast.Mod: ("%", "//"), ast.BitOr: ("|", "&"), ast.BitAnd: ("&", "|")}
CMPOPS = {ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="), ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"),
          ast.Gt: (">", ">="), ast.GtE: (">=", ">"), ast.In: ("in", "not in"), ast.NotIn: ("not in", "in"),
          ast.Is: ("is", "is not"), ast.IsNot: ("is not", "is")}
BOOLOPS = {ast.And: ("and", "or"), ast.Or: ("or", "and")}
OP_RE = {"in": r"(?<![\w.])in(?!\w)", "not in": r"(?<![\w.])not\s+in(?!\w)", "is": r"(?<![\w.])is(?!\s+not)(?!\w)",
         "is not": r"(?<![\w.])is\s+not(?!\w)", "and": r"(?<![\w.])and(?!\w)", "or": r"(?<![\w.])or(?!\w)"}


class _Finder(ast.NodeVisitor):
    """Collects (start, end, replacement, scope) edits on one module's source."""

    def __init__(self, text: str, live: dict[str, str], only: tuple[str, ...] | None = None):
        self.live = live
        self.only = only  # None: every function and the module level; else only these functions
        self.lines = text.splitlines(keepends=True)
        self.offsets = [0]
        for ln in self.lines:
            self.offsets.append(self.offsets[-1] + len(ln.encode()))
        self.raw = text.encode()
        self.edits: list[tuple[int, int, str, str, int, str]] = []  # start, end, new, scope, line, change
        self.scope: list[str] = []  # the classes around, at module level
        self.function = ""
        self.limits: set[int] = set()  # ids of the constants left alone (see _limit)
        self.func_depth = 0
        self.skip_lines = {i + 1 for i, ln in enumerate(self.lines) if "pragma: no mutate" in ln}

    def pos(self, line: int, col: int) -> int:
        return self.offsets[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.pos(node.lineno, node.col_offset), self.pos(node.end_lineno, node.end_col_offset)

    def text(self, a: int, b: int) -> str:
        return self.raw[a:b].decode()

    def cur_scope(self) -> str:
        return self.function if self.func_depth else "<module>"

    def add(self, node: ast.AST, a: int, b: int, new: str) -> None:
        if node.lineno in self.skip_lines or (self.only is not None and not self.func_depth):
            return
        na, nb = self.span(node)
        before = self.text(na, nb)
        after = self.text(na, a) + new + self.text(b, nb)
        short = lambda s: " ".join(s.split())[:90]  # noqa: E731
        self.edits.append((a, b, new, self.cur_scope(), node.lineno, f"`{short(before)}` -> `{short(after)}`"))

    def op_between(self, node: ast.AST, left: ast.AST, right: ast.AST, op: str, new: str) -> None:
        a, b = self.span(left)[1], self.span(right)[0]
        seg = self.text(a, b)
        pattern = OP_RE.get(op, re.escape(op))
        hits = [m for m in re.finditer(pattern, seg)]
        if len(hits) != 1 or "#" in seg:
            return
        m = hits[0]
        self.add(node, a + len(seg[:m.start()].encode()), a + len(seg[:m.end()].encode()), new)

    # -- scopes: mutants inside a function body belong to its outermost function/method
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for d in node.decorator_list:
            self.visit(d)
        for kw in node.keywords:
            self.visit(kw)
        if not self.func_depth:
            self.scope.append(node.name)
        self._body(node.body)
        if not self.func_depth:
            self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for d in node.decorator_list:
            self.visit(d)
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d]:
            self.visit(default)
        if not self.func_depth and not self.scope and (node.name == "add_parser" or node.name in self.live):
            return  # see LIVE
        if not self.func_depth and self.only is not None and ".".join(self.scope + [node.name]) not in self.only:
            return  # see ONLY
        if not self.func_depth:
            self.function = ".".join(self.scope + [node.name])
        self.func_depth += 1
        self._body(node.body)
        self.func_depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def _body(self, body: list[ast.stmt]) -> None:
        for i, stmt in enumerate(body):
            if i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
                    and isinstance(stmt.value.value, str):
                continue  # docstring
            self.visit(stmt)

    def visit_If(self, node: ast.If) -> None:
        if isinstance(node.test, ast.Compare) and any(isinstance(n, ast.Constant) and n.value == "__main__"
                                                      for n in node.test.comparators):
            return
        if not self.func_depth and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        self._negate(node.test)
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        self._negate(node.test)
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._negate(node.test)
        self.generic_visit(node)

    def _negate(self, test: ast.expr) -> None:
        if isinstance(test, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
            a, b = self.span(test)
            self.add(test, a, b, f"not {self.text(a, b)}")

    def visit_Assign(self, node: ast.Assign) -> None:
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value:
            self.visit(node.value)

    def visit_arg(self, node: ast.arg) -> None:
        pass  # annotations

    def visit_BinOp(self, node: ast.BinOp) -> None:
        kind = BINOPS.get(type(node.op))
        string_format = isinstance(node.op, ast.Mod) and isinstance(node.left, (ast.Constant, ast.JoinedStr))
        if kind and not string_format:
            self.op_between(node, node.left, node.right, *kind)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        kind = BINOPS.get(type(node.op))
        if kind:
            self.op_between(node, node.target, node.value, kind[0] + "=", kind[1] + "=")
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            kind = CMPOPS.get(type(op))
            if kind:
                self.op_between(node, left, right, *kind)
            left = right
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        kind = BOOLOPS[type(node.op)]
        for left, right in zip(node.values, node.values[1:]):
            self.op_between(node, left, right, *kind)
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, ast.Not):
            a = self.span(node)[0]
            keyword = re.match(r"not\s*", self.text(a, self.span(node.operand)[0]))
            self.add(node, a, a + keyword.end(), "")
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        if node.value is not None and not (isinstance(node.value, ast.Constant) and node.value.value is None):
            a, b = self.span(node.value)
            self.add(node, a, b, "None")
        self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Call) and self.func_depth:
            a, b = self.span(node)
            self.add(node, a, b, "pass")  # the call dropped
        self.generic_visit(node)

    def visit_Break(self, node: ast.Break) -> None:
        self.add(node, *self.span(node), "continue")

    def visit_Continue(self, node: ast.Continue) -> None:
        self.add(node, *self.span(node), "break")

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        for v in node.values:
            if isinstance(v, ast.FormattedValue):
                self.visit(v.value)

    def visit_Call(self, node: ast.Call) -> None:
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            self._limit(arg)
        self.generic_visit(node)

    def visit_Slice(self, node: ast.Slice) -> None:
        for bound in (node.lower, node.upper, node.step):
            self._limit(bound)
        self.generic_visit(node)

    def _limit(self, node: ast.AST | None) -> None:
        """A number of 20 or more given to a call or a slice is a display width, a
        truncation or a timeout: +1 on it is no bug a test should pin."""
        if isinstance(node, ast.Constant) and type(node.value) is int and node.value >= 20:
            self.limits.add(id(node))

    def visit_Constant(self, node: ast.Constant) -> None:
        if id(node) in self.limits:
            return
        v = node.value
        a, b = self.span(node)
        if isinstance(v, bool):
            self.add(node, a, b, str(not v))
        elif isinstance(v, int):
            self.add(node, a, b, str(v + 1))
        elif isinstance(v, float):
            self.add(node, a, b, repr(v + 1.0))
        elif isinstance(v, str) and not any(c.isspace() for c in v) and node.lineno == node.end_lineno:
            src = self.text(a, b)
            q = re.match(r"[rbuRBU]*('''|\"\"\"|'|\")", src)
            if q:
                prefix = src[:q.end()]
                self.add(node, a, b, prefix + "XX" + src[q.end():-len(q[1])] + "XX" + q[1])


def mutants_of(root: Path, rel: str) -> list[Mutant]:
    text = (root / rel).read_text()
    tree = ast.parse(text)
    finder = _Finder(text, LIVE.get(rel, {}), ONLY.get(rel))
    finder.visit(tree)
    out: list[Mutant] = []
    seen: dict[str, int] = {}
    raw = text.encode()
    for a, b, new, scope, line, change in finder.edits:
        src = (raw[:a] + new.encode() + raw[b:]).decode()  # compiled in the job (one that does not: an error)
        key = f"{rel}::{scope}::{change}"
        seen[key] = seen.get(key, 0) + 1
        m = Mutant(rel, line, scope, change, src, key + (f" #{seen[key]}" if seen[key] > 1 else ""))
        out.append(m)
    return out


# An Ansible module's documentation (module-level strings of prose, which are never mutated).
DOC_STRINGS = ("DOCUMENTATION", "EXAMPLES", "RETURN")


def mutated_text(root: Path, rel: str) -> str:
    """What is mutated in a target file: the whole file but an Ansible module's DOC_STRINGS, or
    (ONLY) the source of its named functions."""
    text = (root / rel).read_text()
    if rel not in ONLY:
        return without_docs(text)
    tree = ast.parse(text)
    found = {n.name: ast.get_source_segment(text, n) for n in tree.body
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    missing = [name for name in ONLY[rel] if name not in found]
    if missing:
        raise SystemExit(f"mutation: {rel} has no function {', '.join(missing)} (ONLY in benchmarks/mutation.py)")
    return "\n\n".join(f"# {name}\n{found[name]}" for name in sorted(ONLY[rel]))


def without_docs(text: str) -> str:
    """The text without its DOC_STRINGS assignments and blank lines: adding or editing a
    module's documentation needs no new mutation run. Other files: the text itself."""
    lines = text.splitlines(keepends=True)
    docs = [node for node in ast.parse(text).body if isinstance(node, ast.Assign) and len(node.targets) == 1
            and getattr(node.targets[0], "id", None) in DOC_STRINGS and isinstance(node.value, ast.Constant)]
    if not docs:
        return text
    for node in reversed(docs):
        del lines[node.lineno - 1:node.end_lineno]
    return "".join(line for line in lines if line.strip())


def content_hash(root: Path, rel: str) -> str:
    return hashlib.sha256(mutated_text(root, rel).encode()).hexdigest()


def target_of(rel: str) -> str:
    """The MODULES entry a file belongs to (a score is given per entry)."""
    return next(m for m in MODULES if rel == m or rel.startswith(m.rstrip("/") + "/"))


def read_record(path: Path = RECORD) -> dict:
    return json.loads(path.read_text()) if path.exists() else {"files": {}}


def test_patterns(rel: str) -> list[str]:
    return next(pats for key, pats in TESTS_FOR.items() if rel.startswith(key))


def target_files(root: Path, modules: list[str]) -> list[str]:
    out = []
    for m in modules:
        p = root / m
        files = sorted(p.rglob("*.py")) if p.is_dir() else [p]
        if not files or not all(f.is_file() for f in files):
            raise SystemExit(f"mutation: {m}: no such module under {root}")
        out += [str(f.relative_to(root)) for f in files]
    return out


def read_equivalent(path: Path) -> dict[str, str]:
    """ID  # why  (one a line; blank lines and lines starting with # are comments)"""
    out = {}
    if path.exists():
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            ident, sep, why = line.partition("  # ")
            if not sep or not why.strip():
                raise SystemExit(f"{path}:{n}: an equivalent mutant needs its explanation: ID  # why")
            out[ident.strip()] = why.strip()
    return out


# ---------------------------------------------------------------------------- private copies

def copy_checkout(src: Path, dst: Path) -> None:
    """The checkout's files (tracked, and untracked but not ignored) into dst."""
    try:
        names = subprocess.run(["git", "-C", str(src), "ls-files", "-z", "-co", "--exclude-standard"],
                               check=True, capture_output=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        names = [str(p.relative_to(src)) for p in src.rglob("*")
                 if p.is_file() and ".git" not in p.parts and "__pycache__" not in p.parts]
    for name in filter(None, names):
        s = src / name
        if s.is_file() and not s.is_symlink():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(s, dst / name)
        elif s.is_symlink():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(s), dst / name)


def child_env(copy: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=str(copy), **(extra or {}))
    env.pop("PYTEST_ADDOPTS", None)
    return env


# ---------------------------------------------------------------------------- phase 1: which test runs which line

SITECUSTOMIZE = '''
import atexit, json, os, sys, threading
_files = set(os.environ["MUT_TRACE_FILES"].split(os.pathsep))
_lines = set()
def _local(frame, event, arg):
    if event == "line":
        _lines.add((frame.f_code.co_filename, frame.f_lineno))
    return _local
def _global(frame, event, arg):
    return _local if frame.f_code.co_filename in _files else None
sys.settrace(_global)
threading.settrace(_global)
@atexit.register
def _dump():
    sys.settrace(None)
    if _lines:
        out = os.path.join(os.environ["MUT_TRACE_DIR"], "%d.json" % os.getpid())
        with open(out, "w") as f:
            json.dump({"test": os.environ.get("MUT_TRACE_TEST", ""), "lines": sorted(_lines)}, f)
'''


def trace_tests(copy: Path, files: list[str], tests: list[str], trace_dir: Path) -> dict:
    """Runs in a fresh process inside `copy`: every test once, recording the lines of `files`
    it executes (itself and its subprocesses), its duration and outcome."""
    import threading

    import pytest

    wanted = {str(copy / f) for f in files}
    per_test: dict[str, set] = {}
    current: set = set()

    def local(frame, event, arg):
        if event == "line":
            current.add((frame.f_code.co_filename, frame.f_lineno))
        return local

    def glob(frame, event, arg):
        return local if frame.f_code.co_filename in wanted else None

    class Plugin:
        durations: dict[str, float] = {}
        outcomes: dict[str, str] = {}

        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_protocol(self, item, nextitem):
            nonlocal current
            current = set()
            os.environ["MUT_TRACE_TEST"] = item.nodeid
            sys.settrace(glob)
            threading.settrace(glob)
            t = time.monotonic()
            yield
            sys.settrace(None)
            threading.settrace(None)
            self.durations[item.nodeid] = time.monotonic() - t
            per_test[item.nodeid] = current

        def pytest_runtest_logreport(self, report):
            if report.failed:
                self.outcomes[report.nodeid] = "failed"
            elif report.skipped:
                self.outcomes.setdefault(report.nodeid, "skipped")
            elif report.when == "call":
                self.outcomes.setdefault(report.nodeid, "passed")

    plugin = Plugin()
    rc = pytest.main(["-q", "--no-header", "-p", "no:cacheprovider", "-p", "no:xdist", "-o", "addopts=", *tests],
                     plugins=[plugin])
    per_sub: dict[str, set] = {}
    for dump in trace_dir.glob("*.json"):  # the kvprov subprocesses' lines
        data = json.loads(dump.read_text())
        per_sub.setdefault(data["test"], set()).update(map(tuple, data["lines"]))
    out: dict = {"rc": int(rc), "durations": plugin.durations, "outcomes": plugin.outcomes}
    for key, source in (("lines", per_test), ("subprocess_lines", per_sub)):
        lines: dict[str, dict[str, list[int]]] = out.setdefault(key, {})
        for test, hits in source.items():
            if plugin.outcomes.get(test) != "passed":
                continue
            for filename, line in sorted(hits):
                if filename in wanted:
                    lines.setdefault(str(Path(filename).relative_to(copy)), {}).setdefault(test, []).append(line)
    return out


# ---------------------------------------------------------------------------- phase 2: one job

def _live_functions(modules: list, qualname: str) -> list:
    """The function objects (in every loaded copy of the module) named qualname."""
    found = []
    for mod in modules:
        obj = mod
        parts = qualname.split(".")
        for part in parts:
            obj = vars(obj).get(part) if hasattr(obj, "__dict__") else None
            if isinstance(obj, (staticmethod, classmethod)):
                obj = obj.__func__
            elif isinstance(obj, property):
                obj = obj.fget
            if obj is None:
                return []
        while hasattr(obj, "__wrapped__"):
            obj = obj.__wrapped__
        if not hasattr(obj, "__code__"):
            return []
        found.append(obj)
    return found


def _code_named(code, qualname: str):
    for const in code.co_consts:
        if hasattr(const, "co_qualname"):
            if const.co_qualname == qualname:
                return const
            inner = _code_named(const, qualname)
            if inner is not None:
                return inner
    return None


def worker(copy: Path, files: list[str], tests: list[str]) -> None:
    """A job: one pytest session inside `copy` that collects the tests once; then per mutant
    (a JSON line on stdin) it writes the mutated file, forks a child that plants the mutant
    and runs the mutant's tests, restores the file and answers a JSON line on stdout."""
    import gc
    import types

    import pytest
    from _pytest.runner import runtestprotocol

    jobs = os.fdopen(os.dup(0), "r")
    out = os.fdopen(os.dup(1), "w", buffering=1)
    note = copy.with_suffix(".note")  # the child's word to the job: the failing test, or the harness's error
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)

    def loaded_copies() -> dict[str, list]:
        modules: dict[str, list] = {}
        for obj in gc.get_objects():
            if isinstance(obj, types.ModuleType) and getattr(obj, "__file__", None):
                try:
                    rel = str(Path(obj.__file__).resolve().relative_to(copy))
                except ValueError:
                    continue
                if rel in files:
                    modules.setdefault(rel, []).append(obj)
        return modules

    def child(job: dict, items: dict, modules: dict, code) -> int:
        """0: every test passed, 1: one failed; 10 + N: a fresh session's pytest exit N other than 0 and 1
        (a collection error, ...), which is not counted as a kill."""
        fresh = job.get("control") is None and job["scope"] == "<module>" and not job["again"]
        if job.get("control") is None and not fresh:
            try:
                if job["again"]:  # a constant: bind it (and those built from it) anew
                    if not modules.get(job["path"]):
                        raise LookupError("the module is not loaded")
                    lines = job["source"].splitlines(keepends=True)
                    for a, b in job["again"]:
                        stmt = compile("\n" * (a - 1) + "".join(lines[a - 1:b]), job["path"], "exec")
                        for mod in modules[job["path"]]:
                            exec(stmt, vars(mod))
                else:
                    live = _live_functions(modules.get(job["path"], []), job["scope"])
                    new = _code_named(code, live[0].__code__.co_qualname) if live else None
                    if new is None:
                        raise LookupError(f"no function {job['scope']} loaded")
                    for fn in live:
                        fn.__code__ = new  # ValueError when the mutant changes its free variables (super() dropped)
            except Exception:
                fresh = True  # it could not be planted in place: the project is imported anew from the mutated copy
        if fresh:  # a fresh session, importing the project from the mutated copy
            for name in [n for n in sys.modules if n == "kvprov" or n.startswith(("kvprov.", "tests"))
                         or n in ("kvprov_mount_state", "kvprov_collect")]:
                del sys.modules[name]
            rc = int(pytest.main([*PYTEST_ARGS, "-p", "no:xdist", *job["tests"]]))
            if rc == 4:  # tests not found: their parameters come from the mutated constant; their files whole
                rc = int(pytest.main([*PYTEST_ARGS, "-p", "no:xdist", *sorted({t.split("::")[0] for t in job["tests"]})]))
            return rc if rc in (0, 1) else 10 + rc
        for nodeid in job["tests"]:
            reports = runtestprotocol(items[nodeid], log=False, nextitem=None)
            if any(r.failed for r in reports):
                note.write_text(nodeid)
                return 1
        return 0

    def fork(body) -> int:
        """A child in its own process group (a timeout kills it with whatever it started) that
        exits with body()'s code; an exception in body is the harness's failure, not a test's:
        exit 8, with it in the note. Returns the child's pid."""
        note.unlink(missing_ok=True)
        pid = os.fork()
        if pid == 0:
            os.setpgid(0, 0)
            try:
                rc = body()
            except BaseException as e:  # noqa: B036
                note.write_text(f"{type(e).__name__}: {e}"[:200])
                rc = 8
            os._exit(rc)
        return pid

    def control(items: dict, modules: dict) -> dict:
        """Every test a mutant may run, on the unmutated code, through the same fork as a mutant's."""
        t = time.monotonic()
        pid = fork(lambda: child({"control": True, "tests": list(items)}, items, modules, None))
        rc = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        return {"rc": rc, "tests": len(items), "seconds": round(time.monotonic() - t, 1),
                "note": note.read_text() if note.exists() else ""}

    class Loop:
        @pytest.hookimpl(tryfirst=True)
        def pytest_runtestloop(self, session):
            items = {item.nodeid: item for item in session.items}
            modules = loaded_copies()
            print(json.dumps({"ready": True, "control": control(items, modules)}), file=out)
            for line in jobs:
                job = json.loads(line)
                missing = [t for t in job["tests"] if t not in items]
                if missing:
                    print(json.dumps({"id": job["id"], "status": f"error (not collected: {missing[0]})", "seconds": 0}),
                          file=out)
                    continue
                path = copy / job["path"]
                assert path.resolve().is_relative_to(copy), path
                original = path.read_text()
                path.write_text(job["source"])
                t = time.monotonic()

                def plant_and_run(job=job) -> int:
                    try:
                        code = compile(job["source"], job["path"], "exec")
                    except SyntaxError:
                        return 7
                    return child(job, items, modules, code)

                pid = fork(plant_and_run)
                status = "timeout"
                deadline = t + job["timeout"]
                while True:
                    done, wstatus = os.waitpid(pid, os.WNOHANG)
                    if done:
                        code = os.waitstatus_to_exitcode(wstatus)
                        status = {0: "survived", 1: "killed", 7: "error (does not compile)"}.get(code, f"error (exit {code})")
                        if code == 8:
                            status = f"error (planting it: {note.read_text() if note.exists() else '?'})"
                        elif code > 10:
                            status = f"error (pytest exit {code - 10} in a fresh session)"
                        break
                    if time.monotonic() > deadline:
                        try:
                            os.killpg(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                        os.waitpid(pid, 0)
                        break
                    time.sleep(0.005)
                path.write_text(original)
                print(json.dumps({"id": job["id"], "status": status, "seconds": round(time.monotonic() - t, 2)}),
                      file=out)
            return True

    pytest.main([*PYTEST_ARGS, "-p", "no:xdist", *tests], plugins=[Loop()])


# ---------------------------------------------------------------------------- the run

def enclosing_lines(copy: Path, rel: str) -> dict[int, tuple[int, int]]:
    """line -> (first, last) line of the statement (or the compound statement's header)
    holding it: a mutant on a multi-line expression is run by the tests that execute any of
    its lines."""
    tree = ast.parse((copy / rel).read_text())
    out: dict[int, tuple[int, int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.If, ast.For,
                                                                ast.While, ast.With, ast.Try, ast.AsyncFunctionDef)):
            span = (node.lineno, node.end_lineno)
        elif isinstance(node, (ast.If, ast.For, ast.While, ast.With)) and node.body[0].lineno - 1 > node.lineno:
            span = (node.lineno, node.body[0].lineno - 1)  # a header over several lines (Python reports its first)
        else:
            continue
        for ln in range(span[0], span[1] + 1):
            first, last = out.get(ln, span)
            if span[1] - span[0] <= last - first:
                out[ln] = span
    return out


def trace(copy: Path, files: list[str], tests: list[str], tmp: Path) -> None:
    site = tmp / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    trace_dir = tmp / "trace"
    trace_dir.mkdir()
    spec = tmp / "trace.json"
    spec.write_text(json.dumps({"files": files, "tests": tests, "trace_dir": str(trace_dir),
                                "out": str(tmp / "traced.json")}))
    env = child_env(copy, {"MUT_TRACE_DIR": str(trace_dir),
                           "MUT_TRACE_FILES": os.pathsep.join(str(copy / f) for f in files)})
    env["PYTHONPATH"] = os.pathsep.join([str(copy), str(site)])
    r = subprocess.run([sys.executable, str(copy / "benchmarks/mutation.py"), "--_trace", str(copy), str(spec)],
                       cwd=copy, env=env, capture_output=True, text=True)
    if r.returncode != 0 or not (tmp / "traced.json").exists():
        print(r.stdout[-3000:], r.stderr[-3000:], sep="\n")
        raise SystemExit("mutation: tracing the unit tests failed (above)")


def reader_lines(copy: Path, rel: str) -> dict[int, set[int]]:
    """line of a module-level assignment -> the lines of the module's functions (and methods)
    that read a name it binds: whoever else imports the name, these are the tests to try first."""
    tree = ast.parse((copy / rel).read_text())
    functions = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    functions += [m for c in tree.body if isinstance(c, ast.ClassDef) for m in c.body
                  if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
    loads = {f: {n.id for n in ast.walk(f) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
             for f in functions}
    out: dict[int, set[int]] = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            lines = {ln for f in functions if loads[f] & names for ln in range(f.lineno, f.end_lineno + 1)}
            for ln in range(stmt.lineno, stmt.end_lineno + 1):
                out[ln] = lines
    return out


def module_level(copy: Path, rel: str, elsewhere: str) -> dict[int, tuple[list, list | None]]:
    """line of a module-level statement -> (the line ranges whose tests can see a mutant in it,
    the statements to run again to plant it, or None for a fresh import). For a constant: the
    functions that read it, directly or through constants built from it (run again after it);
    for a def's decorators and defaults: that function, by a fresh import. Absent where that
    cannot be told (a name another module uses, a class body ...): every test of the module
    runs, on a fresh import."""
    tree = ast.parse((copy / rel).read_text())
    functions = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    functions += [m for c in tree.body if isinstance(c, ast.ClassDef) for m in c.body
                  if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assigns = [n for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))]

    def loads(node: ast.AST) -> set[str]:
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}

    def stores(node: ast.Assign | ast.AnnAssign) -> set[str] | None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if not all(isinstance(t, ast.Name) for t in targets):
            return None
        names = {t.id for t in targets}
        return None if any(re.search(rf"\b{n}\b", elsewhere) for n in names) else names

    out: dict[int, tuple[list, list | None]] = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            plan = ([(stmt.lineno, stmt.end_lineno)], None)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stores(stmt):
            names, again = set(stores(stmt)), [stmt]
            for later in assigns[assigns.index(stmt) + 1:]:  # constants built from this one
                if loads(later) & names:
                    more = stores(later)
                    if more is None:
                        break
                    names |= more
                    again.append(later)
            else:
                ranges = [(f.lineno, f.end_lineno) for f in functions if loads(f) & names]
                if not ranges:
                    continue
                # a default argument was bound when its def ran: binding the constant anew changes
                # nothing there, so such a mutant is planted by a fresh import
                bound = any(loads(d) & names for f in functions if loads(f) & names
                            for d in [*f.args.defaults, *(k for k in f.args.kw_defaults if k)])
                plan = (ranges, None if bound else [(n.lineno, n.end_lineno) for n in again])
                for ln in range(stmt.lineno, stmt.end_lineno + 1):
                    out[ln] = plan
            continue
        else:
            continue
        for ln in range(stmt.lineno, stmt.end_lineno + 1):
            out[ln] = plan
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--module", action="append", help="a file or directory to mutate (repeatable; default: all of "
                    + ", ".join(MODULES) + ")")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--max-tests", type=int, default=100, metavar="N",
                    help="run at most N of the tests that execute the line of a mutant (for one at module level: "
                         "of the tests that run the module or read the constant), the module's "
                         "own test files first, then the fastest (default "
                         "100: the fast rule tests execute most of check.py and would take every slot of a lower cap; a killed "
                         "mutant stops at its first failing test, so the cap costs time on survivors only)")
    ap.add_argument("--json", type=Path, default=RESULTS / "mutation.json")
    ap.add_argument("--survivors-of", type=Path, metavar="JSON",
                    help="run only the mutants a previous run's JSON (--json) did not record as killed, on the same "
                         "code (its files' hashes must match): a quick re-check after adding tests; the others keep "
                         "that run's status, and the record is updated")
    ap.add_argument("--stale", action="store_true",
                    help=f"run only the target files whose content no longer matches the hash in {RECORD.name} "
                         f"(or that it lacks), and update their record; the others keep theirs")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copies (their path is printed)")
    ap.add_argument("--sample", type=int, metavar="N",
                    help="run N of the mutants only, spread evenly over the files (a trial run; implies --no-record)")
    ap.add_argument("--no-record", action="store_true",
                    help=f"write --json only, not {RECORD.name} nor {SUMMARY.name} (a trial run: CI's smallest form, "
                         "tests/unit/test_mutation_smallest.py)")
    ap.add_argument("--reuse-trace", type=Path, help=argparse.SUPPRESS)  # development: phase 1 read from/saved to FILE
    ap.add_argument("--_trace", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--_worker", help=argparse.SUPPRESS)
    args, rest = ap.parse_known_args()

    if args._trace:  # internal: phase 1 inside a copy
        copy, spec = Path(args._trace[0]), json.loads(Path(args._trace[1]).read_text())
        result = trace_tests(copy, spec["files"], spec["tests"], Path(spec["trace_dir"]))
        Path(spec["out"]).write_text(json.dumps(result))
        return 0
    if args._worker:
        spec = json.loads(Path(args._worker).read_text())
        worker(Path(spec["copy"]), spec["files"], spec["tests"])
        return 0

    started = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the temporary copies go with an interrupted run too
    tmp = Path(tempfile.mkdtemp(prefix="kvprov-mutation-"))
    print(f"mutation: private copies under {tmp}", flush=True)
    procs: list[subprocess.Popen] = []
    try:
        return run(args, tmp, procs, started)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


def run(args, tmp: Path, procs: list, started: float) -> int:
    jobs = max(1, args.jobs)
    copies = [tmp / f"copy{j}" for j in range(jobs)]
    # the commit the copies were taken at (the run may outlast later commits)
    args.at_commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                                    text=True).stdout.strip()
    for c in copies:
        copy_checkout(ROOT, c)
    files = target_files(copies[0], args.module or MODULES)
    if args.stale:
        recorded = read_record()["files"]
        files = [f for f in files if recorded.get(f, {}).get("sha256") != content_hash(copies[0], f)]
        print(f"mutation: --stale: {len(files)} target file(s) differ from their record"
              + (f": {', '.join(files)}" if files else ""), flush=True)
        if not files:
            write_summary(read_record(), [])
            return 0
    tests = sorted({str(p.relative_to(copies[0])) for p in (copies[0] / "tests/unit").glob("test_*.py")
                    if any(fnmatch(p.name, pat) for f in files for pat in test_patterns(f))})
    mutants = [m for f in files for m in mutants_of(copies[0], f)]
    if args.sample:
        mutants = mutants[::max(1, len(mutants) // args.sample)][:args.sample]
        args.no_record = True
    every_id = {m.id for m in mutants}
    every_mutant = mutants
    if args.survivors_of:
        earlier = json.loads(args.survivors_of.read_text())
        hashes = earlier.get("hashes") or {rel: f["sha256"] for rel, f in read_record()["files"].items()
                                            if f["commit"] == earlier.get("commit")}
        changed = [f for f in files if hashes.get(f) != content_hash(copies[0], f)]
        if changed:
            raise SystemExit(f"mutation: --survivors-of: {', '.join(changed)} changed since that run (or it did not "
                             "run them): run them whole")
        before = {m["id"]: m["status"] for m in earlier["mutants"]}
        mutants = [m for m in mutants if before.get(m.id, "new") not in ("killed", "timeout", "equivalent")]
        again = {id(m) for m in mutants}
        for m in every_mutant:  # what that run found for the mutants not run again (the code is the same)
            if id(m) not in again:
                m.status = before[m.id]
    equivalent = read_equivalent(EQUIVALENT)
    print(f"mutation: {len(mutants)} mutants in {len(files)} files; tracing {len(tests)} unit test files",
          flush=True)

    # phase 1
    t = time.monotonic()
    if args.reuse_trace and args.reuse_trace.exists():
        shutil.copy(args.reuse_trace, tmp / "traced.json")
    else:
        trace(copies[0], sorted(set(files) | set(target_files(copies[0], MODULES) if args.reuse_trace else [])),
              tests, tmp)
        if args.reuse_trace:
            shutil.copy(tmp / "traced.json", args.reuse_trace)
    traced = json.loads((tmp / "traced.json").read_text())
    failed = sorted(t for t, o in traced["outcomes"].items() if o == "failed")
    print(f"mutation: traced {len(traced['outcomes'])} tests in {time.monotonic() - t:.0f} s", flush=True)
    if failed:  # the control run: a test that fails without any mutant would count every mutant it runs as killed
        raise SystemExit(f"mutation: {len(failed)} unit test(s) fail on the unmutated code; fix them first: "
                         + ", ".join(failed))
    durations: dict[str, float] = traced["durations"]

    # which tests each mutant runs: those of its module's test files that execute its line
    # in-process (else in a `kvprov` subprocess), fastest first; none slower than SLOW
    slow = sorted(t for t, d in durations.items() if d > SLOW)
    todo: list[Mutant] = []
    for rel in files:
        pats = test_patterns(rel)

        def usable(test: str) -> bool:
            return test not in slow and any(fnmatch(test.split("::")[0].rsplit("/", 1)[-1], p) for p in pats)

        by_line: dict[str, dict[int, set]] = {}
        for key in ("lines", "subprocess_lines"):
            for test, lines in traced[key].get(rel, {}).items():
                if usable(test):
                    for ln in lines:
                        by_line.setdefault(key, {}).setdefault(ln, set()).add(test)
        stmt = enclosing_lines(copies[0], rel)
        elsewhere = "\n".join(p.read_text() for p in sorted((copies[0] / "kvprov").rglob("*.py"))
                              if str(p.relative_to(copies[0])) != rel)
        planted = module_level(copies[0], rel, elsewhere)
        readers = reader_lines(copies[0], rel)
        own_stem = Path(rel).stem.replace("-", "_").removeprefix("kvprov_")  # kvprov-kv-key.py: test_kv_key.py
        # a test of the module's own test files may read a constant only (the import that runs
        # the assignment is not traced to any test): every module-level mutant runs them too
        own_tests = {t for t in durations if usable(t) and own_stem in t.split("::")[0].rsplit("/", 1)[-1]}
        for m in (m for m in mutants if m.path == rel):
            if m.id in equivalent:
                m.status = "equivalent"
                continue
            chosen: set = set()
            for key in ("lines", "subprocess_lines"):
                if not chosen:
                    if m.scope == "<module>" and m.line in planted:
                        ranges, m.again = planted[m.line]
                        chosen = set().union(*(by_line.get(key, {}).get(ln, set())
                                               for a, b in ranges for ln in range(a, b + 1))) | own_tests
                    elif m.scope == "<module>":  # run at import: every test that runs the module
                        chosen = set().union(*by_line.get(key, {}).values()) | own_tests
                    else:
                        first, last = stmt.get(m.line, (m.line, m.line))
                        chosen = set().union(*(by_line.get(key, {}).get(ln, set()) for ln in range(first, last + 1)))
            if not chosen:
                m.status = "not covered"
                continue
            m.tests = len(chosen)
            own = Path(rel).stem.removeprefix("kvprov_")  # the module's own test files first (test_mountstats*.py ...)
            # for a module-level one, the tests that run a function reading the names its statement
            # binds come before all others (they are the ones that can see it, and the cap below keeps them)
            near = set().union(*(by_line.get(key, {}).get(ln, set()) for key in ("lines", "subprocess_lines")
                                 for ln in readers.get(m.line, ()))) if m.scope == "<module>" else set()
            m.run = sorted(chosen, key=lambda n: (n not in near, own not in n.split("::")[0].rsplit("/", 1)[-1],
                                                  durations.get(n, 1.0), n))
            # a module-level one is capped too (its tests are every test that runs the module, or every
            # reader of the constant: hundreds for kvprov/check/values.py, minutes per survivor otherwise)
            m.run = m.run[:args.max_tests]
            todo.append(m)
    if slow:
        print(f"mutation: {len(slow)} tests slower than {SLOW:.0f} s are left out: {', '.join(slow)}", flush=True)
    unknown = sorted(i for i in set(equivalent) - every_id if i.split("::")[0] in files)
    print(f"mutation: {len(todo)} mutants to run, {sum(m.status == 'not covered' for m in mutants)} not covered "
          f"by any test, {sum(m.status == 'equivalent' for m in mutants)} listed as equivalent", flush=True)

    # phase 2
    wspec = tmp / "worker.json"
    needed = sorted({n.split("::")[0] for m in todo for n in m.run})
    workers = []
    for c in copies:
        ws = c.with_suffix(".json")
        ws.write_text(json.dumps({"copy": str(c), "files": files, "tests": needed}))
        p = subprocess.Popen([sys.executable, str(c / "benchmarks/mutation.py"), "--_worker", str(ws)], cwd=c,
                             env=child_env(c), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, bufsize=1)
        procs.append(p)
        workers.append(p)
    del wspec
    controls = []
    for p in workers:
        ready = json.loads(p.stdout.readline() or "{}")
        if ready.get("ready") is not True:
            raise SystemExit("mutation: a job did not start (run the unit tests by hand to see why)")
        c = ready["control"]
        if c["rc"] != 0:  # the same fork and test runner as every mutant's, on the unmutated code
            raise SystemExit(f"mutation: control run failed (exit {c['rc']}) on the unmutated code in a job: "
                             f"{c['note'] or 'see the unit tests'}")
        controls.append(c)
    print(f"mutation: control run: the {controls[0]['tests']} tests the mutants may run pass on the unmutated code "
          f"through the job's fork ({controls[0]['seconds']:.0f} s)", flush=True)
    by_id = {m.id: m for m in todo}
    def cost(m: Mutant) -> float:
        return sum(durations.get(n, 1.0) for n in m.run)

    file_cost: dict[str, float] = {}
    for m in todo:
        file_cost[m.path] = file_cost.get(m.path, 0.0) + cost(m)
    # file by file, the cheapest file first (pop() takes the last): an interrupted run records the files it finished
    queue = sorted(todo, key=lambda m: (-file_cost[m.path], m.path, -cost(m)))
    busy: dict[int, str] = {}
    fd_of = {p.stdout.fileno(): p for p in workers}

    def send(p):
        m = queue.pop()
        secs = sum(durations.get(n, 1.0) for n in m.run)
        p.stdin.write(json.dumps({"id": m.id, "path": m.path, "scope": m.scope, "source": m.source, "again": m.again,
                                  "tests": m.run, "timeout": 2 * secs + 10}) + "\n")
        p.stdin.flush()
        busy[p.pid] = m.id

    for p in workers:
        if queue:
            send(p)
    try:
        run_queue(workers, busy, queue, send, by_id, fd_of, todo, started)
    except (KeyboardInterrupt, SystemExit) as e:  # interrupted: record the files whose every mutant ran
        finished = [f for f in files if all(m.status for m in every_mutant if m.path == f)]
        print(f"mutation: interrupted ({e}); recording the {len(finished)} file(s) finished: {', '.join(finished)}",
              flush=True)
        if not finished:
            raise
        files = finished
        every_mutant = [m for m in every_mutant if m.path in finished]
    return report(args, every_mutant, files, equivalent, unknown, started,
                  controls[0]["tests"] if controls else 0, copies[0])


def run_queue(workers, busy, queue, send, by_id, fd_of, todo, started) -> None:
    done, last_print = 0, 0.0
    while busy:
        ready, _, _ = select.select([p.stdout for p in workers if p.pid in busy], [], [])
        for f in ready:
            p = fd_of[f.fileno()]
            line = p.stdout.readline()
            if not line:
                raise SystemExit(f"mutation: a job died while running {busy[p.pid]}")
            res = json.loads(line)
            m = by_id[res["id"]]
            m.status, m.seconds = res["status"], res["seconds"]
            del busy[p.pid]
            done += 1
            if m.status not in ("killed", "timeout"):
                print(f"  {m.status}: {m.where()}", flush=True)
            if queue:
                send(p)
        if time.monotonic() - last_print > 15 or not busy:
            last_print = time.monotonic()
            killed = sum(m.status in ("killed", "timeout") for m in todo)
            print(f"mutation: {done}/{len(todo)} run, {killed} killed, {time.monotonic() - started:.0f} s",
                  flush=True)


SCORED = ("killed / scored, where scored = all mutants - the equivalent ones = killed + survived + not covered "
          "+ error; a timeout counts as killed")


def file_stats(rel: str, mutants: list[Mutant]) -> dict:
    d = {"mutants": len(mutants), "killed": 0, "equivalent": 0, "survived": 0, "not_covered": 0, "error": 0}
    for m in mutants:
        key = ("killed" if m.status in ("killed", "timeout") else "equivalent" if m.status == "equivalent"
               else "not_covered" if m.status == "not covered" else "survived" if m.status == "survived" else "error")
        d[key] += 1
    return d


def scores(record: dict) -> dict[str, dict]:
    """Per target (MODULES entry) and overall, from the record's files."""
    per: dict[str, dict] = {}
    for rel, f in record["files"].items():
        for key in (target_of(rel), "overall"):
            d = per.setdefault(key, {"mutants": 0, "killed": 0, "equivalent": 0, "survived": 0, "not_covered": 0,
                                     "error": 0})
            for k in d:
                d[k] += f[k]
    for d in per.values():
        d["scored"] = d["mutants"] - d["equivalent"]
        d["score"] = round(100.0 * d["killed"] / d["scored"], 1) if d["scored"] else 100.0
    return per


def write_summary(record: dict, unknown: list[str]) -> None:
    """benchmarks/results/mutation.txt from the record: the score per target, then every survivor."""
    per = scores(record)
    head = "mutation score (killed / scored mutants):"
    out = [head]
    for key in sorted(per, key=lambda k: (k == "overall", k)):
        d = per[key]
        out.append(f"  {key:52} {d['killed']:5} / {d['scored']:5}  {d['score']:5.1f} %"
                   + (f"  ({d['equivalent']} equivalent)" if d["equivalent"] else ""))
    o = per.get("overall", {})
    out.append(f"  scored = {SCORED}; overall: {o.get('killed', 0)} killed, {o.get('survived', 0)} survived, "
               f"{o.get('not_covered', 0)} not covered, {o.get('error', 0)} error")
    runs: dict[str, list[str]] = {}
    for rel, f in sorted(record["files"].items()):
        runs.setdefault(f"commit {f['commit'][:12]}{' + changes' if f['uncommitted'] else ''}, {f['date']}",
                        []).append(rel)
    out.append("  each file's figures are from the run that last mutated it (its content hash is in "
               f"{RECORD.name}; {REFRESH} reruns the files that changed):")
    for run, rels in sorted(runs.items(), key=lambda x: x[0].split(", ")[-1]):
        out.append(f"    {run}: {len(rels)} file(s)" + (f" ({', '.join(rels)})" if len(rels) <= 4 else ""))
    for r in record.get("runs", [])[-3:]:
        out.append(f"    run {r['date']}: {r['files']} file(s), {r['mutants']} mutants in {r['minutes']} min, "
                   f"{r['jobs']} job(s), at most {r['max_tests']} tests a mutant; control: {r['control_tests']} "
                   f"tests passed unmutated")
    out += ["", "surviving mutants:"]
    for rel, f in sorted(record["files"].items()):
        out += [f"  {s['where']}  [{s['status']}]" for s in f["survivors"]]
    if unknown:
        out += ["", f"{EQUIVALENT.name}: entries matching no mutant any more (remove or update them):"]
        out += [f"  {ident}" for ident in unknown]
    live = [f"{path}:{func} ({why})" for path, funcs in LIVE.items() if path in record["files"]
            for func, why in funcs.items()]
    if live:
        out += ["", "not mutated, they run only against live hosts (the lab tests'):"] + [f"  {x}" for x in live]
    only = [f"{path}: only {', '.join(funcs)}" for path, funcs in ONLY.items() if path in record["files"]]
    if only:
        out += ["", "files of which only the checking functions are mutated:"] + [f"  {x}" for x in only]
    SUMMARY.write_text("\n".join(out) + "\n")
    print("\n" + "\n".join(out[:out.index("surviving mutants:")]))


def report(args, mutants: list[Mutant], files: list[str], equivalent: dict, unknown: list, started: float,
           control_tests: int, copy: Path) -> int:
    """Writes the run's JSON (every mutant), updates the record of the files it ran (the hash of
    what was mutated: the private copy's, taken when the run began) and the summary."""
    elapsed = time.monotonic() - started
    survivors = [m for m in mutants if m.status not in ("killed", "timeout", "equivalent")]
    commit = args.at_commit

    def dirty(rel: str) -> bool:  # the mutated copy is not the file at that commit
        at_head = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{rel}"], capture_output=True, text=True)
        return at_head.returncode != 0 or at_head.stdout != (copy / rel).read_text()

    data = {
        "command": " ".join(["python3 benchmarks/mutation.py", *sys.argv[1:]]),
        "commit": commit, "jobs": args.jobs, "max_tests": args.max_tests, "minutes": round(elapsed / 60, 1),
        "files": files, "control_tests": control_tests, "scored": SCORED,
        "hashes": {rel: content_hash(copy, rel) for rel in files},
        "survivors_of": str(args.survivors_of) if args.survivors_of else None,
        "not_mutated": {path: funcs for path, funcs in LIVE.items() if path in files},
        "equivalent": [{"id": m.id, "where": m.where(), "why": equivalent[m.id]} for m in mutants
                       if m.status == "equivalent"],
        "survivors": [{"id": m.id, "where": m.where(), "status": m.status} for m in survivors],
        "mutants": [{k: v for k, v in asdict(m).items() if k not in ("source", "run", "again")} for m in mutants],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(data, indent=1) + "\n")
    print(f"  written: {args.json} (every mutant)")
    if args.no_record:
        return 0
    record = read_record()
    date = time.strftime("%Y-%m-%d %H:%M")
    for rel in files:
        ms = [m for m in mutants if m.path == rel]
        record["files"][rel] = {
            "sha256": content_hash(copy, rel), "commit": commit, "uncommitted": dirty(rel), "date": date,
            "survivors_rerun": bool(args.survivors_of),  # the earlier run's kills kept (same code), the rest run again
            **file_stats(rel, ms),
            "survivors": [{"where": m.where(), "status": m.status} for m in ms
                          if m.status not in ("killed", "timeout", "equivalent")],
            "equivalent_mutants": [{"where": m.where(), "why": equivalent[m.id]} for m in ms
                                   if m.status == "equivalent"],
        }
    every = set(target_files(ROOT, MODULES))
    record["files"] = {rel: f for rel, f in sorted(record["files"].items()) if rel in every}
    record.setdefault("runs", []).append({"date": date, "commit": commit, "files": len(files),
                                          "mutants": len(mutants), "minutes": round(elapsed / 60, 1),
                                          "jobs": args.jobs, "max_tests": args.max_tests,
                                          "control_tests": control_tests})
    record["runs"] = record["runs"][-10:]
    record["scored"] = SCORED
    record["refresh"] = REFRESH
    RECORD.write_text(json.dumps(record, indent=1) + "\n")
    write_summary(record, unknown)
    print(f"  written: {RECORD}, {SUMMARY}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
