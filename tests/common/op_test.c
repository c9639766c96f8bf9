/* op_test.c - what the GPU tests of the ops share (op_test.h). */
#include "op_test.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const scree__op *scree_test_op_setup(const char *name, scree_context **ctx, CUstream *stream) {
  *ctx = scree_test_gpu_context();
  scree__ctx_enter(*ctx);
  if ((*ctx)->cu->StreamCreate(stream, CU_STREAM_NON_BLOCKING)) {
    fprintf(stderr, "cuStreamCreate failed\n");
    exit(1);
  }
  const scree__op *op = scree__op_find(name);
  if (!op) {
    fprintf(stderr, "no op %s\n", name);
    exit(1);
  }
  return op;
}

scree_context *scree_test_validating_context(void) {
  scree_options o;
  scree_options_init(&o);
  o.disable_cache = 1;
  o.validate = 1;
  scree_context *vctx;
  char why[512];
  ck_assert_msg(scree_create(&o, &vctx, why, sizeof why) == SCREE_OK, "%s", why);
  return vctx;
}

uint64_t scree_test_calls(scree_context *ctx) {
  scree_counters c;
  scree_get_counters(ctx, &c);
  return c.calls;
}

void scree_test_check_guard(scree_context *ctx, scree_devptr p, size_t n, const char *buffer) {
  unsigned char *g = malloc(n);
  scree_test_d2h(ctx, g, p, n);
  size_t i = 0;
  while (i < n && g[i] == 0xff) i++;
  free(g);
  ck_assert_msg(i == n, "byte %zu past the end of %s was written", i, buffer);
}

void scree_test_compare_rows(const void *got, const void *want, scree_dtype dtype, int64_t rows,
                             int64_t cols, int64_t stride, double rtol, double atol,
                             const char *buffer, const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  const size_t e = scree_dtype_size(dtype);
  size_t bad = 0, worst = 0;
  for (int64_t r = 0; r < rows && !bad; r++) {
    const char *g = (const char *)got + (size_t)(r * stride) * e;
    const char *w = (const char *)want + (size_t)(r * stride) * e;
    bad = scree__compare(g, w, dtype, (size_t)cols, rtol, atol, &worst);
    if (bad) worst += (size_t)(r * stride);
    if (stride > cols)
      ck_assert_msg(!memcmp(g + (size_t)cols * e, w + (size_t)cols * e, (size_t)(stride - cols) * e),
                    "%s: row %lld of %s: padding written", what, (long long)r, buffer);
  }
  ck_assert_msg(bad == 0, "%s: %s: %zu bad in a row, e.g. [%zu] got %.8g want %.8g", what, buffer,
                bad, worst, scree__load_elem(got, dtype, worst),
                scree__load_elem(want, dtype, worst));
}

void scree_test_make(scree_context *ctx, const scree__op *op, const scree__variant *var,
                     const void *args, const scree__lens *lens, scree__run *r) {
  const scree_status st = scree__run_make(ctx, op, var, args, 1, scree_test_rand(), lens, r);
  char vs[128];
  scree__variant_str(op, var, vs, sizeof vs);
  ck_assert_msg(st == SCREE_OK, "%s %s: %s", op->name, vs, scree_last_error(ctx));
}

static void check_run(scree_context *ctx, scree__run *r, scree__runner runner, void *user,
                      CUstream stream, const char *fmt, va_list ap) {
  char why[1024], what[512];
  vsnprintf(what, sizeof what, fmt, ap);
  const scree_status st = scree__run_check(ctx, r, runner, user, stream, 60000, why, sizeof why);
  ck_assert_msg(st == SCREE_OK, "%s, %s: %s", what, r->p.desc, why);
}

void scree_test_check_run(scree_context *ctx, scree__run *r, scree__runner runner, void *user,
                          CUstream stream, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  check_run(ctx, r, runner, user, stream, fmt, ap);
  va_end(ap);
}

void scree_test_check_public(scree_context *ctx, const scree__op *op, const scree__variant *var,
                             const void *args, const scree__lens *lens, CUstream stream,
                             const char *fmt, ...) {
  scree__run r;
  scree_test_make(ctx, op, var, args, lens, &r);
  va_list ap;
  va_start(ap, fmt);
  check_run(ctx, &r, scree__run_config_api, (void *)op, stream, fmt, ap);
  va_end(ap);
  scree__run_free(ctx, &r);
}

void scree_test_check_config(scree_context *ctx, scree__run *r, const scree__op *op,
                             const scree__config *cfg, const scree__variant *var,
                             CUstream stream, const char *fmt, ...) {
  char what[512], cs[128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  scree__config_str(op, cfg, cs, sizeof cs);
  scree__kernel k;
  const scree_status st = scree__kernel_get(ctx, op, cfg, var, &k);
  ck_assert_msg(st == SCREE_OK, "%s %s: %s", cs, what, scree_last_error(ctx));
  scree__config_runner cr = {op, cfg, var, &k};
  scree_test_check_run(ctx, r, scree__run_config, &cr, stream, "%s %s", cs, what);
}

typedef struct compile_job {
  scree_context *ctx;
  const scree__op *op;
  const scree__config *cfgs;
  const scree__variant *var;
  scree_status worst;
} compile_job;

static void compile_one(void *p, int i) {
  compile_job *j = p;
  scree__kernel k;
  const scree_status st = scree__kernel_get(j->ctx, j->op, &j->cfgs[i], j->var, &k);
  if (st != SCREE_OK) j->worst = st;
}

scree__config *scree_test_checked_space(scree_context *ctx, const scree__op *op,
                                        const scree__variant *var, size_t *n) {
  const int total = scree__config_space(op, NULL, 0);
  scree__config *cfgs = calloc((size_t)total, sizeof *cfgs);
  scree__config_space(op, cfgs, total);
  scree__target t;
  scree__target_of(ctx, &t);
  *n = 0;
  for (int i = 0; i < total; i++)
    if (scree__config_check(op, &cfgs[i], var, &t, NULL, 0)) cfgs[(*n)++] = cfgs[i];
  compile_job j = {ctx, op, cfgs, var, SCREE_OK};
  scree__parallel_for((int)*n, 16, compile_one, &j);
  ck_assert_msg(j.worst == SCREE_OK, "compile/load: %s: %s", scree_status_name(j.worst),
                scree_last_error(ctx));
  return cfgs;
}

scree__config scree_test_config(scree_context *ctx, const scree__op *op, const char *text,
                                const scree__variant *var) {
  scree__config c;
  char why[256];
  ck_assert_msg(scree__config_parse(op, text, &c, why, sizeof why) == 0, "%s", why);
  scree__target t;
  scree__target_of(ctx, &t);
  ck_assert_msg(scree__config_check(op, &c, var, &t, why, sizeof why), "%s: %s", text, why);
  return c;
}

const scree__sl_entry *scree_test_next_safelisted(scree_context *ctx, const scree__op *op, int *e,
                                                  scree__variant *var) {
  const scree__safelist *sl = ctx->safelist;
  if (!sl) {
    if (*e < 0) printf("no safelist for %s\n", ctx->arch);
    *e = 0;
    return NULL;
  }
  while (++*e < sl->n) {
    const scree__sl_entry *en = &sl->entries[*e];
    if (en->op != op || en->verb == SCREE__SL_DENY) continue;
    if (strcmp(en->dtype, "*"))
      ck_assert_int_eq(scree__variant_parse(op, en->dtype, var, NULL, 0), 0);
    else
      scree__variant_example(op, var);
    return en;
  }
  return NULL;
}

int scree_test_check_safelisted(scree_context *ctx, const scree__op *op, CUstream stream,
                                int (*shape)(const scree__config *cfg, int i, void *args)) {
  int ran = 0, e = -1;
  scree__variant var;
  for (const scree__sl_entry *en; (en = scree_test_next_safelisted(ctx, op, &e, &var));) {
    _Alignas(16) unsigned char args[SCREE__ARGS_MAX] = {0};
    for (int i = 0; shape(&en->cfg, i, args); i++, memset(args, 0, sizeof args)) {
      char sh[256];
      scree__shape_str(op, args, sh, sizeof sh);
      scree__run r;
      scree_test_make(ctx, op, &var, args, NULL, &r);
      scree__config c = en->cfg;
      if (op->impls[c.impl].adapt) op->impls[c.impl].adapt(&c, &var, args);
      scree_test_check_config(ctx, &r, op, &c, &var, stream, "(line %d) %s", en->line, sh);
      scree__run_free(ctx, &r);
      ran++;
    }
  }
  return ran;
}

/* ---- the packed-sequence ops ----------------------------------------------- */

const int64_t scree_test_lens_edge[21] = {0,   1,   2,   15,  16,  17, 31, 33, 63,   64, 65,
                                          127, 128, 129, 255, 256, 257, 0, 3,  1000, 7};
const int64_t scree_test_lens_small[5] = {0, 1, 3, 40, 17};
const int64_t scree_test_lens_long[3] = {5000, 7, 1};
const int64_t scree_test_lens_one[1] = {1};

int64_t *scree_test_short_lens(int n) {
  int64_t *l = malloc(sizeof *l * (size_t)n);
  ck_assert_ptr_nonnull(l);
  for (int i = 0; i < n; i++) l[i] = (int64_t)(scree_test_rand() % 6);
  return l;
}

int32_t *scree_test_cu_seqlens(const int64_t *lens, int n, int64_t *maxlen) {
  int32_t *cu = malloc(sizeof *cu * (size_t)(n + 1));
  ck_assert_ptr_nonnull(cu);
  cu[0] = 0;
  *maxlen = 0;
  for (int i = 0; i < n; i++) {
    cu[i + 1] = cu[i] + (int32_t)lens[i];
    if (lens[i] > *maxlen) *maxlen = lens[i];
  }
  return cu;
}

scree_status scree_test_run_adapted(void *user, scree_context *ctx, const void *args,
                                    CUstream stream) {
  const scree__config_runner *u = user;
  scree__config c = *u->cfg;
  u->op->impls[c.impl].adapt(&c, u->var, args);
  return scree__run_exact(ctx, u->op, &c, u->var, args, stream);
}
