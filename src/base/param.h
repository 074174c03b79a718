/* Every tunable is one row of one table (param_table.c): the environment
 * variable that sets it, its type, default, allowed values and meaning.
 * NCCL_* names where NCCL has the knob, WEFT_* where it is weft's own.
 * param.c reads the whole table once per process; a value outside what the
 * row allows is WARNed once ("NCCL_MAX_NCHANNELS=-3 is not valid (expected
 * an integer in 1..32); using the default ...") and the default applies.
 * docs/ENVIRONMENT.md is generated from the table (tests/param_doc.c) and
 * the 'env doc' test fails when the two differ. */
#ifndef WEFT_BASE_PARAM_H
#define WEFT_BASE_PARAM_H

#include <stddef.h>
#include <stdint.h>

enum weft_param {
  /* Integers */
  WEFT_PARAM_TIMEOUT,
  WEFT_PARAM_BUFFSIZE,
  WEFT_PARAM_CHUNK,
  WEFT_PARAM_SPIN,
  WEFT_PARAM_SHM_DISABLE,
  WEFT_PARAM_P2P_DISABLE,
  WEFT_PARAM_SHM_SLOTS,
  WEFT_PARAM_SHM_SLOT_BYTES,
  WEFT_PARAM_SHM_CMA,
  WEFT_PARAM_SHM_CMA_MIN,
  WEFT_PARAM_SOCKET_FAMILY_V6,
  WEFT_PARAM_REDUCE_SIMD,
  WEFT_PARAM_CHECK_MISMATCH,
  WEFT_PARAM_CHECK_POINTERS,
  WEFT_PARAM_MIN_NCHANNELS,
  WEFT_PARAM_MAX_NCHANNELS,
  WEFT_PARAM_CUDA_ENGINE,
  WEFT_PARAM_NET_GPU,
  WEFT_PARAM_NET_GPU_NCHANNELS,
  WEFT_PARAM_DIRECT_LL_MAX,
  WEFT_PARAM_DIRECT_CTA_BYTES,
  WEFT_PARAM_DIRECT_P2P_GPUS,
  WEFT_PARAM_SOCKET_NTHREADS,
  WEFT_PARAM_NSOCKS_PERTHREAD,
  WEFT_PARAM_SOCKET_HOST_THREADS,
  WEFT_PARAM_HOST_COPY_THREADS,
  WEFT_PARAM_HOST_LANE_THREADS,
  WEFT_PARAM_HOST_LANE_MIN_BYTES,
  WEFT_PARAM_HOST_WINDOW,
  WEFT_PARAM_SOCKET_WIDE_MIN_BYTES,
  WEFT_PARAM_IB_DISABLE,
  WEFT_PARAM_IB_GID_INDEX,
  WEFT_PARAM_IB_TIMEOUT,
  WEFT_PARAM_IB_RETRY_CNT,
  WEFT_PARAM_IB_SL,
  WEFT_PARAM_IB_TC,
  WEFT_PARAM_IB_QPS_PER_CONNECTION,
  WEFT_PARAM_NET_GDR_READ,
  /* Strings, names and lists */
  WEFT_PARAM_COMM_ID,
  WEFT_PARAM_COMM_SECRET,
  WEFT_PARAM_SOCKET_IFNAME,
  WEFT_PARAM_SOCKET_FAMILY,
  WEFT_PARAM_HOSTID,
  WEFT_PARAM_NET_PLUGIN,
  WEFT_PARAM_NET,
  WEFT_PARAM_P2P_LEVEL,
  WEFT_PARAM_NET_GDR_LEVEL,
  WEFT_PARAM_TOPO_FILE,
  WEFT_PARAM_TOPO_DUMP_FILE,
  WEFT_PARAM_DEVICE,
  WEFT_PARAM_DEBUG,
  WEFT_PARAM_DEBUG_SUBSYS,
  WEFT_PARAM_DEBUG_FILE,
  WEFT_PARAM_ALGO,
  WEFT_PARAM_PROTO,
  WEFT_PARAM_IB_HCA,
  WEFT_PARAM_COUNT
};

enum weft_param_kind {
  WEFT_PARAM_KIND_INT,  /* an integer in min..max */
  WEFT_PARAM_KIND_STR,  /* free text (a path, an address) */
  WEFT_PARAM_KIND_NAME, /* one of names (any case), or an integer in min..max when min <= max */
  WEFT_PARAM_KIND_LIST, /* NCCL's list syntax: "a,b", "^a" (all but), and with keys
                           "key:list;key:list" per key */
};

struct weft_param_row {
  const char *env;
  enum weft_param_kind kind;
  int64_t def; /* INT: the default value */
  int64_t min, max;
  const char *names;   /* NAME, LIST: allowed names, comma-separated */
  const char *keys;    /* LIST: the keys of "key:list" sections, or NULL */
  const char *def_doc; /* the default as a person reads it */
  const char *help;
};

/* The table, indexed by enum weft_param. */
extern const struct weft_param_row weft_param_rows[WEFT_PARAM_COUNT];

/* Value of a parameter: the environment's if set and valid, else the
 * default (INT) or NULL (the others). Read once per process (the first
 * call), like NCCL; the first call also WARNs about bad values and, at
 * NCCL_DEBUG=INFO, says which were set ("NCCL_X set by environment to V"). */
int64_t weft_param_int(enum weft_param id);
const char *weft_param_str(enum weft_param id);
/* Whether the environment set id to a valid value. */
int weft_param_is_set(enum weft_param id);
/* A LIST parameter as bit masks: bit i of masks_out[k] is the i-th name,
 * for the k-th key (or masks_out[0] alone when the row has no keys).
 * Returns 1 when the environment set it (masks filled), 0 when not. */
int weft_param_list(enum weft_param id, unsigned masks_out[], int nmasks);
/* The same for a value given (0), or -1 when it is not valid. */
int weft_param_list_of(enum weft_param id, const char *value, unsigned masks_out[], int nmasks);
/* Parses value as row allows: 0 and *int_out (INT, NAME: the index of the
 * name, or the integer) when valid, else -1 with what was expected in
 * why_out. */
int weft_param_parse(const struct weft_param_row *row, const char *value, int64_t *int_out,
                     char *why_out, size_t why_len);

/* For the logger only: the value without reporting (logging is not up). */
const char *weft_param_str_quiet(enum weft_param id);
/* The environment's value now, validated (ncclResetDebugInit reads the
 * debug variables again); NULL when unset or not valid. */
const char *weft_param_str_fresh(enum weft_param id);

/* At INFO/ENV: "NAME=VALUE" for every parameter when NCCL_DEBUG_SUBSYS
 * names ENV (once per process); the variables set are always reported. */
void weft_param_print_all(void);

#endif
