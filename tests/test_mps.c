/* weft_mps_daemon_live (base/mps.c) on real files: a missing path, a FIFO
 * without and with a reader, a listening UNIX socket and one left behind
 * after its listener closed, and a plain file. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/mps.h"
#include "suite_run.h"

static char dir[64];

static void setup(void) {
  snprintf(dir, sizeof(dir), "/tmp/weft-mps-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
}

static void path_of(char *out, size_t size, const char *name) {
  snprintf(out, size, "%s/%s", dir, name);
}

START_TEST(missing) {
  char p[128];
  path_of(p, sizeof(p), "control");
  ck_assert_int_eq(weft_mps_daemon_live(p), 0);
}
END_TEST

START_TEST(fifo) {
  char p[128];
  path_of(p, sizeof(p), "control");
  ck_assert_int_eq(mkfifo(p, 0600), 0);
  ck_assert_int_eq(weft_mps_daemon_live(p), 0); /* left behind: no reader */
  int r = open(p, O_RDONLY | O_NONBLOCK);
  ck_assert_int_ge(r, 0);
  ck_assert_int_eq(weft_mps_daemon_live(p), 1); /* a daemon reads it */
  close(r);
  ck_assert_int_eq(weft_mps_daemon_live(p), 0);
}
END_TEST

START_TEST(unix_socket) {
  char p[128];
  path_of(p, sizeof(p), "control");
  struct sockaddr_un a;
  memset(&a, 0, sizeof(a));
  a.sun_family = AF_UNIX;
  ck_assert_uint_lt(strlen(p), sizeof(a.sun_path));
  memcpy(a.sun_path, p, strlen(p) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  ck_assert_int_eq(listen(fd, 4), 0);
  ck_assert_int_eq(weft_mps_daemon_live(p), 1);
  close(fd); /* the file stays, nobody listens */
  ck_assert_int_eq(weft_mps_daemon_live(p), 0);
}
END_TEST

START_TEST(plain_file) {
  char p[128];
  path_of(p, sizeof(p), "control");
  FILE *f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  fclose(f);
  ck_assert_int_eq(weft_mps_daemon_live(p), 1); /* not knowable: taken as live */
}
END_TEST

int main(void) {
  Suite *s = suite_create("mps");
  TCase *tc = tcase_create("mps");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, missing);
  tcase_add_test(tc, fifo);
  tcase_add_test(tc, unix_socket);
  tcase_add_test(tc, plain_file);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
