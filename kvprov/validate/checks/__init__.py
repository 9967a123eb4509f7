"""The checks of `kvprov validate`, one module per tier. Importing this package registers
them (kvprov.validate.context's @check / @instance_check); the import order below is the
order the checks run and are reported in, so keep it.

- bundle    the capture itself
- mount     the KV mount (NFS over RDMA, pNFS) or local directory
- rdma      rpcrdma and the RDMA link
- gds       GPUDirect Storage and cufile.json
- nixl      NIXL and its backend TOML
- engine    per engine instance, whatever the engine; engine_sglang, engine_vllm and
            engine_lmcache say what differs per engine (where its storage directory is
            set, what its command line must carry, its cache counters)
- packages  the OS packages the storage profile needs
"""

from kvprov.validate.checks import bundle, mount, rdma, gds, nixl, engine, packages  # noqa: F401  (registers)
from kvprov.validate.checks import engine_lmcache, engine_sglang, engine_vllm  # noqa: F401  (ENGINES)
