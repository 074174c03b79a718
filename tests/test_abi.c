/* ABI test: weft's include/nccl.h against NVIDIA's, fact by fact.
 *
 * The facts (enum values, macro values, sizes, offsets, initializer values,
 * type identities, function types) are listed once in abi/abi_common.h.
 * abi/abi_ref.c evaluates them against NVIDIA's header and abi/abi_weft.c
 * against weft's; this file compares the two tables and names every row that
 * differs.
 *
 * Build (meson), only when the toolkit's nccl.h exists:
 *   abi/abi_ref.c   -std=c11, include path: the toolkit's include dir ONLY
 *                   (toolkit_nccl_inc); never weft's include/.
 *   abi/abi_weft.c  -std=c11, include path: weft's include/ (first).
 *   test_abi.c      Check; needs neither nccl.h.
 * All three link into one executable with Check (dependency 'check'). The
 * #error guards in the two abi_*.c files stop a build that mixes the paths. */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi/abi_common.h"
#include "suite_run.h"

static const struct abi_entry *ref, *weft;
static size_t ref_n, weft_n;

static void load_tables(void) {
  ref = abi_ref_table(&ref_n);
  weft = abi_weft_table(&weft_n);
}

static const struct abi_entry *find(const struct abi_entry *t, size_t n,
                                    const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(t[i].name, name) == 0) return &t[i];
  ck_abort_msg("no ABI row named %s", name);
  return NULL;
}

/* Appends one line to the failure report, keeping it a valid string. */
static void report(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void report(char *buf, size_t cap, const char *fmt, ...) {
  size_t used = strlen(buf);
  if (used + 1 >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + used, cap - used, fmt, ap);
  va_end(ap);
}

START_TEST(tables_list_the_same_rows) {
  ck_assert_uint_eq(ref_n, weft_n);
  for (size_t i = 0; i < ref_n; i++)
    ck_assert_msg(strcmp(ref[i].name, weft[i].name) == 0 &&
                      ref[i].kind == weft[i].kind,
                  "row %zu: %s vs %s", i, ref[i].name, weft[i].name);
}
END_TEST

START_TEST(values_match_nvidia) {
  char msg[8192] = "";
  int bad = 0;
  for (size_t i = 0; i < ref_n && i < weft_n; i++) {
    const struct abi_entry *r = &ref[i], *w = &weft[i];
    switch (r->kind) {
    case ABI_EQUAL:
    case ABI_PTR:
      if (r->value != w->value) {
        report(msg, sizeof msg, "\n  %s: NVIDIA %lld (0x%llx), weft %lld (0x%llx)",
               r->name, r->value, (unsigned long long)r->value, w->value,
               (unsigned long long)w->value);
        bad++;
      }
      break;
    case ABI_FLOAT:
      if (memcmp(&r->fvalue, &w->fvalue, sizeof r->fvalue) != 0) {
        report(msg, sizeof msg, "\n  %s: NVIDIA %g, weft %g", r->name,
               r->fvalue, w->fvalue);
        bad++;
      }
      break;
    case ABI_TRUE:
      if (r->value != 1 || w->value != 1) {
        report(msg, sizeof msg, "\n  %s: false in %s%s%s", r->name,
               r->value != 1 ? "NVIDIA's header" : "",
               r->value != 1 && w->value != 1 ? " and " : "",
               w->value != 1 ? "weft's header" : "");
        bad++;
      }
      break;
    case ABI_VERSION:
      break;
    }
  }
  ck_assert_msg(bad == 0, "%d ABI row(s) differ:%s", bad, msg);
}
END_TEST

START_TEST(weft_claims_nccl_2_27) {
  long long code = find(weft, weft_n, "NCCL_VERSION_CODE")->value;
  ck_assert_int_eq(find(weft, weft_n, "NCCL_MAJOR")->value, 2);
  ck_assert_int_eq(find(weft, weft_n, "NCCL_MINOR")->value, 27);
  /* The code must be NCCL_VERSION(2, 27, NCCL_PATCH), computed by weft's
   * macro, which the value rows already compare with NVIDIA's. */
  ck_assert_int_eq(
      code,
      find(weft, weft_n, "NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)")->value);
  ck_assert_int_eq(code, 22700 + find(weft, weft_n, "NCCL_PATCH")->value);
  ck_assert_int_eq(find(weft, weft_n, "config_initializer.version")->value, code);
  ck_assert_int_eq(find(weft, weft_n, "sim_info_initializer.version")->value, code);
}
END_TEST

/* Guards the test itself: the reference really is NVIDIA's header, and its
 * initializers carry its own version. */
START_TEST(reference_is_consistent) {
  long long code = find(ref, ref_n, "NCCL_VERSION_CODE")->value;
  ck_assert_int_eq(
      code,
      find(ref, ref_n, "NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)")->value);
  ck_assert_int_ge(find(ref, ref_n, "NCCL_MINOR")->value, 27);
  ck_assert_int_eq(find(ref, ref_n, "config_initializer.version")->value, code);
  ck_assert_int_eq(find(ref, ref_n, "sim_info_initializer.version")->value, code);
}
END_TEST

static Suite *abi_suite(void) {
  Suite *s = suite_create("abi");
  TCase *tc = tcase_create("nccl.h");
  tcase_add_checked_fixture(tc, load_tables, NULL);
  tcase_add_test(tc, tables_list_the_same_rows);
  tcase_add_test(tc, values_match_nvidia);
  tcase_add_test(tc, weft_claims_nccl_2_27);
  tcase_add_test(tc, reference_is_consistent);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return suite_run(abi_suite());
}
