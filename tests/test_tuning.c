/* Unit tests of src/sched/tuning.c's protocol and channel choice. A communicator is
 * faked (ranks on one host, host or CUDA engine). NCCL_ALGO and NCCL_PROTO
 * are read once per process, so every test runs in a process of its own
 * (Check's fork mode) and sets them before its first weft_tune.
 * Checked: host ranks always get Simple, with the same algorithm, channels
 * and chunk a CUDA rank gets; the CUDA engine's model gives Simple at every
 * size (LL measured no faster, see tuning.c); NCCL_PROTO forces either; a
 * list with only LL128 falls back to the model; a send and a receive get
 * LL only when NCCL_PROTO allows nothing else for both; channels default
 * to 2 on host ranks and 16 on the CUDA engine, NCCL_MAX_NCHANNELS sets
 * both, chunks default to 512 KiB on host ranks and 4 MiB on the CUDA
 * engine, and the CUDA engine's lanes fit the GPU's SMs. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/debug.h"
#include "core/comm.h"
#include "core/comm_topo.h"
#include "exec/cuda_net.h"
#include "sched/tuning.h"
#include "topo/topo.h"
#include "suite_run.h"

static struct weft_peer_info peers[8];

static struct ncclComm fake_comm(int nranks, int host_engine) {
  struct ncclComm c;
  memset(&c, 0, sizeof(c));
  c.nranks = nranks;
  c.cuda_dev = host_engine ? -1 : 0;
  c.peers = peers; /* zeroed: every peer on this host */
  /* GPU ranks between GPUs over PCIe, whose rows are placeholders (shm's
   * figures): the tests below are of the model's rules, not of a fit. */
  if (!host_engine) c.gpu_path = WEFT_TUNE_PCIE;
  return c;
}

static struct weft_tuning tune(int nranks, int host_engine, enum weft_func func, size_t bytes) {
  struct ncclComm c = fake_comm(nranks, host_engine);
  struct weft_tuning t;
  ck_assert_int_eq(weft_tune(&c, !host_engine, func, bytes, 4, &t), ncclSuccess);
  return t;
}

static enum weft_proto proto(int nranks, enum weft_func func, size_t bytes) {
  return tune(nranks, 0, func, bytes).proto;
}

START_TEST(host_runs_simple) {
  setenv("NCCL_PROTO", "LL", 1);
  /* Direct is the CUDA engine's only when asked for; name the rest so
   * both engines choose among the same algorithms. */
  setenv("NCCL_ALGO", "Ring,Tree", 1);
  /* Same channel ceiling and chunk for both (their defaults differ:
   * channels_default, chunk_default; from 2 MiB both engines fill 2
   * channels). */
  setenv("NCCL_MAX_NCHANNELS", "2", 1);
  setenv("WEFT_CHUNK_SIZE", "524288", 1);
  const size_t sizes[] = {0, 4, 4096, 65536, 1u << 20, 64u << 20};
  for (int f = WEFT_FUNC_ALLREDUCE; f <= WEFT_FUNC_REDUCE; f++)
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
      struct weft_tuning h = tune(4, 1, (enum weft_func)f, sizes[i]);
      struct weft_tuning d = tune(4, 0, (enum weft_func)f, sizes[i]);
      ck_assert_int_eq(h.proto, WEFT_PROTO_SIMPLE);
      ck_assert_int_eq(h.algo, d.algo);
      if (sizes[i] < (2u << 20)) continue;
      ck_assert_int_eq(h.nchannels, d.nchannels);
      ck_assert_uint_eq(h.chunk_bytes, d.chunk_bytes);
    }
}
END_TEST

/* NCCL_ALGO that leaves AllReduce none of weft's algorithms: it runs Ring,
 * and the setting is WARNed once (NCCL would refuse the call). */
START_TEST(algo_none_left) {
  setenv("NCCL_ALGO", "allreduce:^Ring,Tree,Direct", 1);
  ck_assert_int_eq(tune(4, 1, WEFT_FUNC_ALLREDUCE, 1u << 20).algo, WEFT_ALGO_RING);
  ck_assert_int_eq(tune(4, 0, WEFT_FUNC_ALLREDUCE, 64).algo, WEFT_ALGO_RING);
  ck_assert_msg(strstr(weft_last_error(), "NCCL_ALGO=allreduce:^Ring,Tree,Direct leaves") != NULL,
                "last error: %s", weft_last_error());
}
END_TEST

START_TEST(cuda_crossover) {
  setenv("NCCL_ALGO", "Ring", 1);
  /* LL's measured latency is no lower than Simple's, so the model keeps
   * Simple for every collective and size. */
  static const size_t sizes[] = {8, 4096, 32u << 10, 256u << 10, 64u << 20};
  for (int f = WEFT_FUNC_ALLREDUCE; f <= WEFT_FUNC_REDUCE; f++)
    for (size_t i = 0; i < sizeof(sizes) / sizeof(*sizes); i++)
      ck_assert_int_eq(proto(4, (enum weft_func)f, sizes[i]), WEFT_PROTO_SIMPLE);
  /* One rank copies locally: nothing to pick. */
  ck_assert_int_eq(proto(1, WEFT_FUNC_ALLREDUCE, 4096), WEFT_PROTO_SIMPLE);
  /* A send and its receive are tuned apart: Simple unless forced. */
  ck_assert_int_eq(proto(4, WEFT_FUNC_SEND, 4096), WEFT_PROTO_SIMPLE);
  ck_assert_int_eq(proto(4, WEFT_FUNC_RECV, 4096), WEFT_PROTO_SIMPLE);
}
END_TEST

/* Unforced, the CUDA engine never picks Direct; host ranks do. */
START_TEST(cuda_no_direct) {
  ck_assert_int_eq(tune(4, 1, WEFT_FUNC_ALLREDUCE, 4096).algo, WEFT_ALGO_DIRECT);
  ck_assert_int_ne(tune(4, 0, WEFT_FUNC_ALLREDUCE, 4096).algo, WEFT_ALGO_DIRECT);
}
END_TEST

/* Host ranks run small calls of every collective directly (one exchange
 * with the call check folded in; exec/host_check.c) and large ones on the
 * ring; the CUDA engine's Direct over links stays AllReduce's. */
START_TEST(host_direct_small) {
  static const enum weft_func funcs[] = {WEFT_FUNC_ALLGATHER, WEFT_FUNC_REDUCESCATTER,
                                         WEFT_FUNC_BROADCAST, WEFT_FUNC_REDUCE};
  for (int n = 2; n <= 8; n *= 2)
    for (size_t i = 0; i < sizeof(funcs) / sizeof(funcs[0]); i++) {
      ck_assert_int_eq(tune(n, 1, funcs[i], 8).algo, WEFT_ALGO_DIRECT);
      ck_assert_int_eq(tune(n, 1, funcs[i], 4u << 20).algo, WEFT_ALGO_RING);
      ck_assert_int_ne(tune(n, 0, funcs[i], 8).algo, WEFT_ALGO_DIRECT);
    }
}
END_TEST

/* Ranks of one process on one GPU (comm->cuda_direct 1) run every
 * collective Direct has, at every size, on the CUDA engine; send/recv
 * keep their plans. */
START_TEST(own_buffers_one_gpu) {
  struct ncclComm c = fake_comm(4, 0);
  c.cuda_direct = 1;
  static const enum weft_func has[] = {WEFT_FUNC_ALLREDUCE, WEFT_FUNC_ALLGATHER,
                                       WEFT_FUNC_REDUCESCATTER, WEFT_FUNC_BROADCAST,
                                       WEFT_FUNC_REDUCE};
  struct weft_tuning t;
  for (size_t i = 0; i < sizeof(has) / sizeof(has[0]); i++)
    for (size_t bytes = 8; bytes <= (1u << 30); bytes <<= 11) {
      ck_assert_int_eq(weft_tune(&c, 1, has[i], bytes, 4, &t), ncclSuccess);
      ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT);
      ck_assert_int_eq(t.proto, WEFT_PROTO_SIMPLE);
      /* The host engine keeps its own choice: Direct for small calls of
       * every collective (one exchange, the call check folded in), a plan
       * for large ones. */
      ck_assert_int_eq(weft_tune(&c, 0, has[i], bytes, 4, &t), ncclSuccess);
      if (bytes <= 64)
        ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT);
      else if (bytes > 16384)
        ck_assert_int_ne(t.algo, WEFT_ALGO_DIRECT);
    }
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_SEND, 4096, 4, &t), ncclSuccess);
  ck_assert_int_ne(t.algo, WEFT_ALGO_DIRECT);
  /* Several GPUs of one process: only when NCCL_ALGO names it. */
  c.cuda_direct = 2;
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLGATHER, 1u << 20, 4, &t), ncclSuccess);
  ck_assert_int_ne(t.algo, WEFT_ALGO_DIRECT);
}
END_TEST

/* Ranks in several processes on one GPU (comm->cuda_direct 3) run the
 * calls that fit LL lines (cuda_direct_ll_bytes a rank) directly, and
 * keep their plans above that. */
START_TEST(own_buffers_processes) {
  struct ncclComm c = fake_comm(4, 0);
  c.cuda_direct = 3;
  c.cuda_direct_ll_bytes = 32768;
  static const enum weft_func has[] = {WEFT_FUNC_ALLREDUCE, WEFT_FUNC_ALLGATHER,
                                       WEFT_FUNC_REDUCESCATTER, WEFT_FUNC_BROADCAST,
                                       WEFT_FUNC_REDUCE};
  struct weft_tuning t;
  for (size_t i = 0; i < sizeof(has) / sizeof(has[0]); i++) {
    for (size_t bytes = 8; bytes <= 32768; bytes <<= 3) {
      ck_assert_int_eq(weft_tune(&c, 1, has[i], bytes, 4, &t), ncclSuccess);
      ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT);
    }
    ck_assert_int_eq(weft_tune(&c, 1, has[i], 32768 + 16, 4, &t), ncclSuccess);
    ck_assert_int_ne(t.algo, WEFT_ALGO_DIRECT);
    ck_assert_int_eq(weft_tune(&c, 1, has[i], 1u << 20, 4, &t), ncclSuccess);
    ck_assert_int_ne(t.algo, WEFT_ALGO_DIRECT);
  }
  /* On mapped windows, at any size. */
  ck_assert_int_eq(weft_tune_mapped(&c, 1, WEFT_FUNC_ALLGATHER, 1u << 20, 4, 1, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT);
  /* Where the direct kernel measured slower on windows, the ring: a
   * Broadcast between LL lines and 8 MiB, a 2-rank ReduceScatter above
   * LL lines and below 2 MiB a rank. */
  ck_assert_int_eq(weft_tune_mapped(&c, 1, WEFT_FUNC_BROADCAST, 8, 4, 1, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT);
  ck_assert_int_eq(weft_tune_mapped(&c, 1, WEFT_FUNC_BROADCAST, 65536, 4, 1, &t), ncclSuccess);
  ck_assert_int_ne(t.algo, WEFT_ALGO_DIRECT);
  ck_assert_int_eq(weft_tune_mapped(&c, 1, WEFT_FUNC_BROADCAST, 4u << 20, 4, 1, &t), ncclSuccess);
  ck_assert_int_ne(t.algo, WEFT_ALGO_DIRECT);
  ck_assert_int_eq(weft_tune_mapped(&c, 1, WEFT_FUNC_BROADCAST, 8u << 20, 4, 1, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT);
  ck_assert_int_eq(weft_tune_mapped(&c, 1, WEFT_FUNC_REDUCESCATTER, 1u << 20, 4, 1, &t),
                   ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT); /* 4 ranks */
  c.nranks = 2;
  ck_assert_int_eq(weft_tune_mapped(&c, 1, WEFT_FUNC_REDUCESCATTER, 1u << 20, 4, 1, &t),
                   ncclSuccess);
  ck_assert_int_ne(t.algo, WEFT_ALGO_DIRECT);
  ck_assert_int_eq(weft_tune_mapped(&c, 1, WEFT_FUNC_REDUCESCATTER, 2u << 20, 4, 1, &t),
                   ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT);
  ck_assert_int_eq(weft_tune_mapped(&c, 1, WEFT_FUNC_REDUCESCATTER, 16u << 20, 4, 1, &t),
                   ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT);
  /* 2 ranks: an AllGather below 1 MiB a rank, an AllReduce of 128 KiB to
   * 2 MiB; with 4 ranks both run directly. */
  ck_assert_int_eq(weft_tune_mapped(&c, 1, WEFT_FUNC_ALLGATHER, 512u << 10, 4, 1, &t), ncclSuccess);
  ck_assert_int_ne(t.algo, WEFT_ALGO_DIRECT);
  ck_assert_int_eq(weft_tune_mapped(&c, 1, WEFT_FUNC_ALLGATHER, 1u << 20, 4, 1, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT);
  ck_assert_int_eq(weft_tune_mapped(&c, 1, WEFT_FUNC_ALLREDUCE, 64u << 10, 4, 1, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT);
  ck_assert_int_eq(weft_tune_mapped(&c, 1, WEFT_FUNC_ALLREDUCE, 1u << 20, 4, 1, &t), ncclSuccess);
  ck_assert_int_ne(t.algo, WEFT_ALGO_DIRECT);
  ck_assert_int_eq(weft_tune_mapped(&c, 1, WEFT_FUNC_ALLREDUCE, 2u << 20, 4, 1, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT);
  c.nranks = 4;
  ck_assert_int_eq(weft_tune_mapped(&c, 1, WEFT_FUNC_ALLGATHER, 512u << 10, 4, 1, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT);
  ck_assert_int_eq(weft_tune_mapped(&c, 1, WEFT_FUNC_ALLREDUCE, 1u << 20, 4, 1, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT);
  /* No LL scratch (WEFT_DIRECT_LL_MAX=0): no call runs directly. */
  c.cuda_direct_ll_bytes = 0;
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, 8, 4, &t), ncclSuccess);
  ck_assert_int_ne(t.algo, WEFT_ALGO_DIRECT);
}
END_TEST

/* NCCL_ALGO=Ring keeps one GPU's ranks on the ring; naming Direct puts
 * several GPUs' on their own buffers too. */
START_TEST(own_buffers_asked) {
  setenv("NCCL_ALGO", "allreduce:Ring;allgather:Direct", 1);
  struct ncclComm c = fake_comm(4, 0);
  c.cuda_direct = 1;
  struct weft_tuning t;
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, 1u << 20, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_RING);
  c.cuda_direct = 2;
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLGATHER, 1u << 20, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT);
}
END_TEST

/* Over net links (GPU ranks on other hosts) the CUDA engine takes Direct
 * for small all-reduces, Simple only, and the ring past Direct's size. */
START_TEST(net_links_direct) {
  struct ncclComm c = fake_comm(2, 0);
  c.cuda_net_links = 1;
  c.cuda_net_direct = 1;
  struct weft_tuning t;
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, 8, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT);
  ck_assert_int_eq(t.proto, WEFT_PROTO_SIMPLE);
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, 64u << 20, 4, &t), ncclSuccess);
  ck_assert_int_ne(t.algo, WEFT_ALGO_DIRECT);
  ck_assert_int_eq(t.proto, WEFT_PROTO_SIMPLE);
  /* Ranks that are threads of one process on one GPU: no Direct. */
  c.cuda_net_direct = 0;
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, 8, 4, &t), ncclSuccess);
  ck_assert_int_ne(t.algo, WEFT_ALGO_DIRECT);
  ck_assert_int_eq(t.proto, WEFT_PROTO_SIMPLE);
}
END_TEST

/* LL128 runs over NVLink only: forced there, it runs; on one GPU, over
 * PCIe or host memory it is Simple (a WARN), or whatever else NCCL_PROTO
 * allows; sends never; and unmeasured, the model does not pick it. */
START_TEST(ll128_nvlink_only) {
  setenv("NCCL_PROTO", "allreduce:LL128;allgather:LL,LL128;send:LL128;recv:LL128", 1);
  setenv("NCCL_ALGO", "Ring", 1);
  struct ncclComm c = fake_comm(2, 0);
  struct weft_tuning t;
  const int paths[] = {WEFT_TUNE_NVLINK, WEFT_TUNE_SAME_GPU, WEFT_TUNE_PCIE, WEFT_TUNE_STAGED};
  for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
    c.gpu_path = paths[i];
    int nvlink = paths[i] == WEFT_TUNE_NVLINK;
    ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, 1u << 20, 4, &t), ncclSuccess);
    ck_assert_int_eq(t.proto, nvlink ? WEFT_PROTO_LL128 : WEFT_PROTO_SIMPLE);
    ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLGATHER, 4096, 4, &t), ncclSuccess);
    if (!nvlink) ck_assert_int_eq(t.proto, WEFT_PROTO_LL);
    ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_SEND, 4096, 4, &t), ncclSuccess);
    ck_assert_int_eq(t.proto, WEFT_PROTO_SIMPLE);
  }
  /* NVLink between GPUs, but two of the ranks on one GPU. */
  c.gpu_path = WEFT_TUNE_NVLINK;
  c.gpu_shared = 1;
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, 1u << 20, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.proto, WEFT_PROTO_SIMPLE);
  ck_assert(!weft_tune_ll128_links(&c));
  c.gpu_shared = 0;
  ck_assert(weft_tune_ll128_links(&c));
}
END_TEST

START_TEST(ll128_not_picked_unmeasured) {
  struct ncclComm c = fake_comm(2, 0);
  c.gpu_path = WEFT_TUNE_NVLINK;
  const size_t sizes[] = {8, 4096, 1u << 20, 64u << 20, (size_t)1 << 32};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    struct weft_tuning t;
    ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, sizes[i], 4, &t), ncclSuccess);
    ck_assert_int_ne(t.proto, WEFT_PROTO_LL128);
  }
}
END_TEST

START_TEST(tree_crossover) {
  setenv("NCCL_ALGO", "Tree", 1);
  /* Two trees: a step moves a chunk of half the buffer (one channel here). */
  ck_assert_int_eq(tune(8, 0, WEFT_FUNC_ALLREDUCE, 4096).algo, WEFT_ALGO_TREE);
  ck_assert_int_eq(proto(8, WEFT_FUNC_ALLREDUCE, 4096), WEFT_PROTO_SIMPLE);
  ck_assert_int_eq(proto(8, WEFT_FUNC_ALLREDUCE, 256u << 10), WEFT_PROTO_SIMPLE);
}
END_TEST

START_TEST(force_ll) {
  setenv("NCCL_PROTO", "LL", 1);
  ck_assert_int_eq(proto(4, WEFT_FUNC_ALLREDUCE, 64u << 20), WEFT_PROTO_LL);
  ck_assert_int_eq(proto(4, WEFT_FUNC_ALLGATHER, 64u << 20), WEFT_PROTO_LL);
  ck_assert_int_eq(proto(4, WEFT_FUNC_SEND, 64u << 20), WEFT_PROTO_LL);
  ck_assert_int_eq(proto(4, WEFT_FUNC_RECV, 4), WEFT_PROTO_LL);
}
END_TEST

START_TEST(force_simple) {
  setenv("NCCL_PROTO", "^LL,LL128", 1);
  ck_assert_int_eq(proto(4, WEFT_FUNC_ALLREDUCE, 4), WEFT_PROTO_SIMPLE);
  ck_assert_int_eq(proto(8, WEFT_FUNC_BROADCAST, 4096), WEFT_PROTO_SIMPLE);
}
END_TEST

START_TEST(per_collective) {
  setenv("NCCL_PROTO", "allreduce:Simple;broadcast:LL", 1);
  ck_assert_int_eq(proto(4, WEFT_FUNC_ALLREDUCE, 4), WEFT_PROTO_SIMPLE);
  ck_assert_int_eq(proto(4, WEFT_FUNC_BROADCAST, 64u << 20), WEFT_PROTO_LL);
  ck_assert_int_eq(proto(4, WEFT_FUNC_ALLGATHER, 4096), WEFT_PROTO_SIMPLE); /* the model */
}
END_TEST

/* LL128 alone: WARNed at load; the model picks as if nothing was asked. */
START_TEST(ll128_only) {
  setenv("NCCL_PROTO", "LL128", 1);
  setenv("NCCL_ALGO", "Ring", 1);
  ck_assert_int_eq(proto(4, WEFT_FUNC_ALLREDUCE, 4096), WEFT_PROTO_SIMPLE);
  ck_assert_int_eq(proto(4, WEFT_FUNC_ALLREDUCE, 64u << 20), WEFT_PROTO_SIMPLE);
  ck_assert_int_eq(tune(4, 1, WEFT_FUNC_ALLREDUCE, 4096).proto, WEFT_PROTO_SIMPLE);
}
END_TEST

/* LL for sends only: the receive would still run Simple, so neither does. */
START_TEST(p2p_one_side) {
  setenv("NCCL_PROTO", "send:LL", 1);
  ck_assert_int_eq(proto(4, WEFT_FUNC_SEND, 4096), WEFT_PROTO_SIMPLE);
  ck_assert_int_eq(proto(4, WEFT_FUNC_RECV, 4096), WEFT_PROTO_SIMPLE);
}
END_TEST

START_TEST(p2p_both_sides) {
  setenv("NCCL_PROTO", "send:LL;recv:LL", 1);
  ck_assert_int_eq(proto(4, WEFT_FUNC_SEND, 1u << 20), WEFT_PROTO_LL);
  ck_assert_int_eq(proto(4, WEFT_FUNC_RECV, 1u << 20), WEFT_PROTO_LL);
}
END_TEST

/* Without NCCL_MAX_NCHANNELS host ranks use up to 2 channels and the CUDA
 * engine up to 16, growing with the message: one a MiB on host ranks and
 * net links, one per 8 KiB on the CUDA engine's links inside a host. */
START_TEST(channels_default) {
  setenv("NCCL_ALGO", "Ring", 1);
  ck_assert_int_eq(tune(4, 1, WEFT_FUNC_ALLREDUCE, 64u << 20).nchannels, 2);
  ck_assert_int_eq(tune(4, 1, WEFT_FUNC_ALLREDUCE, 1u << 20).nchannels, 1);
  ck_assert_int_eq(tune(4, 0, WEFT_FUNC_ALLREDUCE, 64u << 20).nchannels, 16);
  ck_assert_int_eq(tune(4, 0, WEFT_FUNC_ALLREDUCE, 1u << 20).nchannels, 16);
  ck_assert_int_eq(tune(4, 0, WEFT_FUNC_ALLREDUCE, 24u << 10).nchannels, 3);
  ck_assert_int_eq(tune(4, 0, WEFT_FUNC_ALLREDUCE, 4096).nchannels, 1);
  ck_assert_int_eq(weft_tune_max_channels(0), 2);
  ck_assert_int_eq(weft_tune_max_channels(1), 16);
  /* GPU ranks with net links: a MiB a channel, as the sockets want. */
  struct ncclComm c = fake_comm(4, 0);
  c.cuda_net_links = 1;
  struct weft_tuning t;
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, 3u << 20, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.nchannels, 3);
}
END_TEST

/* The host engine's default ceiling grows only where sockets carry a link
 * (two hosts, or NCCL_SHM_DISABLE=1), with the fewest cores per local rank
 * of any host: 16 channels of one helper thread a link from 8 cores, 8
 * from 4; a communicator with it set uses it, NCCL_MAX_NCHANNELS still
 * wins. */
START_TEST(host_channels_sockets) {
  struct weft_peer_info p[4];
  memset(p, 0, sizeof(p));
  for (int r = 0; r < 4; r++) p[r].cpus = 16, p[r].host_hash = (uint64_t)(r / 2);
  ck_assert_int_eq(weft_comm_host_channels(p, 4, 0), 16); /* two hosts, 8 cores a rank */
  ck_assert_int_eq(weft_comm_host_channels(p, 2, 0), 0);  /* one host, shm: the default */
  ck_assert_int_eq(weft_comm_host_channels(p, 2, 1), 16); /* one host, sockets */
  ck_assert_int_eq(weft_comm_host_channels(p, 1, 1), 0);  /* one rank */
  p[3].cpus = 15;                                         /* 7 cores a rank there */
  ck_assert_int_eq(weft_comm_host_channels(p, 4, 0), 8);
  p[3].cpus = 7; /* 3 */
  ck_assert_int_eq(weft_comm_host_channels(p, 4, 0), 0);
  p[3].cpus = 16;
  p[2].host_hash = p[3].host_hash = 0; /* 4 ranks on one host of 16 cores */
  ck_assert_int_eq(weft_comm_host_channels(p, 4, 1), 8);
  p[0].cpus = 15;
  ck_assert_int_eq(weft_comm_host_channels(p, 4, 1), 0);
  ck_assert_int_eq(weft_comm_host_link_threads(16, 0), 1);
  ck_assert_int_eq(weft_comm_host_link_threads(8, 0), 1);
  ck_assert_int_eq(weft_comm_host_link_threads(4, 0), 0);
  ck_assert_int_eq(weft_comm_host_link_threads(0, 0), 0);

  setenv("NCCL_ALGO", "Ring", 1);
  struct ncclComm c = fake_comm(4, 1);
  c.host_channels = 8;
  struct weft_tuning t;
  ck_assert_int_eq(weft_tune(&c, 0, WEFT_FUNC_ALLREDUCE, 64u << 20, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.nchannels, 8);
  ck_assert_int_eq(weft_tune(&c, 0, WEFT_FUNC_ALLREDUCE, 3u << 20, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.nchannels, 3);
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, 64u << 20, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.nchannels, 16); /* the CUDA engine ignores it */
}
END_TEST

/* The thread's memo of answers (sched/tuning.c) gives the same answer
 * to the same question, and a new one once an input of the choice
 * changes: the communicator's channels, its peers' hosts (the path type),
 * the table in use. */
START_TEST(memo_follows_inputs) {
  setenv("NCCL_ALGO", "Ring", 1);
  struct ncclComm c = fake_comm(4, 1);
  c.host_channels = 8;
  struct weft_tuning t;
  for (int round = 0; round < 2; round++) {
    ck_assert_int_eq(weft_tune(&c, 0, WEFT_FUNC_ALLREDUCE, 64u << 20, 4, &t), ncclSuccess);
    ck_assert_int_eq(t.nchannels, 8);
    ck_assert_int_eq(t.path, WEFT_TUNE_SHM);
  }
  c.host_channels = 4;
  ck_assert_int_eq(weft_tune(&c, 0, WEFT_FUNC_ALLREDUCE, 64u << 20, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.nchannels, 4);
  peers[1].host_hash = 1; /* another host: sockets */
  ck_assert_int_eq(weft_tune(&c, 0, WEFT_FUNC_ALLREDUCE, 64u << 20, 4, &t), ncclSuccess);
  peers[1].host_hash = 0;
  ck_assert_int_eq(t.path, WEFT_TUNE_SOCKET);
  float before = t.estimated_us;
  const struct weft_tune_fit slow[] = {{WEFT_TUNE_SOCKET, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_RING,
                                        WEFT_PROTO_SIMPLE, 4, 1000.0, 1.0, 1, "test"}};
  weft_tune_fits_use(slow, 1);
  peers[1].host_hash = 1;
  ck_assert_int_eq(weft_tune(&c, 0, WEFT_FUNC_ALLREDUCE, 64u << 20, 4, &t), ncclSuccess);
  peers[1].host_hash = 0;
  weft_tune_fits_use(NULL, 0);
  ck_assert_msg(t.estimated_us > before * 10, "estimate %g with the slow table, %g before",
                (double)t.estimated_us, (double)before);
}
END_TEST

/* A 2-rank socket comm whose links are host_channels channels (the two
 * ranks on two hosts), asked about a host collective of `bytes`. */
static struct weft_tuning wide_tune(int nranks, int host_channels, enum weft_func func,
                                    size_t bytes) {
  struct ncclComm c = fake_comm(nranks, 1);
  c.host_channels = host_channels;
  for (int r = 0; r < nranks; r++) peers[r].host_hash = (uint64_t)r;
  struct weft_tuning t;
  ck_assert_int_eq(weft_tune(&c, 0, func, bytes, 4, &t), ncclSuccess);
  int asked = weft_tune_wide(&c, 0, func, bytes, t.algo);
  for (int r = 0; r < nranks; r++) peers[r].host_hash = 0;
  ck_assert_int_eq(t.wide, asked);
  return t;
}

/* The wide link by default: a 2-rank Broadcast over 8 or 16 socket
 * channels from 32 MiB, in one step on one lane; nothing else. */
START_TEST(wide_default) {
  struct weft_tuning t = wide_tune(2, 16, WEFT_FUNC_BROADCAST, 256u << 20);
  ck_assert_int_eq(t.wide, 1);
  ck_assert_int_eq(t.nchannels, 1);
  ck_assert_uint_eq(t.chunk_bytes, 0);
  ck_assert_int_eq(wide_tune(2, 8, WEFT_FUNC_BROADCAST, 32u << 20).wide, 1);
  t = wide_tune(2, 16, WEFT_FUNC_BROADCAST, (32u << 20) - 4);
  ck_assert_int_eq(t.wide, 0);
  ck_assert_int_eq(t.nchannels, 16);
  ck_assert_int_eq(wide_tune(2, 0, WEFT_FUNC_BROADCAST, 256u << 20).wide, 0); /* no helpers */
  ck_assert_int_eq(wide_tune(3, 16, WEFT_FUNC_BROADCAST, 256u << 20).wide, 0);
  ck_assert_int_eq(wide_tune(2, 16, WEFT_FUNC_ALLREDUCE, 256u << 20).wide, 0);
  ck_assert_int_eq(wide_tune(2, 16, WEFT_FUNC_ALLGATHER, 256u << 20).wide, 0);
  /* The same ranks over shared memory, and GPU ranks: never. */
  struct ncclComm c = fake_comm(2, 1);
  c.host_channels = 16;
  struct weft_tuning u;
  ck_assert_int_eq(weft_tune(&c, 0, WEFT_FUNC_BROADCAST, 256u << 20, 4, &u), ncclSuccess);
  ck_assert_int_eq(u.wide, 0);
  peers[1].host_hash = 1;
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_BROADCAST, 256u << 20, 4, &u), ncclSuccess);
  peers[1].host_hash = 0;
  ck_assert_int_eq(u.wide, 0);
}
END_TEST

/* WEFT_SOCKET_WIDE_MIN_BYTES set: from that size on any socket link. */
START_TEST(wide_min_set) {
  setenv("WEFT_SOCKET_WIDE_MIN_BYTES", "1048576", 1);
  ck_assert_int_eq(wide_tune(2, 0, WEFT_FUNC_BROADCAST, 1u << 20).wide, 1);
  ck_assert_int_eq(wide_tune(2, 16, WEFT_FUNC_BROADCAST, 1u << 20).wide, 1);
  ck_assert_int_eq(wide_tune(2, 0, WEFT_FUNC_BROADCAST, (1u << 20) - 4).wide, 0);
}
END_TEST

/* Off (0), or channels or steps asked for: the broadcast keeps the
 * channels. */
static const char *const wide_kept[][2] = {{"WEFT_SOCKET_WIDE_MIN_BYTES", "0"},
                                           {"NCCL_MAX_NCHANNELS", "16"},
                                           {"NCCL_MIN_NCHANNELS", "2"},
                                           {"WEFT_CHUNK_SIZE", "1048576"}};

START_TEST(wide_kept_off) {
  setenv(wide_kept[_i][0], wide_kept[_i][1], 1);
  struct weft_tuning t = wide_tune(2, 16, WEFT_FUNC_BROADCAST, 1u << 30);
  ck_assert_msg(t.wide == 0 && t.nchannels > 1, "%s=%s: wide %d, %d channels", wide_kept[_i][0],
                wide_kept[_i][1], t.wide, t.nchannels);
}
END_TEST

/* NCCL_MAX_NCHANNELS=3 caps a communicator whose default is 4. */
START_TEST(host_channels_env) {
  setenv("NCCL_ALGO", "Ring", 1);
  setenv("NCCL_MAX_NCHANNELS", "3", 1);
  struct ncclComm c = fake_comm(4, 1);
  c.host_channels = 4;
  struct weft_tuning t;
  ck_assert_int_eq(weft_tune(&c, 0, WEFT_FUNC_ALLREDUCE, 64u << 20, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.nchannels, 3);
}
END_TEST

/* GPU ranks' net links: 4 channels, or with one net peer the host
 * engine's socket channels when they are more. */
START_TEST(net_gpu_channels) {
  struct ncclComm c = fake_comm(2, 0);
  c.host_channels = 16;
  ck_assert_int_eq(weft_cuda_net_max_channels(&c, 1), 16);
  ck_assert_int_eq(weft_cuda_net_max_channels(&c, 3), 4); /* several net peers */
  c.host_channels = 8;
  ck_assert_int_eq(weft_cuda_net_max_channels(&c, 1), 8);
  c.host_channels = 0; /* no cores to spare: the tuning's default */
  ck_assert_int_eq(weft_cuda_net_max_channels(&c, 1), 4);
}
END_TEST

/* WEFT_NET_GPU_NCHANNELS, when set, wins either way. */
START_TEST(net_gpu_channels_env) {
  setenv("WEFT_NET_GPU_NCHANNELS", "2", 1);
  struct ncclComm c = fake_comm(2, 0);
  c.host_channels = 16;
  ck_assert_int_eq(weft_cuda_net_max_channels(&c, 1), 2);
  ck_assert_int_eq(weft_cuda_net_max_channels(&c, 3), 2);
}
END_TEST

/* A large message's chunk: 512 KiB on host ranks, 4 MiB on the CUDA
 * engine (its steps drain the pipeline); never more than a channel's
 * share. */
START_TEST(chunk_default) {
  setenv("NCCL_ALGO", "Ring", 1);
  ck_assert_uint_eq(tune(4, 1, WEFT_FUNC_ALLREDUCE, 256u << 20).chunk_bytes, 512u << 10);
  ck_assert_uint_eq(tune(4, 0, WEFT_FUNC_ALLREDUCE, 256u << 20).chunk_bytes, 4u << 20);
  /* 1 MiB on 16 channels: a channel's share. */
  ck_assert_uint_eq(tune(4, 0, WEFT_FUNC_ALLREDUCE, 1u << 20).chunk_bytes, 64u << 10);
  ck_assert_uint_eq(tune(4, 1, WEFT_FUNC_ALLREDUCE, 1u << 20).chunk_bytes, 512u << 10);
}
END_TEST

/* NCCL_MAX_NCHANNELS sets both engines' ceiling. */
START_TEST(channels_env) {
  setenv("NCCL_ALGO", "Ring", 1);
  setenv("NCCL_MAX_NCHANNELS", "5", 1);
  ck_assert_int_eq(tune(4, 1, WEFT_FUNC_ALLREDUCE, 64u << 20).nchannels, 5);
  ck_assert_int_eq(tune(4, 0, WEFT_FUNC_ALLREDUCE, 64u << 20).nchannels, 5);
  ck_assert_int_eq(weft_tune_max_channels(1), 5);
}
END_TEST

/* The CUDA engine's lanes must all run at once with the other ranks' on
 * the GPU: a ring gets at most cuda_max_lanes channels, a tree (4 lanes a
 * channel) a quarter of that, and never fewer than one. */
static int lanes_capped(int max_lanes, const char *algo) {
  setenv("NCCL_ALGO", algo, 1); /* read once: one algorithm a test */
  struct ncclComm c = fake_comm(8, 0);
  c.cuda_max_lanes = max_lanes;
  struct weft_tuning t;
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, 256u << 20, 4, &t), ncclSuccess);
  return t.nchannels;
}

START_TEST(channels_fit_ring) {
  ck_assert_int_eq(lanes_capped(132 / 16, "Ring"), 8);
  ck_assert_int_eq(lanes_capped(132 / 32, "Ring"), 4);
  ck_assert_int_eq(lanes_capped(1, "Ring"), 1);
}
END_TEST

START_TEST(channels_fit_tree) {
  ck_assert_int_eq(lanes_capped(132 / 8, "Tree"), 4);
  ck_assert_int_eq(lanes_capped(132 / 32, "Tree"), 1);
}
END_TEST

/* The compiled table has a row for every path, algorithm and protocol,
 * each with the figures the model divides by and where it came from. */
START_TEST(table_complete) {
  for (int p = 0; p < WEFT_TUNE_PATH_COUNT; p++)
    for (int a = 0; a < WEFT_ALGO_COUNT; a++)
      for (int q = 0; q < WEFT_PROTO_COUNT; q++) {
        const struct weft_tune_fit *r =
            weft_tune_fit_find((enum weft_tune_path)p, WEFT_FUNC_ALLREDUCE, a, q, 4);
        ck_assert_msg(r != NULL, "no row for path %s algo %d proto %d",
                      weft_tune_path_name((enum weft_tune_path)p), a, q);
        ck_assert(r->beta > 0 && r->alpha_us >= 0);
        ck_assert(r->source != NULL && strlen(r->source) > 10);
      }
}
END_TEST

#define ROW(path, algo, proto, n, alpha, beta, measured) \
  { path, WEFT_FUNC_ALLREDUCE, algo, proto, n, alpha, beta, measured, "test" }

/* Host ranks, 8 on shm, measured rows: Ring 14 x 10 us + 1.75 B / 1000,
 * Tree 6 x 1 us + 2 B / 100: Tree up to 7342 bytes, Ring above; the
 * estimate is the chosen row's time. */
START_TEST(fitted_crossover) {
  static const struct weft_tune_fit rows[] = {
      ROW(WEFT_TUNE_SHM, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 8, 10.0, 1000.0, 1),
      ROW(WEFT_TUNE_SHM, WEFT_ALGO_TREE, WEFT_PROTO_SIMPLE, 8, 1.0, 100.0, 1),
  };
  weft_tune_fits_use(rows, 2);
  static const size_t sizes[] = {8, 4096, 7000, 7700, 16384, 1u << 20};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    struct weft_tuning t = tune(8, 1, WEFT_FUNC_ALLREDUCE, sizes[i]);
    double ring = 140.0 + 1.75 * (double)sizes[i] / 1000.0;
    double tree = 6.0 + 2.0 * (double)sizes[i] / 100.0;
    ck_assert_int_eq(t.algo, tree < ring ? WEFT_ALGO_TREE : WEFT_ALGO_RING);
    ck_assert_int_eq(t.algo, sizes[i] < 7342 ? WEFT_ALGO_TREE : WEFT_ALGO_RING);
    ck_assert_float_eq_tol(t.estimated_us, tree < ring ? tree : ring, 1e-3);
    ck_assert_int_eq(t.path, WEFT_TUNE_SHM);
    ck_assert_int_eq(t.fitted, 1);
  }
  weft_tune_fits_use(NULL, 0);
}
END_TEST

/* A placeholder does not compete with a measured row of its path: the
 * Tree placeholder would be faster everywhere. */
START_TEST(fitted_only_measured) {
  static const struct weft_tune_fit rows[] = {
      ROW(WEFT_TUNE_SHM, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 8, 10.0, 1000.0, 1),
      ROW(WEFT_TUNE_SHM, WEFT_ALGO_TREE, WEFT_PROTO_SIMPLE, 0, 0.001, 1e9, 0),
      ROW(WEFT_TUNE_SOCKET, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 0, 10.0, 1000.0, 0),
      ROW(WEFT_TUNE_SOCKET, WEFT_ALGO_TREE, WEFT_PROTO_SIMPLE, 0, 0.001, 1e9, 0),
  };
  weft_tune_fits_use(rows, 4);
  ck_assert_int_eq(tune(8, 1, WEFT_FUNC_ALLREDUCE, 8).algo, WEFT_ALGO_RING);
  ck_assert_int_eq(tune(8, 1, WEFT_FUNC_ALLREDUCE, 1u << 20).algo, WEFT_ALGO_RING);
  /* Where the path has no measured row, the placeholders compete. */
  peers[1].host_hash = 1; /* another host: sockets */
  struct weft_tuning t = tune(8, 1, WEFT_FUNC_ALLREDUCE, 8);
  peers[1].host_hash = 0;
  ck_assert_int_eq(t.path, WEFT_TUNE_SOCKET);
  ck_assert_int_eq(t.algo, WEFT_ALGO_TREE);
  ck_assert_int_eq(t.fitted, 0);
  weft_tune_fits_use(NULL, 0);
}
END_TEST

/* The CUDA engine over NVLink, 2 ranks, measured Ring rows: Simple 2 x 5
 * us + B / 1e5, LL 2 x 1 us + B / 1e4: LL up to 88888 bytes, Simple
 * above; over net links Simple whatever the rows say. */
START_TEST(fitted_protocol) {
  static const struct weft_tune_fit rows[] = {
      ROW(WEFT_TUNE_NVLINK, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 2, 5.0, 1e5, 1),
      ROW(WEFT_TUNE_NVLINK, WEFT_ALGO_RING, WEFT_PROTO_LL, 2, 1.0, 1e4, 1),
      ROW(WEFT_TUNE_NET, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 2, 5.0, 1e5, 1),
      ROW(WEFT_TUNE_NET, WEFT_ALGO_RING, WEFT_PROTO_LL, 2, 1.0, 1e4, 1),
  };
  weft_tune_fits_use(rows, 4);
  struct ncclComm c = fake_comm(2, 0);
  c.gpu_path = WEFT_TUNE_NVLINK;
  struct weft_tuning t;
  static const size_t sizes[] = {8, 8192, 80000, 100000, 1u << 20};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, sizes[i], 4, &t), ncclSuccess);
    ck_assert_int_eq(t.path, WEFT_TUNE_NVLINK);
    ck_assert_int_eq(t.algo, WEFT_ALGO_RING);
    ck_assert_int_eq(t.proto, sizes[i] < 88888 ? WEFT_PROTO_LL : WEFT_PROTO_SIMPLE);
  }
  c.cuda_net_links = 1;
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, 8, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.path, WEFT_TUNE_NET);
  ck_assert_int_eq(t.proto, WEFT_PROTO_SIMPLE);
  weft_tune_fits_use(NULL, 0);
}
END_TEST

/* Several GPUs of one process (cuda_direct 2): Direct on the ranks' own
 * buffers where a row of the path fitted on the collective says it is
 * faster than the plans, the plans otherwise. Here an AllGather on 2
 * ranks over NVLink: Ring 10 us + B / 2e5, Direct 15 us + B / 4e5, Direct
 * from 2e6 bytes; ReduceScatter has no Direct row fitted on it; over PCIe
 * nothing is fitted; NCCL_ALGO=Ring keeps the ring. */
START_TEST(own_buffers_gpus_fitted) {
  static const struct weft_tune_fit rows[] = {
      {WEFT_TUNE_NVLINK, WEFT_FUNC_ALLGATHER, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 2, 10.0, 2e5, 1,
       "test"},
      {WEFT_TUNE_NVLINK, WEFT_FUNC_ALLGATHER, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, 2, 15.0, 4e5, 1,
       "test"},
      {WEFT_TUNE_NVLINK, WEFT_FUNC_REDUCESCATTER, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 2, 10.0, 2e5,
       1, "test"},
  };
  weft_tune_fits_use(rows, 3);
  struct ncclComm c = fake_comm(2, 0);
  c.gpu_path = WEFT_TUNE_NVLINK;
  c.cuda_direct = 2;
  struct weft_tuning t;
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLGATHER, 1900000, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_RING);
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLGATHER, 2100000, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT);
  ck_assert_int_eq(t.fitted, 1);
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_REDUCESCATTER, 64u << 20, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_RING);
  c.gpu_path = WEFT_TUNE_PCIE;
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLGATHER, 64u << 20, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_RING);
  weft_tune_fits_use(NULL, 0);
}
END_TEST

/* The compiled table's NVLink rows (2 H200s, sched/tuning_fit.c): every
 * collective Direct has runs on the ranks' own buffers at 256 MiB, and an
 * AllGather of 64 KiB a rank on the ring. */
START_TEST(own_buffers_gpus_table) {
  struct ncclComm c = fake_comm(2, 0);
  c.gpu_path = WEFT_TUNE_NVLINK;
  c.cuda_direct = 2;
  struct weft_tuning t;
  for (int f = WEFT_FUNC_ALLREDUCE; f <= WEFT_FUNC_REDUCE; f++) {
    ck_assert_int_eq(weft_tune(&c, 1, (enum weft_func)f, 256u << 20, 4, &t), ncclSuccess);
    ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT);
    ck_assert_int_eq(t.fitted, 1);
  }
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLGATHER, 64u << 10, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_RING);
  ck_assert_int_eq(t.fitted, 1);
}
END_TEST

/* The same with NCCL_ALGO=Ring (read once, at the first tuning). */
START_TEST(own_buffers_gpus_ring_asked) {
  setenv("NCCL_ALGO", "Ring", 1);
  struct ncclComm c = fake_comm(2, 0);
  c.gpu_path = WEFT_TUNE_NVLINK;
  c.cuda_direct = 2;
  struct weft_tuning t;
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLGATHER, 64u << 20, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_RING);
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, 1u << 30, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_RING);
}
END_TEST

/* One GPU's ranks (cuda_direct 1) take Direct on their own buffers while
 * its row is a placeholder; once measured, the model decides: here Direct
 * 2 us + 3 B / 1000 against Ring 6 x 10 us + 1.5 B / 1e6 on 4 ranks,
 * Direct up to 19343 bytes. */
START_TEST(fitted_own_buffers) {
  static const struct weft_tune_fit rows[] = {
      ROW(WEFT_TUNE_SAME_GPU, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, 4, 2.0, 1000.0, 1),
      ROW(WEFT_TUNE_SAME_GPU, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 4, 10.0, 1e6, 1),
  };
  struct ncclComm c = fake_comm(4, 0);
  c.cuda_direct = 1;
  c.gpu_path = WEFT_TUNE_SAME_GPU;
  struct weft_tuning t;
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, 1u << 30, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT); /* the compiled placeholders */
  weft_tune_fits_use(rows, 2);
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, 8, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT);
  ck_assert_int_eq(t.fitted, 1);
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, 18000, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT);
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, 21000, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_RING);
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, 1u << 20, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_RING);
  /* Rows fitted on AllReduce do not decide AllGather's: still Direct. */
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLGATHER, 1u << 20, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.algo, WEFT_ALGO_DIRECT);
  weft_tune_fits_use(NULL, 0);
}
END_TEST

/* The row nearest to a call: measured first, then the same collective,
 * then the rank count nearest by ratio. */
START_TEST(fitted_nearest) {
  static const struct weft_tune_fit rows[] = {
      ROW(WEFT_TUNE_PCIE, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 0, 9.0, 1000.0, 0),
      ROW(WEFT_TUNE_PCIE, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 2, 1.0, 1000.0, 1),
      ROW(WEFT_TUNE_PCIE, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 8, 2.0, 1000.0, 1),
      {WEFT_TUNE_PCIE, WEFT_FUNC_ALLGATHER, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 4, 3.0, 1000.0, 1,
       "test"},
  };
  weft_tune_fits_use(rows, 4);
  const enum weft_tune_path p = WEFT_TUNE_PCIE;
  ck_assert_double_eq(weft_tune_fit_find(p, WEFT_FUNC_ALLREDUCE, 0, 0, 3)->alpha_us, 1.0);
  ck_assert_double_eq(weft_tune_fit_find(p, WEFT_FUNC_ALLREDUCE, 0, 0, 6)->alpha_us, 2.0);
  ck_assert_double_eq(weft_tune_fit_find(p, WEFT_FUNC_ALLREDUCE, 0, 0, 64)->alpha_us, 2.0);
  ck_assert_double_eq(weft_tune_fit_find(p, WEFT_FUNC_ALLGATHER, 0, 0, 64)->alpha_us, 3.0);
  /* Another collective's rows: the nearest rank count. */
  ck_assert_double_eq(weft_tune_fit_find(p, WEFT_FUNC_BROADCAST, 0, 0, 4)->alpha_us, 3.0);
  ck_assert_double_eq(weft_tune_fit_find(p, WEFT_FUNC_BROADCAST, 0, 0, 2)->alpha_us, 1.0);
  ck_assert_ptr_null(weft_tune_fit_find(p, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_TREE, 0, 4));
  weft_tune_fits_use(NULL, 0);
}
END_TEST

/* The path type from what the communicator knows. */
START_TEST(path_types) {
  ck_assert_int_eq(tune(1, 1, WEFT_FUNC_ALLREDUCE, 64).path, WEFT_TUNE_LOCAL);
  ck_assert_int_eq(tune(1, 0, WEFT_FUNC_ALLREDUCE, 64).path, WEFT_TUNE_LOCAL);
  ck_assert_int_eq(tune(4, 1, WEFT_FUNC_ALLREDUCE, 64).path, WEFT_TUNE_SHM);
  peers[3].host_hash = 7;
  ck_assert_int_eq(tune(4, 1, WEFT_FUNC_ALLREDUCE, 64).path, WEFT_TUNE_SOCKET);
  peers[3].host_hash = 0;
  struct ncclComm c = fake_comm(4, 0);
  struct weft_tuning t;
  static const enum weft_tune_path gpu[] = {WEFT_TUNE_SAME_GPU, WEFT_TUNE_NVLINK, WEFT_TUNE_PCIE,
                                            WEFT_TUNE_STAGED, WEFT_TUNE_NET};
  for (size_t i = 0; i < sizeof(gpu) / sizeof(gpu[0]); i++) {
    c.gpu_path = gpu[i];
    ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, 64, 4, &t), ncclSuccess);
    ck_assert_int_eq(t.path, gpu[i]);
  }
  c.gpu_path = 0; /* the topology did not say: what the engine knows */
  c.cuda_direct = 1;
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, 64, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.path, WEFT_TUNE_SAME_GPU);
  c.cuda_net_links = 1;
  ck_assert_int_eq(weft_tune(&c, 1, WEFT_FUNC_ALLREDUCE, 64, 4, &t), ncclSuccess);
  ck_assert_int_eq(t.path, WEFT_TUNE_NET);
}
END_TEST

/* NCCL_DEBUG_SUBSYS=TUNING: the line names the path, the choice and the
 * estimate, and whether its row is fitted: host ranks on shm read the
 * fitted 4-rank row (6 x 0.594 us + 1.5 x 4096 / 8446), the CUDA engine
 * between GPUs (pcie here) a placeholder (6 x 3 us + 1.5 x 4096 / 5000). */
START_TEST(tuning_line) {
  char path[64];
  snprintf(path, sizeof(path), "/tmp/weft-test-tuning.%d", (int)getpid());
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "TUNING", 1);
  setenv("NCCL_DEBUG_FILE", path, 1);
  setenv("NCCL_ALGO", "Ring", 1);
  tune(4, 1, WEFT_FUNC_ALLREDUCE, 4096);
  tune(4, 0, WEFT_FUNC_ALLREDUCE, 4096);
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  char line[512], all[4096] = "";
  while (fgets(line, sizeof(line), f) != NULL && strlen(all) + strlen(line) < sizeof(all))
    strcat(all, line);
  fclose(f);
  unlink(path);
  ck_assert_msg(strstr(all,
                       "AllReduce 4096 bytes nranks 4 path shm: Ring, Simple, 1 channel, "
                       "chunk 4096 (est 4.3 us, fitted)") != NULL,
                "%s", all);
  ck_assert_msg(
      strstr(all, "AllReduce 4096 bytes nranks 4 path pcie: Ring, Simple, 1 channel") != NULL, "%s",
      all);
  ck_assert_msg(strstr(all, "(est 19.2 us, placeholder)") != NULL, "%s", all);
}
END_TEST

#if WEFT_HAVE_LIBXML
/* comm->gpu_path from NCCL topology files (tests/topo/, found next to
 * this source file; reading them needs libxml2, so builds without it leave
 * this test out): the slowest pair of GPU ranks decides. */
static struct weft_topo *topo_file(const char *name) {
  char path[1024];
  const char *src = __FILE__, *slash = strrchr(src, '/');
  snprintf(path, sizeof(path), "%.*stopo/%s", slash ? (int)(slash - src + 1) : 0, src, name);
  struct weft_topo *t = NULL;
  ck_assert_int_eq(weft_topo_load_xml(path, &t), ncclSuccess);
  return t;
}

/* Ranks r on GPU gpus[r] of one host (bus ids that name the GPU). */
static int gpu_path(const struct weft_topo *t, const int *gpus, int n) {
  struct weft_peer_info p[8];
  memset(p, 0, sizeof(p));
  for (int r = 0; r < n; r++) {
    p[r].cuda_dev = gpus[r];
    snprintf(p[r].busid, sizeof(p[r].busid), "gpu%d", gpus[r]);
  }
  struct ncclComm c = fake_comm(n, 0);
  c.peers = p;
  return weft_comm_gpu_path(&c, t, gpus);
}

START_TEST(gpu_path_topo) {
  struct weft_topo *hgx = topo_file("hgx-h100-8gpu-8nic.xml");
  const int eight[8] = {0, 1, 2, 3, 4, 5, 6, 7}, one[4] = {0, 0, 0, 0};
  ck_assert_int_eq(gpu_path(hgx, eight, 8), WEFT_TUNE_NVLINK);
  ck_assert_int_eq(gpu_path(hgx, one, 4), WEFT_TUNE_SAME_GPU);
  ck_assert_int_eq(gpu_path(hgx, one, 1), 0); /* one rank */
  weft_topo_free(hgx);
  /* Pairs of GPUs under PCIe switches: p2p within a switch pair and
   * across the pairs of one PCIe tree (PXB); through the CPU (PHB) the
   * shm transport stages through host memory. */
  struct weft_topo *pci = topo_file("pcie-switch-pairs.xml");
  const int pair[2] = {0, 1}, pxb[3] = {0, 1, 2}, phb[3] = {0, 1, 4};
  ck_assert_int_eq(gpu_path(pci, pair, 2), WEFT_TUNE_PCIE);
  ck_assert_int_eq(gpu_path(pci, pxb, 3), WEFT_TUNE_PCIE);
  ck_assert_int_eq(gpu_path(pci, phb, 3), WEFT_TUNE_STAGED);
  pci->policy.shm_disable = 1;
  ck_assert_int_eq(gpu_path(pci, phb, 3), WEFT_TUNE_NET);
  /* A GPU the topology lacks: unknown. */
  const int lost[2] = {0, -1};
  ck_assert_int_eq(gpu_path(pci, lost, 2), 0);
  weft_topo_free(pci);
}
END_TEST
#endif

int main(void) {
  Suite *s = suite_create("tuning");
  TCase *tc = tcase_create("proto");
  tcase_add_test(tc, host_runs_simple);
  tcase_add_test(tc, cuda_crossover);
  tcase_add_test(tc, algo_none_left);
  tcase_add_test(tc, cuda_no_direct);
  tcase_add_test(tc, host_direct_small);
  tcase_add_test(tc, net_links_direct);
  tcase_add_test(tc, own_buffers_one_gpu);
  tcase_add_test(tc, own_buffers_asked);
  tcase_add_test(tc, own_buffers_gpus_fitted);
  tcase_add_test(tc, own_buffers_gpus_ring_asked);
  tcase_add_test(tc, own_buffers_gpus_table);
  tcase_add_test(tc, own_buffers_processes);
  tcase_add_test(tc, ll128_nvlink_only);
  tcase_add_test(tc, ll128_not_picked_unmeasured);
  tcase_add_test(tc, tree_crossover);
  tcase_add_test(tc, force_ll);
  tcase_add_test(tc, force_simple);
  tcase_add_test(tc, per_collective);
  tcase_add_test(tc, ll128_only);
  tcase_add_test(tc, p2p_one_side);
  tcase_add_test(tc, p2p_both_sides);
  tcase_add_test(tc, channels_default);
  tcase_add_test(tc, host_channels_sockets);
  tcase_add_test(tc, host_channels_env);
  tcase_add_test(tc, wide_default);
  tcase_add_test(tc, wide_min_set);
  tcase_add_loop_test(tc, wide_kept_off, 0, (int)(sizeof wide_kept / sizeof wide_kept[0]));
  tcase_add_test(tc, net_gpu_channels);
  tcase_add_test(tc, net_gpu_channels_env);
  tcase_add_test(tc, chunk_default);
  tcase_add_test(tc, channels_env);
  tcase_add_test(tc, channels_fit_ring);
  tcase_add_test(tc, channels_fit_tree);
  tcase_add_test(tc, table_complete);
  tcase_add_test(tc, fitted_crossover);
  tcase_add_test(tc, fitted_only_measured);
  tcase_add_test(tc, fitted_protocol);
  tcase_add_test(tc, fitted_own_buffers);
  tcase_add_test(tc, fitted_nearest);
  tcase_add_test(tc, path_types);
  tcase_add_test(tc, tuning_line);
  tcase_add_test(tc, memo_follows_inputs);
#if WEFT_HAVE_LIBXML
  tcase_add_test(tc, gpu_path_topo);
#endif
  suite_add_tcase(s, tc);
  /* Each test in its own process: the environment is read once. */
  return suite_run_with(s, CK_FORK, CK_NORMAL);
}
