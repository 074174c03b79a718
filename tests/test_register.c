/* Buffer registration, windows and ncclMemAlloc through the public API.
 * weft needs no registration, so a handle is only checked and freed, but
 * every misuse (a handle deregistered twice, on another communicator, of
 * the other kind, or never made) is refused with ncclInvalidArgument and a
 * message; a window registered inside a group is deregistered only after
 * ncclGroupEnd (ncclInvalidUsage before). ncclMemAlloc gives device
 * memory; without a GPU it fails with a message. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "nccl.h"
#include "suite_run.h"

static int expect(ncclResult_t res, ncclResult_t want, const char *what, const char *phrase) {
  HCHECK(res == want, "%s -> %d (%s), expected %d", what, (int)res, ncclGetErrorString(res),
         (int)want);
  if (phrase == NULL) return 0;
  const char *msg = ncclGetLastError(NULL);
  HCHECK(strstr(msg, phrase) != NULL, "%s: last error \"%s\" lacks \"%s\"", what, msg, phrase);
  return 0;
}

#define EXPECT(call, want, phrase)                         \
  do {                                                     \
    if (expect((call), (want), #call, (phrase))) return 1; \
  } while (0)

static int register_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL, other = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  HNCCL(ncclCommSplit(comm, 0, rank, &other, NULL));
  float buf[256];
  for (int i = 0; i < 256; i++) buf[i] = 1.0f;

  /* A registered buffer works in collectives; deregistering twice fails. */
  void *h = NULL, *h2 = NULL;
  HNCCL(ncclCommRegister(comm, buf, sizeof(buf), &h));
  HCHECK(h != NULL, "ncclCommRegister gave a NULL handle");
  HNCCL(ncclAllReduce(buf, buf, 256, ncclFloat32, ncclSum, comm, NULL));
  HCHECK(buf[0] == (float)nranks && buf[255] == (float)nranks, "all-reduce gave %g", buf[0]);
  HNCCL(ncclCommRegister(comm, buf, sizeof(buf), &h2)); /* twice is fine: two handles */
  HCHECK(h2 != h, "two registrations share a handle");
  EXPECT(ncclCommDeregister(other, h), ncclInvalidArgument, "belongs to comm");
  HNCCL(ncclCommDeregister(comm, h));
  EXPECT(ncclCommDeregister(comm, h), ncclInvalidArgument, "not live");
  EXPECT(ncclCommDeregister(comm, buf), ncclInvalidArgument, "not live");
  HNCCL(ncclCommDeregister(comm, NULL)); /* NCCL's handle when registration is off */
  EXPECT(ncclCommRegister(comm, buf, sizeof(buf), NULL), ncclInvalidArgument, "handle");
  EXPECT(ncclCommRegister(comm, NULL, 64, &h), ncclInvalidArgument, "buff is NULL");
  EXPECT(ncclCommRegister(NULL, buf, 64, &h), ncclInvalidArgument, "comm is NULL");
  EXPECT(ncclCommDeregister(NULL, h2), ncclInvalidArgument, "comm is NULL");

  /* Windows: flags checked, kinds not mixed up. */
  ncclWindow_t win = NULL;
  HNCCL(ncclCommWindowRegister(comm, buf, sizeof(buf), &win, NCCL_WIN_COLL_SYMMETRIC));
  HCHECK(win != NULL, "ncclCommWindowRegister gave a NULL window");
  EXPECT(ncclCommDeregister(comm, (void *)win), ncclInvalidArgument, "ncclCommWindowDeregister");
  EXPECT(ncclCommWindowDeregister(comm, (ncclWindow_t)h2), ncclInvalidArgument,
         "ncclCommDeregister");
  HNCCL(ncclCommWindowDeregister(comm, win));
  EXPECT(ncclCommWindowDeregister(comm, win), ncclInvalidArgument, "not live");
  EXPECT(ncclCommWindowRegister(comm, buf, 64, &win, 0x10), ncclInvalidArgument, "winFlags");
  EXPECT(ncclCommWindowRegister(comm, buf, 64, NULL, 0), ncclInvalidArgument, "win");
  HNCCL(ncclCommWindowDeregister(comm, NULL));

  /* Inside a group the window's collective step waits for ncclGroupEnd
   * (one thread may hold several ranks): deregistering it before then is
   * refused, after it works; two windows of one group keep their order. */
  ncclWindow_t g1 = NULL, g2 = NULL;
  HNCCL(ncclGroupStart());
  HNCCL(ncclCommWindowRegister(comm, buf, 64, &g1, NCCL_WIN_COLL_SYMMETRIC));
  HNCCL(ncclCommWindowRegister(comm, buf + 64, 64, &g2, NCCL_WIN_COLL_SYMMETRIC));
  HCHECK(g1 != NULL && g2 != NULL && g1 != g2, "windows of a group: %p, %p", (void *)g1,
         (void *)g2);
  EXPECT(ncclCommWindowDeregister(comm, g1), ncclInvalidUsage, "ncclGroupEnd");
  HNCCL(ncclAllReduce(buf, buf, 256, ncclFloat32, ncclSum, comm, NULL));
  HNCCL(ncclGroupEnd());
  HCHECK(buf[0] == (float)(nranks * nranks), "all-reduce in the window's group gave %g", buf[0]);
  HNCCL(ncclCommWindowDeregister(comm, g2));
  HNCCL(ncclCommWindowDeregister(comm, g1));

  /* ncclGroupSimulateEnd runs no operation of its group, but its windows'
   * steps run as at ncclGroupEnd: the window is live after it. */
  ncclWindow_t gs = NULL;
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  HNCCL(ncclGroupStart());
  HNCCL(ncclCommWindowRegister(comm, buf, 64, &gs, NCCL_WIN_DEFAULT));
  HNCCL(ncclGroupSimulateEnd(&sim));
  HNCCL(ncclCommWindowDeregister(comm, gs));

  /* Handles left registered are released with their communicator. */
  ncclWindow_t left = NULL;
  HNCCL(ncclCommWindowRegister(other, buf, 64, &left, NCCL_WIN_DEFAULT));
  HNCCL(ncclCommDestroy(other));
  HNCCL(ncclCommDeregister(comm, h2));
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

START_TEST(test_register) {
  char why[8192];
  /* Processes: the last error is one per process, as in NCCL. */
  int rc = harness_procs(2, 60, register_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

START_TEST(test_mem_alloc) {
  void *p = (void *)1;
  ck_assert_int_eq(ncclMemAlloc(NULL, 64), ncclInvalidArgument);
  ck_assert_msg(strstr(ncclGetLastError(NULL), "ptr") != NULL, "%s", ncclGetLastError(NULL));
  ck_assert_int_eq(ncclMemAlloc(&p, 0), ncclSuccess); /* as NCCL: NULL, no error */
  ck_assert_ptr_null(p);
  ck_assert_int_eq(ncclMemFree(NULL), ncclSuccess);
  ncclResult_t res = ncclMemAlloc(&p, 1 << 20);
  if (res != ncclSuccess) {
    /* No GPU (or no CUDA in the build): an error that says so. */
    ck_assert_ptr_null(p);
    const char *msg = ncclGetLastError(NULL);
    ck_assert_msg(strstr(msg, "ncclMemAlloc") != NULL && strstr(msg, "1048576") != NULL,
                  "ncclMemAlloc -> %d: \"%s\"", (int)res, msg);
  } else {
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(ncclMemFree(p), ncclSuccess);
  }
  int on_host = 0;
  res = ncclMemFree(&on_host);
  ck_assert_msg(res == ncclInvalidArgument, "ncclMemFree(host pointer) -> %d", (int)res);
}
END_TEST

int main(void) {
  harness_env_defaults();
  Suite *s = suite_create("register");
  TCase *tc = tcase_create("register");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_register);
  tcase_add_test(tc, test_mem_alloc);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
