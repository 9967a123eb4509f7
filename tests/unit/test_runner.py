"""The runner's pure parts: what deploy prints from Ansible's events."""

from pathlib import Path

from kvprov import runner


def test_deploy_diffs_are_printed_as_unified_diffs():
    result = runner.RunResult(0, Path("/tmp"))
    result.diffs = [
        {"host": "h1", "task": "Write the unit", "diff": [{"before": "a\nb\n", "after": "a\nc\n",
                                                          "before_header": "/etc/x.service"}]},
        {"host": "h2", "task": "Create the dir", "diff": {"before": {"state": "absent"},
                                                         "after": {"state": "directory"}}},
        {"host": "h3", "task": "Nothing", "diff": {}},
    ]
    text = runner.format_diffs(result)
    assert "--- h1: Write the unit\n--- /etc/x.service (on the host)\n+++ what deploy writes\n" in text
    assert "-b\n+c" in text
    assert "--- h2: Create the dir\n  state: absent -> directory" in text
    assert "h3" not in text
