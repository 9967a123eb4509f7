"""`kvprov validate`: prove a host's KV-cache tier from captured state.

- bundle    the bundle format (one directory of captured files per host; docs/bundle.md),
            reading its files safely (size caps, no symlinks, per-file errors) and the
            desired state (desired.json)
- parsers   pure parsers for the captured text (gdscheck -p, rdma link, /proc/modules,
            systemctl show, unit files, NIXL TOML, cufile.json)
- evaluate  pure checks: bundle + desired state -> list[Result]
- report    the readable table, JSON and JUnit XML
- cli       `kvprov validate --bundle DIR/HOST [--json F] [--junit F]`
"""
