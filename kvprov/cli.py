"""The `kvprov` command line. Each command lives in a module of the same name."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from kvprov import __version__, paths, vault
from kvprov.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, KvprovError

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a program whose reader left


# Modules that each add one command (their `add_parser(subparsers)`), in help order.
COMMANDS = [
    "kvprov.check",
    "kvprov.render",
    "kvprov.deploy",
    "kvprov.validate.cli",
    "kvprov.validate.collect",
    "kvprov.bench",
    "kvprov.audit",
    "kvprov.storage.cli",
    "kvprov.loadtest",
    "kvprov.lab.cli",
    "kvprov.completion",
]


PINNED = {"NIXL": "kvprov_nixl_version", "SGLang": "kvprov_sglang_version", "vLLM": "kvprov_vllm_version",
          "LMCache": "kvprov_lmcache_version"}  # the role defaults a deploy installs


class _Version(argparse.Action):
    """--version: kvprov's, ansible-core's and the pinned engines' (read only when asked)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from ansible.release import __version__ as ansible_version

        from kvprov import inventory

        defaults = inventory.read_role_defaults(paths.roles_dir())
        pins = ", ".join(f"{name} {defaults[var].value}" for name, var in PINNED.items() if var in defaults)
        print(f"kvprov {__version__}\nansible-core {ansible_version}\npinned by default: {pins}")
        parser.exit()  # after printing to stdout, as ansible --version does


class Parser(argparse.ArgumentParser):
    """Every (sub)command's parser: an option is spelled out (argparse would take --che for --check)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="kvprov",
        description="Provision and prove a GPU KV-cache tier on NetApp pNFS over RDMA.",
        epilog="Exit codes: 0 ok, 1 checks failed/drift, 2 usage or inventory error, "
               "3 unreachable hosts, 4 environment (root, tools, disk, ports), 5 lab failure, "
               "6 another run holds the inventory's lock, 7 internal error (traceback saved), 130 interrupted.")
    p.add_argument("--version", action=_Version, nargs=0, help="show kvprov's, ansible-core's and the pinned engines' versions")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: 2 on usage errors, 0 for --help/--version
        return int(e.code or 0) and EXIT_USAGE
    try:
        return args.func(args) or 0
    except KvprovError as e:
        print(f"kvprov: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("kvprov: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `kvprov ... | head`: the reader left; no traceback, no error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's flush at exit would fail again
        return EXIT_BROKEN_PIPE
    except EOFError:
        print("kvprov: error: the input ended before kvprov read what it asked for (a password?)", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:  # noqa: BLE001 - a bug: one line here, the traceback in a file
        saved = save_traceback()
        if os.environ.get("KVPROV_DEBUG"):
            print(Path(saved).read_text(), file=sys.stderr, end="")
        print(f"kvprov: internal error: {type(e).__name__}: {vault.hide(str(e))[:300]}; "
              f"traceback saved in {saved} (please report it; KVPROV_DEBUG=1 prints it)", file=sys.stderr)
        return EXIT_INTERNAL


def save_traceback() -> str:
    """The current exception's traceback in a root-only file under kvprov's state directory."""
    import time
    import traceback

    directory = paths.state_dir() / "crashes"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(vault.hide(traceback.format_exc()))
    return str(path)


if __name__ == "__main__":
    sys.exit(main())
