"""Can a restart copy a store's bytes to the GPU straight out of the page cache? (scripts/gpu-check.sh)

A restart today reads the store into page-locked staging buffers and copies those to the GPU:
three passes over host memory (the page cache read, the staging written, the staging read by
the bus), which on a 16-core host is the memory's bandwidth at about 0.6x of the bus. Copying
from the file's pages themselves — mapped, registered with the driver (cuMemHostRegister,
read-only) — would leave two (the bus's read and the checksums'). This measures what that costs
on the machine at hand, for an 8 GiB file in /dev/shm:

- registering the whole mapping, and registering it piece by piece (64 MiB) while the previous
  piece is copied, with the copy's rate;
- the copy from page-locked memory allocated by the driver, for reference;
- the copy from the registered mapping while 8 host threads read the same pages (as checksums
  would), and those threads' rate alone.

Prints one line per figure and, last, one JSON object (`mapped_h2d: {...}`).
"""

import json
import mmap
import os
import sys
import threading
import time

import cupy as cp
import numpy as np

GiB = 1 << 30
PIECE = 64 << 20
SIZE = int(os.environ.get("MAPPED_H2D_GIB", "8")) * GiB
PATH = sys.argv[1] if len(sys.argv) > 1 else "/dev/shm/eckpt-mapped-h2d"
REGISTER_READ_ONLY = 8  # cudaHostRegisterReadOnly (CUDA 11.1 and later)
H2D = 1  # cudaMemcpyHostToDevice
figures = {}


def say(key, value, text):
    figures[key] = value
    print(text, flush=True)


def gbps(seconds):
    return SIZE / seconds / 1e9


def timed(f):
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    f()
    cp.cuda.Device().synchronize()
    return time.perf_counter() - start


def read_pages(view, threads):
    """`threads` host threads sum the view's 64-bit words, a share each (numpy drops the GIL)."""
    words = view.view(np.uint64)
    share = len(words) // threads
    workers = [threading.Thread(target=lambda i=i: words[i * share:(i + 1) * share].sum()) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


with open(PATH, "wb") as f:
    chunk = np.random.default_rng(0).integers(0, 255, size=PIECE, dtype=np.uint8).tobytes()
    for _ in range(SIZE // PIECE):
        f.write(chunk)
fd = os.open(PATH, os.O_RDONLY)
try:
    mapping = mmap.mmap(fd, SIZE, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    view = np.frombuffer(mapping, dtype=np.uint8)
    address = view.ctypes.data
    device = cp.empty(SIZE, dtype=cp.uint8)

    pinned = cp.cuda.alloc_pinned_memory(SIZE)
    np.frombuffer(pinned, dtype=np.uint8, count=SIZE)[:] = view
    for _ in range(2):
        pinned_s = timed(lambda: cp.cuda.runtime.memcpy(device.data.ptr, pinned.ptr, SIZE, H2D))
    say("pinned_h2d_gbps", gbps(pinned_s), f"host-to-device from driver-allocated page-locked memory: {gbps(pinned_s):.1f} GB/s")
    del pinned

    supported = cp.cuda.runtime.deviceGetAttribute(113, 0)  # cudaDevAttrHostRegisterReadOnlySupported
    say("read_only_registration_supported", supported, f"read-only host registration supported: {supported}")
    start = time.perf_counter()
    cp.cuda.runtime.hostRegister(address, SIZE, REGISTER_READ_ONLY)
    register_s = time.perf_counter() - start
    say("register_s", register_s, f"register the 8 GiB mapping (read-only): {register_s * 1e3:.0f} ms = {gbps(register_s):.1f} GB/s")
    mapped_s = timed(lambda: cp.cuda.runtime.memcpy(device.data.ptr, address, SIZE, H2D))
    say("mapped_h2d_gbps", gbps(mapped_s), f"host-to-device from the registered mapping: {gbps(mapped_s):.1f} GB/s")
    expected = int(view[:PIECE].view(np.uint64).sum(dtype=np.uint64))
    assert int(device[:PIECE].view(cp.uint64).sum(dtype=cp.uint64)) == expected, "the device copy differs"

    alone_s = timed(lambda: read_pages(view, 8))
    say("host_read_8_threads_gbps", gbps(alone_s), f"8 host threads reading the mapping, alone: {gbps(alone_s):.1f} GB/s")
    copier = threading.Thread(target=lambda: cp.cuda.runtime.memcpy(device.data.ptr, address, SIZE, H2D))
    both_s = timed(lambda: (copier.start(), read_pages(view, 8), copier.join()))
    say("mapped_h2d_with_reads_gbps", gbps(both_s),
        f"the copy from the mapping while 8 threads read it: both done in {both_s * 1e3:.0f} ms = {gbps(both_s):.1f} GB/s")
    start = time.perf_counter()
    cp.cuda.runtime.hostUnregister(address)
    say("unregister_s", time.perf_counter() - start, f"unregister: {(time.perf_counter() - start) * 1e3:.0f} ms")

    # Piece by piece: register piece i+1 while piece i is copied (one stream, async copies).
    stream = cp.cuda.Stream(non_blocking=True)

    def pipelined():
        for offset in range(0, SIZE, PIECE):
            cp.cuda.runtime.hostRegister(address + offset, PIECE, REGISTER_READ_ONLY)
            cp.cuda.runtime.memcpyAsync(device.data.ptr + offset, address + offset, PIECE, H2D, stream.ptr)
        stream.synchronize()

    piece_s = timed(pipelined)
    say("register_and_copy_by_piece_gbps", gbps(piece_s),
        f"register 64 MiB pieces and copy each as registered: {piece_s * 1e3:.0f} ms = {gbps(piece_s):.1f} GB/s")
    start = time.perf_counter()
    for offset in range(0, SIZE, PIECE):
        cp.cuda.runtime.hostUnregister(address + offset)
    say("unregister_pieces_s", time.perf_counter() - start, f"unregister the pieces: {(time.perf_counter() - start) * 1e3:.0f} ms")
    del view
    mapping.close()
except Exception as e:  # what the driver refuses is itself the finding
    print(f"mapped_h2d: {e!r}")
finally:
    os.close(fd)
    os.remove(PATH)
print("mapped_h2d:", json.dumps(figures, sort_keys=True))
