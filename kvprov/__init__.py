"""kvprov: provision and prove a GPU KV-cache tier on NetApp pNFS over RDMA."""

__version__ = "0.2.0"
