"""kvprov: provision and prove a GPU KV-cache tier on NetApp pNFS over RDMA."""

__version__ = "0.1.0"
