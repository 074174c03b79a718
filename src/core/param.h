/* Every tunable is one row here: the environment variable that sets it, its
 * default and what it does. NCCL_* names where NCCL has the knob, WEFT_*
 * where it is weft's own. NCCL_DEBUG_SUBSYS=ENV prints the table. */
#ifndef WEFT_CORE_PARAM_H
#define WEFT_CORE_PARAM_H

#include <stdint.h>

/* X(id, env name, default, help) for integer parameters. */
#define WEFT_INT_PARAMS(X)                                                          \
  X(TIMEOUT, "WEFT_TIMEOUT", 300, "seconds any bootstrap or peer wait may take")    \
  X(SOCKET_NTHREADS, "NCCL_SOCKET_NTHREADS", 1, "socket helper threads per conn")   \
  X(BUFFSIZE, "NCCL_BUFFSIZE", 4194304, "bytes of buffering per connection")        \
  X(CHUNK, "WEFT_CHUNK_SIZE", 0, "pipeline chunk bytes (0: chosen by size)")        \
  X(SPIN, "WEFT_SPIN", 2000, "polls a wait spins before it yields, then sleeps")    \
  X(SHM_DISABLE, "NCCL_SHM_DISABLE", 0, "1: no shared memory between ranks")        \
  X(P2P_DISABLE, "NCCL_P2P_DISABLE", 0, "1: no GPU peer-to-peer between GPUs")       \
  X(SHM_SLOTS, "WEFT_SHM_SLOTS", 8, "slots per shared-memory connection")           \
  X(SHM_SLOT_BYTES, "WEFT_SHM_SLOT_BYTES", 0, "shm slot bytes (0: BUFFSIZE/slots)") \
  X(SHM_CMA, "WEFT_SHM_CMA", 1,                                                           \
    "1: large shm sends are read once, straight from the sender (process_vm_readv); "    \
    "0: always copy through the segment; -1 (tests): make the probe fail")               \
  X(SHM_CMA_MIN, "WEFT_SHM_CMA_MIN", 262144, "shm sends of this many bytes or more go single-copy") \
  X(SOCKET_FAMILY_V6, "WEFT_SOCKET_IPV6", 0, "1: prefer IPv6 for bootstrap")        \
  X(REDUCE_SIMD, "WEFT_REDUCE_SIMD", 1, "0: portable host reduce loops (no AVX2/F16C)") \
  X(CHECK_MISMATCH, "WEFT_CHECK_MISMATCH", 1,                                              \
    "1: ranks compare each collective call first (mismatch: ncclInvalidUsage); "          \
    "0: skip it for the lowest latency (a mismatch then times out or corrupts)")           \
  X(MIN_NCHANNELS, "NCCL_MIN_NCHANNELS", 1, "fewest channels a collective uses")         \
  X(MAX_NCHANNELS, "NCCL_MAX_NCHANNELS", 2, "most channels a collective uses")          \
  X(CUDA_ENGINE, "WEFT_CUDA_ENGINE", 1,                                                   \
    "0: never run CUDA kernels; device buffers are staged through host memory")

/* X(id, env name, default, help) for string parameters (NULL: unset). */
#define WEFT_STR_PARAMS(X)                                                          \
  X(COMM_ID, "NCCL_COMM_ID", NULL, "host:port of the bootstrap root")               \
  X(COMM_SECRET, "WEFT_COMM_SECRET", NULL,                                          \
    "with NCCL_COMM_ID: a secret every rank sets alike; only ranks presenting it join") \
  X(SOCKET_IFNAME, "NCCL_SOCKET_IFNAME", NULL, "interfaces to use (prefix, ^excl)")  \
  X(P2P_LEVEL, "NCCL_P2P_LEVEL", NULL, "p2p up to LOC/NVL/PIX/PXB/PHB/SYS or 0..5")   \
  X(TOPO_FILE, "NCCL_TOPO_FILE", NULL, "NCCL topology XML to use instead of detecting") \
  X(TOPO_DUMP_FILE, "NCCL_TOPO_DUMP_FILE", NULL, "write the topology found as XML")    \
  X(DEVICE, "WEFT_DEVICE", NULL, "cpu: run every rank on host buffers")             \
  X(DEBUG, "NCCL_DEBUG", NULL, "VERSION, WARN, INFO or TRACE")                      \
  X(DEBUG_SUBSYS, "NCCL_DEBUG_SUBSYS", NULL, "INIT,COLL,NET,ENV,... or ^excl")       \
  X(DEBUG_FILE, "NCCL_DEBUG_FILE", NULL, "log file; %h host, %p pid")                \
  X(ALGO, "NCCL_ALGO", NULL, "algorithms: Ring,Tree,Direct, ^excl, or allreduce:tree;...")  \
  X(PROTO, "NCCL_PROTO", NULL, "protocols: Simple,LL,LL128 or ^excl (host: Simple)")

#define WEFT_PARAM_ENUM(id, env, def, help) WEFT_PARAM_##id,
enum weft_int_param { WEFT_INT_PARAMS(WEFT_PARAM_ENUM) WEFT_INT_PARAM_COUNT };
enum weft_str_param { WEFT_STR_PARAMS(WEFT_PARAM_ENUM) WEFT_STR_PARAM_COUNT };
#undef WEFT_PARAM_ENUM

/* Value of a parameter: the environment's if set and valid, else the default.
 * Read once per process (the first call), like NCCL. */
int64_t weft_param_int(enum weft_int_param id);
/* Whether the environment set id (to a valid integer), rather than the
 * default applying. */
int weft_param_is_set(enum weft_int_param id);
const char *weft_param_str(enum weft_str_param id);

/* Prints every parameter and its value at INFO/ENV (once per process). */
void weft_param_print_all(void);

#endif
