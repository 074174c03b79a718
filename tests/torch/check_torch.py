#!/usr/bin/env python3
"""weft as PyTorch's NCCL: every check compares the "nccl" backend (weft,
through LD_PRELOAD) with a gloo process group of the same ranks on CPU
copies of the same data.

Run it under torchrun, all ranks on GPU 0 (weft lets several ranks share
one GPU), with weft's libnccl.so.2 preloaded:

    LD_PRELOAD=BUILD/src/libnccl.so.2 python3 -m torch.distributed.run \\
        --standalone --nproc-per-node 2 tests/torch/check_torch.py

tests/torch/run.sh does that for 2 and 4 ranks, MPS off and on. Modes:
  --mode checks  (default) collectives x dtypes x sizes, send/recv, barrier,
                 new_group (ncclCommSplit), DDP against gloo, an all_reduce
                 captured in a CUDA graph (with --staged: its refusal),
                 destroy_process_group.
  --mode abort   the last rank exits mid-loop; each other rank's next
                 all_reduce must end or its abort must return, not hang.
Each rank prints "PASS|FAIL|SKIP <check>: detail" lines for its own checks;
rank 0 prints the summary over all ranks. Exit status: 0 when every check
passed on every rank. --any-nccl runs the same checks on whatever NCCL
torch loaded (NVIDIA's, to validate the script itself).
"""
import argparse
import ctypes
import datetime
import os
import sys
import threading
import time
import traceback

import torch
import torch.distributed as dist

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
DEV = torch.device("cuda", 0)
GLOO = None  # the gloo group of all ranks, made after the nccl one
RESULTS = []  # (name, status, detail): status "PASS", "FAIL" or "SKIP"


def say(msg):
    print(f"[rank {RANK}] {msg}", flush=True)


def record(name, status, detail=""):
    RESULTS.append((name, status, detail))
    if status != "PASS" or RANK == 0:
        say(f"{status} {name}{': ' + detail if detail else ''}")


def check(name, fn, *args):
    """Runs fn on every rank; an exception fails this rank's check only.
    Checks raise only after their collectives, so peers never wait on a
    rank that gave up early."""
    t0 = time.time()
    try:
        detail = fn(*args)
        record(name, "PASS", f"{detail + ', ' if detail else ''}{time.time() - t0:.2f} s")
    except SkipCheck as e:
        record(name, "SKIP", str(e))
    except Exception as e:  # noqa: BLE001 - any failure is the check's result
        record(name, "FAIL", f"{type(e).__name__}: {e}")
        traceback.print_exc(file=sys.stdout)


class SkipCheck(Exception):
    pass


def start_deadline(seconds):
    """Never hang the caller: past the deadline, print what is known and exit."""

    def fire():
        say(f"FAIL deadline: still running after {seconds} s; results so far:")
        for name, status, detail in RESULTS:
            say(f"  {status} {name} {detail}")
        sys.stdout.flush()
        os._exit(3)

    t = threading.Timer(seconds, fire)
    t.daemon = True
    t.start()
    return t


# ---- which NCCL this process runs ----------------------------------------


class DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def nccl_library():
    """(file that defines the ncclGetVersion this process calls, its version,
    every libnccl mapped here). The global scope holds a preloaded library;
    without one, torch's own copy is in libtorch_cuda's local scope, so the
    first mapped libnccl answers."""
    mapped = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "libnccl" in os.path.basename(path):
                mapped.add(path)
    libc = ctypes.CDLL(None)
    try:
        fn = libc.ncclGetVersion
    except AttributeError:
        if not mapped:
            return "(no libnccl loaded)", 0, []
        fn = ctypes.CDLL(sorted(mapped)[0]).ncclGetVersion
    version = ctypes.c_int(0)
    fn(ctypes.byref(version))
    info = DlInfo()
    libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    libc.dladdr(ctypes.cast(fn, ctypes.c_void_p), ctypes.byref(info))
    return (info.dli_fname or b"?").decode(), version.value, sorted(mapped)


def check_library(any_nccl):
    path, version, mapped = nccl_library()
    torch_v = torch.cuda.nccl.version()
    detail = f"ncclGetVersion from {path} ({version}), torch sees {torch_v}, mapped: {mapped}"
    if any_nccl:
        return detail
    preload = [p for p in os.environ.get("LD_PRELOAD", "").replace(":", " ").split()
               if "libnccl" in os.path.basename(p)]
    if not preload:
        raise RuntimeError("LD_PRELOAD names no libnccl: run with LD_PRELOAD=BUILD/src/libnccl.so.2 "
                           "(or --any-nccl); " + detail)
    if os.path.realpath(path) != os.path.realpath(preload[0]):
        raise RuntimeError(f"the NCCL in use is not the preloaded {preload[0]}: " + detail)
    return detail


# ---- references from gloo --------------------------------------------------


def make_input(seed, n, dtype):
    """Small integers: exact in fp16/bf16, and so are their sums here."""
    g = torch.Generator().manual_seed(seed * 1000 + RANK)
    return torch.randint(-8, 9, (n,), generator=g).to(dtype)


def gather(t_cpu):
    """Every rank's CPU tensor, gathered over gloo (in float64)."""
    src = t_cpu.to(torch.float64)
    out = [torch.empty_like(src) for _ in range(WORLD)]
    dist.all_gather(out, src, group=GLOO)
    return out


def expect_close(got, want, dtype, what):
    got = got.detach().cpu().to(torch.float64)
    exact = WORLD & (WORLD - 1) == 0  # averages over 2 or 4 ranks are exact too
    tol = 0.0 if exact else {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 5e-2}[dtype]
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    diff = (got - want).abs()
    bad = diff > tol * (1 + want.abs())
    if bad.any():
        i = int(bad.nonzero()[0])
        raise AssertionError(f"{what}: element {i} is {got[i].item()}, expected {want[i].item()} "
                             f"({int(bad.sum())} of {want.numel()} wrong)")


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def c_all_reduce(op_name, dtype, n, seed):
    inp = make_input(seed, n, dtype)
    parts = torch.stack(gather(inp))
    x = inp.to(DEV)
    if op_name == "sum":
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
        want = parts.sum(0)
        ref = inp.to(torch.float32)
        dist.all_reduce(ref, op=dist.ReduceOp.SUM, group=GLOO)  # gloo itself, too
        expect_close(ref, want, torch.float32, "gloo sum")
    elif op_name == "avg":
        dist.all_reduce(x, op=dist.ReduceOp.AVG)
        want = parts.sum(0) / WORLD
    elif op_name == "max":
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
        want = parts.max(0).values
    elif op_name == "premul_sum":
        make = getattr(dist, "_make_nccl_premul_sum", None)
        if make is None:
            raise SkipCheck("torch.distributed._make_nccl_premul_sum is not in this torch")
        dist.all_reduce(x, op=make(0.5))
        want = parts.sum(0) * 0.5
        if dtype == torch.bfloat16 and torch.all(x == 0) and not torch.all(want == 0):
            # PyTorch before its fix of issue #190745 hands NCCL a float32
            # factor for bf16, of which NCCL (and weft, its ABI) reads the
            # first 2 bytes: the low half of 0.5f, a bf16 zero. The result
            # must then be exactly what NCCL gives: every sum times zero.
            low = torch.tensor([0.5], dtype=torch.float32).view(torch.int16)[:1]
            factor = low.view(torch.bfloat16).to(torch.float64).item()
            expect_close(x, parts.sum(0) * factor, dtype, "all_reduce premul_sum (PyTorch #190745)")
            return "PyTorch #190745: a float32 factor for bf16, read as NCCL reads it"
    else:
        raise ValueError(op_name)
    expect_close(x, want, dtype, f"all_reduce {op_name}")


def c_all_gather(dtype, n, seed):
    inp = make_input(seed, n, dtype)
    out = torch.empty(WORLD * n, dtype=dtype, device=DEV)
    dist.all_gather_into_tensor(out, inp.to(DEV))
    expect_close(out, torch.cat(gather(inp)), dtype, "all_gather_into_tensor")


def c_reduce_scatter(dtype, n, seed):
    inp = make_input(seed, WORLD * n, dtype)
    out = torch.empty(n, dtype=dtype, device=DEV)
    dist.reduce_scatter_tensor(out, inp.to(DEV))
    want = torch.stack(gather(inp)).sum(0)[RANK * n:(RANK + 1) * n]
    expect_close(out, want, dtype, "reduce_scatter_tensor")


def c_broadcast(dtype, n, seed):
    root = WORLD - 1
    inp = make_input(seed, n, dtype)
    x = inp.to(DEV)
    dist.broadcast(x, src=root)
    expect_close(x, gather(inp)[root], dtype, f"broadcast from {root}")


def c_all_to_all(dtype, n, seed):
    inp = make_input(seed, WORLD * n, dtype)
    out = torch.empty(WORLD * n, dtype=dtype, device=DEV)
    dist.all_to_all_single(out, inp.to(DEV))
    parts = gather(inp)
    want = torch.cat([parts[j][RANK * n:(RANK + 1) * n] for j in range(WORLD)])
    expect_close(out, want, dtype, "all_to_all_single")


def c_send_recv(dtype, n, seed):
    inp = make_input(seed, n, dtype)
    parts = gather(inp)
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    # Pairs by blocking send/recv, even ranks first (no cycle of waits).
    partner = RANK ^ 1
    if partner < WORLD:
        got = torch.empty(n, dtype=dtype, device=DEV)
        if RANK % 2 == 0:
            dist.send(inp.to(DEV), partner)
            dist.recv(got, partner)
        else:
            dist.recv(got, partner)
            dist.send(inp.to(DEV), partner)
        expect_close(got, parts[partner], dtype, f"recv from {partner}")
    # A ring in one batch (ncclGroupStart/End around the sends and recvs).
    got = torch.empty(n, dtype=dtype, device=DEV)
    ops = [dist.P2POp(dist.isend, inp.to(DEV), nxt), dist.P2POp(dist.irecv, got, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    expect_close(got, parts[prv], dtype, f"ring recv from {prv}")


def c_barrier():
    dist.barrier(device_ids=[DEV.index])
    dist.barrier(device_ids=[DEV.index])


def c_new_group(groups, mine):
    """groups were made by new_group (ncclCommSplit, NOCOLOR for others)."""
    inp = make_input(77, 4099, torch.float32)
    parts = gather(inp)
    for ranks, pg in zip(groups, mine):
        if pg is None:
            continue
        x = inp.to(DEV)
        dist.all_reduce(x, group=pg)
        want = torch.stack([parts[r] for r in ranks]).sum(0)
        expect_close(x, want, torch.float32, f"all_reduce on new_group({ranks})")
    return f"groups {groups}"


# ---- DDP against gloo -------------------------------------------------------


def train(device, pg, steps, batch=32):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
                                torch.nn.Tanh(), torch.nn.Linear(64, 1)).to(device)
    ddp = DDP(model, device_ids=[DEV.index] if device.type == "cuda" else None, process_group=pg)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1234)
    w_true = torch.randn(32, 1, generator=g)
    losses = []
    for _ in range(steps):
        x = torch.randn(WORLD, batch, 32, generator=g)[RANK]  # each rank its own shard
        y = torch.sin(x @ w_true)
        loss = torch.nn.functional.mse_loss(ddp(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    flat = torch.cat([p.detach().cpu().reshape(-1) for p in model.parameters()])
    return losses, flat


def c_ddp(steps):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    l_nccl, p_nccl = train(DEV, None, steps)
    l_gloo, p_gloo = train(torch.device("cpu"), GLOO, steps)
    tail = max(1, steps // 10)
    mine = torch.tensor([sum(l_nccl[-tail:]) / tail, sum(l_gloo[-tail:]) / tail, l_nccl[0]],
                        dtype=torch.float64)
    dist.all_reduce(mine, group=GLOO)
    final_nccl, final_gloo, first = (mine / WORLD).tolist()
    everyone = gather(p_nccl)
    same = all(torch.equal(everyone[0], p) for p in everyone)
    drift = (p_nccl - p_gloo).abs().max().item()
    detail = (f"loss {first:.4f} -> nccl {final_nccl:.6f} / gloo {final_gloo:.6f} "
              f"after {steps} steps, max param diff {drift:.2e}")
    if not same:
        raise AssertionError("parameters differ between ranks after DDP on nccl; " + detail)
    if not final_nccl < first:
        raise AssertionError("the loss did not go down; " + detail)
    if abs(final_nccl - final_gloo) > 1e-4 + 1e-2 * abs(final_gloo):
        raise AssertionError("nccl and gloo losses differ; " + detail)
    return detail


# ---- CUDA graph ---------------------------------------------------------------


def c_cuda_graph(staged):
    n = 1 << 16
    x = torch.zeros(n, device=DEV)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture
        for _ in range(3):
            x.fill_(1.0)
            dist.all_reduce(x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    if staged:
        # Ranks of different processes on one GPU without MPS stage through
        # host memory, where capture is refused (README); the refusal must
        # be an error, and the group must still work after it.
        try:
            with torch.cuda.graph(graph):
                dist.all_reduce(x)
        except Exception as e:  # noqa: BLE001 - the refusal is the expected outcome
            if "invalid usage" not in str(e):
                raise
        else:
            raise AssertionError("capture on the staged path was not refused")
        x.fill_(float(RANK + 1))
        dist.all_reduce(x)
        torch.cuda.synchronize()
        want = float(sum(r + 1 for r in range(WORLD)))
        if not torch.all(x == want):
            raise AssertionError(f"after the refused capture: got {x[0].item()}, expected {want}")
        return "capture refused with invalid usage (staged path); the group still works"
    with torch.cuda.graph(graph):
        dist.all_reduce(x)
    for i in range(5):
        x.fill_(float(RANK + 1 + i))
        graph.replay()
        torch.cuda.synchronize()
        want = float(sum(r + 1 + i for r in range(WORLD)))
        if not torch.all(x == want):
            raise AssertionError(f"replay {i}: got {x[0].item()}, expected {want}")
    dist.barrier(device_ids=[DEV.index])
    return "captured once, replayed 5 times"


def c_shrink():
    c10d = dist.distributed_c10d
    if not hasattr(c10d, "shrink_group"):
        raise SkipCheck("torch.distributed has no shrink_group")
    if RANK == WORLD - 1:
        return "excluded (does not call)"
    pg = c10d.shrink_group([WORLD - 1])
    x = torch.ones(1024, device=DEV)
    dist.all_reduce(x, group=pg)
    if not torch.all(x == WORLD - 1):
        raise AssertionError(f"all_reduce on the shrunk group gave {x[0].item()}")
    return "without the last rank"


# ---- modes ------------------------------------------------------------------


def summarize():
    """Every rank's results to rank 0 over gloo; returns 0 when all passed."""
    everyone = [None] * WORLD
    dist.all_gather_object(everyone, RESULTS, group=GLOO)
    failed = 0
    if RANK == 0:
        names = [name for name, _, _ in RESULTS]
        print("\n==== summary over", WORLD, "ranks ====", flush=True)
        for i, name in enumerate(names):
            states = [res[i][1] if i < len(res) else "MISSING" for res in everyone]
            bad = [r for r, s in enumerate(states) if s not in ("PASS", "SKIP")]
            status = "FAIL" if bad else ("SKIP" if "SKIP" in states else "PASS")
            failed += status == "FAIL"
            print(f"{status} {name}" + (f" (ranks {bad})" if bad else ""), flush=True)
    flag = torch.tensor([failed])
    dist.broadcast(flag, src=0, group=GLOO)
    return int(flag.item())


def mode_checks(args):
    check("nccl library", check_library, args.any_nccl)
    sizes = [1031, args.large]
    seed = 1
    for dname, dtype in DTYPES.items():
        for n in sizes:
            tag = f"{dname} n={n}"
            for op in ("sum", "avg", "max", "premul_sum"):
                check(f"all_reduce {op} {tag}", c_all_reduce, op, dtype, n, seed)
                seed += 1
            check(f"all_gather_into_tensor {tag}", c_all_gather, dtype, n, seed)
            check(f"reduce_scatter_tensor {tag}", c_reduce_scatter, dtype, n, seed + 1)
            check(f"broadcast {tag}", c_broadcast, dtype, n, seed + 2)
            check(f"all_to_all_single {tag}", c_all_to_all, dtype, n, seed + 3)
            check(f"send/recv {tag}", c_send_recv, dtype, n, seed + 4)
            seed += 5
    check("barrier", c_barrier)
    everyone = list(range(WORLD))
    groups = [everyone[0::2], everyone[1::2], everyone[:-1] or everyone]
    mine = []
    for ranks in groups:  # every rank calls new_group for every group
        pg = dist.new_group(ranks=ranks)
        mine.append(pg if RANK in ranks else None)
    check("new_group (ncclCommSplit)", c_new_group, groups, mine)
    check(f"DDP {args.steps} steps vs gloo", c_ddp, args.steps)
    check("all_reduce in a CUDA graph", c_cuda_graph, args.staged)
    if args.with_shrink:
        check("shrink_group (ncclCommShrink)", c_shrink)
    failed = summarize()
    t0 = time.time()
    try:
        dist.destroy_process_group()
        say(f"PASS destroy_process_group: {time.time() - t0:.2f} s")
    except Exception as e:  # noqa: BLE001
        say(f"FAIL destroy_process_group: {type(e).__name__}: {e}")
        failed += 1
    if RANK == 0:
        print("RESULT:", "PASS" if failed == 0 else f"FAIL ({failed} checks)", flush=True)
    return 1 if failed else 0


def abort_backend():
    """ProcessGroupNCCL's abort (ncclCommAbort on its communicators)."""
    c10d = dist.distributed_c10d
    if hasattr(c10d, "_abort_process_group"):
        c10d._abort_process_group()
        return "_abort_process_group"
    backend = c10d._get_default_group()._get_backend(DEV)
    backend.abort()
    return "ProcessGroupNCCL.abort"


def run_bounded(fn, seconds):
    """(finished, result or exception, seconds taken)."""
    box = {}

    def body():
        try:
            box["r"] = fn()
        except Exception as e:  # noqa: BLE001
            box["r"] = e

    t0 = time.time()
    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(seconds)
    return not t.is_alive(), box.get("r"), time.time() - t0


def mode_abort(args):
    victim = WORLD - 1
    x = torch.ones(1 << 16, device=DEV)
    for _ in range(20):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    if RANK == victim:
        say("exiting now, as if killed (exit 0, so torchrun lets the others finish)")
        os._exit(0)
    time.sleep(0.5)
    # The all_reduce runs on a thread of its own: should the call itself
    # block (not just its stream), the abort must still come and free it.
    box = {}
    give_up = time.time() + args.detect_s + args.abort_s + 10

    def issue():
        try:
            work = dist.all_reduce(x, async_op=True)
            box["issued"] = time.time()
            while not work.is_completed() and time.time() < give_up:
                time.sleep(0.05)
            if not work.is_completed():
                box["how"] = "never completed"
                return
            work.wait()
            box["how"] = "completed without an error"
        except Exception as e:  # noqa: BLE001 - how the call ended is the finding
            box["how"] = f"failed: {type(e).__name__}: {str(e)[:200]}"
        box["ended"] = time.time()

    t0 = time.time()
    caller = threading.Thread(target=issue, daemon=True)
    caller.start()
    caller.join(args.detect_s)
    state = box.get("how") or ("pending" if "issued" in box else "blocked inside the call")
    say(f"INFO all_reduce after rank {victim} died: {state} ({time.time() - t0:.1f} s)")
    ok, res, took = run_bounded(abort_backend, args.abort_s)
    failed = 0
    if ok and not isinstance(res, Exception):
        say(f"PASS abort returned: {res} in {took:.2f} s")
    else:
        say(f"FAIL abort: {'did not return within %d s' % args.abort_s if not ok else res}")
        failed += 1
    caller.join(args.abort_s)
    if caller.is_alive() and "issued" not in box:
        say("FAIL the all_reduce call is still blocked after the abort")
        failed += 1
    else:
        say(f"PASS the all_reduce call returned: {box.get('how', 'issued, still pending')}")
    drained, _, took = run_bounded(torch.cuda.synchronize, args.abort_s)
    say(f"{'PASS' if drained else 'FAIL'} stream drained after abort"
        f"{'' if drained else ': the all_reduce kernel still runs'} ({took:.2f} s)")
    failed += not drained
    say("RESULT: " + ("PASS" if failed == 0 else "FAIL"))
    sys.stdout.flush()
    os._exit(1 if failed else 0)


def main():
    global GLOO, DEV
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["checks", "abort"], default="checks")
    ap.add_argument("--steps", type=int, default=200, help="DDP training steps")
    ap.add_argument("--large", type=int, default=1 << 18, help="elements of the large size")
    ap.add_argument("--deadline", type=int, default=480, help="seconds before giving up")
    ap.add_argument("--pg-timeout", type=int, default=120, help="process group timeout (s)")
    ap.add_argument("--detect-s", type=int, default=20, help="abort mode: wait for the error")
    ap.add_argument("--abort-s", type=int, default=30, help="abort mode: abort must return by")
    ap.add_argument("--with-shrink", action="store_true", help="also torch's shrink_group")
    ap.add_argument("--any-nccl", action="store_true", help="do not require weft")
    ap.add_argument("--staged", action="store_true",
                    help="ranks share a GPU across processes without MPS: weft stages through "
                    "host memory and refuses CUDA graph capture")
    ap.add_argument("--device-per-rank", action="store_true",
                    help="rank i on cuda:LOCAL_RANK instead of all on cuda:0 (to run the script "
                         "on NVIDIA's NCCL, which refuses two ranks on one GPU)")
    args = ap.parse_args()
    if args.device_per_rank:
        DEV = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    if args.mode == "abort":
        # The script, not torch's watchdog, reacts to the failure.
        os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0"
        os.environ["TORCH_NCCL_ENABLE_MONITORING"] = "0"
        os.environ.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "0")
    start_deadline(args.deadline)
    torch.cuda.set_device(DEV)
    if RANK == 0:
        env = {k: v for k, v in os.environ.items()
               if k.startswith(("NCCL_", "WEFT_", "TORCH_NCCL", "CUDA_MPS")) or k == "LD_PRELOAD"}
        print(f"torch {torch.__version__}, {WORLD} ranks on {torch.cuda.get_device_name(DEV)}, "
              f"mode {args.mode}, env {env}", flush=True)
    dist.init_process_group("nccl", device_id=DEV,
                            timeout=datetime.timedelta(seconds=args.pg_timeout))
    GLOO = dist.new_group(backend="gloo")
    if args.mode == "abort":
        mode_abort(args)
    sys.exit(mode_checks(args))


if __name__ == "__main__":
    main()
