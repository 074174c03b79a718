/* Inputs and references for the GPU suites (see gpu_ref.h). */
#include "gpu_ref.h"

#include <math.h>
#include <string.h>

const char *const ref_op_names[REF_NOPS] = {"sum", "prod",        "max",       "min",
                                            "avg", "premul-host", "premul-dev"};

static int is_fp8(const struct dtype_info *d) {
  return d->type == ncclFloat8e4m3 || d->type == ncclFloat8e5m2;
}

/* Rank r's input at period position j. Sums of 8 ranks stay exact in every
 * type: the ranges of elem.c (fp8: 2 and 1, half and bf16: 15), eighths for
 * float and double. Products take 1, -1, 2 and (floating types) 0.5, with
 * at most two 2s and two 0.5s per position over 8 ranks, so every partial
 * product lies in [1/4, 4]. */
static double gen_value(const struct dtype_info *d, int op, int r, int j, uint32_t salt) {
  uint32_t h = mix((uint32_t)j * 0x9e3779b1U ^ mix((uint32_t)r + 1) ^ mix(salt * 0x85ebca77U + 7));
  if (op == ncclProd) {
    double v = 1;
    if ((j + r) % 4 == 0)
      v = 2;
    else if ((j + r) % 4 == 2 && d->kind == K_FLOAT)
      v = 0.5;
    if (d->kind != K_UINT && (h & 1)) v = -v;
    return v;
  }
  int range = d->range;
  double v = d->kind == K_UINT ? (double)(h % (uint32_t)(range + 1))
                               : (double)((int)(h % (uint32_t)(2 * range + 1)) - range);
  if (d->type == ncclFloat32 || d->type == ncclFloat64) v /= 8;
  return v;
}

/* Scalars differ by rank, so an engine that applies one rank's scalar to
 * every rank's data fails; they are powers of two, so products stay exact.
 * fp8 is the exception: with 3 or 2 mantissa bits, sums of mixed scalings
 * would round, so every rank scales by the same power of two there (the
 * other types catch a scalar taken from the wrong rank). Integers wrap, the
 * same in any order. */
double ref_premul_scalar(const struct dtype_info *d, int op, int r) {
  if (op == OP_PREMUL_HOST) return is_fp8(d) ? 2 : 1 + r % 2;
  if (is_fp8(d)) return 0.5;
  if (d->type == ncclFloat32 || d->type == ncclFloat64) return r % 2 ? 0.5 : 2;
  return r % 2 ? 1 : 2;
}

void ref_build(struct ref_table *t, const struct dtype_info *d, int op, int nranks, uint32_t salt) {
  t->d = d;
  t->op = op;
  t->nranks = nranks;
  t->exact = !(op == ncclAvg && d->kind == K_FLOAT);
  for (int j = 0; j < REF_PERIOD; j++) {
    double xs[REF_MAX_RANKS];
    for (int r = 0; r < nranks; r++) {
      xs[r] = gen_value(d, op, r, j, salt);
      elem_store(d, t->in[r] + (size_t)j * d->size, xs[r]);
      if (op >= ncclNumOps) xs[r] *= ref_premul_scalar(d, op, r);
    }
    t->red[j] = elem_reduce(d, op, xs, nranks, &t->tol[j]);
    elem_store(d, t->red_b + (size_t)j * d->size, t->red[j]);
  }
}

void ref_fill(const struct ref_table *t, int r, void *buf, size_t base, size_t count) {
  size_t s = t->d->size;
  unsigned char *p = buf;
  size_t k = 0;
  for (; k < count && k < REF_PERIOD; k++)
    memcpy(p + k * s, t->in[r] + ((base + k) % REF_PERIOD) * s, s);
  while (k < count) { /* k is a multiple of the period: repeat what is done */
    size_t n = k < count - k ? k : count - k;
    memcpy(p + k * s, p, n * s);
    k += n;
  }
}

static void note_bad(struct ref_bad *bad, size_t index, double got, double want, double tol) {
  if (bad->nbad++ > 0) return;
  bad->index = index;
  bad->got = got;
  bad->want = want;
  bad->tol = tol;
}

size_t ref_check(const struct ref_table *t, const void *buf, size_t at, size_t count, int src,
                 size_t base, struct ref_bad *bad) {
  const struct dtype_info *d = t->d;
  size_t s = d->size;
  const unsigned char *p = (const unsigned char *)buf + at * s;
  const unsigned char *want = src >= 0 ? t->in[src] : t->red_b;
  int exact = src >= 0 || t->exact;
  memset(bad, 0, sizeof *bad);
  size_t j = base % REF_PERIOD;
  for (size_t k = 0; k < count; k++, j = j + 1 == REF_PERIOD ? 0 : j + 1) {
    const unsigned char *g = p + k * s;
    if (memcmp(g, want + j * s, s) == 0) continue;
    double got = elem_load(d, g);
    /* Exact results compare as values, so +0 and -0 are one answer;
     * integers against the wrapped value, as stored. */
    double w = exact ? elem_load(d, want + j * s) : t->red[j];
    double tol = exact ? 0 : t->tol[j];
    if (!isnan(got) && fabs(got - w) <= tol) continue;
    note_bad(bad, at + k, got, w, tol);
  }
  return bad->nbad;
}

size_t ref_check_poison(const struct ref_table *t, const void *buf, size_t at, size_t count,
                        struct ref_bad *bad) {
  const struct dtype_info *d = t->d;
  size_t s = d->size;
  unsigned char poison = poison_byte(d);
  const unsigned char *p = (const unsigned char *)buf + at * s;
  memset(bad, 0, sizeof *bad);
  for (size_t k = 0; k < count; k++)
    for (size_t b = 0; b < s; b++)
      if (p[k * s + b] != poison) {
        note_bad(bad, at + k, elem_load(d, p + k * s), NAN, 0);
        break;
      }
  return bad->nbad;
}
