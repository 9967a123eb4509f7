"""`kvprov validate`: prove a host's KV-cache tier from captured state.

- bundle    the bundle format (one directory of captured files per host; docs/bundle.md),
            reading its files safely (size caps, no symlinks, per-file errors) and the
            desired state (desired.json)
- parsers   pure parsers for the captured text (gdscheck -p, rdma link, /proc/modules,
            systemctl show, unit files, NIXL TOML, cufile.json)
- result    the result model (Result, statuses, summarize) shared with bench and audit
- context   what a check reads (Context: bundle + desired state, parsed files cached)
            and the check registry (@check, @instance_check, run_check)
- checks/   the checks, one module per tier: bundle, mount, rdma, gds, nixl, engine
            (per engine instance; engine_<name> for further engines), packages
- evaluate  runs them: bundle + desired state -> list[Result] (evaluate, evaluate_bundle)
- report    the readable table, JSON and JUnit XML, and the report writer that
            validate, bench and audit share
- collect   live capture of a host's bundle (playbooks/collect.yml)
- cli       `kvprov validate [INVENTORY | --bundle DIR/HOST] [--json F] [--junit F]`
"""
