"""Where kvprov's Ansible content lives (the repository root of this package)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def playbooks_dir() -> Path:
    return ROOT / "playbooks"


def roles_dir() -> Path:
    return ROOT / "roles"


def ansible_cfg() -> Path:
    return ROOT / "ansible.cfg"
