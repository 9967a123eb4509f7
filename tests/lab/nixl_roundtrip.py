"""Run on a lab host with the deployed NIXL venv's python: write a file on the KV mount
through NIXL's POSIX backend from DRAM, read it back into another buffer, compare.
Prints one JSON line. Removes only the file it wrote."""

import json
import os
import sys
import time

import numpy as np
from nixl._api import nixl_agent, nixl_agent_config

path = sys.argv[1]
size = int(sys.argv[2]) if len(sys.argv) > 2 else 4 << 20
agent = nixl_agent("kvprov-roundtrip", nixl_agent_config(backends=[]))
agent.create_backend("POSIX", {"use_aio": "false"})
src = np.random.default_rng(7).integers(0, 255, size, dtype=np.uint8)
dst = np.zeros(size, dtype=np.uint8)


def xfer(op, buf, fd):
    agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
    files = agent.register_memory([(0, buf.nbytes, fd, "")], "FILE")
    handle = agent.initialize_xfer(op, agent.get_xfer_descs([(buf.ctypes.data, buf.nbytes, 0)], "DRAM"),
                                   files.trim(), "kvprov-roundtrip")
    state = agent.transfer(handle)
    deadline = time.monotonic() + 60
    while state not in ("DONE", "ERR") and time.monotonic() < deadline:
        state = agent.check_xfer_state(handle)
        time.sleep(0.01)
    agent.release_xfer_handle(handle)
    return state


fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
try:
    wrote = xfer("WRITE", src, fd)
    os.fsync(fd)
    read = xfer("READ", dst, fd)
    print(json.dumps({"write": wrote, "read": read, "size": os.fstat(fd).st_size,
                      "equal": bool(np.array_equal(src, dst))}))
finally:
    os.close(fd)
    os.unlink(path)
