"""Benchmarks that cannot rot (#41 item 5): the lab's benchmarks the docs name, each in its
smallest form on the running, deployed lab (no restart; one host, one round, the lab left as
it was). Their figures mean nothing here; what is asserted is that each runs end to end and
reports what it measured. The benchmarks that need no lab: tests/unit/test_benchmarks_smallest.py."""

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.lab

GPU1_SSH = ("ssh -p 2221 -i /var/lib/kvprov/lab/id_ed25519 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
            "-o LogLevel=ERROR -o BatchMode=yes root@127.0.0.1")


def bench(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-3000:]
    return r


def test_scale_on_one_running_container(lab, tmp_path):
    """benchmarks/scale.py on kvlab-c1 (deployed by test_2): its first (here no-op) deploy, the
    drift, the audit finding exactly that host, the drift deployed back; a table and a chart."""
    out, chart = tmp_path / "scale.json", tmp_path / "scale.png"
    r = bench("benchmarks/scale.py", "--hosts", "kvlab-c1", "--rounds", "1", "--only", "audit", "--variants", "0",
              "--json", str(out), "--chart", str(chart))
    [size] = json.loads(out.read_text())["sizes"]
    assert size["hosts"] == 1 and size["findings"]["audit"] == ["kvlab-c1"] == size["drifted"], size
    assert {"first deploy", "audit", "drift deploy"} <= set(size["commands"]), size["commands"]
    assert all(c["rc"] == [0] or name == "audit" for name, c in size["commands"].items()), size["commands"]
    assert chart.stat().st_size > 10_000 and chart.read_bytes()[:4] == b"\x89PNG"
    assert "audit" in r.stdout
    # the drift is gone: the host audits clean again
    audit = subprocess.run([sys.executable, "-m", "kvprov", "audit", lab["inventory"], "--limit", "kvlab-c1"],
                           capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert audit.returncode == 0, audit.stdout[-3000:]


def test_lab_benchmark_on_the_running_lab(lab):
    """benchmarks/lab.py --reuse: the cached image build and fio on a hand mount of the export
    from kvlab-gpu1 (the lab not restarted; its mount removed after)."""
    r = bench("benchmarks/lab.py", "--reuse", "--fio-size", "8M")
    rows = dict(line.rsplit("  ", 1) for line in r.stdout.splitlines() if "  " in line.strip())
    assert any(k.startswith("image build, cached") for k in rows), r.stdout
    for op in ("write", "read"):
        [figure] = [v for k, v in rows.items() if k.startswith(f"fio {op}")]
        assert figure.strip().endswith("MB/s") and float(figure.split()[0]) > 0, r.stdout


def test_visibility_with_one_host_in_both_roles(lab, tmp_path):
    """benchmarks/visibility.py with kvlab-gpu1 as writer and reader, one variant, one trial: the
    file is seen, and the variant mount is gone afterwards."""
    out = tmp_path / "visibility.json"
    bench("benchmarks/visibility.py", "--writer-ssh", GPU1_SSH, "--reader-ssh", GPU1_SSH, "--variant", "default",
          "--trials", "1", "--timeout", "30", "--json", str(out))
    [result] = json.loads(out.read_text())["results"]
    assert result["stat"]["not_seen"] == result["open"]["not_seen"] == 0 and result["miss_stat_us"] > 0, result
    left = subprocess.run([*GPU1_SSH.split(), "findmnt -rn -o TARGET | grep -c kvprov-visibility || true"],
                          capture_output=True, text=True, timeout=60)
    assert left.stdout.strip() == "0", left.stdout
