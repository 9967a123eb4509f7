"""What scripts/install-deps installs is required where it ran: CI (.ci/run) sets
KVPROV_REQUIRE_ENGINES=1, and a test that needs an engine venv or an engine in it then fails
instead of skipping, so a broken engine install cannot turn the engines' own parsers off
while CI stays green. Elsewhere (a checkout without install-deps) it is a skip with the reason."""

import os

import pytest

ENV = "KVPROV_REQUIRE_ENGINES"


def engine_missing(reason: str):
    if os.environ.get(ENV) == "1":
        pytest.fail(f"{reason}; {ENV}=1: scripts/install-deps installs it, so the install is broken", pytrace=False)
    pytest.skip(reason)
