/* Unit tests of src/sched/ring.c: a single-process simulator runs every
 * rank's ring all-reduce schedule against in-memory buffers, with one FIFO
 * of messages per ring link, and checks the result, that each step's
 * counts match on both ends, that nothing deadlocks or is left unread, and
 * that the POSTOP (avg's divide) lands exactly once per element, on a fully
 * reduced value. Needs ring.c, debug.c and param.c. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/schedule.h"

/* Check's asserts talk to the runner on every call; the simulator's loops
 * call it only on failure. */
#define EXPECT(cond, ...)                   \
  do {                                      \
    if (!(cond)) ck_abort_msg(__VA_ARGS__); \
  } while (0)

/* Added by POSTOP; the result must carry it exactly once. */
#define POSTOP_MARK 0x40000000u

struct msg {
  size_t count;
  uint32_t *data;
  struct msg *next;
};

struct link {
  struct msg *head, *tail;
};

struct sim_rank {
  uint32_t *in, *out;
  struct weft_schedule sched;
  size_t pc;
  int sent; /* the current step's send is done */
};

struct sim {
  int n;
  size_t count;
  struct sim_rank *r;
  struct link *links; /* links[p]: p -> p+1 */
  uint32_t *expect;   /* the sum over ranks */
  uint8_t *postops;   /* POSTOPs seen per element, over all ranks */
};

static uint32_t input_value(int rank, size_t i) {
  uint32_t x = (uint32_t)(i * 2654435761u) ^ (uint32_t)(rank * 40503u + 17u);
  return x & 0x3fffffffu;
}

static void link_push(struct link *l, const uint32_t *src, size_t count) {
  struct msg *m = malloc(sizeof(*m));
  m->count = count;
  m->data = malloc(count * sizeof(uint32_t));
  memcpy(m->data, src, count * sizeof(uint32_t));
  m->next = NULL;
  if (l->tail)
    l->tail->next = m;
  else
    l->head = m;
  l->tail = m;
}

static struct msg *link_pop(struct link *l) {
  struct msg *m = l->head;
  if (m) {
    l->head = m->next;
    if (l->head == NULL) l->tail = NULL;
  }
  return m;
}

static void sim_postop(struct sim *s, uint32_t *out, size_t off, size_t count, int p) {
  for (size_t i = 0; i < count; i++) {
    EXPECT(out[off + i] == s->expect[off + i],
           "rank %d: POSTOP on element %zu before the "
           "reduction completed (%u, want %u)",
           p, off + i, out[off + i], s->expect[off + i]);
    out[off + i] += POSTOP_MARK;
    s->postops[off + i]++;
  }
}

static int ranges_overlap(size_t a, size_t b, size_t n) {
  return a < b + n && b < a + n;
}

/* Receives and applies step st of rank p if its data has arrived. */
static int sim_recv(struct sim *s, int p, const struct weft_step *st) {
  struct sim_rank *r = &s->r[p];
  int prev = (p - 1 + s->n) % s->n;
  EXPECT(st->recv_peer == prev, "rank %d: receives from %d, not its ring predecessor %d", p,
         st->recv_peer, prev);
  struct msg *m = link_pop(&s->links[prev]);
  if (m == NULL) return 0;
  EXPECT(m->count == st->count, "rank %d step %zu: %zu elements arrived, %zu expected", p, r->pc,
         m->count, st->count);
  EXPECT(st->recv_off + st->count <= s->count, "rank %d: receive past the end", p);
  EXPECT((st->flags & (WEFT_STEP_REDUCE | WEFT_STEP_COPY)) != 0, "rank %d: RECV with no use", p);
  const uint32_t *local = st->local_buf == WEFT_BUF_IN ? r->in : r->out;
  for (size_t i = 0; i < st->count; i++) {
    size_t k = st->recv_off + i;
    r->out[k] = (st->flags & WEFT_STEP_REDUCE) ? local[k] + m->data[i] : m->data[i];
  }
  if (st->flags & WEFT_STEP_POSTOP) sim_postop(s, r->out, st->recv_off, st->count, p);
  free(m->data);
  free(m);
  return 1;
}

/* Runs as much of rank p's schedule as the data allows; returns 1 if it
 * moved at all. */
static int sim_advance(struct sim *s, int p) {
  struct sim_rank *r = &s->r[p];
  int moved = 0;
  while (r->pc < r->sched.nsteps) {
    const struct weft_step *st = &r->sched.steps[r->pc];
    EXPECT(st->count > 0, "rank %d step %zu moves nothing", p, r->pc);
    if ((st->flags & WEFT_STEP_SEND) && !r->sent) {
      int next = (p + 1) % s->n;
      EXPECT(st->send_peer == next, "rank %d sends to %d, not %d", p, st->send_peer, next);
      EXPECT(st->send_off + st->count <= s->count, "rank %d: send past the end", p);
      const uint32_t *src = st->send_buf == WEFT_BUF_IN ? r->in : r->out;
      /* A send and a receive of one step run at once: they must not touch
       * the same elements of one buffer. */
      if ((st->flags & WEFT_STEP_RECV) && (src == r->out || r->in == r->out))
        EXPECT(!ranges_overlap(st->send_off, st->recv_off, st->count),
               "rank %d step %zu sends the slice it receives into", p, r->pc);
      link_push(&s->links[p], src + st->send_off, st->count);
      r->sent = 1;
      moved = 1;
    }
    if (st->flags & WEFT_STEP_LOCAL) {
      EXPECT(s->n == 1, "LOCAL step with %d ranks", s->n);
      if (r->in != r->out) memcpy(r->out + st->recv_off, r->in + st->recv_off, st->count * 4);
      if (st->flags & WEFT_STEP_POSTOP) sim_postop(s, r->out, st->recv_off, st->count, p);
    } else if (st->flags & WEFT_STEP_RECV) {
      if (!sim_recv(s, p, st)) return moved;
    }
    r->pc++;
    r->sent = 0;
    moved = 1;
  }
  return moved;
}

static void sim_run(int n, size_t count, size_t chunk, int in_place) {
  struct sim s = {.n = n, .count = count};
  s.r = calloc((size_t)n, sizeof(*s.r));
  s.links = calloc((size_t)n, sizeof(*s.links));
  s.expect = calloc(count + 1, sizeof(uint32_t));
  s.postops = calloc(count + 1, 1);
  for (int p = 0; p < n; p++) {
    struct sim_rank *r = &s.r[p];
    r->in = malloc((count + 1) * sizeof(uint32_t));
    r->out = in_place ? r->in : malloc((count + 1) * sizeof(uint32_t));
    for (size_t i = 0; i < count; i++) {
      r->in[i] = input_value(p, i);
      s.expect[i] += r->in[i];
      if (!in_place) r->out[i] = 0xdeadbeefu; /* poison */
    }
    ncclResult_t res =
        weft_ring_schedule_allreduce(p, n, (p - 1 + n) % n, (p + 1) % n, count, chunk, &r->sched);
    ck_assert_int_eq(res, ncclSuccess);
    if (count == 0) ck_assert_uint_eq(r->sched.nsteps, 0);
  }
  for (;;) {
    int moved = 0, done = 1;
    for (int p = 0; p < n; p++) {
      moved |= sim_advance(&s, p);
      done &= s.r[p].pc == s.r[p].sched.nsteps;
    }
    if (done) break;
    EXPECT(moved, "n=%d count=%zu chunk=%zu: deadlock", n, count, chunk);
  }
  for (int p = 0; p < n; p++) {
    EXPECT(s.links[p].head == NULL, "n=%d count=%zu: unread data on link %d", n, count, p);
    for (size_t i = 0; i < count; i++)
      EXPECT(s.r[p].out[i] == s.expect[i] + POSTOP_MARK,
             "n=%d count=%zu chunk=%zu %s: rank %d element %zu is %u, want %u", n, count, chunk,
             in_place ? "in-place" : "out-of-place", p, i, s.r[p].out[i],
             s.expect[i] + POSTOP_MARK);
  }
  for (size_t i = 0; i < count; i++)
    EXPECT(s.postops[i] == 1, "element %zu got %d POSTOPs", i, s.postops[i]);
  for (int p = 0; p < n; p++) {
    weft_schedule_free(&s.r[p].sched);
    if (!in_place) free(s.r[p].out);
    free(s.r[p].in);
  }
  free(s.r), free(s.links), free(s.expect), free(s.postops);
}

START_TEST(small_counts) {
  int n = _i;
  size_t counts[] = {0, 1, 2, 7, (size_t)n - 1, (size_t)n, (size_t)n + 1, 2 * (size_t)n + 3, 100};
  size_t chunks[] = {0, 1, 2, 3, 1000};
  for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
    for (size_t k = 0; k < sizeof(chunks) / sizeof(chunks[0]); k++)
      for (int inp = 0; inp < 2; inp++) sim_run(n, counts[c], chunks[k], inp);
}
END_TEST

START_TEST(large_count) {
  int n = _i;
  size_t chunks[] = {0, 4099, 65536};
  for (size_t k = 0; k < sizeof(chunks) / sizeof(chunks[0]); k++)
    for (int inp = 0; inp < 2; inp++) sim_run(n, 1000003, chunks[k], inp);
}
END_TEST

START_TEST(shape) {
  struct weft_schedule s;
  /* One rank: a single local copy that also finishes avg. */
  ck_assert_int_eq(weft_ring_schedule_allreduce(0, 1, 0, 0, 10, 4, &s), ncclSuccess);
  ck_assert_uint_eq(s.nsteps, 1);
  ck_assert_uint_eq(s.steps[0].flags, WEFT_STEP_LOCAL | WEFT_STEP_POSTOP);
  ck_assert_uint_eq(s.steps[0].count, 10);
  weft_schedule_free(&s);
  /* One round of 2(n-1) steps; the first send is from the input. */
  ck_assert_int_eq(weft_ring_schedule_allreduce(2, 4, 1, 3, 400, 0, &s), ncclSuccess);
  ck_assert_uint_eq(s.nsteps, 6);
  ck_assert_uint_eq(s.steps[0].send_buf, WEFT_BUF_IN);
  ck_assert_uint_eq(s.steps[0].send_off, 100); /* slice 1 */
  ck_assert_uint_eq(s.steps[0].recv_off, 0);   /* slice 0 */
  ck_assert(s.steps[2].flags & WEFT_STEP_POSTOP);
  ck_assert_uint_eq(s.steps[2].recv_off, 200); /* its own slice */
  ck_assert(s.steps[3].flags & WEFT_STEP_COPY);
  for (size_t i = 1; i < s.nsteps; i++) ck_assert_uint_eq(s.steps[i].send_buf, WEFT_BUF_OUT);
  weft_schedule_free(&s);
  /* Bad positions are refused. */
  ck_assert_int_ne(weft_ring_schedule_allreduce(4, 4, 3, 0, 10, 0, &s), ncclSuccess);
  weft_schedule_free(NULL);
}
END_TEST

static Suite *ring_suite(void) {
  Suite *s = suite_create("ring_schedule");
  TCase *tc = tcase_create("simulator");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, shape);
  tcase_add_loop_test(tc, small_counts, 1, 9);
  tcase_add_loop_test(tc, large_count, 1, 9);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(ring_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
