"""SGLang's API key stays out of its log (#24): SGLang 0.5.23 logs its server_args, the key
included, once at start. The unit kvprov renders puts a sitecustomize.py first on PYTHONPATH
that redacts the key (read from the credential systemd hands over) from every log record.

Run with SGLang's own code: its --config merger reads the key file as deploy writes it, then
the line its engine.py logs (`server_args=` + its watermark redactor's dict) goes through
Python's logging, once with the unit's PYTHONPATH and once without (the control: the key is
there). Only the importable part of SGLang runs here (its engine module needs CUDA's stack)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kvprov.validate.parsers import exec_argv, parse_unit, unit_environment
from tests.conftest import render_one_host
from tests.unit.test_engine_parsers import _sglang_python

KEY = "sk-kvprov-Secret_42.x"  # what check admits: printable ASCII, no quotes, spaces or backslashes
LOG_LINE = r'''
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s", stream=sys.stdout)
from sglang.srt.server_args import prepare_server_args
from sglang.srt.sampling.watermarking.core import redact_watermark_secrets
server_args = prepare_server_args(sys.argv[1:])
assert server_args.api_key == sys.stdin.read(), "SGLang did not read the key deploy wrote"
# sglang/srt/entrypoints/engine.py, as 0.5.23 logs it at start:
logging.getLogger("sglang.srt.entrypoints.engine").info(
    f"server_args={redact_watermark_secrets(server_args.resolved_dict())}")
'''


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    return render_one_host(tmp_path_factory.mktemp("sglkey"), KEY)


def test_the_unit_puts_the_redactor_first_on_pythonpath(rendered):
    unit = parse_unit((rendered / "etc/systemd/system/kvprov-sglang-main.service").read_text())
    site = unit_environment(unit)["PYTHONPATH"]
    assert site == "/usr/local/lib/kvprov-sglang"
    assert (rendered / site.lstrip("/") / "sitecustomize.py").is_file()
    assert KEY not in (rendered / site.lstrip("/") / "sitecustomize.py").read_text()


@pytest.mark.parametrize("redactor", [True, False], ids=["unit's PYTHONPATH", "control without it"])
def test_sglang_logs_its_server_args_without_the_key(rendered, tmp_path, redactor):
    python = _sglang_python()
    if python is None:
        pytest.skip("no SGLang venv (scripts/install-deps builds /var/lib/kvprov/sglang-parse-venv)")
    unit = parse_unit((rendered / "etc/systemd/system/kvprov-sglang-main.service").read_text())
    argv = exec_argv(dict(unit["Service"])["ExecStart"], from_show=False)
    config = argv.index("--config")
    credentials = tmp_path / "credentials"  # what systemd makes of LoadCredential=
    credentials.mkdir()
    name = argv[config + 1].removeprefix("%d/")
    (credentials / name).write_text(f"api-key: {json.dumps(KEY)}\n")  # as deploy writes it (to_json)
    args = ["--model-path", argv[argv.index("--model-path") + 1], "--config", str(credentials / name)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["CREDENTIALS_DIRECTORY"] = str(credentials)
    if redactor:
        env["PYTHONPATH"] = str(rendered / unit_environment(unit)["PYTHONPATH"].lstrip("/"))
    r = subprocess.run([python, "-c", LOG_LINE, *args], input=KEY, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    # SGLang sets its own log format when it loads: the line is found by its text
    line = next(ln for ln in (r.stdout + r.stderr).splitlines() if "server_args={'model_path'" in ln)
    leaked = KEY in line or repr(KEY)[1:-1] in line
    if redactor:
        assert not leaked and "'api_key': '<redacted>'" in line, line
    else:
        assert leaked, "the control should show the key SGLang logs"
