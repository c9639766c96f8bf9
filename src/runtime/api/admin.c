/* admin.c - the administration interface (admin.h), cache side: text,
 * cache rows listed, exported, merged and cleared, the learned safelist,
 * the shipped tuned configs, and the facts scree-tune doctor reports.
 * admin_tune.c has the side that runs kernels: prewarm tasks, tuning,
 * verify, the demo and the worker. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/admin.h"
#include "api/api.h"
#include "store/safelist.h"
#include "store/tuned.h"

#define set_why scree__set_why

/* ---- text -------------------------------------------------------------------- */

const char *scree__admin_escape(char *buf, size_t size, const char *s) {
  return scree__escape_text(buf, size, s ? s : "");
}

void scree__admin_json_string(FILE *f, const char *s) {
  fputc('"', f);
  const size_t n = strlen(s);
  for (size_t i = 0; i < n;) {
    unsigned cp;
    const int len = scree__utf8_char(s + i, n - i, &cp);
    if (!len) {
      fputs("\\ufffd", f);
      i++;
    } else if (cp == '"' || cp == '\\') {
      fprintf(f, "\\%c", (char)cp);
      i++;
    } else if (scree__unsafe_char(cp)) {
      fprintf(f, "\\u%04x", cp);
      i += (size_t)len;
    } else {
      fwrite(s + i, 1, (size_t)len, f);
      i += (size_t)len;
    }
  }
  fputc('"', f);
}

/* ---- ops --------------------------------------------------------------------- */

const char *scree__admin_op_name(int i) {
  for (int k = 0; scree__ops[k]; k++)
    if (k == i) return scree__ops[k]->name;
  return NULL;
}

const char *scree__admin_source_hash(const char *op) {
  const scree__op *o = op ? scree__op_find(op) : NULL;
  return o ? scree__source_hash(o) : NULL;
}

int scree__admin_kernel_sources(char *why, size_t why_size) {
  return scree__kernel_sources_error(why, why_size);
}

/* 1 if a row of op with this source hash was tuned for another kernel
 * source than this build's (or is of an op this build lacks). */
static int is_stale(const char *op, const char *src_hash) {
  const char *h = scree__admin_source_hash(op);
  return !h || strcmp(h, src_hash);
}

/* ---- cache files ------------------------------------------------------------- */

scree_status scree__admin_default_path(char *buf, size_t size) {
  return scree__cache_default_path(buf, size);
}

scree_status scree__admin_open(const char *path, int readonly, scree__admin_cache **out,
                               int *recovered, char *why, size_t why_size) {
  /* What a command writes, the runtime loads and runs: a file others could
   * change is refused as the runtime would refuse it. */
  return scree__cache_open_trusted(path, readonly, !readonly && scree__cache_strict_modes(), out,
                                   recovered, why, why_size);
}

void scree__admin_close(scree__admin_cache *c) { scree__cache_close(c); }

const char *scree__admin_path(const scree__admin_cache *c) { return scree__cache_path(c); }

void scree__admin_cache_error(scree__admin_cache *c, char *why, size_t why_size) {
  scree__cache_last_error(c, why, why_size);
}

int scree__admin_refused(scree__admin_cache *c, char *why, size_t why_size) {
  return scree__cache_refused(c, why, why_size);
}

scree__admin_cache *scree__admin_context_cache(scree_context *ctx) {
  return scree__user_cache(ctx);
}

static void key_of(const scree__ckey *k, scree__admin_key *out) {
  memset(out, 0, sizeof *out);
  memcpy(out->op, k->op, sizeof out->op);
  memcpy(out->bucket, k->bucket, sizeof out->bucket);
  memcpy(out->dtype, k->dtype, sizeof out->dtype);
  out->causal = k->causal;
  memcpy(out->arch, k->arch, sizeof out->arch);
  memcpy(out->src_hash, k->src_hash, sizeof out->src_hash);
}

/* A winner as a row; cubin_ok as read (-1 when the cubin was not). */
void scree__admin_row_of(const scree__centry *e, int with_cubin, scree__admin_row *r) {
  memset(r, 0, sizeof *r);
  key_of(&e->key, &r->key);
  r->stale = is_stale(e->key.op, e->key.src_hash);
  memcpy(r->config, e->config, sizeof r->config);
  r->median_us = e->median_us;
  r->spread_us = e->spread_us;
  memcpy(r->device, e->device_name, sizeof r->device);
  /* A tune always knows its SM count and driver; a row compiled from a
   * shipped tuned config (text) knows neither. */
  r->device_known = e->sm_count != 0 || e->driver_version != 0;
  r->sm_count = e->sm_count;
  r->driver_version = e->driver_version;
  r->nvrtc_version = e->nvrtc_version;
  memcpy(r->scree_version, e->scree_version, sizeof r->scree_version);
  r->created = e->created;
  r->cubin_size = e->cubin_size;
  memcpy(r->cubin_hash, e->cubin_hash, sizeof r->cubin_hash);
  r->cubin_ok = with_cubin ? e->cubin_ok : -1;
}

int scree__admin_keeps(const scree__admin_filter *f, const scree__ckey *k) {
  return !f || ((!f->bucket || !strcmp(f->bucket, k->bucket)) &&
                (!f->dtype || !strcmp(f->dtype, k->dtype)));
}

typedef struct rows_ctx {
  const scree__admin_filter *f;
  int with_cubin;
  int (*fn)(void *user, const scree__admin_row *r);
  void *user;
  scree__admin_row row;
} rows_ctx;

static int on_winner(void *user, const scree__centry *e) {
  rows_ctx *x = user;
  if (!scree__admin_keeps(x->f, &e->key)) return 0;
  scree__admin_row_of(e, x->with_cubin, &x->row);
  return x->fn(x->user, &x->row);
}

static int on_miss_row(void *user, const scree__cmiss *m) {
  rows_ctx *x = user;
  memset(&x->row, 0, sizeof x->row);
  key_of(&m->key, &x->row.key);
  memcpy(x->row.example, m->example, sizeof x->row.example);
  x->row.count = m->count;
  x->row.first_seen = m->first_seen;
  x->row.last_seen = m->last_seen;
  return x->fn(x->user, &x->row);
}

static int on_bad_row(void *user, const scree__cbad *b) {
  rows_ctx *x = user;
  memset(&x->row, 0, sizeof x->row);
  key_of(&b->key, &x->row.key);
  x->row.stale = is_stale(b->key.op, b->key.src_hash);
  memcpy(x->row.config, b->config, sizeof x->row.config);
  x->row.nvrtc_version = b->nvrtc_version;
  memcpy(x->row.reason, b->reason, sizeof x->row.reason);
  x->row.when = b->when;
  return x->fn(x->user, &x->row);
}

scree_status scree__admin_rows(scree__admin_cache *c, scree__admin_table t,
                               const scree__admin_filter *f, int check_cubins,
                               int (*fn)(void *user, const scree__admin_row *r), void *user) {
  rows_ctx *x = malloc(sizeof *x); /* the row is large: not on a thread's stack */
  if (!x) return SCREE_ERROR_OUT_OF_MEMORY;
  *x = (rows_ctx){.f = f, .with_cubin = check_cubins, .fn = fn, .user = user};
  const char *arch = f ? f->arch : NULL, *op = f ? f->op : NULL;
  const scree_status st =
      t == SCREE__ADMIN_MISSES ? scree__cache_foreach_miss(c, arch, op, on_miss_row, x)
      : t == SCREE__ADMIN_BAD  ? scree__cache_foreach_bad(c, arch, op, on_bad_row, x)
                               : scree__cache_foreach_entry(c, arch, op, check_cubins, on_winner, x);
  free(x);
  return st;
}

scree_status scree__admin_export(scree__admin_cache *c, const char *dst,
                                 const scree__admin_filter *f, int *exported, int *skipped,
                                 char *why, size_t why_size) {
  return scree__cache_export(c, dst, f ? f->arch : NULL, f ? f->op : NULL, exported, skipped,
                             why, why_size);
}

typedef struct text_ctx {
  FILE *f;
  int n, skipped, failed;
  char first[640];
} text_ctx;

static int on_text_entry(void *user, const scree__centry *e) {
  text_ctx *t = user;
  char why[256];
  if (!scree__centry_check(e, why, sizeof why)) {
    if (!t->skipped++)
      snprintf(t->first, sizeof t->first, "%s %s %s: %s", e->key.op, e->key.bucket,
               e->key.dtype, why);
    return 0;
  }
  if (scree__tuned_write(t->f, e)) {
    t->failed = 1;
    return 1;
  }
  t->n++;
  return 0;
}

scree_status scree__admin_export_text(scree__admin_cache *c, const scree__admin_filter *f,
                                      char **text, size_t *len, int *exported, int *skipped,
                                      char *why, size_t why_size) {
  const char *arch = f ? f->arch : NULL, *op = f ? f->op : NULL;
  *text = NULL;
  *len = 0;
  *exported = *skipped = 0;
  set_why(why, why_size, "%s", "");
  FILE *m = open_memstream(text, len);
  if (!m) {
    set_why(why, why_size, "out of memory");
    return SCREE_ERROR_OUT_OF_MEMORY;
  }
  fprintf(m, "# scree shipped tuned configs: one winner a line (docs/cache.md, \"Shipped tuned"
             " configs\").\n"
             "# Written by scree-tune export --text (scree %s)%s%s%s%s; regenerate rather than"
             " edit.\n"
             "# op bucket dtype causal arch device config median_us src_hash\n",
          scree_version(), arch ? " --arch " : "", arch ? arch : "", op ? " --op " : "",
          op ? op : "");
  text_ctx t = {.f = m};
  scree_status st = scree__cache_foreach_entry(c, arch, op, 0, on_text_entry, &t);
  if (fclose(m) != 0 || t.failed) {
    if (!st) {
      set_why(why, why_size, "out of memory");
      st = SCREE_ERROR_OUT_OF_MEMORY;
    }
  }
  if (st) {
    if (st != SCREE_ERROR_OUT_OF_MEMORY) scree__cache_last_error(c, why, why_size);
    free(*text);
    *text = NULL;
    return st;
  }
  /* What is written must load: parse it back first. */
  scree__tuned back = {0};
  char perr[512];
  if (scree__tuned_parse(*text, "the text", &back, perr, sizeof perr) != SCREE_OK ||
      back.n != t.n) {
    set_why(why, why_size, "the text would not load back (%s)", perr);
    scree__tuned_free(&back);
    free(*text);
    *text = NULL;
    return SCREE_ERROR_PARSE;
  }
  scree__tuned_free(&back);
  *exported = t.n;
  *skipped = t.skipped;
  if (t.skipped) set_why(why, why_size, "%s", t.first);
  return SCREE_OK;
}

typedef struct conflict_ctx {
  void (*fn)(void *user, const scree__admin_row *mine, const scree__admin_row *theirs);
  void *user;
  scree__admin_row mine, theirs;
} conflict_ctx;

static void on_conflict(void *user, const scree__centry *mine, const scree__centry *theirs) {
  conflict_ctx *x = user;
  scree__admin_row_of(mine, 0, &x->mine);
  scree__admin_row_of(theirs, 0, &x->theirs);
  x->fn(x->user, &x->mine, &x->theirs);
}

scree_status scree__admin_merge(scree__admin_cache *c, const char *src, int strict,
                                scree__admin_merge_counts *counts,
                                void (*conflict)(void *user, const scree__admin_row *mine,
                                                 const scree__admin_row *theirs),
                                void *user, char *why, size_t why_size) {
  conflict_ctx *x = conflict ? malloc(sizeof *x) : NULL;
  if (conflict && !x) return SCREE_ERROR_OUT_OF_MEMORY;
  if (x) {
    x->fn = conflict;
    x->user = user;
  }
  scree__merge_counts n = {0};
  const scree_status st =
      scree__cache_merge(c, src, strict, &n, x ? on_conflict : NULL, x, why, why_size);
  free(x);
  if (counts)
    *counts = (scree__admin_merge_counts){n.added, n.replaced, n.conflicts, n.skipped_hash,
                                          n.skipped_invalid};
  return st;
}

int scree__admin_strict_modes(void) { return scree__cache_strict_modes(); }

scree_status scree__admin_clear(scree__admin_cache *c, const scree__admin_filter *f,
                                int *deleted) {
  return scree__cache_clear(c, f ? f->arch : NULL, f ? f->op : NULL, deleted);
}

/* ---- safelist export --------------------------------------------------------- */

typedef struct learn_ctx {
  scree__safelist *sl;
  int cap;
  scree__admin_learned *n;
  int oom;
} learn_ctx;

/* Appends the line `verb op cfg` for the dtype selector sel (its reason
 * left to learned_reason); NULL when out of memory. */
static scree__sl_entry *push(learn_ctx *s, const scree__op *op, scree__sl_verb verb,
                             const scree__config *cfg, const char *sel) {
  if (s->sl->n == s->cap) {
    const int cap = s->cap ? s->cap * 2 : 64;
    scree__sl_entry *e = realloc(s->sl->entries, (size_t)cap * sizeof *e);
    if (!e) {
      s->oom = 1;
      return NULL;
    }
    s->sl->entries = e;
    s->cap = cap;
  }
  scree__sl_entry *e = &s->sl->entries[s->sl->n++];
  memset(e, 0, sizeof *e);
  e->op = op;
  e->verb = verb;
  e->cfg = *cfg;
  snprintf(e->dtype, sizeof e->dtype, "%s", sel);
  return e;
}

/* The op of a cache row of key k and its config, parsed: NULL when this
 * build has no such op or the config does not parse (the row teaches
 * nothing). *stale: the row is for another kernel source than this
 * build's. */
static const scree__op *learned_op(const scree__ckey *k, const char *config, scree__config *cfg,
                                   int *stale) {
  const scree__op *op = scree__op_find(k->op);
  char why[256];
  if (!op || scree__config_parse(op, config, cfg, why, sizeof why)) return NULL;
  *stale = strcmp(k->src_hash, scree__source_hash(op)) != 0;
  return op;
}

/* The selector of a learned line, as the parser will check it: "*" when the
 * config passes the op's check with the op's example variant on the list's
 * arch, else the variant it was learned on if the config passes for that
 * one. 0 if neither (the line would not load: it is left out). */
static int selector_for(const learn_ctx *s, const scree__op *op, const scree__config *cfg,
                        const char *variant, char *out, size_t n) {
  scree__variant ex, var;
  scree__target t;
  char canon[128];
  if (scree__target_for_arch(s->sl->arch, &t)) return 0;
  scree__variant_example(op, &ex);
  if (scree__config_check(op, cfg, &ex, &t, NULL, 0)) {
    snprintf(out, n, "*");
    return 1;
  }
  if (scree__variant_parse(op, variant, &var, NULL, 0)) return 0;
  scree__variant_str(op, &var, canon, sizeof canon);
  if (strcmp(canon, variant) || strlen(variant) >= n ||
      !scree__config_check(op, cfg, &var, &t, NULL, 0))
    return 0;
  snprintf(out, n, "%s", variant);
  return 1;
}

/* Drops every line of op/cfg (any verb, any dtype selector). */
static void drop_lines(scree__safelist *sl, const scree__op *op, const scree__config *cfg) {
  int m = 0;
  for (int i = 0; i < sl->n; i++)
    if (!(sl->entries[i].op == op && !memcmp(&sl->entries[i].cfg, cfg, sizeof *cfg)))
      sl->entries[m++] = sl->entries[i];
  sl->n = m;
}

/* A learned reason: built from cache text, so escaped (scree__escape_text)
 * to fit the reason field as it will be written. */
static void learned_reason(scree__sl_entry *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void learned_reason(scree__sl_entry *e, const char *fmt, ...) {
  char raw[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(raw, sizeof raw, fmt, ap);
  va_end(ap);
  for (char *r = raw; *r; r++)
    if (*r == '\n' || *r == '\r') *r = ' ';
  scree__escape_text(e->reason, sizeof e->reason, raw);
}

/* A bad record becomes a deny line when it says the config is wrong
 * everywhere: it failed to compile or load (bucket "*"), or computed a
 * wrong answer. Timeouts and launch failures of one bucket stay in the
 * cache, where they apply to that bucket only. Records for another kernel
 * source say nothing about this one and are skipped, as are records whose
 * line would not pass the op's check (the list would not load). */
static int learn_bad(void *user, const scree__cbad *b) {
  learn_ctx *s = user;
  scree__config cfg;
  char sel[64];
  int stale;
  const scree__op *op = learned_op(&b->key, b->config, &cfg, &stale);
  if (!op) return 0;
  if (stale) {
    s->n->stale++;
    return 0;
  }
  const int global = !strcmp(b->key.bucket, "*") || !strncmp(b->reason, "wrong answer", 12);
  if (!global) {
    s->n->one_bucket++;
    return 0;
  }
  if (!selector_for(s, op, &cfg, b->key.dtype, sel, sizeof sel)) {
    s->n->failed_check++;
    return 0;
  }
  for (int i = 0; i < s->sl->n; i++)
    if (s->sl->entries[i].op == op && s->sl->entries[i].verb == SCREE__SL_DENY &&
        !memcmp(&s->sl->entries[i].cfg, &cfg, sizeof cfg) && !strcmp(s->sl->entries[i].dtype, "*"))
      return 0; /* denied already */
  drop_lines(s->sl, op, &cfg);
  scree__sl_entry *e = push(s, op, SCREE__SL_DENY, &cfg, sel);
  if (!e) return 1;
  learned_reason(e, "learned: %.120s (%.40s, %.60s, NVRTC %d.%d)", b->reason, b->key.dtype,
                 b->key.bucket, b->nvrtc_version / 1000, (b->nvrtc_version % 1000) / 10);
  s->n->denied++;
  return 0;
}

static int learn_good(void *user, const scree__centry *w) {
  learn_ctx *s = user;
  scree__config cfg;
  char sel[64];
  int stale;
  const scree__op *op = learned_op(&w->key, w->config, &cfg, &stale);
  if (!op || stale) return 0;
  for (int i = 0; i < s->sl->n; i++)
    if (s->sl->entries[i].op == op && !memcmp(&s->sl->entries[i].cfg, &cfg, sizeof cfg))
      return 0; /* listed already (allowed, denied or default) */
  if (!selector_for(s, op, &cfg, w->key.dtype, sel, sizeof sel)) {
    s->n->failed_check++;
    return 0;
  }
  scree__sl_entry *e = push(s, op, SCREE__SL_ALLOW, &cfg, sel);
  if (!e) return 1;
  learned_reason(e, "learned: won %s %s at %.2f us on %.60s", w->key.bucket, w->key.dtype,
                 w->median_us, w->device_name);
  s->n->allowed++;
  return 0;
}

scree_status scree__admin_safelist_export(scree__admin_cache *c, const char *arch,
                                          const char *op, char **text, size_t *len,
                                          scree__admin_learned *learned, char *why,
                                          size_t why_size) {
  *text = NULL;
  *len = 0;
  memset(learned, 0, sizeof *learned);
  scree__safelist sl;
  char err[1024];
  scree_status st = scree__safelist_for_arch(arch, &sl, err, sizeof err);
  if (st == SCREE_ERROR_INVALID_ARGUMENT) {
    set_why(why, why_size, "%s", err);
    return st;
  } else if (st == SCREE_ERROR_NOT_FOUND) {
    memset(&sl, 0, sizeof sl); /* none yet: start an empty list */
    snprintf(sl.arch, sizeof sl.arch, "%s", arch);
  } else if (st != SCREE_OK) {
    set_why(why, why_size, "the current list does not load: %s", err);
    return SCREE_ERROR_PARSE;
  } else if (strcmp(sl.arch, arch)) {
    snprintf(sl.arch, sizeof sl.arch, "%s", arch); /* a fallback family list */
  }
  learn_ctx s = {.sl = &sl, .cap = sl.n, .n = learned};
  st = SCREE_OK;
  if (c) {
    st = scree__cache_foreach_bad(c, arch, op, learn_bad, &s);
    if (!st) st = scree__cache_foreach_entry(c, arch, op, 0, learn_good, &s);
    if (!st && s.oom) st = SCREE_ERROR_OUT_OF_MEMORY;
    if (st == SCREE_ERROR_OUT_OF_MEMORY)
      set_why(why, why_size, "out of memory");
    else if (st)
      scree__cache_last_error(c, why, why_size);
  }
  if (st) {
    scree__safelist_free(&sl);
    return st;
  }
  /* The text is built in memory and parsed back before it is returned:
   * what this returns always loads. */
  char comment[256], name[64];
  snprintf(comment, sizeof comment,
           "written by scree-tune safelist export --arch %s (scree %s)", arch, scree_version());
  FILE *m = open_memstream(text, len);
  const int werr = !m || scree__safelist_write(m, &sl, comment) != 0;
  const int cerr = m && fclose(m) != 0;
  scree__safelist_free(&sl);
  if (werr || cerr || !*text) {
    free(*text);
    *text = NULL;
    set_why(why, why_size, "out of memory");
    return SCREE_ERROR_OUT_OF_MEMORY;
  }
  snprintf(name, sizeof name, "%s.txt", arch);
  scree__safelist back;
  if (scree__safelist_parse(*text, name, &back, err, sizeof err) != SCREE_OK) {
    set_why(why, why_size, "the list it would write does not load, so nothing was written: %s",
            err);
    free(*text);
    *text = NULL;
    return SCREE_ERROR_PARSE;
  }
  scree__safelist_free(&back);
  return SCREE_OK;
}

/* ---- shipped tuned configs --------------------------------------------------- */

static void shipped_row(const scree__tuned *t, const scree__tentry *e,
                        scree__admin_shipped_row *r) {
  memset(r, 0, sizeof *r);
  key_of(&e->key, &r->key);
  memcpy(r->device, e->device, sizeof r->device);
  memcpy(r->config, e->config, sizeof r->config);
  r->median_us = e->median_us;
  r->stale = is_stale(e->key.op, e->key.src_hash);
  snprintf(r->file, sizeof r->file, "%s", t->files[e->file]);
  r->line = e->line;
}

static int matches(const scree__admin_filter *f, const scree__ckey *k) {
  return !f || ((!f->arch || !strcmp(f->arch, k->arch)) && (!f->op || !strcmp(f->op, k->op)));
}

scree_status scree__admin_shipped(const scree__admin_filter *f,
                                  int (*fn)(void *user, const scree__admin_shipped_row *r),
                                  void *user, scree__admin_shipped_summary *s) {
  memset(s, 0, sizeof *s);
  scree__tuned t;
  if (scree__tuned_load(&t, s->warn, sizeof s->warn)) return SCREE_ERROR_OUT_OF_MEMORY;
  s->files = t.nfiles;
  s->entries = t.n;
  for (int i = 0; i < t.nfiles; i++) {
    const size_t used = strlen(s->names);
    snprintf(s->names + used, sizeof s->names - used, "%s%s", i ? ", " : "", t.files[i]);
  }
  scree__admin_shipped_row r;
  for (int i = 0; i < t.n; i++) {
    if (!matches(f, &t.e[i].key)) continue;
    shipped_row(&t, &t.e[i], &r);
    s->matched++;
    s->stale += r.stale;
    if (fn && fn(user, &r)) break;
  }
  scree__tuned_free(&t);
  return SCREE_OK;
}

typedef struct job {
  const scree__tentry *e;
  const scree__op *op;
  scree__variant var;
  scree__config cfg;
  char target[16];
  int same_as; /* index of an earlier job with the same compile, or -1 */
  void *cubin;
  size_t size;
  scree_status st;
  char *log;
} job;

typedef struct jobs {
  const scree__nvrtc_api *nv;
  job *j;
  int n, compiles, done;
  pthread_mutex_t lock;
  void (*progress)(void *user, int done, int total, const char *stage);
  void *user;
} jobs;

static void compile_job(void *user, int i) {
  jobs *js = user;
  job *j = &js->j[i];
  if (j->same_as >= 0) return;
  j->st = scree__compile(js->nv, j->op, &j->cfg, &j->var, j->target, NULL, &j->cubin, &j->size,
                         &j->log);
  if (js->progress) {
    pthread_mutex_lock(&js->lock);
    js->progress(js->user, ++js->done, js->compiles, "compile");
    pthread_mutex_unlock(&js->lock);
  }
}

/* The first line of an NVRTC log, for a one-line reason. */
static void first_line(char *dst, size_t size, const char *log) {
  if (!log) log = "";
  while (*log == '\n') log++;
  set_why(dst, size, "%.*s", (int)strcspn(log, "\n"), log);
}

scree_status scree__admin_compile_shipped(scree__admin_cache *c,
                                          const scree__admin_compile_opts *o,
                                          int (*fn)(void *user, const scree__admin_compiled *r),
                                          void *user, scree__admin_compile_counts *n,
                                          char *why, size_t why_size) {
  memset(n, 0, sizeof *n);
  set_why(why, why_size, "%s", "");
  const char *arch = o->arch, *op = o->op;
  const int force = o->force;
  char err[1024];
  const scree__nvrtc_api *nv = scree__nvrtc_load(err, sizeof err, NULL);
  if (!nv) {
    set_why(why, why_size, "%s", err);
    return SCREE_ERROR_NO_NVRTC;
  }
  int major = 0, minor = 0;
  nv->Version(&major, &minor);
  n->nvrtc_version = major * 1000 + minor * 10;
  /* The arch: the caller's, else this machine's GPU's, else every arch listed. */
  scree_device_info dev;
  if (!arch && scree_get_device_info(0, &dev) == SCREE_OK) arch = dev.arch;
  snprintf(n->arch, sizeof n->arch, "%s", arch ? arch : "");
  scree__tuned t;
  char warn[4096] = "";
  if (scree__tuned_load(&t, warn, sizeof warn)) return SCREE_ERROR_OUT_OF_MEMORY;
  jobs js = {.nv = nv, .j = calloc((size_t)(t.n ? t.n : 1), sizeof(job)),
             .progress = o->progress, .user = o->progress_user};
  if (!js.j) {
    scree__tuned_free(&t);
    return SCREE_ERROR_OUT_OF_MEMORY;
  }
  for (int i = 0; i < t.n; i++) {
    const scree__tentry *e = &t.e[i];
    job *j = &js.j[js.n];
    memset(j, 0, sizeof *j);
    j->same_as = -1;
    j->e = e;
    if (arch && strcmp(arch, e->key.arch)) {
      n->other_arch++;
      continue;
    }
    if (op && strcmp(op, e->key.op)) {
      n->other_op++;
      continue;
    }
    j->op = scree__op_find(e->key.op);
    if (!j->op || strcmp(e->key.src_hash, scree__source_hash(j->op))) {
      n->stale++;
      continue;
    }
    scree__centry have;
    if (!force && scree__cache_get(c, &e->key, &have) == SCREE_OK) {
      const int ok = have.cubin_ok;
      scree__centry_free(&have);
      if (ok) {
        n->cached++;
        continue;
      }
    }
    scree__target tg;
    if (scree__variant_parse(j->op, e->key.dtype, &j->var, NULL, 0) ||
        scree__config_parse(j->op, e->config, &j->cfg, NULL, 0) ||
        scree__target_for_arch(e->key.arch, &tg))
      continue; /* checked when the file was read */
    scree__target_arch(e->key.arch, tg.sm, &j->op->impls[j->cfg.impl], j->target);
    /* Buckets share configs: compile each (op, config, variant, target) once. */
    for (int k = 0; k < js.n; k++)
      if (js.j[k].same_as < 0 && js.j[k].op == j->op &&
          !memcmp(&js.j[k].cfg, &j->cfg, sizeof j->cfg) &&
          !memcmp(&js.j[k].var, &j->var, sizeof j->var) && !strcmp(js.j[k].target, j->target)) {
        j->same_as = k;
        break;
      }
    js.compiles += j->same_as < 0;
    js.n++;
  }
  n->total = js.n;
  n->compiles = js.compiles;
  pthread_mutex_init(&js.lock, NULL);
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  scree__parallel_for(js.n, 0, compile_job, &js);
  clock_gettime(CLOCK_MONOTONIC, &b);
  n->seconds = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
  pthread_mutex_destroy(&js.lock);
  scree_status rc = SCREE_OK;
  scree__admin_compiled *r = malloc(sizeof *r);
  for (int i = 0; i < js.n && r; i++) {
    job *j = &js.j[i];
    const job *src = j->same_as >= 0 ? &js.j[j->same_as] : j;
    memset(r, 0, sizeof *r);
    shipped_row(&t, j->e, &r->row);
    snprintf(r->target, sizeof r->target, "%s", j->target);
    r->cubin_size = src->size;
    r->st = src->st;
    if (src->st != SCREE_OK) {
      n->failed++;
      if (src->log)
        first_line(r->why, sizeof r->why, src->log);
      else
        set_why(r->why, sizeof r->why, "%s", scree_status_name(src->st));
    } else {
      scree__centry e;
      memset(&e, 0, sizeof e);
      e.key = j->e->key;
      snprintf(e.config, sizeof e.config, "%s", j->e->config);
      e.median_us = j->e->median_us;
      for (size_t k = 0; k < sizeof e.device_name - 1 && j->e->device[k]; k++)
        e.device_name[k] = j->e->device[k] == '_' ? ' ' : j->e->device[k];
      e.nvrtc_version = n->nvrtc_version;
      e.cubin = src->cubin;
      e.cubin_size = src->size;
      int written = 0;
      const scree_status st = scree__cache_put(c, &e, &written);
      if (st) {
        n->failed++;
        r->st = st;
        scree__cache_last_error(c, r->why, sizeof r->why);
        if (!rc) {
          rc = SCREE_ERROR_CACHE;
          set_why(why, why_size, "%s", r->why);
        }
      } else if (written) {
        n->stored++;
      } else {
        n->cached++; /* a good row at least as fast stays: nothing was stored */
      }
    }
    if (fn && fn(user, r)) break;
  }
  if (!r) rc = SCREE_ERROR_OUT_OF_MEMORY;
  free(r);
  for (int i = 0; i < js.n; i++) {
    free(js.j[i].cubin);
    free(js.j[i].log);
  }
  free(js.j);
  scree__tuned_free(&t);
  if (!rc && warn[0]) set_why(why, why_size, "%s", warn);
  return rc;
}

/* ---- facts for doctor -------------------------------------------------------- */

void scree__admin_nvrtc_info(scree__admin_nvrtc *n) {
  memset(n, 0, sizeof *n);
  const char *name = NULL;
  const scree__nvrtc_api *nv = scree__nvrtc_load(n->why, sizeof n->why, &name);
  if (!nv) return;
  n->loaded = 1;
  nv->Version(&n->major, &n->minor);
  snprintf(n->name, sizeof n->name, "%s", name ? name : "");
  /* The name may be a soname the loader resolved: the file is where its
   * code lives. */
  Dl_info di;
  if (dladdr((const void *)nv->Version, &di) && di.dli_fname)
    snprintf(n->file, sizeof n->file, "%s", di.dli_fname);
}

typedef struct count_ctx {
  int n, stale;
} count_ctx;

static int count_entry(void *user, const scree__centry *e) {
  count_ctx *x = user;
  x->n++;
  x->stale += is_stale(e->key.op, e->key.src_hash);
  return 0;
}

static int count_miss(void *user, const scree__cmiss *m) {
  (void)m;
  ((count_ctx *)user)->n++;
  return 0;
}

static int count_bad(void *user, const scree__cbad *b) {
  (void)b;
  ((count_ctx *)user)->n++;
  return 0;
}

void scree__admin_cache_facts_of(const char *path, scree__admin_cache_facts *f) {
  memset(f, 0, sizeof *f);
  f->trusted = scree__cache_trust_check(path, f->trust_why, sizeof f->trust_why) == SCREE_OK;
  scree__cache *c = NULL;
  if (scree__cache_open(path, 1, &c, NULL, f->why, sizeof f->why) != SCREE_OK) return;
  f->opened = 1;
  count_ctx w = {0}, m = {0}, b = {0};
  scree_status st = scree__cache_foreach_entry(c, NULL, NULL, 0, count_entry, &w);
  if (!st) st = scree__cache_foreach_miss(c, NULL, NULL, count_miss, &m);
  if (!st) st = scree__cache_foreach_bad(c, NULL, NULL, count_bad, &b);
  if (st) scree__cache_last_error(c, f->why, sizeof f->why);
  f->winners = w.n;
  f->stale = w.stale;
  f->misses = m.n;
  f->bad = b.n;
  f->refused = scree__cache_refused(c, NULL, 0);
  scree__cache_close(c);
}

int scree__admin_jobs(char *how, size_t how_size) { return scree__jobs(how, how_size); }
