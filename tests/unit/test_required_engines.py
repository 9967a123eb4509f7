"""CI requires what install-deps installs: an engine test that cannot reach its engine fails
there instead of skipping (tests/required.py)."""

import pytest

from tests.conftest import ROOT
from tests.required import ENV, engine_missing


def test_a_missing_engine_fails_where_install_deps_ran_and_skips_elsewhere(monkeypatch):
    monkeypatch.setenv(ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="KVPROV_REQUIRE_ENGINES=1: scripts/install-deps installs it"):
        engine_missing("vllm_argv: the venv lacks the engine (No module named 'vllm')")
    monkeypatch.delenv(ENV)
    with pytest.raises(pytest.skip.Exception, match="No module named 'vllm'"):
        engine_missing("vllm_argv: the venv lacks the engine (No module named 'vllm')")


def test_ci_requires_the_engines():
    lines = (ROOT / ".ci/run").read_text().splitlines()
    assert f"export {ENV}=1" in [line.split("  #")[0] for line in lines]
    assert lines.index(next(x for x in lines if x.startswith(f"export {ENV}=1"))) < lines.index(
        next(x for x in lines if x.startswith("python3 -m pytest")))
