"""`kvprov storage check INVENTORY`: the storage side of the KV-cache tier, read from the
storage systems themselves (inventory group kv_storage): ONTAP over its REST API
(kvprov.storage.ontap), a Linux knfsd over ssh (kvprov.storage.linux).

- systems: the inventory's storage systems and the GPU nodes that mount from each (pure);
- credentials: the ONTAP credentials file (root-only) that `kvprov check` also reads;
- access: what both kinds share: export rules that cover a client, free space and inodes (pure);
- knfsd: parsers of knfsd's files and commands (pure);
- ontap / linux: reading a system (I/O) and judging what was read (pure);
- cli: the command.
"""
