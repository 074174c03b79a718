/* The list of ABI facts that weft's nccl.h must share with NVIDIA's.
 *
 * abi_ref.c expands the list against NVIDIA's header and abi_weft.c against
 * weft's; test_abi.c compares the two tables row by row. The list is written
 * once, here, so both sides always ask the same questions in the same order.
 *
 * A row is X(kind, expression): its name is the expression as written.
 *   EQUAL    integer value, must match (enum values, macros, sizes, offsets)
 *   FLOAT    floating value, must match
 *   PTR      pointer value, must match (NULL macros, initializer fields)
 *   TRUE     must be 1 on both sides (type identities, field types)
 *   VERSION  recorded but not compared: weft is 2.27, the toolkit is newer
 * A row FN(ret, name, params) checks that both name and pname are declared
 * with exactly that type. */
#ifndef WEFT_TESTS_ABI_COMMON_H
#define WEFT_TESTS_ABI_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum abi_kind {
  ABI_EQUAL,
  ABI_FLOAT,
  ABI_PTR,
  ABI_TRUE,
  ABI_VERSION,
};

struct abi_entry {
  const char *name;
  enum abi_kind kind;
  long long value; /* every kind but FLOAT */
  double fvalue;   /* FLOAT */
};

/* Each returns a table of *n rows that stays valid for the whole run. */
const struct abi_entry *abi_ref_table(size_t *n);
const struct abi_entry *abi_weft_table(size_t *n);

#define ABI_TYPE_IS(expr, type) __builtin_types_compatible_p(__typeof__(expr), type)
#define ABI_CONFIG_FIELD(X, type, field)                                       \
  X(EQUAL, offsetof(ncclConfig_t, field))                                      \
  X(TRUE, ABI_TYPE_IS(((ncclConfig_t *)0)->field, type))
#define ABI_SIMINFO_FIELD(X, type, field)                                      \
  X(EQUAL, offsetof(ncclSimInfo_t, field))                                     \
  X(TRUE, ABI_TYPE_IS(((ncclSimInfo_t *)0)->field, type))

/* config_initializer and sim_info_initializer are objects made from
 * NCCL_CONFIG_INITIALIZER and NCCL_SIM_INFO_INITIALIZER by ABI_DEFINE_TABLE. */
#define ABI_LIST(X, FN)                                                        \
  /* Version */                                                                \
  X(EQUAL, NCCL_MAJOR)                                                         \
  X(VERSION, NCCL_MINOR)                                                       \
  X(VERSION, NCCL_PATCH)                                                       \
  X(VERSION, NCCL_VERSION_CODE)                                                \
  X(VERSION, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH))                 \
  X(EQUAL, sizeof(NCCL_SUFFIX))                                                \
  X(EQUAL, NCCL_VERSION(1, 9, 9))                                              \
  X(EQUAL, NCCL_VERSION(2, 8, 4))                                              \
  X(EQUAL, NCCL_VERSION(2, 9, 6))                                              \
  X(EQUAL, NCCL_VERSION(2, 27, 7))                                             \
  X(EQUAL, NCCL_VERSION(2, 28, 9))                                             \
  X(EQUAL, NCCL_VERSION(3, 0, 0))                                              \
  /* Handles and ids */                                                        \
  X(EQUAL, sizeof(ncclComm_t))                                                 \
  X(TRUE, ABI_TYPE_IS((ncclComm_t)0, struct ncclComm *))                       \
  X(PTR, NCCL_COMM_NULL)                                                       \
  X(EQUAL, sizeof(ncclWindow_t))                                               \
  X(TRUE, ABI_TYPE_IS((ncclWindow_t)0, struct ncclWindow_vidmem *))            \
  X(EQUAL, sizeof(cudaStream_t))                                               \
  X(TRUE, ABI_TYPE_IS((cudaStream_t)0, struct CUstream_st *))                  \
  X(EQUAL, NCCL_UNIQUE_ID_BYTES)                                               \
  X(EQUAL, sizeof(ncclUniqueId))                                               \
  X(EQUAL, _Alignof(ncclUniqueId))                                             \
  X(EQUAL, sizeof(((ncclUniqueId *)0)->internal))                              \
  X(TRUE, ABI_TYPE_IS(((ncclUniqueId *)0)->internal, char[128]))               \
  /* Results */                                                                \
  X(EQUAL, sizeof(ncclResult_t))                                               \
  X(EQUAL, ncclSuccess)                                                        \
  X(EQUAL, ncclUnhandledCudaError)                                             \
  X(EQUAL, ncclSystemError)                                                    \
  X(EQUAL, ncclInternalError)                                                  \
  X(EQUAL, ncclInvalidArgument)                                                \
  X(EQUAL, ncclInvalidUsage)                                                   \
  X(EQUAL, ncclRemoteError)                                                    \
  X(EQUAL, ncclInProgress)                                                     \
  X(EQUAL, ncclNumResults)                                                     \
  /* Constants */                                                              \
  X(EQUAL, NCCL_CONFIG_UNDEF_INT)                                              \
  X(PTR, NCCL_CONFIG_UNDEF_PTR)                                                \
  X(FLOAT, NCCL_UNDEF_FLOAT)                                                   \
  X(TRUE, ABI_TYPE_IS(NCCL_UNDEF_FLOAT, float))                                \
  X(EQUAL, NCCL_SPLIT_NOCOLOR)                                                 \
  X(EQUAL, NCCL_WIN_DEFAULT)                                                   \
  X(EQUAL, NCCL_WIN_COLL_SYMMETRIC)                                            \
  X(EQUAL, NCCL_WIN_REQUIRED_ALIGNMENT)                                        \
  X(EQUAL, NCCL_CTA_POLICY_DEFAULT)                                            \
  X(EQUAL, NCCL_CTA_POLICY_EFFICIENCY)                                         \
  X(EQUAL, NCCL_CTA_POLICY_ZERO)                                               \
  X(EQUAL, NCCL_SHRINK_DEFAULT)                                                \
  X(EQUAL, NCCL_SHRINK_ABORT)                                                  \
  X(EQUAL, NCCL_REVOKE_DEFAULT)                                                \
  /* ncclConfig_t */                                                           \
  X(EQUAL, sizeof(ncclConfig_t))                                               \
  X(EQUAL, _Alignof(ncclConfig_t))                                             \
  X(TRUE, ABI_TYPE_IS(*(ncclConfig_t *)0, struct ncclConfig_v22800))           \
  ABI_CONFIG_FIELD(X, size_t, size)                                            \
  ABI_CONFIG_FIELD(X, unsigned int, magic)                                     \
  ABI_CONFIG_FIELD(X, unsigned int, version)                                   \
  ABI_CONFIG_FIELD(X, int, blocking)                                           \
  ABI_CONFIG_FIELD(X, int, cgaClusterSize)                                     \
  ABI_CONFIG_FIELD(X, int, minCTAs)                                            \
  ABI_CONFIG_FIELD(X, int, maxCTAs)                                            \
  ABI_CONFIG_FIELD(X, const char *, netName)                                   \
  ABI_CONFIG_FIELD(X, int, splitShare)                                         \
  ABI_CONFIG_FIELD(X, int, trafficClass)                                       \
  ABI_CONFIG_FIELD(X, const char *, commName)                                  \
  ABI_CONFIG_FIELD(X, int, collnetEnable)                                      \
  ABI_CONFIG_FIELD(X, int, CTAPolicy)                                          \
  ABI_CONFIG_FIELD(X, int, shrinkShare)                                        \
  ABI_CONFIG_FIELD(X, int, nvlsCTAs)                                           \
  ABI_CONFIG_FIELD(X, int, nChannelsPerNetPeer)                                \
  ABI_CONFIG_FIELD(X, int, nvlinkCentricSched)                                 \
  X(EQUAL, config_initializer.size)                                            \
  X(EQUAL, config_initializer.magic)                                           \
  X(VERSION, config_initializer.version)                                       \
  X(EQUAL, config_initializer.blocking)                                        \
  X(EQUAL, config_initializer.cgaClusterSize)                                  \
  X(EQUAL, config_initializer.minCTAs)                                         \
  X(EQUAL, config_initializer.maxCTAs)                                         \
  X(PTR, config_initializer.netName)                                           \
  X(EQUAL, config_initializer.splitShare)                                      \
  X(EQUAL, config_initializer.trafficClass)                                    \
  X(PTR, config_initializer.commName)                                          \
  X(EQUAL, config_initializer.collnetEnable)                                   \
  X(EQUAL, config_initializer.CTAPolicy)                                       \
  X(EQUAL, config_initializer.shrinkShare)                                     \
  X(EQUAL, config_initializer.nvlsCTAs)                                        \
  X(EQUAL, config_initializer.nChannelsPerNetPeer)                             \
  X(EQUAL, config_initializer.nvlinkCentricSched)                              \
  /* ncclSimInfo_t */                                                          \
  X(EQUAL, sizeof(ncclSimInfo_t))                                              \
  X(EQUAL, _Alignof(ncclSimInfo_t))                                            \
  X(TRUE, ABI_TYPE_IS(*(ncclSimInfo_t *)0, struct ncclSimInfo_v22200))         \
  ABI_SIMINFO_FIELD(X, size_t, size)                                           \
  ABI_SIMINFO_FIELD(X, unsigned int, magic)                                    \
  ABI_SIMINFO_FIELD(X, unsigned int, version)                                  \
  ABI_SIMINFO_FIELD(X, float, estimatedTime)                                   \
  X(EQUAL, sim_info_initializer.size)                                          \
  X(EQUAL, sim_info_initializer.magic)                                         \
  X(VERSION, sim_info_initializer.version)                                     \
  X(FLOAT, sim_info_initializer.estimatedTime)                                 \
  /* Reduction operators */                                                    \
  X(EQUAL, sizeof(ncclRedOp_dummy_t))                                          \
  X(EQUAL, ncclNumOps_dummy)                                                   \
  X(EQUAL, sizeof(ncclRedOp_t))                                                \
  X(EQUAL, ncclSum)                                                            \
  X(EQUAL, ncclProd)                                                           \
  X(EQUAL, ncclMax)                                                            \
  X(EQUAL, ncclMin)                                                            \
  X(EQUAL, ncclAvg)                                                            \
  X(EQUAL, ncclNumOps)                                                         \
  X(EQUAL, ncclMaxRedOp)                                                       \
  /* Data types */                                                             \
  X(EQUAL, sizeof(ncclDataType_t))                                             \
  X(EQUAL, ncclInt8)                                                           \
  X(EQUAL, ncclChar)                                                           \
  X(EQUAL, ncclUint8)                                                          \
  X(EQUAL, ncclInt32)                                                          \
  X(EQUAL, ncclInt)                                                            \
  X(EQUAL, ncclUint32)                                                         \
  X(EQUAL, ncclInt64)                                                          \
  X(EQUAL, ncclUint64)                                                         \
  X(EQUAL, ncclFloat16)                                                        \
  X(EQUAL, ncclHalf)                                                           \
  X(EQUAL, ncclFloat32)                                                        \
  X(EQUAL, ncclFloat)                                                          \
  X(EQUAL, ncclFloat64)                                                        \
  X(EQUAL, ncclDouble)                                                         \
  X(EQUAL, ncclBfloat16)                                                       \
  X(EQUAL, ncclFloat8e4m3)                                                     \
  X(EQUAL, ncclFloat8e5m2)                                                     \
  X(EQUAL, ncclNumTypes)                                                       \
  X(EQUAL, sizeof(ncclScalarResidence_t))                                      \
  X(EQUAL, ncclScalarDevice)                                                   \
  X(EQUAL, ncclScalarHostImmediate)                                            \
  /* Functions */                                                              \
  FN(ncclResult_t, ncclMemAlloc, (void **, size_t))                            \
  FN(ncclResult_t, ncclMemFree, (void *))                                      \
  FN(ncclResult_t, ncclGetVersion, (int *))                                    \
  FN(ncclResult_t, ncclGetUniqueId, (ncclUniqueId *))                          \
  FN(ncclResult_t, ncclCommInitRankConfig,                                     \
     (ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *))                   \
  FN(ncclResult_t, ncclCommInitRank, (ncclComm_t *, int, ncclUniqueId, int))   \
  FN(ncclResult_t, ncclCommInitAll, (ncclComm_t *, int, const int *))          \
  FN(ncclResult_t, ncclCommFinalize, (ncclComm_t))                             \
  FN(ncclResult_t, ncclCommDestroy, (ncclComm_t))                              \
  FN(ncclResult_t, ncclCommAbort, (ncclComm_t))                                \
  FN(ncclResult_t, ncclCommRevoke, (ncclComm_t, int))                          \
  FN(ncclResult_t, ncclCommSplit,                                              \
     (ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *))                     \
  FN(ncclResult_t, ncclCommShrink,                                             \
     (ncclComm_t, int *, int, ncclComm_t *, ncclConfig_t *, int))              \
  FN(ncclResult_t, ncclCommInitRankScalable,                                   \
     (ncclComm_t *, int, int, int, ncclUniqueId *, ncclConfig_t *))            \
  FN(const char *, ncclGetErrorString, (ncclResult_t))                         \
  FN(const char *, ncclGetLastError, (ncclComm_t))                             \
  FN(void, ncclResetDebugInit, (void))                                         \
  FN(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t, ncclResult_t *))        \
  FN(ncclResult_t, ncclCommCount, (const ncclComm_t, int *))                   \
  FN(ncclResult_t, ncclCommCuDevice, (const ncclComm_t, int *))                \
  FN(ncclResult_t, ncclCommUserRank, (const ncclComm_t, int *))                \
  FN(ncclResult_t, ncclCommRegister,                                           \
     (const ncclComm_t, void *, size_t, void **))                              \
  FN(ncclResult_t, ncclCommDeregister, (const ncclComm_t, void *))             \
  FN(ncclResult_t, ncclCommWindowRegister,                                     \
     (ncclComm_t, void *, size_t, ncclWindow_t *, int))                        \
  FN(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t, ncclWindow_t))       \
  FN(ncclResult_t, ncclRedOpCreatePreMulSum,                                   \
     (ncclRedOp_t *, void *, ncclDataType_t, ncclScalarResidence_t,            \
      ncclComm_t))                                                             \
  FN(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t, ncclComm_t))                \
  FN(ncclResult_t, ncclReduce,                                                 \
     (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int,          \
      ncclComm_t, cudaStream_t))                                               \
  FN(ncclResult_t, ncclBcast,                                                  \
     (void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))          \
  FN(ncclResult_t, ncclBroadcast,                                              \
     (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,           \
      cudaStream_t))                                                           \
  FN(ncclResult_t, ncclAllReduce,                                              \
     (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,   \
      cudaStream_t))                                                           \
  FN(ncclResult_t, ncclReduceScatter,                                          \
     (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,   \
      cudaStream_t))                                                           \
  FN(ncclResult_t, ncclAllGather,                                              \
     (const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t)) \
  FN(ncclResult_t, ncclAlltoAll,                                               \
     (const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t)) \
  FN(ncclResult_t, ncclGather,                                                 \
     (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,           \
      cudaStream_t))                                                           \
  FN(ncclResult_t, ncclScatter,                                                \
     (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,           \
      cudaStream_t))                                                           \
  FN(ncclResult_t, ncclSend,                                                   \
     (const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))    \
  FN(ncclResult_t, ncclRecv,                                                   \
     (void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))          \
  FN(ncclResult_t, ncclGroupStart, (void))                                     \
  FN(ncclResult_t, ncclGroupEnd, (void))                                       \
  FN(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t *))

/* Row makers. A row's value is computed at run time, so the table can read
 * the initializer objects and use pointer values. */
#define ABI_VALUE_EQUAL(e) (long long)(e), 0.0
#define ABI_VALUE_VERSION(e) (long long)(e), 0.0
#define ABI_VALUE_TRUE(e) (long long)(e), 0.0
#define ABI_VALUE_PTR(e) (long long)(uintptr_t)(e), 0.0
#define ABI_VALUE_FLOAT(e) 0, (double)(e)
#define ABI_ROW(kind, e) {#e, ABI_##kind, ABI_VALUE_##kind(e)},
#define ABI_FN_ROW(ret, name, params)                                          \
  {#name, ABI_TRUE, ABI_TYPE_IS(name, ret params), 0.0},                       \
      {"p" #name, ABI_TRUE, ABI_TYPE_IS(p##name, ret params), 0.0},

/* Defines `const struct abi_entry *fn(size_t *n)` from ABI_LIST, against
 * whichever nccl.h the including file included first. The deprecated
 * ncclResetDebugInit is only named inside __typeof__, never called. */
#define ABI_DEFINE_TABLE(fn)                                                   \
  _Pragma("GCC diagnostic push")                                               \
  _Pragma("GCC diagnostic ignored \"-Wdeprecated-declarations\"")              \
  const struct abi_entry *fn(size_t *n) {                                      \
    static const ncclConfig_t config_initializer = NCCL_CONFIG_INITIALIZER;    \
    static const ncclSimInfo_t sim_info_initializer =                          \
        NCCL_SIM_INFO_INITIALIZER;                                             \
    const struct abi_entry rows[] = {ABI_LIST(ABI_ROW, ABI_FN_ROW)};           \
    static struct abi_entry table[sizeof rows / sizeof rows[0]];               \
    memcpy(table, rows, sizeof rows);                                          \
    *n = sizeof rows / sizeof rows[0];                                         \
    return table;                                                              \
  }                                                                            \
  _Pragma("GCC diagnostic pop")

#endif
