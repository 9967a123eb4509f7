"""The local lab: a storage VM standing in for the NetApp (knfsd, pNFS block layout,
soft-RoCE), GPU-node VMs, and optional systemd-nspawn containers. See docs/lab.md."""
