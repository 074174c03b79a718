#!/usr/bin/env python3
"""Fails when a CUDA kernel of the build uses local memory (docs/CUDA.md,
"Registers and spills").

ptxas spills registers to local memory, which lives in the kernel's stack
frame, so a kernel whose frame is 0 bytes spills nothing. The build's
device code is in the library (the .nv_fatbin section of libnccl.so.2) as
one cubin (a CUDA ELF image) per .cu file; each cubin's .nv.info section
records, per function, EIATTR_REGCOUNT, EIATTR_FRAME_SIZE,
EIATTR_MIN_STACK_SIZE (the frame plus its callees') and
EIATTR_MAX_STACK_SIZE. This reads them with no CUDA tool (CI's toolkit has
no cuobjdump) and asserts, for every kernel, a stack of 0 bytes, except the
kernels in ALLOWED, which may not grow past their figure. With --rdc (a
-Drdc=true build) the bounds are RDC_ALLOWED: relocatable code keeps the
registers a reduction uses on the stack around each call to it.

  check_kernel_stack.py [--rdc] LIBRARY
Exit 0: every kernel within its bound; 1: one is not (named); 77: the
library holds no CUDA kernels (a build without CUDA)."""
import struct
import sys

EM_CUDA = 190
STO_CUDA_ENTRY = 0x10
EIFMT_SVAL, EIFMT_HVAL = 4, 3
EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE = 0x11, 0x12
EIATTR_MAX_STACK_SIZE, EIATTR_REGCOUNT = 0x23, 0x2F

# Kernels still allowed a stack, with the most bytes they may use (the
# figure today, CUDA 13.0, sm_90; lower it when it shrinks). The LL and
# LL128 plan kernels hold more values across the call to their reduction of a staged
# slot (ll_reduce_out) than the registers a call leaves alone, at the
# 128-register cap: ptxas spills the rest around the call.
ALLOWED = {
    "_Z16weft_plan_kernelILi1EEv9exec_args": 80,  # weft_plan_kernel<LL>
    "_Z17weft_fused_kernelILi1EEv10fused_args": 120,  # weft_fused_kernel<LL>
    "_Z16weft_plan_kernelILi2EEv9exec_args": 32,  # weft_plan_kernel<LL128>
}

# -Drdc=true (docs/CUDA.md, "Build time"): the same, plus the register
# saves around every call into another file's code (CUDA 13.0, sm_90,
# measured on an H100 on 2026-12-05).
RDC_ALLOWED = {
    "_Z16weft_plan_kernelILi0EEv9exec_args": 120,  # weft_plan_kernel<Simple>
    "_Z16weft_plan_kernelILi1EEv9exec_args": 208,  # weft_plan_kernel<LL>
    "_Z16weft_plan_kernelILi2EEv9exec_args": 224,  # weft_plan_kernel<LL128>
    "_Z17weft_fused_kernelILi0EEv10fused_args": 120,  # weft_fused_kernel<Simple>
    "_Z17weft_fused_kernelILi1EEv10fused_args": 248,  # weft_fused_kernel<LL>
    "_Z18weft_direct_kernel11direct_args": 168,  # weft_direct_kernel
}


def cstr(b, off):
    return b[off:b.index(b"\0", off)].decode("ascii", "replace")


def cubin_kernels(b, base):
    """{kernel: {attr: value}} of the CUDA ELF image at b[base:]."""
    shoff, = struct.unpack_from("<Q", b, base + 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, base + 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", b, base + shoff + k * shentsize)
            for k in range(shnum)]
    names = [cstr(b, base + secs[shstrndx][4] + s[0]) for s in secs]
    symtab = next(s for s in secs if s[1] == 2)  # SHT_SYMTAB
    strtab = secs[symtab[6]]
    syms = []
    for k in range(symtab[5] // 24):
        name, _info, other, _shndx, _val, _size = struct.unpack_from(
            "<IBBHQQ", b, base + symtab[4] + k * 24)
        syms.append((cstr(b, base + strtab[4] + name), other))
    kernels = {n: {} for n, other in syms if other & STO_CUDA_ENTRY}
    for s, n in zip(secs, names):
        if n != ".nv.info":
            continue
        o, end = base + s[4], base + s[4] + s[5]
        while o < end:
            fmt, attr = b[o], b[o + 1]
            if fmt == EIFMT_SVAL:
                size, = struct.unpack_from("<H", b, o + 2)
                payload = b[o + 4:o + 4 + size]
                o += 4 + size
            else:
                payload = b""
                o += 4 if fmt == EIFMT_HVAL else 2
            if fmt == EIFMT_SVAL and len(payload) == 8:
                sym, value = struct.unpack("<II", payload)
                name = syms[sym][0] if sym < len(syms) else None
                if name in kernels:
                    kernels[name][attr] = value
    return kernels


def main():
    args = sys.argv[1:]
    allowed = ALLOWED
    if args[:1] == ["--rdc"]:
        allowed, args = RDC_ALLOWED, args[1:]
    if len(args) != 1:
        print("usage: check_kernel_stack.py [--rdc] LIBRARY")
        return 2
    path = args[0]
    b = open(path, "rb").read()
    kernels = {}
    pos = b.find(b"\x7fELF", 1)
    while pos >= 0:
        if b[pos + 4] == 2 and struct.unpack_from("<H", b, pos + 18)[0] == EM_CUDA:
            kernels.update(cubin_kernels(b, pos))
        pos = b.find(b"\x7fELF", pos + 4)
    if not kernels:
        if b".nv_fatbin" in b:
            print("%s has a .nv_fatbin section but no readable cubin (compressed?): "
                  "cannot check the kernels" % path)
            return 1
        print("SKIP: no CUDA kernels in %s (a build without CUDA)" % path)
        return 77
    bad = []
    for name in sorted(kernels):
        a = kernels[name]
        if EIATTR_MIN_STACK_SIZE not in a and EIATTR_FRAME_SIZE not in a:
            bad.append("%s: no stack size recorded in its cubin" % name)
            continue
        stack = max(a.get(EIATTR_FRAME_SIZE, 0), a.get(EIATTR_MIN_STACK_SIZE, 0),
                    a.get(EIATTR_MAX_STACK_SIZE, 0))
        limit = allowed.get(name, 0)
        print("%-60s %3s registers, %4d bytes stack (at most %d)"
              % (name[:60], a.get(EIATTR_REGCOUNT, "?"), stack, limit))
        if stack > limit:
            bad.append("%s: %d bytes of stack (local memory: spills or a local copy), "
                       "at most %d allowed" % (name, stack, limit))
    for m in bad:
        print("FAIL: " + m)
    print("%d kernels, %d over their stack bound" % (len(kernels), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
