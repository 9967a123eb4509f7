"""Where kvprov's Ansible content lives (the repository root of this package)."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def playbooks_dir() -> Path:
    return ROOT / "playbooks"


def roles_dir() -> Path:
    return ROOT / "roles"


def ansible_cfg() -> Path:
    return ROOT / "ansible.cfg"


def state_dir() -> Path:
    """kvprov's state on the controller (run artifacts, locks): $XDG_STATE_HOME/kvprov."""
    return Path(os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")) / "kvprov"
