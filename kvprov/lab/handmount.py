"""Mount the lab's export on a GPU-node VM by hand, the way an operator would before
kvprov's roles exist: soft-RoCE on the data NIC, rpcrdma, blkmapd for the block layout,
then an NFSv4.1 mount over RDMA. Used by the lab tests and the lab benchmark."""

from kvprov.lab import topology

RXE = "rxe_handmount"


def mount_script(mountpoint: str, storage_ip: str, vers: str = "4.1") -> str:
    return ("set -e; modprobe rdma_rxe; "
            f"rdma link | grep -q ' netdev data0 ' || rdma link add {RXE} type rxe netdev data0; "
            "modprobe rpcrdma; systemctl start nfs-blkmap; "
            f"mkdir -p {mountpoint}; mount -t nfs4 -o proto=rdma,port={topology.RDMA_PORT},vers={vers} "
            f"{storage_ip}:{topology.EXPORT_PATH} {mountpoint}")


def unmount_script(mountpoint: str) -> str:
    """Undo mount_script, leaving the host unconfigured again."""
    return (f"umount {mountpoint}; rmdir {mountpoint}; systemctl stop nfs-blkmap; "
            f"rdma link delete {RXE} 2>/dev/null || true")
