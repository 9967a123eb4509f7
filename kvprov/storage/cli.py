"""`kvprov storage check INVENTORY [--json F] [--junit F]`: check the storage systems of
group kv_storage (ONTAP over REST, Linux knfsd over ssh) against what the inventory's GPU
nodes mount from them (docs/storage-check.md).

Exit 0: no check failed (warnings allowed); 1: a check failed; 2: bad inventory (or no
kv_storage group); 3: a storage system could not be reached (whatever else failed: README's
exit codes, where 3 wins over 1 for every command).
"""

from __future__ import annotations

from kvprov import check, inventory
from kvprov.errors import EXIT_CHECKS_FAILED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, KvprovError
from kvprov.storage import access, credentials, linux, ontap, systems
from kvprov.storage.systems import Client, System
from kvprov.validate import report
from kvprov.validate.result import FAIL, PASS, WARN, Result, summarize


def add_parser(sub) -> None:
    p = sub.add_parser("storage", help="check the storage systems (group kv_storage): ONTAP, Linux knfsd",
                       description="Check the storage side of the KV-cache tier on the systems themselves.")
    storage_sub = p.add_subparsers(dest="storage_command", required=True, metavar="SUBCOMMAND")
    c = storage_sub.add_parser(
        "check", help="NFS versions, pNFS, RDMA, id-domain, export rules, space and inodes",
        description="Read each storage system of group kv_storage (ONTAP over its REST API with the certificate "
                    "verified, Linux knfsd over ssh) and check it against the GPU nodes that mount from it: NFS 4.1 "
                    "on and 4.0 off, pNFS, referrals off, the v4 id-domain, RDMA on the service and on every LIF "
                    "mounted through, the export's volume online with free space and inodes, and an export rule "
                    "that gives every GPU node read, write and root. Changes nothing. Exit 0: no check failed; "
                    "1: a check failed; 2: bad inventory; 3: a storage system was unreachable, whatever else failed "
                    "(docs/storage-check.md).")
    inventory.add_inventory_args(c)
    inventory.add_limit_arg(c, "only the storage systems of this Ansible host pattern")
    c.add_argument("--json", metavar="F", help="also write the results as JSON to F ('-': to stdout, no table)")
    c.add_argument("--junit", metavar="F", help="also write JUnit XML to F (a testcase per check)")
    c.set_defaults(func=cmd_check)


def _clients_result(system: System, served: list[Client]) -> Result:
    expected = "the GPU nodes that mount from it (kvprov_storage_server in kvprov_storage_data_addresses)"
    if not served:
        return access.result(system, "storage.clients", WARN, expected, "no GPU node mounts from it",
                             "list the addresses the GPU nodes mount it through in kvprov_storage_data_addresses")
    return access.result(system, "storage.clients", PASS, expected,
                         ", ".join(f"{c.host} ({c.server}:{c.export})" for c in served))


def _orphan(c: Client) -> Result:
    return Result("storage.server", access.CATEGORY, FAIL,
                  "a storage system of group kv_storage that serves kvprov_storage_server",
                  f"no kv_storage host has {c.server} among its addresses (kvprov_storage_data_addresses; an "
                  "ONTAP system without them: its SVM's LIFs)", f"add {c.server} to kvprov_storage_data_addresses "
                  "of the storage system it mounts from, or fix kvprov_storage_server", c.host)


def run(path: str | list[str], stream=None, limit: str | None = None) -> tuple[list[Result], list[str]]:
    """Every storage check of an inventory (limit: only the storage systems of this Ansible
    host pattern): (results without summaries, unreachable systems)."""
    check.require_valid(path)
    inv = inventory.load(path)
    all_systems = systems.systems(inv)
    if not all_systems:
        raise KvprovError(f"{inventory.describe(path)}: no group {inventory.STORAGE_GROUP} with hosts: add the storage systems under "
                          f"all: children: {inventory.STORAGE_GROUP}: hosts: (docs/storage-check.md)", EXIT_USAGE)
    if limit:
        selected = inventory.hosts_matching(inventory.source_list(path), limit)
        if not any(s.name in selected for s in all_systems):
            raise KvprovError(f"{inventory.describe(path)}: --limit {limit} matches no storage system of group "
                              f"{inventory.STORAGE_GROUP} ({', '.join(s.name for s in all_systems)})", EXIT_USAGE)
    chosen = [s for s in all_systems if not limit or s.name in selected]
    results: list[Result] = []
    unreachable: list[str] = []
    ontap_states: dict[str, dict] = {}
    for s in (s for s in chosen if s.kind == "ontap"):
        try:
            ontap_states[s.name] = ontap.fetch(s)
        except (ontap.ApiError, credentials.CredentialsError) as e:
            results.append(access.result(s, "storage.api", FAIL, f"ONTAP's REST API read at {s.address}", str(e),
                                         "fix what the message says, then run kvprov storage check again"))
            if getattr(e, "unreachable", False):
                unreachable.append(s.name)
    # every system's addresses, so that a client goes to its own system whatever the limit; an ONTAP
    # system left out by the limit, whose LIFs were not read, is no catch-all
    addresses = {s.name: s.data_addresses or (ontap.lif_addresses(ontap_states[s.name]) if s.name in ontap_states
                                              else [] if s in chosen or s.kind != "ontap" else ["(not read)"])
                 for s in all_systems}
    served, orphans = systems.assign(systems.clients(inv), addresses)
    results += [] if limit else [_orphan(c) for c in orphans]  # limited: another system may serve them
    linux_systems = [s for s in chosen if s.kind == "linux"]
    linux_states: dict[str, linux.State] = {}
    if linux_systems:
        linux_states, run_ = linux.collect(path, {s.name: sorted({c.export for c in served[s.name]})
                                                  for s in linux_systems}, stream)
        for f in run_.failures:
            if f.host in linux_states:
                continue
            results.append(access.result(f.host, "storage.ssh", FAIL, "the server read over ssh",
                                         f"{'unreachable' if f.unreachable else f.task + ' failed'}: {f.message}",
                                         "check the host's ansible_* connection settings and that it runs sshd"))
            if f.unreachable:
                unreachable.append(f.host)
    for s in chosen:
        if s.name in ontap_states:
            results += [_clients_result(s, served[s.name]), *ontap.evaluate(s, ontap_states[s.name], served[s.name])]
        elif s.name in linux_states:
            results += [_clients_result(s, served[s.name]), *linux.evaluate(s, linux_states[s.name], served[s.name])]
    return results, unreachable


def cmd_check(args) -> int:
    results, unreachable = run(inventory.from_args(args), limit=inventory.limit_patterns(args.limit))
    results += [summarize(rs) for rs in report.by_host(results).values()]
    report.write_reports(args, results, name="kvprov storage check")
    if unreachable:  # wins over 1, as for every command (README's exit codes): the rest is unknown
        return EXIT_UNREACHABLE
    return EXIT_CHECKS_FAILED if any(r.status == FAIL for r in report.checks(results)) else EXIT_OK
