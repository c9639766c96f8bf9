/* admin_tune.c - the administration interface (admin.h), the side that
 * runs kernels or decides what to run: prewarm tasks (from shapes, model
 * presets, shapes files and misses), tuning one task, verify, the demo and
 * the tuning worker. admin.c has the cache side. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/admin.h"
#include "api/api.h"
#include "ops/presets.h"
#include "tuner/worker.h"

#define set_why scree__set_why

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- prewarm tasks ----------------------------------------------------------- */

/* The shape fields that text ("rows=16000,cols=4096", already parsed by
 * scree__shape_parse) does not give, comma-separated in missing; how
 * many. */
static int missing_fields(const scree__op *op, const char *text, char *missing, size_t size) {
  int n = 0;
  size_t used = 0;
  missing[0] = 0;
  for (int f = 0; f < op->nargs; f++) {
    if (!(op->args[f].flags & SCREE__SHAPE)) continue;
    const char *name = op->args[f].name;
    const size_t len = strlen(name);
    int given = 0;
    for (const char *p = text; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
      if (!strncmp(p, name, len) && p[len] == '=') given = 1;
    if (given) continue;
    if (used < size)
      used += (size_t)snprintf(missing + used, size - used, "%s%s", n ? ", " : "", name);
    n++;
  }
  return n;
}

/* The variant of a shape: every dtype field at dt and every other field
 * from the shape field of the same name, or the op's example value. */
static void shape_variant(const scree__op *op, const void *args, scree_dtype dt,
                          scree__variant *var) {
  scree__variant_example(op, var);
  for (int i = 0; i < op->nvfields; i++) {
    if (op->vfields[i].is_dtype) {
      var->v[i] = dt;
      continue;
    }
    const scree__arg *f = scree__shape_field(op, op->vfields[i].name);
    if (f) {
      int64_t v;
      memcpy(&v, (const char *)args + f->offset, sizeof v);
      var->v[i] = v > INT32_MAX || v < INT32_MIN ? INT32_MIN : (int)v;
    }
  }
}

/* The op's own argument checks (its validate hook, as the public entry
 * runs them) on a call of this shape and variant: the op's problem
 * builder says which fields are buffers and fills the variant's fields
 * into args; each buffer gets its own fake device address, 2^56 bytes
 * from the next, so that no real shape overlaps another buffer or the
 * end of the address space. Nothing is read through them: the context
 * is offline and does not validate device-side arguments. 0, or -1 with
 * the reason in why. */
static int check_call(const scree__op *op, const void *shape, const scree__variant *var,
                      char *why, size_t why_size) {
  scree__problem *p = calloc(1, sizeof *p);
  if (!p) {
    set_why(why, why_size, "out of memory");
    return -1;
  }
  /* check = 1: the op's small edge-case problem, which builds quickly for
   * any shape; its shape fields are replaced by the call's below. */
  if (op->problem(shape, var, 1, 1, NULL, p, why, why_size)) {
    scree__problem_free(p);
    free(p);
    return -1;
  }
  _Alignas(16) unsigned char args[SCREE__ARGS_MAX];
  memcpy(args, p->args, op->args_size);
  for (int f = 0; f < op->nargs; f++)
    if (op->args[f].flags & SCREE__SHAPE)
      memcpy(args + op->args[f].offset, (const char *)shape + op->args[f].offset,
             sizeof(int64_t));
  for (int b = 0; b < p->nbufs; b++) {
    const scree_devptr addr = (scree_devptr)(b + 1) << 56;
    memcpy(args + p->bufs[b].arg_offset, &addr, sizeof addr);
  }
  scree__problem_free(p);
  free(p);
  scree_context *ctx = scree__context_offline();
  if (!ctx) {
    set_why(why, why_size, "out of memory");
    return -1;
  }
  scree__variant got;
  memset(&got, 0, sizeof got);
  int skip = 0, rc = 0;
  const scree_status st = scree__args_check(ctx, op, args, NULL, &got, &skip);
  if (st) {
    set_why(why, why_size, "%s", scree_last_error(ctx));
    rc = -1;
  } else if (skip) {
    set_why(why, why_size, "a call of this shape has nothing to do");
    rc = -1;
  } else if (memcmp(&got, var, sizeof got)) {
    char want[128], have[128];
    scree__variant_str(op, var, want, sizeof want);
    scree__variant_str(op, &got, have, sizeof have);
    set_why(why, why_size, "a call of this shape has the variant %s, not %s (give --variant, or "
            "a shape of that variant)", have, want);
    rc = -1;
  }
  scree_destroy(ctx);
  return rc;
}

int scree__admin_task_of_shape(const char *op_name, const char *shape, const char *variant,
                               scree_dtype dtype, scree__admin_task *t, char *why,
                               size_t why_size) {
  memset(t, 0, sizeof *t);
  const scree__op *op = scree__op_find(op_name);
  if (!op) {
    set_why(why, why_size, "unknown op %s", op_name);
    return -1;
  }
  _Alignas(16) unsigned char args[SCREE__ARGS_MAX];
  memset(args, 0, sizeof args);
  char err[512], missing[512];
  if (scree__shape_parse(op, shape, args, err, sizeof err)) {
    set_why(why, why_size, "%s", err);
    return -1;
  }
  /* A field left out would be 0, which for some fields is a value of its
   * own (attention's window_left=0 is a window): never guessed. */
  if (missing_fields(op, shape, missing, sizeof missing)) {
    char all[512];
    scree__shape_names(op, all, sizeof all);
    set_why(why, why_size, "%s shape %s: missing %s (a shape gives every field of %s: %s; 0 "
            "where the op reads 0 as not set)", op->name, shape, missing, op->name, all);
    return -1;
  }
  scree__variant var;
  if (variant) {
    if (scree__variant_parse(op, variant, &var, err, sizeof err)) {
      set_why(why, why_size, "--variant: %s", err);
      return -1;
    }
  } else {
    shape_variant(op, args, dtype, &var);
  }
  if (check_call(op, args, &var, err, sizeof err)) {
    set_why(why, why_size, "%s shape %s: %s", op->name, shape, err);
    return -1;
  }
  scree__bucket b;
  scree__bucket_of(op, &var, args, &b);
  snprintf(t->op, sizeof t->op, "%s", op->name);
  scree__bucket_str(op, &b, t->bucket, sizeof t->bucket);
  scree__variant_str(op, &var, t->variant, sizeof t->variant);
  snprintf(t->shape, sizeof t->shape, "%s", shape);
  return 0;
}

/* The key of a task in the set: its bucket, zero-padded. */
typedef struct task_key {
  char op[32], bucket[96], variant[64];
} task_key;

static void key_of(const scree__admin_task *t, task_key *k) {
  memset(k, 0, sizeof *k);
  snprintf(k->op, sizeof k->op, "%s", t->op);
  snprintf(k->bucket, sizeof k->bucket, "%s", t->bucket);
  snprintf(k->variant, sizeof k->variant, "%s", t->variant);
}

/* The set of ts's tasks (rebuilt after a keep); NULL when out of memory. */
static scree__htab *task_index(scree__admin_tasks *ts) {
  if (ts->index) return ts->index;
  scree__htab *h = malloc(sizeof *h);
  if (!h) return NULL;
  scree__htab_init(h, sizeof(task_key), sizeof(int));
  for (int i = 0; i < ts->n; i++) {
    task_key k;
    key_of(&ts->t[i], &k);
    if (!scree__htab_insert(h, &k, &i)) {
      scree__htab_free(h);
      free(h);
      return NULL;
    }
  }
  return ts->index = h;
}

int scree__admin_tasks_add(void *user, const scree__admin_task *t) {
  scree__admin_tasks *ts = user;
  scree__htab *h = task_index(ts);
  if (!h) return ts->failed = 1;
  task_key k;
  key_of(t, &k);
  const int *have = scree__htab_find(h, &k);
  if (have) {
    scree__admin_task *x = &ts->t[*have];
    if (!x->shape[0]) snprintf(x->shape, sizeof x->shape, "%s", t->shape);
    if (t->from_miss && !x->from_miss) {
      x->from_miss = 1;
      x->miss = t->miss;
    }
    return 0;
  }
  if (ts->n == SCREE__ADMIN_MAX_TASKS) return ts->failed = 2, 1;
  if (ts->n == ts->cap) {
    const int cap = ts->cap ? ts->cap * 2 : 64;
    scree__admin_task *n = realloc(ts->t, (size_t)cap * sizeof *n);
    if (!n) return ts->failed = 1;
    ts->t = n;
    ts->cap = cap;
  }
  if (!scree__htab_insert(h, &k, &ts->n)) return ts->failed = 1;
  ts->t[ts->n++] = *t;
  return 0;
}

static void drop_index(scree__admin_tasks *ts) {
  if (ts->index) scree__htab_free(ts->index);
  free(ts->index);
  ts->index = NULL;
}

void scree__admin_tasks_keep(scree__admin_tasks *ts, const unsigned char *keep) {
  int m = 0;
  for (int i = 0; i < ts->n; i++)
    if (keep[i]) ts->t[m++] = ts->t[i];
  ts->n = m;
  drop_index(ts); /* the indices moved */
}

void scree__admin_tasks_free(scree__admin_tasks *ts) {
  drop_index(ts);
  free(ts->t);
  memset(ts, 0, sizeof *ts);
}

typedef struct preset_ctx {
  const scree__preset *p;
  scree_dtype dt;
  int (*fn)(void *user, const scree__admin_task *t);
  void *user;
  char *why;
  size_t why_size;
  int failed;
  int generated; /* p was made from a config file: its lines are not the user's */
} preset_ctx;

/* One call shape of a preset line: a shape the op refuses names its line. */
static int on_preset_shape(void *user, const scree__preset_line *l, const char *shape,
                           const char *variant) {
  preset_ctx *pc = user;
  scree__admin_task t;
  char err[768];
  if (scree__admin_task_of_shape(l->op->name, shape, variant, pc->dt, &t, err, sizeof err)) {
    if (pc->generated)
      set_why(pc->why, pc->why_size, "%s: %s (a call shape of the config's sizes)",
              pc->p->source, err);
    else
      set_why(pc->why, pc->why_size, "model %s: %s:%d: %s", pc->p->name, pc->p->source,
              l->line, err);
    pc->failed = 1;
    return 1;
  }
  return pc->fn(pc->user, &t);
}

/* The tasks of preset p in each dtype: fn for each call shape. */
static scree_status preset_tasks(const scree__preset *p, int generated, const scree_dtype *dtypes,
                                 int ndtypes, int (*fn)(void *user, const scree__admin_task *t),
                                 void *user, char *why, size_t why_size) {
  for (int d = 0; d < ndtypes; d++) {
    preset_ctx pc = {p, dtypes[d], fn, user, why, why_size, 0, generated};
    if (scree__preset_expand(p, dtypes[d], on_preset_shape, &pc) && pc.failed)
      return SCREE_ERROR_PARSE;
  }
  return SCREE_OK;
}

scree_status scree__admin_model_tasks(const char *model, const char *presets_file,
                                      const scree_dtype *dtypes, int ndtypes,
                                      int (*fn)(void *user, const scree__admin_task *t),
                                      void *user, char *why, size_t why_size) {
  scree__presets ps;
  char err[1024];
  scree_status st = scree__presets_load(presets_file, &ps, err, sizeof err);
  if (st) {
    set_why(why, why_size, "presets: %s", err);
    return st;
  }
  const scree__preset *p = scree__preset_find(&ps, model);
  if (!p) {
    set_why(why, why_size, "unknown model %s", model);
    st = SCREE_ERROR_NOT_FOUND;
  }
  if (p) st = preset_tasks(p, 0, dtypes, ndtypes, fn, user, why, why_size);
  scree__presets_free(&ps);
  return st;
}

scree_status scree__admin_hf_config_tasks(const char *path, const scree_dtype *dtypes,
                                          int ndtypes,
                                          int (*fn)(void *user, const scree__admin_task *t),
                                          void *user, char *about, size_t about_size, char *why,
                                          size_t why_size) {
  scree__presets ps;
  scree_status st = scree__hf_config_preset(path, &ps, why, why_size);
  if (!st && about) set_why(about, about_size, "%s", ps.p[0].about);
  if (!st) st = preset_tasks(&ps.p[0], 1, dtypes, ndtypes, fn, user, why, why_size);
  scree__presets_free(&ps);
  return st;
}

scree_status scree__admin_presets(const char *presets_file,
                                  void (*fn)(void *user, const char *name, const char *about),
                                  void *user, char *why, size_t why_size) {
  scree__presets ps;
  char err[1024];
  const scree_status st = scree__presets_load(presets_file, &ps, err, sizeof err);
  if (st) {
    set_why(why, why_size, "presets: %s", err);
    return st;
  }
  for (int k = 0; k < ps.n; k++) fn(user, ps.p[k].name, ps.p[k].about);
  scree__presets_free(&ps);
  return SCREE_OK;
}

/* As many shapes as prewarm takes from one file. */
#define SHAPES_MAX 256

int scree__admin_shapes_file_tasks(const char *path,
                                   int (*fn)(void *user, const scree__admin_task *t),
                                   void *user, char *why, size_t why_size) {
  char err[1024];
  char *text = scree__read_text(path, err, sizeof err);
  if (!text) {
    set_why(why, why_size, "cannot read %s", err);
    return -1;
  }
  long(*shapes)[2] = malloc(SHAPES_MAX * sizeof *shapes);
  if (!shapes) {
    free(text);
    set_why(why, why_size, "out of memory");
    return -1;
  }
  scree_dtype dts[3];
  int ndt = 0;
  const int n = scree__parse_shapes(text, shapes, SHAPES_MAX, dts, 3, &ndt, err, sizeof err);
  free(text);
  int rc = n;
  if (n < 0) {
    set_why(why, why_size, "%s: %s", path, err);
  } else if (n > SHAPES_MAX) {
    set_why(why, why_size, "%s: %d shapes, more than %d", path, n, SHAPES_MAX);
    rc = -1;
  }
  if (!ndt) dts[ndt++] = SCREE_DTYPE_BF16;
  for (int i = 0; rc >= 0 && i < n; i++) {
    if (shapes[i][1] > 65536) {
      set_why(why, why_size, "%s: shape %d has cols %ld > 65536", path, i + 1, shapes[i][1]);
      rc = -1;
      break;
    }
    char shape[96];
    snprintf(shape, sizeof shape, "rows=%ld,cols=%ld", shapes[i][0], shapes[i][1]);
    for (int k = 0; rc >= 0 && k < ndt; k++) {
      scree__admin_task t;
      if (scree__admin_task_of_shape("rmsnorm", shape, NULL, dts[k], &t, err, sizeof err)) {
        set_why(why, why_size, "%s: shape %d: %s", path, i + 1, err);
        rc = -1;
      } else if (fn(user, &t)) {
        break;
      }
    }
  }
  free(shapes);
  return rc;
}

typedef struct miss_ctx {
  int (*fn)(void *user, const scree__admin_task *t);
  void *user;
  int *unreadable;
  char *why;
  size_t why_size;
} miss_ctx;

static int on_miss(void *user, const scree__cmiss *m) {
  miss_ctx *mc = user;
  const scree__op *op = scree__op_find(m->key.op);
  scree__variant var;
  scree__bucket bucket;
  if (!op || scree__variant_parse(op, m->key.dtype, &var, NULL, 0) ||
      scree__bucket_parse(op, m->key.bucket, &bucket, NULL, 0)) {
    if (!(*mc->unreadable)++)
      set_why(mc->why, mc->why_size, "%s %s %s", m->key.op, m->key.bucket, m->key.dtype);
    return 0;
  }
  scree__admin_task t;
  memset(&t, 0, sizeof t);
  snprintf(t.op, sizeof t.op, "%s", op->name);
  scree__bucket_str(op, &bucket, t.bucket, sizeof t.bucket);
  scree__variant_str(op, &var, t.variant, sizeof t.variant);
  snprintf(t.shape, sizeof t.shape, "%s", m->example);
  t.from_miss = 1;
  memcpy(t.miss.op, m->key.op, sizeof t.miss.op);
  memcpy(t.miss.bucket, m->key.bucket, sizeof t.miss.bucket);
  memcpy(t.miss.dtype, m->key.dtype, sizeof t.miss.dtype);
  t.miss.causal = m->key.causal;
  memcpy(t.miss.arch, m->key.arch, sizeof t.miss.arch);
  return mc->fn(mc->user, &t);
}

scree_status scree__admin_miss_tasks(scree__admin_cache *c, const char *arch, const char *op,
                                     int (*fn)(void *user, const scree__admin_task *t),
                                     void *user, int *unreadable, char *why, size_t why_size) {
  *unreadable = 0;
  miss_ctx mc = {fn, user, unreadable, why, why_size};
  const scree_status st = scree__cache_foreach_miss(c, arch, op, on_miss, &mc);
  if (st) scree__cache_last_error(c, why, why_size);
  return st;
}

void scree__admin_task_id(const scree__admin_task *t, char *buf, size_t size) {
  snprintf(buf, size, "%s %s %s", t->op, t->bucket, t->variant);
}

void scree__admin_tune(scree_context *ctx, const scree__admin_task *t,
                       const scree__admin_tune_opts *opt, scree__admin_tuned *out) {
  memset(out, 0, sizeof *out);
  const scree__op *op = scree__op_find(t->op);
  scree__variant var;
  scree__bucket bucket;
  if (!op || scree__variant_parse(op, t->variant, &var, out->why, sizeof out->why) ||
      scree__bucket_parse(op, t->bucket, &bucket, out->why, sizeof out->why)) {
    out->st = SCREE_ERROR_INVALID_ARGUMENT;
    if (!op) set_why(out->why, sizeof out->why, "unknown op %s", t->op);
    snprintf(out->key.op, sizeof out->key.op, "%s", t->op);
    return;
  }
  scree__cache *user = scree__user_cache(ctx);
  scree__ckey key, miss;
  scree__make_key(ctx, op, &var, &bucket, &key);
  memset(&out->key, 0, sizeof out->key);
  memcpy(out->key.op, key.op, sizeof out->key.op);
  memcpy(out->key.bucket, key.bucket, sizeof out->key.bucket);
  memcpy(out->key.dtype, key.dtype, sizeof out->key.dtype);
  out->key.causal = key.causal;
  memcpy(out->key.arch, key.arch, sizeof out->key.arch);
  memcpy(out->key.src_hash, key.src_hash, sizeof out->key.src_hash);
  memset(&miss, 0, sizeof miss);
  memcpy(miss.op, t->miss.op, sizeof miss.op);
  memcpy(miss.bucket, t->miss.bucket, sizeof miss.bucket);
  memcpy(miss.dtype, t->miss.dtype, sizeof miss.dtype);
  miss.causal = t->miss.causal;
  memcpy(miss.arch, t->miss.arch, sizeof miss.arch);
  scree__centry e;
  if (!opt->force && scree__cache_get(user, &key, &e) == SCREE_OK) {
    const int ok = e.cubin_ok;
    if (ok) {
      out->cached = 1;
      out->median_us = e.median_us;
      snprintf(out->config, sizeof out->config, "%s", e.config);
    }
    scree__centry_free(&e);
    if (ok) {
      if (t->from_miss) scree__cache_delete_miss(user, &miss);
      return;
    }
  }
  scree__tune_opts o;
  scree__tune_opts_init(&o);
  o.explore = opt->explore;
  if (opt->reps > 0) o.reps = opt->reps;
  /* Another prewarm, another GPU of this one, or a process tuning on a
   * miss may tune the bucket meanwhile: then its row is taken, unless
   * force. */
  o.reuse_cached = !opt->force;
  o.progress = opt->progress;
  o.user = opt->user;
  scree__tune_result res;
  memset(&res, 0, sizeof res);
  out->st = scree__tune(ctx, op, &var, &bucket, &o, &res);
  if (out->st == SCREE_OK) {
    scree__config_str(op, &res.cfg, out->config, sizeof out->config);
    out->cached = !res.tuned; /* another process or GPU stored it meanwhile */
    if (t->from_miss) scree__cache_delete_miss(user, &miss);
  } else {
    set_why(out->why, sizeof out->why, "%s", scree_last_error(ctx));
  }
  out->median_us = res.median_us;
  out->spread_us = res.spread_us;
  out->default_us = res.default_us;
  out->flops = res.flops;
  out->bytes = res.bytes;
  out->seconds = res.seconds;
  out->candidates = res.candidates;
  out->timed = res.timed;
  out->failed = res.failed;
  out->known_bad = res.known_bad;
  out->compiled = res.compiled;
  out->reused = res.reused;
  snprintf(out->problem, sizeof out->problem, "%s", res.problem);
}

/* ---- verify ------------------------------------------------------------------ */

typedef struct verify_ctx {
  scree_context *ctx;
  const scree__admin_filter *f;
  int retime;
  int (*fn)(void *user, const scree__admin_row *r, const scree__admin_verdict *v);
  void *user;
  scree__admin_verify_counts *n;
  int nvrtc_version, driver_version;
  scree__admin_row row;
  scree__admin_verdict v;
} verify_ctx;

static int verify_entry(void *user, const scree__centry *e) {
  verify_ctx *x = user;
  if (!scree__admin_keeps(x->f, &e->key)) return 0;
  if (strcmp(e->key.arch, x->n->arch)) {
    x->n->other_arch++;
    return 0;
  }
  scree__admin_verdict *v = &x->v;
  memset(v, 0, sizeof *v);
  const scree__op *op = scree__op_find(e->key.op);
  scree__variant var;
  scree__bucket bucket;
  scree__config cfg;
  char why[256];
  double sp = 0;
  if (!op) {
    v->verdict = "unknown op";
  } else if (strcmp(e->key.src_hash, scree__source_hash(op))) {
    v->verdict = "stale";
    x->n->stale++;
  } else if (scree__variant_parse(op, e->key.dtype, &var, NULL, 0) ||
             scree__bucket_parse(op, e->key.bucket, &bucket, NULL, 0) ||
             scree__config_parse(op, e->config, &cfg, why, sizeof why)) {
    v->verdict = "unreadable";
    v->failed = 1;
  } else if (!e->cubin_ok) {
    v->verdict = "cubin hash mismatch";
    v->failed = 1;
  } else {
    /* The cubin is what runs, whichever compiler made it: checking it is
     * the verdict. Another NVRTC or driver is said beside it. */
    v->other_nvrtc = e->nvrtc_version != x->nvrtc_version;
    v->other_driver = (e->sm_count || e->driver_version) && e->driver_version != x->driver_version;
    x->n->other_compiler += v->other_nvrtc || v->other_driver;
    const scree_status st = scree__verify_config(x->ctx, op, &var, &bucket, &cfg, e->cubin,
                                                 x->retime ? &v->now_us : NULL, &sp);
    x->n->checked++;
    if (st) {
      v->verdict = st == SCREE_ERROR_WRONG_ANSWER ? "WRONG" : scree_status_name(st);
      v->failed = 1;
      set_why(v->detail, sizeof v->detail, "%s", scree_last_error(x->ctx));
    } else if (x->retime &&
               v->now_us > e->median_us + fmax(0.10 * e->median_us, 3 * e->spread_us)) {
      v->verdict = "slower";
      x->n->slower++;
    } else {
      v->verdict = "ok";
    }
  }
  x->n->wrong += v->failed;
  scree__admin_row_of(e, 1, &x->row);
  return x->fn ? x->fn(x->user, &x->row, v) : 0;
}

scree_status scree__admin_verify(scree_context *ctx, scree__admin_cache *c,
                                 const scree__admin_filter *f, int retime,
                                 int (*fn)(void *user, const scree__admin_row *r,
                                           const scree__admin_verdict *v),
                                 void *user, scree__admin_verify_counts *counts) {
  memset(counts, 0, sizeof *counts);
  scree_device_info dev;
  scree_context_device(ctx, &dev);
  snprintf(counts->arch, sizeof counts->arch, "%s", dev.arch);
  verify_ctx *x = calloc(1, sizeof *x);
  if (!x) return SCREE_ERROR_OUT_OF_MEMORY;
  x->ctx = ctx;
  x->f = f;
  x->retime = retime;
  x->fn = fn;
  x->user = user;
  x->n = counts;
  x->nvrtc_version = scree__nvrtc_version(ctx);
  scree_runtime_info ri;
  scree_get_runtime_info(&ri);
  x->driver_version = ri.driver_version;
  const scree_status st = scree__cache_foreach_entry(c, f ? f->arch : NULL, f ? f->op : NULL, 1,
                                                     verify_entry, x);
  free(x);
  return st;
}

/* ---- the demo ---------------------------------------------------------------- */

/* 0, or -1 when the case's op, shape or variant text does not parse. */
static int demo_parse(const scree__admin_demo_case *dc, const scree__op **op, void *args,
                      scree__variant *var, char *why, size_t why_size) {
  char err[512];
  *op = scree__op_find(dc->op);
  memset(args, 0, SCREE__ARGS_MAX);
  if (!*op) {
    set_why(why, why_size, "unknown op %s", dc->op);
    return -1;
  }
  if (scree__shape_parse(*op, dc->shape, args, err, sizeof err) ||
      scree__variant_parse(*op, dc->variant, var, err, sizeof err)) {
    set_why(why, why_size, "%s %s %s: %s", dc->op, dc->shape, dc->variant, err);
    return -1;
  }
  return 0;
}

int scree__admin_demo_check(const scree__admin_demo_case *dc, char *why, size_t why_size) {
  const scree__op *op;
  _Alignas(16) unsigned char args[SCREE__ARGS_MAX];
  scree__variant var;
  if (demo_parse(dc, &op, args, &var, why, why_size)) return -1;
  /* A shape of the user's (no lengths given) is checked as prewarm checks
   * one; the built-in cases leave the batch to their lengths. */
  if (!dc->lens) {
    scree__admin_task t;
    return scree__admin_task_of_shape(dc->op, dc->shape, dc->variant, SCREE_DTYPE_FP16, &t, why,
                                      why_size);
  }
  return 0;
}

double scree__admin_copy_gbps(scree_context *ctx) {
  const int pushed = scree__ctx_enter(ctx);
  const double gbps = scree__copy_gbps(ctx);
  scree__ctx_leave(ctx, pushed);
  return gbps;
}

scree_status scree__admin_demo(scree_context *ctx, const scree__admin_demo_case *dc,
                               scree__admin_demo_result *r) {
  memset(r, 0, sizeof *r);
  const scree__op *op;
  _Alignas(16) unsigned char args[SCREE__ARGS_MAX], call[SCREE__ARGS_MAX];
  scree__variant var;
  if (demo_parse(dc, &op, args, &var, r->why, sizeof r->why)) return SCREE_ERROR_INVALID_ARGUMENT;
  const scree__lens lens = {dc->nlens, dc->lens, dc->lens};
  scree__run big, chk;
  CUstream stream = NULL;
  const uint64_t seed = scree__fresh_seed();
  const int pushed = scree__ctx_enter(ctx);
  scree_status st = scree__run_make(ctx, op, &var, args, 0, seed, dc->lens ? &lens : NULL, &big);
  if (st) {
    set_why(r->why, sizeof r->why, "%s: %s", op->name, scree_last_error(ctx));
    scree__ctx_leave(ctx, pushed);
    return st;
  }
  snprintf(r->desc, sizeof r->desc, "%s", big.p.desc);
  r->flops = big.p.flops;
  r->bytes = big.p.bytes;
  void *user = (void *)op;
  scree__run_bind(&big, 0, call);
  const double t0 = now_s();
  st = scree__run_config_api(user, ctx, call, NULL);
  ctx->cu->CtxSynchronize();
  r->first_ms = (now_s() - t0) * 1e3;
  if (st) {
    set_why(r->why, sizeof r->why, "scree_%s: %s: %s", op->name, scree_status_name(st),
            scree_last_error(ctx));
    scree__run_free(ctx, &big);
    scree__ctx_leave(ctx, pushed);
    return st;
  }
  r->stage = 1;
  /* The op's edge-case batch for the same shape (sequence bounds included). */
  if ((st = scree__run_make(ctx, op, &var, big.p.args, 1, seed, NULL, &chk))) {
    set_why(r->why, sizeof r->why, "%s", scree_last_error(ctx));
    scree__run_free(ctx, &big);
    scree__ctx_leave(ctx, pushed);
    return st;
  }
  ctx->cu->StreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  /* The config the timed calls run (their plan), checked on the edge-case
   * batch: through the public entry that batch would be a bucket of its own. */
  scree__config cfg;
  scree__kernel k;
  if (!scree__plan_config(ctx, op, &var, call, &cfg)) {
    set_why(r->why, sizeof r->why, "no plan for the call");
    st = SCREE_ERROR_INTERNAL;
    goto done;
  }
  scree__config_str(op, &cfg, r->config, sizeof r->config);
  if ((st = scree__kernel_get(ctx, op, &cfg, &var, &k))) {
    set_why(r->why, sizeof r->why, "%s", scree_last_error(ctx));
    goto done;
  }
  scree__config_runner cr = {op, &cfg, &var, &k};
  snprintf(r->check_desc, sizeof r->check_desc, "%s", chk.p.desc);
  st = scree__run_check(ctx, &chk, scree__run_config, &cr, stream, 10000, r->why, sizeof r->why);
  if (st) goto done;
  for (int b = 0; b < chk.p.nbufs; b++)
    if (chk.p.bufs[b].kind == SCREE__BUF_OUT) r->check_elems += chk.p.bufs[b].count;
  r->stage = 2;
  double spread = 0;
  st = scree__run_time(ctx, &big, scree__run_config_api, user, stream, 10, 100, 1, 10000, &r->us,
                       &spread, r->why, sizeof r->why);
  if (!st) r->stage = 3;
done:
  if (stream) ctx->cu->StreamDestroy(stream);
  scree__run_free(ctx, &chk);
  scree__run_free(ctx, &big);
  scree__ctx_leave(ctx, pushed);
  return st;
}

scree_status scree__admin_compile_default(const scree__admin_demo_case *dc, const char *arch,
                                          scree__admin_offline_compile *r, char *why,
                                          size_t why_size) {
  memset(r, 0, sizeof *r);
  char err[1024];
  const scree__nvrtc_api *nv = scree__nvrtc_load(err, sizeof err, NULL);
  if (!nv) {
    set_why(why, why_size, "%s", err);
    return SCREE_ERROR_NO_NVRTC;
  }
  const scree__op *op;
  _Alignas(16) unsigned char args[SCREE__ARGS_MAX];
  scree__variant var;
  if (demo_parse(dc, &op, args, &var, why, why_size)) return SCREE_ERROR_INVALID_ARGUMENT;
  scree__target t;
  if (scree__target_for_arch(arch, &t)) {
    set_why(why, why_size, "unknown arch %s", arch);
    return SCREE_ERROR_INVALID_ARGUMENT;
  }
  scree__config cfg;
  op->default_config(&t, &var, args, &cfg);
  scree__config_str(op, &cfg, r->config, sizeof r->config);
  scree__target_arch(arch, t.sm, &op->impls[cfg.impl], r->target);
  void *cubin = NULL;
  char *log = NULL;
  const double t0 = now_s();
  const scree_status st =
      scree__compile(nv, op, &cfg, &var, r->target, NULL, &cubin, &r->cubin_size, &log);
  r->ms = (now_s() - t0) * 1e3;
  if (st) set_why(why, why_size, "%s", log ? log : scree_status_name(st));
  free(cubin);
  free(log);
  return st;
}

/* ---- the tuning worker --------------------------------------------------------- */

int scree__admin_worker(scree_context *ctx, int in, int out) {
  return scree__worker_serve(ctx, in, out);
}
