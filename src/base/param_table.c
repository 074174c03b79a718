/* The parameter table: one row per environment variable weft reads. A new
 * tunable is a row here and an id in param.h; docs/ENVIRONMENT.md is
 * generated from these rows (weft-params --markdown). */
#include "base/param.h"

#define KEYS_FUNC "allreduce,allgather,reducescatter,broadcast,reduce,send,recv"
#define INT_ROW(env_, def_, min_, max_, doc_, help_)                                 \
  {                                                                                  \
    .env = env_, .kind = WEFT_PARAM_KIND_INT, .def = def_, .min = min_, .max = max_, \
    .def_doc = doc_, .help = help_                                                   \
  }
#define STR_ROW(env_, doc_, help_) \
  { .env = env_, .kind = WEFT_PARAM_KIND_STR, .min = 1, .max = 0, .def_doc = doc_, .help = help_ }
#define BOOL_ROW(env_, def_, help_) INT_ROW(env_, def_, 0, 1, #def_, help_)

const struct weft_param_row weft_param_rows[WEFT_PARAM_COUNT] = {
    [WEFT_PARAM_TIMEOUT] = INT_ROW("WEFT_TIMEOUT", 300, 1, 1000000, "300",
                                   "seconds any bootstrap, connection or peer wait may take; "
                                   "a timeout names the rank that did not answer"),
    [WEFT_PARAM_BUFFSIZE] =
        INT_ROW("NCCL_BUFFSIZE", 4194304, 4096, 1073741824,
                "4194304 (CUDA engine: 1 MiB a link when every rank shares one GPU, 4 MiB "
                "otherwise)",
                "bytes of buffering per connection: shared-memory slots, and the CUDA "
                "engine's slots per link; every rank must set the same value"),
    [WEFT_PARAM_CHUNK] = INT_ROW("WEFT_CHUNK_SIZE", 0, 0, 1073741824,
                                 "0 (512 KiB on host ranks, 4 MiB on the CUDA engine)",
                                 "bytes per pipeline step; smaller messages move in one piece"),
    [WEFT_PARAM_SPIN] = INT_ROW("WEFT_SPIN", 2000, 0, 1000000000, "2000",
                                "polls a wait spins before it yields, then sleeps"),
    [WEFT_PARAM_SHM_DISABLE] =
        BOOL_ROW("NCCL_SHM_DISABLE", 0, "1: no shared memory between ranks (sockets only)"),
    [WEFT_PARAM_P2P_DISABLE] =
        BOOL_ROW("NCCL_P2P_DISABLE", 0,
                 "1: no GPU peer-to-peer between GPUs (device buffers are staged through host "
                 "memory)"),
    [WEFT_PARAM_SHM_SLOTS] =
        INT_ROW("WEFT_SHM_SLOTS", 8, 1, 4096, "8", "slots per shared-memory connection"),
    [WEFT_PARAM_SHM_SLOT_BYTES] =
        INT_ROW("WEFT_SHM_SLOT_BYTES", 0, 0, 1099511627776LL, "0 (NCCL_BUFFSIZE / WEFT_SHM_SLOTS)",
                "bytes per shared-memory slot"),
    [WEFT_PARAM_SHM_CMA] =
        INT_ROW("WEFT_SHM_CMA", 1, -1, 1, "1",
                "1: large shared-memory sends are read once, straight from the sender "
                "(process_vm_readv), and in-place exchanges of host ranks are swapped "
                "directly (process_vm_readv/writev); 0: always copy through the segment; -1 "
                "(tests): make the probe fail"),
    [WEFT_PARAM_SHM_CMA_MIN] = INT_ROW("WEFT_SHM_CMA_MIN", 262144, 0, 1099511627776LL, "262144",
                                       "shared-memory sends (and in-place swaps) of this "
                                       "many bytes or more go single-copy"),
    [WEFT_PARAM_SOCKET_FAMILY_V6] =
        BOOL_ROW("WEFT_SOCKET_IPV6", 0,
                 "1: try IPv6 addresses first (interfaces and host names); weft's older knob, "
                 "kept: NCCL_SOCKET_FAMILY, when set, wins"),
    [WEFT_PARAM_REDUCE_SIMD] =
        BOOL_ROW("WEFT_REDUCE_SIMD", 1, "0: portable host reduce loops (no AVX2/F16C)"),
    [WEFT_PARAM_CHECK_MISMATCH] =
        BOOL_ROW("WEFT_CHECK_MISMATCH", 1,
                 "1: ranks compare each collective call first (a mismatch is "
                 "ncclInvalidUsage); 0: skip it for the lowest latency (a mismatch then times "
                 "out or corrupts)"),
    [WEFT_PARAM_CHECK_POINTERS] =
        BOOL_ROW("NCCL_CHECK_POINTERS", 0,
                 "1: ask CUDA about every buffer on every call (GPU ranks: can the GPU "
                 "reach it; host ranks: is it not device memory); 0: a buffer the first time "
                 "a thread passes it (the last 64 answers are remembered, device memory of "
                 "the rank's GPU as its whole allocation: a buffer freed and passed again is "
                 "then not caught, as NCCL by default)"),
    [WEFT_PARAM_MIN_NCHANNELS] =
        INT_ROW("NCCL_MIN_NCHANNELS", 1, 1, 32, "1",
                "fewest channels a collective uses; above NCCL_MAX_NCHANNELS it is lowered to "
                "it (WARN); set alone it raises the default maximum"),
    [WEFT_PARAM_MAX_NCHANNELS] =
        INT_ROW("NCCL_MAX_NCHANNELS", 2, 1, 32,
                "(host ranks: where sockets carry a link, 16 when every host has 8 cores per "
                "local rank, 8 with 4, else 2; 16 on the CUDA engine)",
                "most channels a collective uses (one per MiB of message on host ranks and "
                "net links, one per 8 KiB on the CUDA engine inside a host, within the "
                "bounds)"),
    [WEFT_PARAM_CUDA_ENGINE] =
        BOOL_ROW("WEFT_CUDA_ENGINE", 1,
                 "0: never run CUDA kernels; device buffers are staged through host memory"),
    [WEFT_PARAM_NET_GPU] =
        BOOL_ROW("WEFT_NET_GPU", 1,
                 "GPU ranks on other hosts: 1 runs kernels over net links driven by the proxy "
                 "thread; 0 stages device buffers through host memory (the host engine)"),
    [WEFT_PARAM_NET_GPU_NCHANNELS] =
        INT_ROW("WEFT_NET_GPU_NCHANNELS", 4, 1, 16,
                "4 (one net peer: the host ranks' socket channels when more, 16 where every "
                "host has 8 cores per local rank, 8 with 4)",
                "most channels of a CUDA-engine communicator with net links (each channel "
                "is a network connection per peer and direction, trees use two)"),
    [WEFT_PARAM_DIRECT_LL_MAX] =
        INT_ROW("WEFT_DIRECT_LL_MAX", 32768, 0, 1048576, "32768",
                "largest per-rank payload (bytes) of a direct collective that runs in LL lines "
                "with no barrier (ranks of one process on one GPU); 0: never"),
    [WEFT_PARAM_DIRECT_CTA_BYTES] =
        INT_ROW("WEFT_DIRECT_CTA_BYTES", 262144, 4096, 1073741824, "262144",
                "bytes of a rank's share of a direct collective or send/recv (ranks of one "
                "process) per CTA it launches, up to the rank's CTA cap"),
    [WEFT_PARAM_DIRECT_P2P_GPUS] =
        INT_ROW("WEFT_DIRECT_P2P_GPUS", 2097152, 0, 1099511627776, "2097152",
                "smallest send or receive (bytes) between ranks of one process on different "
                "GPUs that is copied directly from the sender's buffer into the receiver's "
                "(peer access over NVLink or PCIe); smaller ones go through the links' FIFOs; "
                "0: every size; a size above any message: never"),
    [WEFT_PARAM_IB_DISABLE] =
        BOOL_ROW("NCCL_IB_DISABLE", 0, "1: the RDMA network (net/ib) uses no device"),
    [WEFT_PARAM_IB_GID_INDEX] =
        INT_ROW("NCCL_IB_GID_INDEX", -1, -1, 255,
                "-1 (InfiniBand: 0; RoCE: a RoCE v2 IPv4 GID, else v2 IPv6, else v1)",
                "GID table index net/ib's queue pairs use; an index the port lacks makes the "
                "port unusable (WARN)"),
    [WEFT_PARAM_IB_TIMEOUT] =
        INT_ROW("NCCL_IB_TIMEOUT", 20, 1, 31, "20",
                "net/ib queue pairs' ack timeout: 4.096 us x 2^value (0, wait forever, is "
                "refused)"),
    [WEFT_PARAM_IB_RETRY_CNT] = INT_ROW("NCCL_IB_RETRY_CNT", 7, 0, 7, "7",
                                        "net/ib queue pairs' retransmissions before an error"),
    [WEFT_PARAM_IB_SL] =
        INT_ROW("NCCL_IB_SL", 0, 0, 15, "0", "InfiniBand service level of net/ib's queue pairs"),
    [WEFT_PARAM_IB_TC] = INT_ROW("NCCL_IB_TC", 0, 0, 255, "0",
                                 "traffic class of net/ib's queue pairs (RoCE: the GRH's)"),
    [WEFT_PARAM_IB_QPS_PER_CONNECTION] =
        INT_ROW("NCCL_IB_QPS_PER_CONNECTION", 1, 1, 128, "1",
                "queue pairs per net/ib connection; messages are split across them"),
    [WEFT_PARAM_NET_GDR_READ] =
        BOOL_ROW("NCCL_NET_GDR_READ", 1,
                 "1 lets sends read device memory directly (GPUDirect RDMA); 0 keeps GPU ranks' "
                 "net send slots in host memory and makes net/ib refuse to register device "
                 "memory for sending (reg_mr says it needs a host bounce buffer). NCCL's "
                 "default depends on the platform (NVLink); weft's is 1"),
    [WEFT_PARAM_COMM_ID] =
        STR_ROW("NCCL_COMM_ID", "(rank 0's address, a free port)",
                "host:port of the bootstrap root (rank 0 serves it); a value that cannot be "
                "read is an error of ncclGetUniqueId / ncclCommInitRank"),
    [WEFT_PARAM_COMM_SECRET] =
        STR_ROW("WEFT_COMM_SECRET", "(none: anyone who reaches the port may join; said at INFO)",
                "with NCCL_COMM_ID: a string every rank of the job sets alike; only ranks "
                "presenting it may register (never logged)"),
    [WEFT_PARAM_SOCKET_NTHREADS] =
        INT_ROW("NCCL_SOCKET_NTHREADS", 2, 1, 16,
                "2 (host ranks with 8 or 16 channels over sockets: 1 a link, one data socket each; "
                "their wide link, WEFT_SOCKET_WIDE_MIN_BYTES: one per channel)",
                "helper threads per socket network connection (net/socket); each moves the "
                "chunks of large messages on its NCCL_NSOCKS_PERTHREAD sockets"),
    [WEFT_PARAM_NSOCKS_PERTHREAD] =
        INT_ROW("NCCL_NSOCKS_PERTHREAD", 1, 1, 64, "1",
                "data sockets each socket network helper thread owns; threads x sockets is "
                "capped at 64 (sockets per thread lowered, with a WARN)"),
    [WEFT_PARAM_SOCKET_HOST_THREADS] =
        INT_ROW("WEFT_SOCKET_HOST_THREADS", -1, -1, 1,
                "-1 (when the host has a core for each local rank and each of its helper threads)",
                "host ranks' socket links: 1 moves messages over 64 KiB through the socket "
                "network's helper threads and data sockets, 0 moves every message on the "
                "control socket from the rank's own thread (one stream per link)"),
    [WEFT_PARAM_HOST_COPY_THREADS] =
        INT_ROW("WEFT_HOST_COPY_THREADS", -1, -1, 64,
                "-1 (none below 4 cores per local rank, else half the cores per local rank, "
                "at most 4)",
                "threads of a host rank that copy the host engine's large local copies (a "
                "broadcast root's input to its output, a one-rank collective out of place, "
                "send/recv to self) beside the engine's own; 0: the engine copies alone"),
    [WEFT_PARAM_HOST_LANE_THREADS] =
        INT_ROW("WEFT_HOST_LANE_THREADS", -1, -1, 64,
                "-1 (2 for AllReduce, ReduceScatter and Reduce where the links are 16 socket "
                "channels, i.e. 8 cores per local rank; else 1: the engine's thread alone)",
                "threads of a host rank that run a large collective's lanes (channels), each "
                "its share, the engine's thread among them; the lanes' sends, receives and "
                "reductions then progress on several cores; set, it applies to every "
                "collective"),
    [WEFT_PARAM_HOST_LANE_MIN_BYTES] =
        INT_ROW("WEFT_HOST_LANE_MIN_BYTES", 4194304, 0, 1099511627776LL, "4194304",
                "a host collective runs on the lane threads (WEFT_HOST_LANE_THREADS) when its "
                "plan moves at least this many bytes (sent plus received) on this rank"),
    [WEFT_PARAM_HOST_WINDOW] =
        INT_ROW("WEFT_HOST_WINDOW", 2, 1, 4, "2",
                "host collectives in flight at once on a rank: a queued collective's channel "
                "starts as soon as the calls before it are done with that channel, instead "
                "of when they have ended on every channel (collectives on 2 channels or more, "
                "connected, not reading or writing what an earlier one in flight writes); "
                "1: one call at a time"),
    [WEFT_PARAM_SOCKET_WIDE_MIN_BYTES] =
        INT_ROW("WEFT_SOCKET_WIDE_MIN_BYTES", -1, -1, 1099511627776LL,
                "-1 (33554432 where 2 host ranks' link is 8 or 16 socket channels, i.e. 4 "
                "cores per local rank; else never)",
                "a 2-rank Broadcast over sockets of at least this many bytes moves in one "
                "piece on one wide link, its 16 MiB messages dealt between as many helper "
                "threads and data sockets as there are channels, instead of in 512 KiB steps "
                "on a share per channel; 0: never; set, it applies wherever the 2 ranks' link "
                "is a socket, and NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS or WEFT_CHUNK_SIZE "
                "set keep the channels"),
    [WEFT_PARAM_SOCKET_IFNAME] =
        STR_ROW("NCCL_SOCKET_IFNAME",
                "(ib* first, then any but docker*, lo*, virbr*, then docker*, then lo)",
                "interfaces for the bootstrap and sockets, as NCCL reads it: a comma list of "
                "name prefixes (eth,ib), ^ first excludes them (^docker,lo), = first makes "
                "them exact (=eth0); a :suffix is ignored; a name that matches no up "
                "interface is an error (WARN naming the interfaces there)"),
    [WEFT_PARAM_SOCKET_FAMILY] = {.env = "NCCL_SOCKET_FAMILY",
                                  .kind = WEFT_PARAM_KIND_NAME,
                                  .def = -1,
                                  .min = 1,
                                  .max = 0,
                                  .names = "AF_INET,AF_INET6",
                                  .def_doc = "(either: IPv4 first, see WEFT_SOCKET_IPV6)",
                                  .help = "AF_INET: IPv4 addresses only; AF_INET6: IPv6 only "
                                          "(interfaces and host names)"},
    [WEFT_PARAM_HOSTID] =
        STR_ROW("NCCL_HOSTID", "(host name and boot id)",
                "a string naming this rank's host: ranks with different values are different "
                "hosts (no shared memory, no GPU peer access between them: sockets), as in "
                "containers"),
    [WEFT_PARAM_NET_PLUGIN] =
        STR_ROW("NCCL_NET_PLUGIN", "(libnccl-net.so when there is one)",
                "the external net plugin (an NCCL plugin, ABI v8..v11) to load, as NCCL reads "
                "it: none disables; a name foo is tried as given, then as libnccl-net-foo.so; "
                "a path is used as given; a comma list is tried in order, the first that loads "
                "is used; one that cannot be loaded gets a WARN (then the built-in Socket "
                "network)"),
    [WEFT_PARAM_NET] =
        STR_ROW("NCCL_NET", "(the loaded plugin, else Socket)",
                "the network to use, by name (any case): Socket or the loaded plugin's name; "
                "a name that matches none fails the first connection between hosts"),
    [WEFT_PARAM_P2P_LEVEL] = {.env = "NCCL_P2P_LEVEL",
                              .kind = WEFT_PARAM_KIND_NAME,
                              .min = 0,
                              .max = 5,
                              .names = "LOC,NVL,PIX,PXB,PHB,SYS",
                              .def_doc = "PXB (SYS on AMD CPUs)",
                              .help = "how far GPU peer-to-peer may reach (NCCL's old numbers: "
                                      "0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and 5 SYS)"},
    [WEFT_PARAM_NET_GDR_LEVEL] = {.env = "NCCL_NET_GDR_LEVEL",
                                  .kind = WEFT_PARAM_KIND_NAME,
                                  .min = 0,
                                  .max = 5,
                                  .names = "LOC,NVL,NVB,C2C,PIX,PXB,PXN,P2C,PHB,SYS",
                                  .def_doc = "PXB",
                                  .help = "how far GPUDirect RDMA may reach: a NIC reads and "
                                          "writes GPU memory where the GPU-NIC path type is at "
                                          "or below it (NCCL's old numbers: 0 LOC, 1 PIX, 2 PXB, "
                                          "3 PHB, 4 and 5 SYS; NVB and C2C read as NVL, PXN and "
                                          "P2C as PXB); a net device the topology cannot place "
                                          "counts as SYS. GPU ranks' net slots go in device "
                                          "memory only where it allows (LOC: never)"},
    [WEFT_PARAM_TOPO_FILE] =
        STR_ROW("NCCL_TOPO_FILE", "(detect the topology)",
                "NCCL topology XML to use instead of detecting; one that cannot be read is an "
                "error of communicator creation"),
    [WEFT_PARAM_TOPO_DUMP_FILE] =
        STR_ROW("NCCL_TOPO_DUMP_FILE", "(none)", "write the topology found as NCCL's XML"),
    [WEFT_PARAM_DEVICE] = {.env = "WEFT_DEVICE",
                           .kind = WEFT_PARAM_KIND_NAME,
                           .min = 1,
                           .max = 0,
                           .names = "cpu,auto",
                           .def_doc = "auto",
                           .help = "cpu: run every rank on host buffers; auto: a GPU where "
                                   "there is one"},
    [WEFT_PARAM_DEBUG] = {.env = "NCCL_DEBUG",
                          .kind = WEFT_PARAM_KIND_NAME,
                          .min = 1,
                          .max = 0,
                          .names = "VERSION,WARN,INFO,ABORT,TRACE",
                          .def_doc = "(nothing printed)",
                          .help = "how much to log"},
    [WEFT_PARAM_DEBUG_SUBSYS] = {.env = "NCCL_DEBUG_SUBSYS",
                                 .kind = WEFT_PARAM_KIND_LIST,
                                 .names = "INIT,COLL,P2P,SHM,NET,GRAPH,TUNING,ENV,ALLOC,CALL,"
                                          "PROXY,NVLS,BOOTSTRAP,REG,PROFILE,RAS,ALLOC_HOST,"
                                          "DESTROY,ALL",
                                 .def_doc = "INIT,BOOTSTRAP,ENV",
                                 .help = "subsystems INFO logs, ^ excludes; naming ENV prints "
                                         "every parameter"},
    [WEFT_PARAM_DEBUG_FILE] =
        STR_ROW("NCCL_DEBUG_FILE", "(stdout)", "log file; %h is the host, %p the pid"),
    [WEFT_PARAM_ALGO] = {.env = "NCCL_ALGO",
                         .kind = WEFT_PARAM_KIND_LIST,
                         .names = "Ring,Tree,Direct,CollNetDirect,CollNetChain,NVLS,NVLSTree,"
                                  "PAT,CollNet",
                         .keys = KEYS_FUNC,
                         .def_doc = "(the tuning model picks)",
                         .help = "algorithms: Ring,Tree, ^Tree, or per collective "
                                 "allreduce:tree;broadcast:ring; Tree is AllReduce only, and "
                                 "Direct too on GPU ranks (host ranks have it for AllReduce, "
                                 "AllGather, ReduceScatter, Broadcast and Reduce); NCCL's "
                                 "CollNet*, NVLS*, PAT are accepted and ignored"},
    [WEFT_PARAM_PROTO] = {.env = "NCCL_PROTO",
                          .kind = WEFT_PARAM_KIND_LIST,
                          .names = "Simple,LL,LL128",
                          .keys = KEYS_FUNC,
                          .def_doc = "(the tuning model picks)",
                          .help = "protocols, same syntax as NCCL_ALGO; LL128 runs only where "
                                  "every pair of GPUs is joined by NVLink (elsewhere the others "
                                  "allowed, or Simple with a WARN); send/recv run Simple or LL, "
                                  "host ranks always Simple"},
    [WEFT_PARAM_IB_HCA] =
        STR_ROW("NCCL_IB_HCA", "(every active port)",
                "RDMA ports net/ib may use, as NCCL reads it: a comma list of name[:port] "
                "prefixes (mlx5_0:1,mlx5_1), ^ first excludes them, = first makes names exact "
                "(=mlx5_1, ^=mlx5_0:2); a value that cannot be read is a WARN and no port is "
                "used"),
};
