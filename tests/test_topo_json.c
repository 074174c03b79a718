/* Runs weft-topo --json on a topology XML and checks the document: valid
 * JSON, with gpus and nics lists and paths.gpu_gpu (N x N, "LOC" on the
 * diagonal) and paths.gpu_nic (N x M). Written in C because CI machines
 * need not have python.
 * usage: test_topo_json WEFT_TOPO FILE.xml NGPUS NNICS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jv { /* a parsed JSON value */
  char type; /* o(bject) a(rray) s(tring) n(umber) l(iteral) */
  char *str; /* string value */
  char *key; /* the key, when inside an object */
  struct jv **kids;
  int nkids;
};

static const char *p;

static void fail(const char *why) {
  fprintf(stderr, "test_topo_json: %s near '%.30s'\n", why, p ? p : "");
  exit(1);
}

static void ws(void) {
  while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
}

static char *string(void) {
  if (*p != '"') fail("expected a string");
  const char *s = ++p;
  while (*p && *p != '"') p += *p == '\\' ? 2 : 1;
  if (*p != '"') fail("unterminated string");
  char *out = strndup(s, (size_t)(p++ - s));
  return out;
}

static struct jv *value(int depth);

static void add(struct jv *v, struct jv *kid) {
  v->kids = realloc(v->kids, (size_t)(v->nkids + 1) * sizeof(*v->kids));
  v->kids[v->nkids++] = kid;
}

static struct jv *container(char open, char close, int depth) {
  struct jv *v = calloc(1, sizeof(*v));
  v->type = open == '{' ? 'o' : 'a';
  p++;
  ws();
  if (*p == close) return p++, v;
  for (;;) {
    char *key = NULL;
    ws();
    if (v->type == 'o') {
      key = string();
      ws();
      if (*p++ != ':') fail("expected ':'");
    }
    struct jv *kid = value(depth + 1);
    kid->key = key;
    add(v, kid);
    ws();
    if (*p == ',') { p++; continue; }
    if (*p++ != close) fail("expected ',' or a closing bracket");
    return v;
  }
}

static struct jv *value(int depth) {
  if (depth > 32) fail("nested too deep");
  ws();
  if (*p == '{') return container('{', '}', depth);
  if (*p == '[') return container('[', ']', depth);
  struct jv *v = calloc(1, sizeof(*v));
  if (*p == '"') {
    v->type = 's';
    v->str = string();
  } else if (strchr("-0123456789", *p) && *p) {
    v->type = 'n';
    strtod(p, (char **)&p);
  } else if (!strncmp(p, "true", 4) || !strncmp(p, "null", 4)) {
    v->type = 'l', p += 4;
  } else if (!strncmp(p, "false", 5)) {
    v->type = 'l', p += 5;
  } else {
    fail("not a JSON value");
  }
  return v;
}

static struct jv *get(const struct jv *o, const char *key) {
  for (int i = 0; o && o->type == 'o' && i < o->nkids; i++)
    if (!strcmp(o->kids[i]->key, key)) return o->kids[i];
  fprintf(stderr, "test_topo_json: key '%s' missing\n", key);
  exit(1);
}

static void jv_free(struct jv *v) {
  for (int i = 0; i < v->nkids; i++) jv_free(v->kids[i]);
  free(v->kids);
  free(v->str);
  free(v->key);
  free(v);
}

static void matrix(const struct jv *m, int rows, int cols, int diag_loc) {
  if (m->type != 'a' || m->nkids != rows) fail("matrix has the wrong number of rows");
  for (int i = 0; i < rows; i++) {
    const struct jv *r = m->kids[i];
    if (r->type != 'a' || r->nkids != cols) fail("matrix row has the wrong length");
    for (int j = 0; j < cols; j++) {
      if (r->kids[j]->type != 's') fail("path type is not a string");
      if (diag_loc && (i == j) != !strcmp(r->kids[j]->str, "LOC")) fail("LOC must be the diagonal");
    }
  }
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: test_topo_json WEFT_TOPO FILE.xml NGPUS NNICS\n");
    return 2;
  }
  char cmd[4096], *doc = NULL;
  size_t len = 0;
  snprintf(cmd, sizeof(cmd), "'%s' --json --topo-file '%s'", argv[1], argv[2]);
  FILE *f = popen(cmd, "r");
  if (f == NULL) return 1;
  FILE *mem = open_memstream(&doc, &len);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) fwrite(buf, 1, n, mem);
  fclose(mem);
  if (pclose(f) != 0) fail("weft-topo --json failed");
  p = doc;
  struct jv *root = value(0);
  ws();
  if (*p) fail("text after the JSON document");
  int ng = atoi(argv[3]), nn = atoi(argv[4]);
  if (get(root, "gpus")->type != 'a' || get(root, "gpus")->nkids != ng) fail("gpus: wrong list");
  if (get(root, "nics")->type != 'a' || get(root, "nics")->nkids != nn) fail("nics: wrong list");
  matrix(get(get(root, "paths"), "gpu_gpu"), ng, ng, 1);
  matrix(get(get(root, "paths"), "gpu_nic"), ng, nn, 0);
  get(root, "ring");
  jv_free(root);
  free(doc);
  printf("weft-topo --json on %s: %d GPUs, %d NICs, keys and shapes as expected\n", argv[2], ng, nn);
  return 0;
}
