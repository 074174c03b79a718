#!/usr/bin/env python3
"""weft as CuPy's NCCL (cupy.cuda.nccl): NPROC processes (multiprocessing,
spawn), all on GPU 0, run all-reduce (sum, max), broadcast, all-gather and
reduce-scatter in one group, and check every result on the host.

    LD_PRELOAD=BUILD/src/libnccl.so.2 python3 tests/torch/check_cupy.py [NPROC]

The parent makes the unique id (weft's bootstrap root runs in the parent,
which stays alive until the ranks have joined). Prints PASS/FAIL per rank and
per check; exits non-zero on any failure. --any-nccl skips the check that
the NCCL in use is the preloaded one.
"""
import ctypes
import multiprocessing as mp
import os
import sys
import traceback

N = 4099  # a prime count: no rank's share is a round number


def nccl_in_use():
    """(file defining the ncclGetVersion this process calls, every libnccl mapped)."""
    with open("/proc/self/maps") as maps:
        mapped = sorted({line.split()[-1] for line in maps if "libnccl" in line})
    libc = ctypes.CDLL(None)
    try:
        fn = libc.ncclGetVersion
    except AttributeError:
        fn = ctypes.CDLL(mapped[0]).ncclGetVersion if mapped else None
    if fn is None:
        return "(none)", mapped

    class DlInfo(ctypes.Structure):
        _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                    ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]

    info = DlInfo()
    libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    libc.dladdr(ctypes.cast(fn, ctypes.c_void_p), ctypes.byref(info))
    return (info.fname or b"?").decode(), mapped


def rank_main(rank, nranks, uid, any_nccl, out):
    lines, ok = [], True

    def report(name, good, detail=""):
        nonlocal ok
        ok &= good
        lines.append(f"[rank {rank}] {'PASS' if good else 'FAIL'} {name}"
                     f"{': ' + detail if detail else ''}")

    try:
        import cupy
        from cupy.cuda import nccl

        cupy.cuda.Device(0).use()
        path, mapped = nccl_in_use()
        preload = [p for p in os.environ.get("LD_PRELOAD", "").split(":") if "libnccl" in p]
        weft = bool(preload) and os.path.realpath(path) == os.path.realpath(preload[0])
        report("nccl library", any_nccl or weft,
               f"ncclGetVersion from {path}, version {nccl.get_version()}, mapped {mapped}")
        comm = nccl.NcclCommunicator(nranks, uid, rank)
        report("NcclCommunicator", comm.rank_id() == rank and comm.size() == nranks,
               f"rank {comm.rank_id()} of {comm.size()}")
        stream = cupy.cuda.Stream(non_blocking=True)
        f32 = nccl.NCCL_FLOAT32

        x = cupy.arange(N, dtype=cupy.float32) + rank
        y = cupy.empty_like(x)
        comm.allReduce(x.data.ptr, y.data.ptr, N, f32, nccl.NCCL_SUM, stream.ptr)
        stream.synchronize()
        want = cupy.arange(N, dtype=cupy.float32) * nranks + nranks * (nranks - 1) / 2
        report("allReduce sum", bool(cupy.array_equal(y, want)))

        comm.allReduce(x.data.ptr, y.data.ptr, N, f32, nccl.NCCL_MAX, stream.ptr)
        stream.synchronize()
        report("allReduce max", bool(cupy.array_equal(y, x - rank + nranks - 1)))

        # One group: broadcast from the last rank, all-gather, reduce-scatter.
        b = x.copy()
        g = cupy.empty(N * nranks, dtype=cupy.float32)
        big = cupy.tile(x, nranks)
        r = cupy.empty(N, dtype=cupy.float32)
        nccl.groupStart()
        comm.bcast(b.data.ptr, N, f32, nranks - 1, stream.ptr)
        comm.allGather(x.data.ptr, g.data.ptr, N, f32, stream.ptr)
        comm.reduceScatter(big.data.ptr, r.data.ptr, N, f32, nccl.NCCL_SUM, stream.ptr)
        nccl.groupEnd()
        stream.synchronize()
        base = cupy.arange(N, dtype=cupy.float32)
        report("bcast (grouped)", bool(cupy.array_equal(b, base + nranks - 1)))
        report("allGather (grouped)",
               bool(cupy.array_equal(g, cupy.concatenate([base + k for k in range(nranks)]))))
        report("reduceScatter (grouped)", bool(cupy.array_equal(r, want)))
        comm.destroy()
        report("destroy", True)
    except Exception as e:  # noqa: BLE001 - reported as this rank's failure
        report("exception", False, f"{type(e).__name__}: {e}")
        lines.append(traceback.format_exc())
    out.put((rank, ok, lines))


def main():
    any_nccl = "--any-nccl" in sys.argv
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    nranks = int(args[0]) if args else 2
    from cupy.cuda import nccl

    uid = nccl.get_unique_id()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, nranks, uid, any_nccl, out))
             for r in range(nranks)]
    for p in procs:
        p.start()
    results = {}
    try:
        for _ in range(nranks):
            rank, ok, lines = out.get(timeout=300)
            results[rank] = ok
            print("\n".join(lines), flush=True)
    except Exception as e:  # noqa: BLE001 - a rank that never reported
        print(f"FAIL: ranks {sorted(set(range(nranks)) - set(results))} did not report: {e!r}")
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
    good = len(results) == nranks and all(results.values())
    print("RESULT:", "PASS" if good else "FAIL", f"(cupy.cuda.nccl, {nranks} processes on GPU 0)")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
