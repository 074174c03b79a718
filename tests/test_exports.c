/* Export test: the built library defines every function NVIDIA's nccl.h
 * declares, nccl* and pnccl* alike, so a program linked against NCCL loads
 * and resolves against weft.
 *
 * Usage: test_exports [REFERENCE_NCCL_H [LIBNCCL]]
 *   REFERENCE_NCCL_H  NVIDIA's header; else $WEFT_REF_NCCL_H; else
 *                     /usr/local/cuda/include/nccl.h. Missing: exit 77 (skip).
 *   LIBNCCL           the built libnccl.so.2; else $WEFT_LIBNCCL. Missing:
 *                     failure, since then the build is what is wrong.
 * Link with -ldl (dlopen) and Check. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr */
#endif
#include <check.h>
#include <ctype.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "suite_run.h"

#define DEFAULT_REF_HEADER "/usr/local/cuda/include/nccl.h"
#define MAX_NAMES 512
#define MAX_NAME_LEN 96

static const char *lib_path;
static char names[MAX_NAMES][MAX_NAME_LEN];
static int n_names;

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  size_t got;
  while (buf != NULL && (got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
    len += got;
    if (cap - len - 1 == 0) {
      char *bigger = realloc(buf, cap * 2);
      if (bigger == NULL) free(buf);
      buf = bigger;
      cap *= 2;
    }
  }
  fclose(f);
  if (buf != NULL) buf[len] = '\0';
  return buf;
}

/* Blanks out comments, string and character literals, and preprocessor
 * lines, so what is left is declarations only. Newlines are kept. */
static void strip_non_code(char *s) {
  int line_start = 1;
  for (char *p = s; *p != '\0';) {
    if (p[0] == '/' && p[1] == '*') {
      char *end = strstr(p + 2, "*/");
      char *stop = end != NULL ? end + 2 : p + strlen(p);
      for (; p < stop; p++)
        if (*p != '\n') *p = ' ';
    } else if (p[0] == '/' && p[1] == '/') {
      for (; *p != '\0' && *p != '\n'; p++) *p = ' ';
    } else if (*p == '"' || *p == '\'') {
      char quote = *p;
      *p++ = ' ';
      for (; *p != '\0' && *p != quote && *p != '\n'; p++) {
        if (*p == '\\' && p[1] != '\0') *p++ = ' ';
        *p = ' ';
      }
      if (*p == quote) *p++ = ' ';
    } else if (line_start && *p == '#') {
      /* A directive runs to the first newline not escaped by a backslash. */
      for (; *p != '\0'; p++) {
        if (*p == '\n' && p[-1] != '\\') break;
        if (*p != '\n') *p = ' ';
      }
    } else {
      if (*p == '\n') line_start = 1;
      else if (!isspace((unsigned char)*p)) line_start = 0;
      p++;
    }
  }
}

static int is_ident(char c) { return isalnum((unsigned char)c) || c == '_'; }

static void add_name(const char *start, size_t len) {
  if (len >= MAX_NAME_LEN || n_names >= MAX_NAMES) return;
  for (int i = 0; i < n_names; i++)
    if (strlen(names[i]) == len && strncmp(names[i], start, len) == 0) return;
  memcpy(names[n_names], start, len);
  names[n_names][len] = '\0';
  n_names++;
}

/* Records every nccl* or pnccl* identifier that is followed by '(' and
 * preceded by a type (an identifier or '*'): a function declaration. */
static void collect_functions(const char *code) {
  char prev = '\0'; /* last non-blank character before the identifier */
  for (const char *p = code; *p != '\0';) {
    if (is_ident(*p)) {
      const char *start = p;
      while (is_ident(*p)) p++;
      size_t len = (size_t)(p - start);
      const char *q = p;
      while (isspace((unsigned char)*q)) q++;
      int named = strncmp(start, "nccl", 4) == 0 || strncmp(start, "pnccl", 5) == 0;
      if (named && *q == '(' && (is_ident(prev) || prev == '*'))
        add_name(start, len);
      prev = p[-1];
    } else {
      if (!isspace((unsigned char)*p)) prev = *p;
      p++;
    }
  }
}

static int has_name(const char *name) {
  for (int i = 0; i < n_names; i++)
    if (strcmp(names[i], name) == 0) return 1;
  return 0;
}

/* The parse itself must have worked, or an empty list would pass. */
START_TEST(reference_header_parsed) {
  ck_assert_int_ge(n_names, 40);
  ck_assert_msg(has_name("ncclAllReduce") && has_name("pncclAllReduce") &&
                    has_name("ncclGetErrorString") &&
                    has_name("pncclGetErrorString") && has_name("ncclGroupEnd"),
                "parsed %d names but missed well-known ones", n_names);
  ck_assert_msg(!has_name("ncclConfig_t") && !has_name("ncclRedOp_dummy_t"),
                "parser took a type for a function");
}
END_TEST

START_TEST(every_function_is_exported) {
  void *lib = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
  ck_assert_msg(lib != NULL, "dlopen %s: %s", lib_path, dlerror());

  char lib_real[PATH_MAX];
  ck_assert_msg(realpath(lib_path, lib_real) != NULL, "realpath %s", lib_path);

  char missing[8192] = "";
  int n_missing = 0;
  for (int i = 0; i < n_names; i++) {
    void *sym = dlsym(lib, names[i]);
    const char *why = NULL;
    Dl_info info;
    char sym_real[PATH_MAX];
    if (sym == NULL) {
      why = "not exported";
    } else if (dladdr(sym, &info) == 0 || info.dli_fname == NULL ||
               realpath(info.dli_fname, sym_real) == NULL ||
               strcmp(sym_real, lib_real) != 0) {
      why = "resolved outside the library"; /* e.g. from a real libnccl */
    }
    if (why != NULL) {
      size_t used = strlen(missing);
      snprintf(missing + used, sizeof missing - used, "\n  %.64s (%s)", names[i], why);
      n_missing++;
    }
  }
  dlclose(lib);
  ck_assert_msg(n_missing == 0, "%d of %d functions of the reference nccl.h are missing from %s:%s",
                n_missing, n_names, lib_path, missing);
}
END_TEST

int main(int argc, char **argv) {
  const char *ref = argc > 1 ? argv[1] : getenv("WEFT_REF_NCCL_H");
  if (ref == NULL || ref[0] == '\0') ref = DEFAULT_REF_HEADER;
  lib_path = argc > 2 ? argv[2] : getenv("WEFT_LIBNCCL");

  char *code = read_file(ref);
  if (code == NULL) {
    printf("SKIP: reference header %s not readable\n", ref);
    return 77;
  }
  if (lib_path == NULL || lib_path[0] == '\0') {
    fprintf(stderr, "test_exports: no library given (argv[2] or WEFT_LIBNCCL)\n");
    free(code);
    return EXIT_FAILURE;
  }
  strip_non_code(code);
  collect_functions(code);
  free(code);

  Suite *s = suite_create("exports");
  TCase *tc = tcase_create("reference nccl.h");
  tcase_add_test(tc, reference_header_parsed);
  tcase_add_test(tc, every_function_is_exported);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
