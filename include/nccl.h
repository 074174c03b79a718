/* weft's public header: the NCCL API and ABI.
 *
 * weft is a drop-in replacement for NVIDIA's NCCL. This header declares the
 * same names, values and struct layouts as NCCL's own header, so programs
 * compiled against either one link and run against weft. weft reports itself
 * as NCCL 2.27.7; it also declares the calls that NCCL 2.28 added, with
 * ncclConfig_t in its 2.28 layout. weft's additions live in weft.h.
 *
 * What must not change without breaking binaries built against NCCL:
 * every enum value, every macro value, the layout of ncclUniqueId,
 * ncclConfig_t and ncclSimInfo_t, and the struct tags and anonymous typedefs
 * (C++ callers mangle their own functions with these names).
 * tests/test_abi.c compares all of these against NVIDIA's header.
 *
 * The header builds without the CUDA toolkit: when <cuda_runtime.h> cannot
 * be found (or WEFT_NO_CUDA_HEADERS is defined) it declares cudaStream_t
 * itself, with the same type the CUDA runtime uses. */
#ifndef NCCL_H_
#define NCCL_H_

/* Lets a translation unit tell weft's header from NVIDIA's. */
#define WEFT_NCCL_H 1

#include <limits.h>
#include <stddef.h>

#if !defined(WEFT_NO_CUDA_HEADERS) && defined(__has_include)
#if __has_include(<cuda_runtime.h>)
#define WEFT_NCCL_H_CUDA 1
#endif
#endif

#ifdef WEFT_NCCL_H_CUDA
/* NCCL's header pulls these in; programs may rely on it for half and
 * __nv_bfloat16, so weft's does too. */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#if defined(__cplusplus) && CUDART_VERSION >= 11080
#include <cuda_fp8.h>
#endif
#else
/* The CUDA runtime's own definition; repeating a typedef is allowed in C11
 * and C++, so including <cuda_runtime.h> later still works. */
typedef struct CUstream_st *cudaStream_t;
#endif

#define NCCL_MAJOR 2
#define NCCL_MINOR 27
#define NCCL_PATCH 7
#define NCCL_SUFFIX ""

/* Before 2.9 the code was X*1000 + Y*100 + Z; from 2.9 on it is
 * X*10000 + Y*100 + Z. Both forms are NCCL's and both are kept. */
#define NCCL_VERSION(X, Y, Z)                                                  \
  (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z)                       \
                          : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE 22707

#if defined(__GNUC__) || defined(__clang__)
#define WEFT_NCCL_DEPRECATED_(msg) __attribute__((deprecated(msg)))
#else
#define WEFT_NCCL_DEPRECATED_(msg)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Handles and identifiers ------------------------------------------ */

/* A communicator: one rank's membership in a group of ranks. */
typedef struct ncclComm *ncclComm_t;
#define NCCL_COMM_NULL NULL

/* A registered memory window (ncclCommWindowRegister). */
typedef struct ncclWindow_vidmem *ncclWindow_t;

/* Opaque bytes made by ncclGetUniqueId on one rank and handed to all others
 * out of band; it names the communicator being created. */
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* ---- Results ------------------------------------------------------------ */

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1, /* a CUDA call failed */
  ncclSystemError = 2,        /* a system call or allocation failed */
  ncclInternalError = 3,      /* a bug in the library */
  ncclInvalidArgument = 4,    /* a bad value was passed */
  ncclInvalidUsage = 5,       /* a call made in the wrong way or order */
  ncclRemoteError = 6,        /* another rank failed or went away */
  ncclInProgress = 7,         /* a non-blocking call has not finished yet */
  ncclNumResults = 8
} ncclResult_t;

/* ---- Configuration ------------------------------------------------------ */

/* "Leave it to the library" values for ncclConfig_t fields. */
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_UNDEF_FLOAT -1.0f

/* The color that leaves a rank out of every communicator ncclCommSplit makes. */
#define NCCL_SPLIT_NOCOLOR -1

/* winFlags for ncclCommWindowRegister. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
/* Buffers given to ncclCommWindowRegister must be aligned to this. */
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* Values of ncclConfig_t.CTAPolicy. */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

/* shrinkFlags for ncclCommShrink. */
#define NCCL_SHRINK_DEFAULT 0x00 /* shrink once the parent is idle */
#define NCCL_SHRINK_ABORT 0x01   /* abort the parent's work, then shrink */

/* revokeFlags for ncclCommRevoke; no other value is defined yet. */
#define NCCL_REVOKE_DEFAULT 0x00

/* Options for ncclCommInitRankConfig, ncclCommSplit and friends.
 * Start from NCCL_CONFIG_INITIALIZER and set only the fields you need; the
 * first three fields tell the library which layout the caller compiled
 * against, so never set them by hand. The tag names the layout (NCCL 2.28). */
typedef struct ncclConfig_v22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;            /* 0: calls may return ncclInProgress */
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char *netName;     /* network plugin or transport to use */
  int splitShare;          /* children of ncclCommSplit share resources */
  int trafficClass;
  const char *commName;    /* shown in logs */
  int collnetEnable;
  int CTAPolicy;           /* NCCL_CTA_POLICY_* */
  int shrinkShare;         /* children of ncclCommShrink share resources */
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                \
  {                                                                            \
    sizeof(ncclConfig_t),                              /* size */              \
    0xcafebeef,                                        /* magic */             \
    NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),  /* version */           \
    NCCL_CONFIG_UNDEF_INT,                             /* blocking */          \
    NCCL_CONFIG_UNDEF_INT,                             /* cgaClusterSize */    \
    NCCL_CONFIG_UNDEF_INT,                             /* minCTAs */           \
    NCCL_CONFIG_UNDEF_INT,                             /* maxCTAs */           \
    NCCL_CONFIG_UNDEF_PTR,                             /* netName */           \
    NCCL_CONFIG_UNDEF_INT,                             /* splitShare */        \
    NCCL_CONFIG_UNDEF_INT,                             /* trafficClass */      \
    NCCL_CONFIG_UNDEF_PTR,                             /* commName */          \
    NCCL_CONFIG_UNDEF_INT,                             /* collnetEnable */     \
    NCCL_CONFIG_UNDEF_INT,                             /* CTAPolicy */         \
    NCCL_CONFIG_UNDEF_INT,                             /* shrinkShare */       \
    NCCL_CONFIG_UNDEF_INT,                             /* nvlsCTAs */          \
    NCCL_CONFIG_UNDEF_INT,                             /* nChannelsPerNetPeer */ \
    NCCL_CONFIG_UNDEF_INT,                             /* nvlinkCentricSched */ \
  }

/* What ncclGroupSimulateEnd reports. Start from NCCL_SIM_INFO_INITIALIZER. */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime; /* microseconds the group would take */
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER                                              \
  {                                                                            \
    sizeof(ncclSimInfo_t),                             /* size */              \
    0x74685283,                                        /* magic */             \
    NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),  /* version */           \
    NCCL_UNDEF_FLOAT                                   /* estimatedTime */     \
  }

/* ---- Reduction operators and data types --------------------------------- */

/* Exists only so ncclMaxRedOp can be computed from the size the compiler
 * gives an enum (it differs under -fshort-enums). */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;

typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  /* Count of built-in operators; operators made by ncclRedOpCreatePreMulSum
   * take values from here up. */
  ncclNumOps = 5,
  /* The largest operator value: the largest positive value that fits the
   * size of an enum, so the type never grows. */
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

/* Where the scalar of ncclRedOpCreatePreMulSum lives. */
typedef enum {
  ncclScalarDevice = 0,       /* device memory, read when the op runs */
  ncclScalarHostImmediate = 1 /* host memory, read before the call returns */
} ncclScalarResidence_t;

/* ---- Every function below also exists as pnccl<Name>, the profiling
 * entry point with the same behaviour. ---------------------------------- */

/* ---- Library ------------------------------------------------------------ */

/* Stores NCCL_VERSION_CODE of the library that is running (not of this
 * header) in *version. */
ncclResult_t ncclGetVersion(int *version);
ncclResult_t pncclGetVersion(int *version);

/* Text for a result code. */
const char *ncclGetErrorString(ncclResult_t result);
const char *pncclGetErrorString(ncclResult_t result);

/* A message describing the most recent failure; comm may be NULL. */
const char *ncclGetLastError(ncclComm_t comm);
const char *pncclGetLastError(ncclComm_t comm);

/* Re-reads the logging environment variables. NCCL deprecated it. */
WEFT_NCCL_DEPRECATED_("ncclResetDebugInit is not part of the supported NCCL API")
void ncclResetDebugInit(void);
WEFT_NCCL_DEPRECATED_("pncclResetDebugInit is not part of the supported NCCL API")
void pncclResetDebugInit(void);

/* Allocates and frees memory suited to every optimization (for example
 * buffer registration); more than size bytes may be reserved. */
ncclResult_t ncclMemAlloc(void **ptr, size_t size);
ncclResult_t pncclMemAlloc(void **ptr, size_t size);
ncclResult_t ncclMemFree(void *ptr);
ncclResult_t pncclMemFree(void *ptr);

/* ---- Communicator lifecycle --------------------------------------------- */

/* Makes the id that every rank passes to ncclCommInitRank*. Call it on one
 * rank and send the result to the others. */
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId);

/* Joins rank (0 <= rank < nranks) to the communicator named by commId, on
 * the current CUDA device. Every rank must call it, from its own thread or
 * process, or inside one ncclGroupStart/ncclGroupEnd. */
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                              int rank);
ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks,
                               ncclUniqueId commId, int rank);

/* As ncclCommInitRank, with options (config may be NULL). */
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks,
                                    ncclUniqueId commId, int rank,
                                    ncclConfig_t *config);
ncclResult_t pncclCommInitRankConfig(ncclComm_t *comm, int nranks,
                                     ncclUniqueId commId, int rank,
                                     ncclConfig_t *config);

/* As ncclCommInitRankConfig, with nId ids (the same ids, in the same order,
 * on every rank) to spread the setup work. */
ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks,
                                      int myrank, int nId,
                                      ncclUniqueId *commIds,
                                      ncclConfig_t *config);
ncclResult_t pncclCommInitRankScalable(ncclComm_t *newcomm, int nranks,
                                       int myrank, int nId,
                                       ncclUniqueId *commIds,
                                       ncclConfig_t *config);

/* Creates ndev communicators of one process, one per device of devlist
 * (devices 0..ndev-1 when devlist is NULL); comm must hold ndev handles. */
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
ncclResult_t pncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);

/* Ranks passing the same color form a new communicator, ordered by key
 * (ties by old rank). NCCL_SPLIT_NOCOLOR yields *newcomm == NULL. A NULL
 * config copies the parent's. */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                           ncclComm_t *newcomm, ncclConfig_t *config);
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key,
                            ncclComm_t *newcomm, ncclConfig_t *config);

/* A new communicator of the parent's ranks minus excludeRanksList, ranks
 * renumbered without gaps. shrinkFlags: NCCL_SHRINK_*. */
ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList,
                            int excludeRanksCount, ncclComm_t *newcomm,
                            ncclConfig_t *config, int shrinkFlags);
ncclResult_t pncclCommShrink(ncclComm_t comm, int *excludeRanksList,
                             int excludeRanksCount, ncclComm_t *newcomm,
                             ncclConfig_t *config, int shrinkFlags);

/* Completes all work issued on comm and releases what it shares with other
 * ranks; ncclCommDestroy then frees the rest without waiting. */
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t pncclCommFinalize(ncclComm_t comm);

/* Frees this rank's resources of comm. */
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t pncclCommDestroy(ncclComm_t comm);

/* Stops whatever comm is running and frees it. */
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm);

/* Cancels comm's work in flight; afterwards comm may only be destroyed,
 * split or shrunk. revokeFlags must be NCCL_REVOKE_DEFAULT. */
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags);

/* ---- Communicator queries ----------------------------------------------- */

/* The error, if any, that work running in the background hit. */
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm,
                                    ncclResult_t *asyncError);

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t pncclCommCount(const ncclComm_t comm, int *count);

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int *device);

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank);

/* ---- Memory registration ------------------------------------------------- */

/* Registers a user buffer with comm so collectives can use it in place. */
ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
                              void **handle);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
                               void **handle);
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void *handle);

/* Registers a window (winFlags: NCCL_WIN_*); every rank calls it. */
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
                                    ncclWindow_t *win, int winFlags);
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
                                     ncclWindow_t *win, int winFlags);
ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);

/* ---- Custom reduction operators ----------------------------------------- */

/* Makes an operator that multiplies each input by *scalar, then sums. It is
 * valid only with comm and datatype. */
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                      ncclDataType_t datatype,
                                      ncclScalarResidence_t residence,
                                      ncclComm_t comm);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                       ncclDataType_t datatype,
                                       ncclScalarResidence_t residence,
                                       ncclComm_t comm);

/* Releases an operator once no call using it is still being issued. */
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* ---- Collectives ---------------------------------------------------------
 *
 * Every rank of comm makes the matching call. A call returns once the work is
 * queued on stream (for ranks without a GPU, once it is done). Ranks driven
 * from one thread must be wrapped in ncclGroupStart/ncclGroupEnd. Counts are
 * in elements of datatype. */

/* Every rank ends with op over all ranks' sendbuff in recvbuff. */
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, ncclRedOp_t op,
                            ncclComm_t comm, cudaStream_t stream);

/* Rank root ends with op over all ranks' sendbuff in recvbuff; recvbuff
 * is unused elsewhere. */
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, ncclRedOp_t op, int root,
                         ncclComm_t comm, cudaStream_t stream);

/* Root's sendbuff lands in every rank's recvbuff. */
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream);

/* The older in-place broadcast (buff serves as both buffers). */
ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype,
                       int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBcast(void *buff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, cudaStream_t stream);

/* Reduces nranks*recvcount elements; rank i keeps block i in recvbuff. */
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff,
                               size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff,
                                size_t recvcount, ncclDataType_t datatype,
                                ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream);

/* Rank i's sendcount elements land at recvbuff + i*sendcount everywhere. */
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff,
                           size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff,
                            size_t sendcount, ncclDataType_t datatype,
                            ncclComm_t comm, cudaStream_t stream);

/* Block j of sendbuff (count elements each) goes to rank j; the block from
 * rank i lands at block i of recvbuff. */
ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm,
                          cudaStream_t stream);
ncclResult_t pncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclComm_t comm,
                           cudaStream_t stream);

/* Every rank's count elements land at block i (rank i) of root's recvbuff. */
ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, int root, ncclComm_t comm,
                        cudaStream_t stream);
ncclResult_t pncclGather(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm,
                         cudaStream_t stream);

/* Block i of root's sendbuff lands in rank i's recvbuff. */
ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm,
                         cudaStream_t stream);
ncclResult_t pncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm,
                          cudaStream_t stream);

/* ---- Point to point -------------------------------------------------------
 *
 * A send to peer pairs with a receive from this rank on peer, with the same
 * count and datatype. Sends and receives that must progress together go in
 * one group. */

ncclResult_t ncclSend(const void *sendbuff, size_t count,
                      ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t pncclSend(const void *sendbuff, size_t count,
                       ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream);

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype,
                      int peer, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype,
                       int peer, ncclComm_t comm, cudaStream_t stream);

/* ---- Groups ----------------------------------------------------------------
 *
 * Calls between ncclGroupStart and ncclGroupEnd are only recorded; the
 * outermost ncclGroupEnd issues them together. That lets one thread drive
 * several ranks, fuses small operations, and lets sends and receives progress
 * together. Groups nest. */

ncclResult_t ncclGroupStart(void);
ncclResult_t pncclGroupStart(void);

ncclResult_t ncclGroupEnd(void);
ncclResult_t pncclGroupEnd(void);

/* Closes the group like ncclGroupEnd would, but runs nothing: it fills
 * *simInfo with the library's estimate of the group's cost. */
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo);
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t *simInfo);

#ifdef __cplusplus
} /* extern "C" */
#endif

#undef WEFT_NCCL_DEPRECATED_

#endif /* NCCL_H_ */
