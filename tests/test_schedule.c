/* Unit tests of src/sched (ring.c, tree.c, p2p.c, plan.c): a single-process
 * simulator runs every rank's plan against in-memory buffers. Lanes run in
 * a shuffled order; a step's send goes into the (src, dst, channel) FIFO
 * when the step starts, its receive completes only when a message is there,
 * so a plan that needs something no lane will send is found as a deadlock.
 * Checked: results exact (double, float, uint8 elements); POSTOP exactly
 * once per result element (a tag that travels with the data); message sizes
 * equal on both ends; FIFOs empty at the end; a step never sends from what
 * it receives into; Reduce never touches a non-root's output, Broadcast
 * never reads a non-root's input, and out-of-place inputs stay unchanged.
 * Needs plan.c, ring.c, tree.c, p2p.c of src/sched, src/base/debug.c and
 * src/base/param.c. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/plan.h"
#include "sched/schedule.h"
#include "suite_run.h"

#define EXPECT(cond, ...)                   \
  do {                                      \
    if (!(cond)) ck_abort_msg(__VA_ARGS__); \
  } while (0)

#define MAXR 8
#define MAXCH 32
#define MAXBUF 64

struct msg {
  size_t bytes;
  unsigned char *data, *tags;
  struct msg *next;
};

struct fifo {
  struct msg *head, *tail;
};

/* A buffer index of one rank: a window of the rank's arena. */
struct region {
  unsigned char *data, *tags;
  size_t size;
  int forbidden; /* the plan must not touch it */
};

struct sim_lane {
  const struct weft_lane *lane;
  unsigned char *scratch, *scratch_tags;
  size_t idx;
  int sent;
};

struct sim_rank {
  struct weft_plan plan;
  struct sim_lane *lanes;
  int nbufs;
  struct region bufs[MAXBUF];
  unsigned char *arena, *arena_tags, *arena0;
  size_t arena_bytes;
};

struct sim {
  int n;
  size_t es; /* element size: 8 double, 4 float, 1 uint8 */
  int avg;   /* POSTOP divides */
  int typed; /* collectives: reduce as numbers and check alignment */
  struct sim_rank r[MAXR];
  struct fifo f[MAXR][MAXR][MAXCH];
  unsigned rng;
};

static unsigned sim_rand(struct sim *s) {
  s->rng = s->rng * 1103515245u + 12345u;
  return s->rng >> 8;
}

static void fifo_push(struct fifo *f, const unsigned char *d, const unsigned char *t, size_t n) {
  struct msg *m = calloc(1, sizeof(*m));
  m->bytes = n;
  m->data = malloc(n + 1);
  m->tags = malloc(n + 1);
  memcpy(m->data, d, n);
  memcpy(m->tags, t, n);
  if (f->tail)
    f->tail->next = m;
  else
    f->head = m;
  f->tail = m;
}

static struct msg *fifo_pop(struct fifo *f) {
  struct msg *m = f->head;
  if (m == NULL) return NULL;
  f->head = m->next;
  if (f->head == NULL) f->tail = NULL;
  return m;
}

static void msg_free(struct msg *m) {
  free(m->data);
  free(m->tags);
  free(m);
}

/* Bytes [off, off+bytes) of buffer `buf` as seen by lane l of rank r. */
static unsigned char *sim_resolve(struct sim *s, int r, struct sim_lane *l, unsigned buf,
                                  size_t off, size_t bytes, unsigned char **tags) {
  struct region reg;
  if (buf == WEFT_BUF_SCRATCH) {
    reg = (struct region){l->scratch, l->scratch_tags, l->lane->scratch_bytes, 0};
  } else {
    EXPECT((int)buf < s->r[r].nbufs, "rank %d: buffer index %u of %d", r, buf, s->r[r].nbufs);
    reg = s->r[r].bufs[buf];
  }
  EXPECT(!reg.forbidden, "rank %d: touches forbidden buffer %u", r, buf);
  EXPECT(off <= reg.size && bytes <= reg.size - off,
         "rank %d: buffer %u [%zu, +%zu) outside %zu bytes", r, buf, off, bytes, reg.size);
  if (s->typed)
    EXPECT(off % s->es == 0 && bytes % s->es == 0, "rank %d: unaligned [%zu, +%zu)", r, off, bytes);
  *tags = reg.tags + off;
  return reg.data + off;
}

static int overlap2(const unsigned char *a, size_t na, const unsigned char *b, size_t nb) {
  return na > 0 && nb > 0 && a < b + nb && b < a + na;
}

static int overlap(const unsigned char *a, const unsigned char *b, size_t n) {
  return overlap2(a, n, b, n);
}

static void sim_reduce(struct sim *s, unsigned char *dst, const unsigned char *loc,
                       const unsigned char *in, size_t bytes) {
  for (size_t i = 0; i < bytes; i += s->es) {
    if (s->es == 8) {
      double a, b;
      memcpy(&a, loc + i, 8);
      memcpy(&b, in + i, 8);
      a += b;
      memcpy(dst + i, &a, 8);
    } else if (s->es == 4) {
      float a, b;
      memcpy(&a, loc + i, 4);
      memcpy(&b, in + i, 4);
      a += b;
      memcpy(dst + i, &a, 4);
    } else {
      dst[i] = (unsigned char)(loc[i] + in[i]);
    }
  }
}

static void sim_postop(struct sim *s, unsigned char *dst, unsigned char *tags, size_t bytes) {
  for (size_t i = 0; i < bytes; i++) tags[i]++;
  if (!s->avg) return;
  for (size_t i = 0; i < bytes; i += s->es) {
    if (s->es == 8) {
      double a;
      memcpy(&a, dst + i, 8);
      a /= s->n;
      memcpy(dst + i, &a, 8);
    } else if (s->es == 4) {
      float a;
      memcpy(&a, dst + i, 4);
      a /= (float)s->n;
      memcpy(dst + i, &a, 4);
    }
  }
}

static void sim_check_flags(int r, const struct weft_step *st) {
  unsigned f = st->flags;
  unsigned known = WEFT_STEP_SEND | WEFT_STEP_RECV | WEFT_STEP_REDUCE | WEFT_STEP_COPY |
                   WEFT_STEP_POSTOP | WEFT_STEP_LOCAL;
  EXPECT((f & ~known) == 0, "rank %d: unknown step flags %#x", r, f);
  EXPECT(f & (WEFT_STEP_SEND | WEFT_STEP_RECV | WEFT_STEP_LOCAL), "rank %d: empty step", r);
  if (f & WEFT_STEP_RECV)
    EXPECT(!(f & WEFT_STEP_COPY) != !(f & WEFT_STEP_REDUCE),
           "rank %d: a receive needs exactly one of COPY/REDUCE (%#x)", r, f);
  else
    EXPECT(!(f & (WEFT_STEP_COPY | WEFT_STEP_REDUCE)), "rank %d: COPY/REDUCE without RECV", r);
  if (f & WEFT_STEP_LOCAL) EXPECT(!(f & WEFT_STEP_RECV), "rank %d: LOCAL with a receive", r);
  if (f & WEFT_STEP_POSTOP)
    EXPECT(f & (WEFT_STEP_RECV | WEFT_STEP_LOCAL), "rank %d: POSTOP with no result", r);
}

/* Sends if not yet sent; completes the step if its data is there.
 * Returns 1 when something happened. */
static int sim_step(struct sim *s, int r, struct sim_lane *l) {
  const struct weft_step *st = &l->lane->steps[l->idx];
  int ch = l->lane->channel, did = 0;
  unsigned char *sd = NULL, *st_tags, *dst = NULL, *dtags = NULL;
  EXPECT(ch >= 0 && ch < MAXCH, "rank %d: channel %d", r, ch);
  sim_check_flags(r, st);
  if (st->flags & (WEFT_STEP_RECV | WEFT_STEP_LOCAL))
    dst = sim_resolve(s, r, l, st->dst_buf, st->dst_off, st->recv_bytes, &dtags);
  if ((st->flags & WEFT_STEP_SEND) && !l->sent) {
    int p = st->send_peer;
    EXPECT(p >= 0 && p < s->n && p != r, "rank %d: send to peer %d", r, p);
    sd = sim_resolve(s, r, l, st->send_buf, st->send_off, st->send_bytes, &st_tags);
    /* A LOCAL copy in place writes nothing; any other result must not
     * touch the bytes the step sends (engines order the two freely). */
    int writes = dst != NULL;
    if (writes && (st->flags & WEFT_STEP_LOCAL)) {
      unsigned char *unused;
      writes = sim_resolve(s, r, l, st->local_buf, st->local_off, st->recv_bytes, &unused) != dst;
    }
    if (writes)
      EXPECT(!overlap2(sd, st->send_bytes, dst, st->recv_bytes),
             "rank %d: a step sends from bytes it writes", r);
    fifo_push(&s->f[r][p][ch], sd, st_tags, st->send_bytes);
    l->sent = 1;
    did = 1;
  }
  if (st->flags & WEFT_STEP_RECV) {
    int p = st->recv_peer;
    EXPECT(p >= 0 && p < s->n && p != r, "rank %d: receive from peer %d", r, p);
    struct msg *m = fifo_pop(&s->f[p][r][ch]);
    if (m == NULL) return did;
    EXPECT(m->bytes == st->recv_bytes,
           "rank %d: receives %zu bytes from %d on channel %d, "
           "%zu were sent",
           r, st->recv_bytes, p, ch, m->bytes);
    if (st->flags & WEFT_STEP_REDUCE) {
      unsigned char *lt,
          *loc = sim_resolve(s, r, l, st->local_buf, st->local_off, st->recv_bytes, &lt);
      EXPECT(loc == dst || !overlap(loc, dst, st->recv_bytes),
             "rank %d: reduce operand "
             "partly overlaps its result",
             r);
      sim_reduce(s, dst, loc, m->data, st->recv_bytes);
      for (size_t i = 0; i < st->recv_bytes; i++) dtags[i] = (unsigned char)(lt[i] + m->tags[i]);
    } else {
      memcpy(dst, m->data, st->recv_bytes);
      memcpy(dtags, m->tags, st->recv_bytes);
    }
    msg_free(m);
  }
  if (st->flags & WEFT_STEP_LOCAL) {
    unsigned char *lt,
        *src = sim_resolve(s, r, l, st->local_buf, st->local_off, st->recv_bytes, &lt);
    EXPECT(src == dst || !overlap(src, dst, st->recv_bytes), "rank %d: LOCAL copy overlaps", r);
    memmove(dst, src, st->recv_bytes);
    memmove(dtags, lt, st->recv_bytes);
  }
  if (st->flags & WEFT_STEP_POSTOP) sim_postop(s, dst, dtags, st->recv_bytes);
  l->idx++;
  l->sent = 0;
  return 1;
}

/* Runs every lane of every rank to the end, in a shuffled order. */
static void sim_run(struct sim *s) {
  int nl = 0;
  struct sim_lane *all[MAXR * 64];
  int owner[MAXR * 64];
  for (int r = 0; r < s->n; r++)
    for (int i = 0; i < s->r[r].plan.nlanes; i++) {
      EXPECT(nl < MAXR * 64, "too many lanes");
      owner[nl] = r;
      all[nl++] = &s->r[r].lanes[i];
    }
  for (;;) {
    int progress = 0, left = 0;
    for (int i = nl - 1; i > 0; i--) {
      int j = (int)(sim_rand(s) % (unsigned)(i + 1));
      struct sim_lane *t = all[i];
      int to = owner[i];
      all[i] = all[j], owner[i] = owner[j];
      all[j] = t, owner[j] = to;
    }
    for (int i = 0; i < nl; i++) {
      int burst = 1 + (int)(sim_rand(s) % 3);
      while (burst-- > 0 && all[i]->idx < all[i]->lane->nsteps && sim_step(s, owner[i], all[i]))
        progress = 1;
      left += all[i]->idx < all[i]->lane->nsteps;
    }
    if (!left) break;
    EXPECT(progress, "deadlock: %d lanes cannot progress", left);
  }
  for (int a = 0; a < s->n; a++)
    for (int b = 0; b < s->n; b++)
      for (int c = 0; c < MAXCH; c++)
        EXPECT(s->f[a][b][c].head == NULL, "FIFO %d->%d channel %d not empty at the end", a, b, c);
}

/* Lane state and scratch for rank r's plan (already in s->r[r].plan). */
static void sim_lanes_init(struct sim_rank *sr) {
  sr->lanes = calloc((size_t)sr->plan.nlanes + 1, sizeof(*sr->lanes));
  for (int i = 0; i < sr->plan.nlanes; i++) {
    struct sim_lane *l = &sr->lanes[i];
    l->lane = &sr->plan.lanes[i];
    l->scratch = calloc(l->lane->scratch_bytes + 1, 1);
    l->scratch_tags = calloc(l->lane->scratch_bytes + 1, 1);
  }
}

static void sim_free(struct sim *s) {
  for (int r = 0; r < s->n; r++) {
    struct sim_rank *sr = &s->r[r];
    for (int i = 0; i < sr->plan.nlanes && sr->lanes; i++) {
      free(sr->lanes[i].scratch);
      free(sr->lanes[i].scratch_tags);
    }
    free(sr->lanes);
    weft_plan_free(&sr->plan);
    free(sr->arena);
    free(sr->arena_tags);
    free(sr->arena0);
  }
}

/* ---- collectives ---- */

struct coll_case {
  enum weft_func func;
  int tree;
  int n;
  const int *ring;
  int nch;
  size_t chunk_bytes;
  size_t count;
  size_t es;
  int inplace, avg, root;
  unsigned seed;
};

static uint32_t coll_value(int r, size_t i) {
  return (((uint32_t)i * 2654435761u) ^ ((uint32_t)r * 40503u + 7u)) % 65536u + 1u;
}

static void put_elem(size_t es, unsigned char *p, double v) {
  if (es == 8)
    memcpy(p, &v, 8);
  else if (es == 4) {
    float f = (float)v;
    memcpy(p, &f, 4);
  } else {
    *p = (unsigned char)((uint64_t)(int64_t)v & 0xff);
  }
}

static size_t coll_in_elems(const struct coll_case *c) {
  return c->func == WEFT_FUNC_REDUCESCATTER ? c->count * (size_t)c->n : c->count;
}

static size_t coll_out_elems(const struct coll_case *c) {
  return c->func == WEFT_FUNC_ALLGATHER ? c->count * (size_t)c->n : c->count;
}

/* The arena: out-of-place IN then OUT; in-place one buffer as NCCL lays it. */
static void coll_setup_rank(struct sim *s, const struct coll_case *c, int r) {
  struct sim_rank *sr = &s->r[r];
  size_t inb = coll_in_elems(c) * c->es, outb = coll_out_elems(c) * c->es;
  size_t in_off = 0, out_off = inb, own = (size_t)r * c->count * c->es;
  sr->arena_bytes = inb + outb;
  if (c->inplace) {
    sr->arena_bytes = inb > outb ? inb : outb;
    in_off = c->func == WEFT_FUNC_ALLGATHER ? own : 0;
    out_off = c->func == WEFT_FUNC_REDUCESCATTER ? own : 0;
  }
  sr->arena = malloc(sr->arena_bytes + 1);
  sr->arena_tags = calloc(sr->arena_bytes + 1, 1);
  sr->arena0 = malloc(sr->arena_bytes + 1);
  for (size_t i = 0; i < sr->arena_bytes; i += c->es) put_elem(c->es, sr->arena + i, -777.25);
  for (size_t i = 0; i < coll_in_elems(c); i++)
    put_elem(c->es, sr->arena + in_off + i * c->es, coll_value(r, i));
  memcpy(sr->arena0, sr->arena, sr->arena_bytes);
  sr->nbufs = 2;
  sr->bufs[WEFT_BUF_IN] = (struct region){sr->arena + in_off, sr->arena_tags + in_off, inb, 0};
  sr->bufs[WEFT_BUF_OUT] = (struct region){sr->arena + out_off, sr->arena_tags + out_off, outb, 0};
  if (c->func == WEFT_FUNC_BROADCAST && r != c->root) sr->bufs[WEFT_BUF_IN].forbidden = 1;
  if (c->func == WEFT_FUNC_REDUCE && r != c->root) sr->bufs[WEFT_BUF_OUT].forbidden = 1;
}

/* Expected OUT element i of rank r (before the type's rounding), and
 * whether it is a reduction (POSTOP expected once). */
static double coll_expect(const struct coll_case *c, int r, size_t i, int *reduced) {
  double sum = 0;
  *reduced = 1;
  switch (c->func) {
    case WEFT_FUNC_ALLGATHER: *reduced = 0; return coll_value((int)(i / c->count), i % c->count);
    case WEFT_FUNC_BROADCAST: *reduced = 0; return coll_value(c->root, i);
    case WEFT_FUNC_REDUCESCATTER:
      for (int q = 0; q < c->n; q++) sum += coll_value(q, (size_t)r * c->count + i);
      return sum;
    default:
      for (int q = 0; q < c->n; q++) sum += coll_value(q, i);
      return sum;
  }
}

static void coll_check_elem(const struct sim *s, const struct coll_case *c, int r, size_t i,
                            const unsigned char *got, const unsigned char *tags) {
  int reduced;
  double e = coll_expect(c, r, i, &reduced);
  unsigned char want[8];
  if (c->es == 8)
    put_elem(8, want, c->avg && reduced ? e / c->n : e);
  else if (c->es == 4) {
    float f = (float)e;
    if (c->avg && reduced) f /= (float)c->n;
    memcpy(want, &f, 4);
  } else {
    put_elem(1, want, e);
  }
  EXPECT(memcmp(got, want, c->es) == 0, "%s%s n=%d rank %d: element %zu wrong",
         weft_func_name(c->func), c->tree ? "(tree)" : "", s->n, r, i);
  for (size_t b = 0; b < c->es; b++)
    EXPECT(tags[b] == (reduced ? 1 : 0), "%s n=%d rank %d: element %zu had %d POSTOPs",
           weft_func_name(c->func), s->n, r, i, tags[b]);
}

static void coll_check_rank(struct sim *s, const struct coll_case *c, int r) {
  struct sim_rank *sr = &s->r[r];
  if (c->func == WEFT_FUNC_REDUCE && r != c->root) {
    EXPECT(memcmp(sr->arena, sr->arena0, sr->arena_bytes) == 0,
           "Reduce: non-root rank %d's buffers were written", r);
    return;
  }
  struct region out = sr->bufs[WEFT_BUF_OUT];
  for (size_t i = 0; i < coll_out_elems(c); i++)
    coll_check_elem(s, c, r, i, out.data + i * c->es, out.tags + i * c->es);
  if (!c->inplace) {
    struct region in = sr->bufs[WEFT_BUF_IN];
    EXPECT(memcmp(in.data, sr->arena0, in.size) == 0, "rank %d: input was written", r);
  }
}

static void coll_run(const struct coll_case *c) {
  static struct sim s;
  memset(&s, 0, sizeof(s));
  s.n = c->n, s.es = c->es, s.avg = c->avg, s.typed = 1, s.rng = c->seed;
  for (int r = 0; r < c->n; r++) {
    struct weft_sched_args a = {.func = c->func,
                                .rank = r,
                                .nranks = c->n,
                                .root = c->root,
                                .count = c->count,
                                .elem_size = c->es,
                                .nchannels = c->nch,
                                .chunk_bytes = c->chunk_bytes,
                                .ring = c->ring};
    ncclResult_t res =
        c->tree ? weft_tree_plan(&a, &s.r[r].plan) : weft_ring_plan(&a, &s.r[r].plan);
    EXPECT(res == ncclSuccess, "%s plan failed on rank %d: %d", weft_func_name(c->func), r, res);
    if (c->count == 0)
      for (int i = 0; i < s.r[r].plan.nlanes; i++)
        EXPECT(s.r[r].plan.lanes[i].nsteps == 0, "count 0 has steps");
    sim_lanes_init(&s.r[r]);
    coll_setup_rank(&s, c, r);
  }
  sim_run(&s);
  for (int r = 0; r < c->n; r++) coll_check_rank(&s, c, r);
  sim_free(&s);
}

/* ring[] orders: 0 identity, 1 a fixed shuffle. */
static void make_ring(int n, int kind, int *ring) {
  for (int i = 0; i < n; i++) ring[i] = i;
  unsigned x = 12345u + (unsigned)n;
  for (int i = n - 1; kind && i > 0; i--) {
    x = x * 1103515245u + 12345u;
    int j = (int)((x >> 8) % (unsigned)(i + 1));
    int t = ring[i];
    ring[i] = ring[j], ring[j] = t;
  }
}

static const enum weft_func ring_funcs[] = {WEFT_FUNC_ALLREDUCE, WEFT_FUNC_ALLGATHER,
                                            WEFT_FUNC_REDUCESCATTER, WEFT_FUNC_BROADCAST,
                                            WEFT_FUNC_REDUCE};

static int is_reduction(enum weft_func f) {
  return f == WEFT_FUNC_ALLREDUCE || f == WEFT_FUNC_REDUCESCATTER || f == WEFT_FUNC_REDUCE;
}

/* Every count, channel count, chunk size, ring order and placement of one
 * (func, algorithm, n, element size). */
static void coll_matrix(enum weft_func f, int tree, int n, size_t es) {
  int ring[MAXR];
  size_t counts[] = {0, 1, 7, (size_t)n - 1, (size_t)n + 1, 1000};
  /* One element, three and a bit (not a multiple), and no limit at all. */
  size_t chunks[] = {es, 3 * es + 1, 1u << 20};
  int roots[] = {n - 1, 0, n / 2};
  int nroots = f == WEFT_FUNC_BROADCAST || f == WEFT_FUNC_REDUCE ? 3 : 1;
  /* Other element sizes only check offsets: fewer shapes will do. */
  int full = es == 8;
  if (!full) nroots = 1;
  unsigned seed = 1;
  for (int kind = 0; kind < 2; kind++) {
    make_ring(n, kind, ring);
    for (int nch = 1; nch <= 3; nch += full ? 1 : 2)
      for (size_t ci = full ? 0 : 1; ci < 3; ci++)
        for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
          for (int inplace = 0; inplace < 2; inplace++)
            for (int ri = 0; ri < nroots; ri++) {
              struct coll_case c = {.func = f,
                                    .tree = tree,
                                    .n = n,
                                    .ring = ring,
                                    .nch = nch,
                                    .chunk_bytes = chunks[ci],
                                    .count = counts[k],
                                    .es = es,
                                    .inplace = inplace,
                                    .avg = es > 1 && is_reduction(f),
                                    .root = roots[ri],
                                    .seed = seed++};
              coll_run(&c);
            }
  }
}

START_TEST(ring_collectives) {
  int n = _i;
  for (size_t f = 0; f < sizeof(ring_funcs) / sizeof(ring_funcs[0]); f++) {
    coll_matrix(ring_funcs[f], 0, n, 8);
    coll_matrix(ring_funcs[f], 0, n, 4);
    coll_matrix(ring_funcs[f], 0, n, 1);
  }
}
END_TEST

START_TEST(tree_allreduce) {
  int n = _i;
  coll_matrix(WEFT_FUNC_ALLREDUCE, 1, n, 8);
  coll_matrix(WEFT_FUNC_ALLREDUCE, 1, n, 4);
  coll_matrix(WEFT_FUNC_ALLREDUCE, 1, n, 1);
}
END_TEST

/* With n even, every rank receives from children (is inner) in exactly one
 * of the two trees. */
START_TEST(tree_shape) {
  for (int n = 2; n <= MAXR; n += 2) {
    int ring[MAXR];
    make_ring(n, 0, ring);
    for (int r = 0; r < n; r++) {
      struct weft_sched_args a = {.func = WEFT_FUNC_ALLREDUCE,
                                  .rank = r,
                                  .nranks = n,
                                  .count = 1000,
                                  .elem_size = 8,
                                  .nchannels = 1,
                                  .chunk_bytes = 1u << 20,
                                  .ring = ring};
      struct weft_plan p;
      ck_assert_int_eq(weft_tree_plan(&a, &p), ncclSuccess);
      ck_assert_int_eq(p.nlanes, 4);
      int inner = 0;
      for (int t = 0; t < 2; t++) {
        const struct weft_lane *up = &p.lanes[2 * t];
        ck_assert_int_eq(up->channel, t);
        ck_assert_int_eq(p.lanes[2 * t + 1].channel, t);
        for (size_t i = 0; i < up->nsteps; i++)
          if (up->steps[i].flags & WEFT_STEP_RECV) {
            inner++;
            break;
          }
      }
      EXPECT(inner == 1, "n=%d rank %d is inner in %d trees", n, r, inner);
      weft_plan_free(&p);
    }
  }
}
END_TEST

/* ---- grouped send/recv ---- */

/* cnt[a][b]: messages a sends to b; message k from a to b has p2p_size
 * bytes. Each rank posts its sends and receives in a random order that
 * keeps the k-th message to (from) each peer after the (k-1)-th. */
struct p2p_case {
  int n;
  int cnt[MAXR][MAXR];
  unsigned seed;
  int parts; /* lanes per peer (weft_p2p_plan_parts); 0: weft_p2p_plan */
};

static size_t p2p_size(int a, int b, int k) {
  return (size_t)((a * 31 + b * 7 + k * 5) % 50);
}

static unsigned char p2p_byte(int a, int b, int k, size_t i) {
  return (unsigned char)(a * 17 + b * 5 + k * 3 + (int)i + 1);
}

/* Op list of rank r: for each op, peer, direction and message number. */
static int p2p_ops(struct sim *s, const struct p2p_case *c, int r, struct weft_p2p *ops,
                   int *knum) {
  int next[2][MAXR] = {{0}}, nops = 0, total = 0;
  for (int q = 0; q < c->n; q++) total += c->cnt[r][q] + c->cnt[q][r];
  EXPECT(total <= MAXBUF, "too many ops");
  while (nops < total) {
    int q = (int)(sim_rand(s) % (unsigned)c->n), send = (int)(sim_rand(s) % 2);
    int lim = send ? c->cnt[r][q] : c->cnt[q][r];
    if (next[send][q] >= lim) continue;
    int k = next[send][q]++;
    ops[nops] = (struct weft_p2p){
        .peer = q, .is_send = send, .bytes = send ? p2p_size(r, q, k) : p2p_size(q, r, k)};
    knum[nops++] = k;
  }
  return nops;
}

static void p2p_run(const struct p2p_case *c) {
  static struct sim s;
  static struct weft_p2p ops[MAXR][MAXBUF];
  static int knum[MAXR][MAXBUF], nops[MAXR];
  memset(&s, 0, sizeof(s));
  s.n = c->n, s.es = 1, s.rng = c->seed;
  for (int r = 0; r < c->n; r++) {
    struct sim_rank *sr = &s.r[r];
    nops[r] = p2p_ops(&s, c, r, ops[r], knum[r]);
    ck_assert_int_eq(c->parts ? weft_p2p_plan_parts(r, ops[r], nops[r], c->parts, &sr->plan)
                              : weft_p2p_plan(r, ops[r], nops[r], &sr->plan),
                     ncclSuccess);
    sim_lanes_init(sr);
    size_t total = 0;
    for (int i = 0; i < nops[r]; i++) total += ops[r][i].bytes;
    sr->arena = malloc(total + 1), sr->arena_tags = calloc(total + 1, 1);
    sr->arena_bytes = total, sr->nbufs = nops[r];
    for (int i = 0, off = 0; i < nops[r]; off += (int)ops[r][i].bytes, i++) {
      sr->bufs[i] = (struct region){sr->arena + off, sr->arena_tags + off, ops[r][i].bytes, 0};
      for (size_t b = 0; b < ops[r][i].bytes; b++)
        sr->bufs[i].data[b] = ops[r][i].is_send ? p2p_byte(r, ops[r][i].peer, knum[r][i], b) : 0xee;
    }
  }
  sim_run(&s);
  for (int r = 0; r < c->n; r++)
    for (int i = 0; i < nops[r]; i++) {
      const struct weft_p2p *o = &ops[r][i];
      int a = o->is_send ? r : o->peer, b = o->is_send ? o->peer : r;
      for (size_t x = 0; x < o->bytes; x++)
        EXPECT(s.r[r].bufs[i].data[x] == p2p_byte(a, b, knum[r][i], x),
               "n=%d rank %d op %d (%s peer %d) byte %zu wrong", c->n, r, i,
               o->is_send ? "send" : "recv", o->peer, x);
    }
  sim_free(&s);
}

/* Every pattern with one lane per peer, and cut into 3 parts a peer (the
 * CUDA engine's several CTAs a peer). */
START_TEST(p2p_patterns) {
  int n = _i;
  for (int pat = 0; pat < 10; pat++)
    for (unsigned seed = 1; seed <= 8; seed++) {
      struct p2p_case c = {.n = n, .seed = seed * 7919u + (unsigned)pat, .parts = pat / 5 * 3};
      for (int a = 0; a < n; a++) {
        int nx = (a + 1) % n, pv = (a + n - 1) % n;
        if (pat % 5 == 0) c.cnt[a][nx] = 1;                          /* ring exchange */
        for (int b = 0; pat % 5 == 1 && b < n; b++) c.cnt[a][b] = 1; /* all-to-all */
        if (pat % 5 == 2) c.cnt[a][a] = 2;                           /* self */
        if (pat % 5 == 3) {                                          /* unequal */
          c.cnt[a][nx] += 1 + a % 3;
          c.cnt[a][pv] += 1 + (a + 1) % 2;
          c.cnt[a][a] = a % 2;
        }
        for (int b = 0; pat % 5 == 4 && b < n; b++) c.cnt[a][b] = (int)((a * 5 + b * 3 + seed) % 3);
      }
      p2p_run(&c);
    }
}
END_TEST

/* weft_split: parts tile the total, start on a grain, differ by at most
 * one grain, and the last takes what is short of a grain. */
START_TEST(split_grains) {
  const size_t grains[] = {1, 4, 16};
  for (size_t gi = 0; gi < sizeof(grains) / sizeof(grains[0]); gi++)
    for (int n = 1; n <= 7; n++)
      for (size_t total = 0; total <= 300; total++) {
        size_t g = grains[gi], at = 0, lo = SIZE_MAX, hi = 0;
        for (int c = 0; c < n; c++) {
          size_t off, len;
          weft_split(total, n, c, g, &off, &len);
          EXPECT(off == at, "split %zu/%d grain %zu: part %d at %zu, not %zu", total, n, g, c, off,
                 at);
          EXPECT(off % g == 0, "split %zu/%d grain %zu: part %d at %zu", total, n, g, c, off);
          size_t whole = c == n - 1 ? len - total % g : len;
          EXPECT(whole % g == 0, "split %zu/%d grain %zu: part %d of %zu", total, n, g, c, len);
          lo = whole < lo ? whole : lo;
          hi = whole > hi ? whole : hi;
          at += len;
        }
        EXPECT(at == total, "split %zu/%d grain %zu covers %zu", total, n, g, at);
        EXPECT(hi - lo <= g, "split %zu/%d grain %zu: parts of %zu and %zu", total, n, g, lo, hi);
      }
}
END_TEST

/* Offsets of a plan's steps stay 16-byte aligned where no rank's block
 * boundary needs otherwise (AllReduce, Broadcast, Reduce), whatever the
 * count and the channel count: the kernels then use 16-byte vectors. Five
 * channels and three ranks cut 4 Mi floats at odd elements before. */
static void check_aligned(const struct weft_plan *p, const char *what, int nch, int n) {
  for (int i = 0; i < p->nlanes; i++)
    for (size_t k = 0; k < p->lanes[i].nsteps; k++) {
      const struct weft_step *st = &p->lanes[i].steps[k];
      size_t offs[3] = {st->send_off, st->dst_off, st->local_off};
      for (int o = 0; o < 3; o++)
        EXPECT(offs[o] % WEFT_SPLIT_BYTES == 0,
               "%s, %d ranks, %d channels: lane %d step %zu offset %zu is not 16-byte aligned",
               what, n, nch, i, k, offs[o]);
    }
}

START_TEST(steps_aligned) {
  const enum weft_func funcs[] = {WEFT_FUNC_ALLREDUCE, WEFT_FUNC_BROADCAST, WEFT_FUNC_REDUCE};
  const size_t counts[] = {4u << 20, (4u << 20) + 3, 1000003};
  int ring[MAXR];
  for (int n = 2; n <= 5; n++) {
    make_ring(n, 1, ring);
    for (int nch = 1; nch <= 7; nch++)
      for (size_t f = 0; f < sizeof(funcs) / sizeof(funcs[0]); f++)
        for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
          for (int tree = 0; tree < 2; tree++) {
            if (tree && funcs[f] != WEFT_FUNC_ALLREDUCE) continue;
            for (int r = 0; r < n; r++) {
              struct weft_sched_args a = {.func = funcs[f],
                                          .rank = r,
                                          .nranks = n,
                                          .root = n - 1,
                                          .count = counts[k],
                                          .elem_size = 4,
                                          .nchannels = nch,
                                          .chunk_bytes = 128 << 10,
                                          .ring = ring};
              struct weft_plan p;
              ck_assert_int_eq(tree ? weft_tree_plan(&a, &p) : weft_ring_plan(&a, &p), ncclSuccess);
              check_aligned(&p, weft_func_name(funcs[f]), nch, n);
              weft_plan_free(&p);
            }
          }
  }
}
END_TEST

/* Many channels over small lanes, the chunk a channel's share (what
 * NCCL_MIN_NCHANNELS=16 gives a call of 24-256 KiB, and what the CUDA
 * engine's middle sizes gain from: docs/PERFORMANCE.md, "Ninth pass"):
 * every ring collective, and the tree's AllReduce on a quarter of the
 * lanes, land right at 16 channels with lanes from 1.5 KiB, and with
 * counts that do not split evenly. */
START_TEST(many_channels) {
  const size_t counts[] = {32768, 6151, (size_t)32768 * 2 + 5};
  const int ns[] = {2, 3, 8};
  int ring[MAXR];
  unsigned seed = 7;
  for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
    int n = ns[ni];
    make_ring(n, 1, ring);
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
      for (size_t f = 0; f < sizeof(ring_funcs) / sizeof(ring_funcs[0]); f++)
        for (int tree = 0; tree < 2; tree++) {
          if (tree && ring_funcs[f] != WEFT_FUNC_ALLREDUCE) continue;
          int nch = tree ? 4 : 16;
          struct coll_case c = {.func = ring_funcs[f],
                                .tree = tree,
                                .n = n,
                                .ring = ring,
                                .nch = nch,
                                .chunk_bytes = (counts[k] * 4 + (size_t)nch - 1) / (size_t)nch,
                                .count = counts[k],
                                .es = 4,
                                .inplace = (int)(k & 1),
                                .avg = is_reduction(ring_funcs[f]),
                                .root = n - 1,
                                .seed = seed++};
          coll_run(&c);
        }
  }
}
END_TEST

START_TEST(edges) {
  int ring[2] = {0, 1};
  struct weft_plan p;
  struct weft_sched_args a = {.func = WEFT_FUNC_ALLREDUCE,
                              .rank = 0,
                              .nranks = 2,
                              .count = 0,
                              .elem_size = 4,
                              .nchannels = 2,
                              .chunk_bytes = 64,
                              .ring = ring};
  ck_assert_int_eq(weft_ring_plan(&a, &p), ncclSuccess);
  ck_assert_int_eq(p.nlanes, 0);
  weft_plan_free(&p);
  ck_assert_int_eq(weft_tree_plan(&a, &p), ncclSuccess);
  ck_assert_int_eq(p.nlanes, 0);
  /* A rank that is not in the ring, and a bad root, are internal errors. */
  a.count = 10;
  a.rank = 2;
  ck_assert_int_eq(weft_ring_plan(&a, &p), ncclInternalError);
  a.rank = 0;
  a.func = WEFT_FUNC_REDUCE;
  a.root = 5;
  ck_assert_int_eq(weft_ring_plan(&a, &p), ncclInternalError);
  ck_assert_int_eq(weft_tree_plan(&a, &p), ncclInternalError);
  /* A send to self with no receive from self can never complete. */
  struct weft_p2p ops[2] = {{.peer = 1, .is_send = 1, .bytes = 8},
                            {.peer = 1, .is_send = 0, .bytes = 8}};
  ck_assert_int_eq(weft_p2p_plan(1, ops, 1, &p), ncclInvalidUsage);
  ck_assert_int_eq(weft_p2p_plan(1, ops + 1, 1, &p), ncclInvalidUsage);
  ck_assert_int_eq(weft_p2p_plan(1, ops, 0, &p), ncclSuccess);
  ck_assert_int_eq(p.nlanes, 0);
  /* Self send/recv of different sizes copy the smaller. */
  ops[1].bytes = 4;
  ck_assert_int_eq(weft_p2p_plan(1, ops, 2, &p), ncclSuccess);
  ck_assert_int_eq(p.nlanes, 1);
  ck_assert_int_eq(p.lanes[0].nsteps, 1);
  ck_assert_uint_eq(p.lanes[0].steps[0].flags, WEFT_STEP_LOCAL);
  ck_assert_uint_eq(p.lanes[0].steps[0].recv_bytes, 4);
  ck_assert_uint_eq(p.lanes[0].steps[0].dst_buf, 1);
  ck_assert_uint_eq(p.lanes[0].steps[0].local_buf, 0);
  weft_plan_free(&p);
  ck_assert_str_eq(weft_func_name(WEFT_FUNC_REDUCESCATTER), "ReduceScatter");
  ck_assert_str_eq(weft_func_name(WEFT_FUNC_COUNT), "Unknown");
}
END_TEST

static Suite *schedule_suite(void) {
  Suite *s = suite_create("schedule");
  TCase *tc = tcase_create("simulator");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, edges);
  tcase_add_test(tc, split_grains);
  tcase_add_test(tc, steps_aligned);
  tcase_add_test(tc, many_channels);
  tcase_add_test(tc, tree_shape);
  tcase_add_loop_test(tc, ring_collectives, 1, MAXR + 1);
  tcase_add_loop_test(tc, tree_allreduce, 1, MAXR + 1);
  tcase_add_loop_test(tc, p2p_patterns, 1, MAXR + 1);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return suite_run(schedule_suite());
}
