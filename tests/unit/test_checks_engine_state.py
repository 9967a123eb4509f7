"""engine.<instance>.state on the GPU host's bundle (gpu_a01) with the unit's `systemctl
show` edited: running, still starting, restarted, stopped, failed."""

from kvprov.validate import bundle as bf
from kvprov.validate import evaluate as ev
from kvprov.validate.bundle import Bundle
from kvprov.validate.result import FAIL, PASS, WARN
from tests.conftest import FIXTURES

ROOT = FIXTURES / "bundles/gpu_a01"
FILES = {str(p.relative_to(ROOT)): p.read_bytes() for p in ROOT.rglob("*") if p.is_file()}
UNIT = "kvprov-sglang-gpu0-3.service"
SHOW = f"systemctl/{UNIT}.txt"


def state(active: str, sub: str, restarts: str = "0"):
    text = FILES[SHOW].decode()
    for old, new in (("ActiveState=active", f"ActiveState={active}"), ("SubState=running", f"SubState={sub}"),
                     ("NRestarts=0", f"NRestarts={restarts}")):
        assert old in text
        text = text.replace(old, new)
    b = Bundle(files={**FILES, SHOW: text.encode()})
    [r] = [r for r in ev.evaluate(b, bf.load_desired(b)) if r.id == "engine.gpu0-3.state"]
    return r.status, r.expected, r.found, r.fix


LOGS = f"`journalctl -u {UNIT} -b -n 200`"
EXPECTED = f"{UNIT} active (running), no restarts"


def test_running_passes():
    assert state("active", "running") == (
        PASS, EXPECTED, f"{UNIT}: ActiveState=active SubState=running NRestarts=0", "")


def test_still_starting_is_a_warning():
    assert state("activating", "start") == (
        WARN, EXPECTED, f"{UNIT}: ActiveState=activating SubState=start NRestarts=0: still starting (loading the "
                        "model can take minutes)", f"collect again later; {LOGS}")


def test_restarted_but_running_is_a_warning():
    assert state("active", "running", "2") == (
        WARN, EXPECTED, f"{UNIT}: ActiveState=active SubState=running NRestarts=2: it crashed and was restarted",
        f"read {LOGS}")


def test_stopped_fails_and_failed_or_looping_fails_with_the_logs():
    assert state("inactive", "dead") == (
        FAIL, EXPECTED, f"{UNIT}: ActiveState=inactive SubState=dead NRestarts=0: not running",
        f"`systemctl start {UNIT}`; {LOGS}")
    for active, sub, restarts in (("failed", "failed", "0"), ("activating", "auto-restart", "3"),
                                  ("inactive", "dead", "1")):
        assert state(active, sub, restarts) == (
            FAIL, "active (running)", f"{UNIT}: ActiveState={active} SubState={sub} NRestarts={restarts}: failed or "
                                      "in a restart loop", f"read {LOGS}, fix, then `systemctl restart {UNIT}`")
