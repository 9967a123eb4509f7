"""benchmarks/mutation.py in its smallest form (#41 item 5: benchmarks that cannot rot): a few
mutants of one small target, for real (its unit tests traced, each mutant planted and its tests
run), writing only the run's JSON, never the committed record or summary."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks/results"


def test_a_sample_of_mutants_of_one_module(tmp_path):
    committed = {p: p.read_bytes() for p in (RESULTS / "mutation-record.json", RESULTS / "mutation.txt")}
    out = tmp_path / "mutation.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks/mutation.py"), "--module", "kvprov/tunnel.py",
                        "--jobs", "1", "--sample", "4", "--json", str(out)], capture_output=True, text=True,
                       timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["files"] == ["kvprov/tunnel.py"] and len(data["mutants"]) == 4, data["files"]
    statuses = [m["status"] for m in data["mutants"]]
    assert set(statuses) <= {"killed", "timeout", "survived", "not covered", "equivalent"}, statuses
    assert "killed" in statuses, statuses  # the suite kills mutants of this file (its record: 98 %)
    assert all(p.read_bytes() == before for p, before in committed.items())  # a trial: the record untouched
