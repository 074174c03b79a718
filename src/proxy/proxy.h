/* The proxy thread: one per process and CUDA device, started with the
 * first communicator that has net links and stopped with the last. It
 * drives the links a kernel cannot drive itself (transport/net/
 * net_fifo.h): the engine posts "k more slots on link L" at each launch
 * (proxy ops, counted from the launched plan: proxy_ops.c), and the thread
 * moves those slots between the kernel's FIFOs and the network.
 *
 * An idle proxy sleeps on a condition variable; while ops are pending it
 * polls, spinning briefly, then yielding, then sleeping in short naps, so
 * it never holds a core for long while a kernel computes. A link error
 * writes the communicator's error word (the kernels stop and the engine
 * reports it); an abort or an error word set by anyone drops the
 * communicator's ops. */
#ifndef WEFT_PROXY_PROXY_H
#define WEFT_PROXY_PROXY_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "sched/schedule.h"

struct weft_net_fifo;
struct weft_proxy_comm;

/* `slots` more slots on link `link` of a communicator's link table. */
struct weft_proxy_op {
  uint32_t link;
  uint32_t slots;
};

/* A communicator's link table has one entry per (peer, channel, way). */
static inline uint32_t weft_proxy_link_index(int nchannels, int peer, int channel, int is_send) {
  return ((uint32_t)peer * (uint32_t)nchannels + (uint32_t)channel) * 2u + (is_send ? 1u : 0u);
}

/* The ops a launch of plan posts: slots per net link (net_peer[p] nonzero:
 * the links to and from p are net links), exactly as the kernels cut
 * messages: Simple sends and receives take ceil(bytes / slot_bytes) slots
 * (none for 0 bytes); send/recv plans (p2p) add their 16-byte header. One
 * op per link that carries anything; *ops_out (malloc'd, NULL when none)
 * is freed by the caller. */
ncclResult_t weft_proxy_ops_count(const struct weft_plan *plan, int p2p, size_t slot_bytes,
                                  int nranks, int nchannels, const unsigned char *net_peer,
                                  struct weft_proxy_op **ops_out, int *n_out);

/* A communicator's part of the proxy of device dev: nlinks table entries
 * (weft_proxy_link_index), each NULL or a connected FIFO set with
 * weft_proxy_comm_set_link. error is the word the kernels watch; a link
 * error writes fail_words[i] there (the engine's WEFT_DEV_ERR_NET word
 * naming the peer). abort nonzero or error nonzero: ops are dropped. */
ncclResult_t weft_proxy_comm_create(int dev, int rank, int nlinks, uint64_t *error,
                                    const volatile uint32_t *abort, struct weft_proxy_comm **out);
void weft_proxy_comm_set_link(struct weft_proxy_comm *pc, uint32_t index,
                              struct weft_net_fifo *fifo, uint64_t fail_word);
/* Hands the communicator to its device's proxy thread (started here when
 * it is the first). */
ncclResult_t weft_proxy_comm_start(struct weft_proxy_comm *pc);
/* Posts ops (thread-safe; no CUDA call, no wait: a CUDA host function may
 * call it). Ignored once the communicator failed. */
void weft_proxy_post(struct weft_proxy_comm *pc, const struct weft_proxy_op *ops, int n);
/* Waits (sleeping, at most timeout_s seconds) until every link moved all
 * the slots posted to it, or the communicator failed: a kernel that ended
 * has handed its last slots to the proxy, not yet to the network, so a
 * communicator is drained before its links close. ncclRemoteError (WARN)
 * when time ran out. */
ncclResult_t weft_proxy_comm_drain(struct weft_proxy_comm *pc, double timeout_s);
/* Slots link `index` has moved in all (for tests and messages). */
uint64_t weft_proxy_link_done(struct weft_proxy_comm *pc, uint32_t index);
/* Takes the communicator off its proxy (the thread stops with the last)
 * and frees it; the FIFOs stay the caller's. */
void weft_proxy_comm_destroy(struct weft_proxy_comm *pc);

#endif
