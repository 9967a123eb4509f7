"""Where kvprov's Ansible content lives: the collection kvprov.kvprov (galaxy.yml).

A checkout or an editable install: the repository root, which is the collection.
A wheel install: the copy the wheel carries inside the package (setup.py bundles it as
kvprov/collection/ansible_collections/kvprov/kvprov)."""

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_BUNDLED = _PACKAGE / "collection" / "ansible_collections" / "kvprov" / "kvprov"
BUNDLED = (_BUNDLED / "galaxy.yml").is_file()
ROOT = _BUNDLED if BUNDLED else _PACKAGE.parent


def playbooks_dir() -> Path:
    return ROOT / "playbooks"


def roles_dir() -> Path:
    return ROOT / "roles"


def collections_dir() -> Path:
    """The directory whose ansible_collections/kvprov/kvprov is ROOT, for ANSIBLE_COLLECTIONS_PATH:
    a wheel's kvprov/collection, or a checkout's .collections (its kvprov/kvprov is a link to
    the repository root)."""
    return ROOT.parents[2] if BUNDLED else ROOT / ".collections"


def state_dir() -> Path:
    """kvprov's state on the controller (run artifacts, locks): $XDG_STATE_HOME/kvprov."""
    return Path(os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")) / "kvprov"
