/* cache_check.c - a cache file is untrusted input (docs/security.md): every
 * row read from one is checked before it is used, and every entry before it
 * is written, so that what scree writes it can read back. docs/cache.md
 * ("Rows read from a file") lists the rules. */
#include "store/cache_internal.h"

#include <limits.h>

#include "ops/op.h"

/* ------------------------------------------------------------------------ */
/* Values                                                                    */
/* ------------------------------------------------------------------------ */

/* "NULL", "an integer"... for messages about a column of the wrong type. */
static const char *type_name(int t) {
  switch (t) {
  case SQLITE_INTEGER: return "an integer";
  case SQLITE_FLOAT: return "a real";
  case SQLITE_TEXT: return "text";
  case SQLITE_BLOB: return "a blob";
  }
  return "NULL";
}

int scree__cache_text_ok(const char *p, size_t n, size_t cap, cache_text kind,
                         const char *name, char *why, size_t why_size) {
  if (n >= cap) {
    put_why(why, why_size, "%s is %zu bytes, longer than %zu", name, n, cap - 1);
    return -1;
  }
  if (memchr(p, 0, n)) {
    put_why(why, why_size, "%s holds a NUL byte", name);
    return -1;
  }
  if (kind == TXT_FREE) return 0;
  if (kind == TXT_HEX64) {
    int ok = n == 64;
    for (size_t i = 0; ok && i < n; i++)
      ok = (p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f');
    if (!ok) put_why(why, why_size, "%s is not 64 lowercase hex digits", name);
    return ok ? 0 : -1;
  }
  if (!n) {
    put_why(why, why_size, "%s is empty", name);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    const unsigned char ch = (unsigned char)p[i];
    if (ch <= ' ' || ch >= 0x7f) {
      put_why(why, why_size, "%s holds byte 0x%02x at %zu (expected printable ASCII, no"
                             " blanks)", name, ch, i);
      return -1;
    }
  }
  return 0;
}

/* Checks text column col and copies it into dst (cap bytes, terminated). */
static int col_text(sqlite3_stmt *s, int col, char *dst, size_t cap, cache_text kind,
                    const char *name, char *why, size_t why_size) {
  const int t = sqlite3_column_type(s, col);
  if (t != SQLITE_TEXT) {
    put_why(why, why_size, "%s is %s, not text", name, type_name(t));
    return -1;
  }
  const char *p = (const char *)sqlite3_column_text(s, col);
  const size_t n = (size_t)sqlite3_column_bytes(s, col);
  if (!p && n) {
    put_why(why, why_size, "%s: out of memory", name);
    return -1;
  }
  if (scree__cache_text_ok(p ? p : "", n, cap, kind, name, why, why_size)) return -1;
  if (n) memcpy(dst, p, n);
  dst[n] = 0;
  return 0;
}

/* Checks integer column col: an INTEGER in [lo, hi]. */
static int col_int(sqlite3_stmt *s, int col, int64_t lo, int64_t hi, int64_t *out,
                   const char *name, char *why, size_t why_size) {
  const int t = sqlite3_column_type(s, col);
  if (t != SQLITE_INTEGER) {
    put_why(why, why_size, "%s is %s, not an integer", name, type_name(t));
    return -1;
  }
  const int64_t v = sqlite3_column_int64(s, col);
  if (v < lo || v > hi) {
    put_why(why, why_size, "%s is %lld, outside [%lld, %lld]", name, (long long)v,
            (long long)lo, (long long)hi);
    return -1;
  }
  *out = v;
  return 0;
}

int scree__median_below_floor(double v, const char *name, char *why, size_t why_size) {
  if (v >= SCREE__CACHE_MIN_MEDIAN_US) return 0;
  put_why(why, why_size, "%s is %g, below the %g us that the fastest kernel takes", name, v,
          SCREE__CACHE_MIN_MEDIAN_US);
  return 1;
}

/* Checks a time in microseconds: a finite number, > 0 (positive = 1, a
 * median: at least SCREE__CACHE_MIN_MEDIAN_US) or >= 0. */
static int col_us(sqlite3_stmt *s, int col, int positive, double *out, const char *name,
                  char *why, size_t why_size) {
  const int t = sqlite3_column_type(s, col);
  if (t != SQLITE_FLOAT && t != SQLITE_INTEGER) {
    put_why(why, why_size, "%s is %s, not a number", name, type_name(t));
    return -1;
  }
  const double v = sqlite3_column_double(s, col);
  if (!isfinite(v) || v < 0 || (positive && v <= 0)) {
    put_why(why, why_size, "%s is %g, not a finite %s number", name, v,
            positive ? "positive" : "non-negative");
    return -1;
  }
  if (positive && scree__median_below_floor(v, name, why, why_size)) return -1;
  *out = v;
  return 0;
}

/* The causal flag: the integer 0 or 1. */
static int col_causal(sqlite3_stmt *s, int col, int *out, char *why, size_t why_size) {
  int64_t v;
  if (col_int(s, col, 0, 1, &v, "causal", why, why_size)) return -1;
  *out = (int)v;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Rows                                                                      */
/* ------------------------------------------------------------------------ */

/* Columns 0..4, a winner's or a miss's key: op, bucket, dtype, causal,
 * arch. 0, or -1 with the reason. */
static int col_key(sqlite3_stmt *s, scree__ckey *k, char *why, size_t why_size) {
  if (col_text(s, 0, k->op, sizeof k->op, TXT_KEY, "op", why, why_size) ||
      col_text(s, 1, k->bucket, sizeof k->bucket, TXT_KEY, "bucket", why, why_size) ||
      col_text(s, 2, k->dtype, sizeof k->dtype, TXT_KEY, "dtype", why, why_size) ||
      col_causal(s, 3, &k->causal, why, why_size) ||
      col_text(s, 4, k->arch, sizeof k->arch, TXT_KEY, "arch", why, why_size))
    return -1;
  return 0;
}

int row_to_entry(sqlite3_stmt *s, scree__centry *e, char *why, size_t why_size) {
  memset(e, 0, sizeof *e);
  int64_t sm, drv, nv, created;
  scree__ckey *k = &e->key;
  if (col_key(s, k, why, why_size) ||
      col_text(s, 5, k->src_hash, sizeof k->src_hash, TXT_HEX64, "src_hash", why, why_size) ||
      col_text(s, 6, e->config, sizeof e->config, TXT_KEY, "config", why, why_size) ||
      col_us(s, 7, 1, &e->median_us, "median_us", why, why_size) ||
      col_us(s, 8, 0, &e->spread_us, "spread_us", why, why_size) ||
      col_text(s, 9, e->device_name, sizeof e->device_name, TXT_FREE, "device_name", why,
               why_size) ||
      col_int(s, 10, 0, INT_MAX, &sm, "sm_count", why, why_size) ||
      col_int(s, 11, 0, INT_MAX, &drv, "driver_version", why, why_size) ||
      col_int(s, 12, 0, INT_MAX, &nv, "nvrtc_version", why, why_size) ||
      col_text(s, 13, e->scree_version, sizeof e->scree_version, TXT_FREE, "scree_version",
               why, why_size) ||
      col_int(s, 14, 0, INT64_MAX, &created, "created", why, why_size) ||
      col_text(s, 15, e->cubin_hash, sizeof e->cubin_hash, TXT_FREE, "cubin_hash", why,
               why_size)) {
    memset(e, 0, sizeof *e);
    return -1;
  }
  e->sm_count = (int)sm;
  e->driver_version = (int)drv;
  e->nvrtc_version = (int)nv;
  e->created = created;
  return 0;
}

int row_cubin_size(sqlite3_stmt *s, int col, size_t *size, char *why, size_t why_size) {
  const int t = sqlite3_column_type(s, col + 1);
  const char *type = t == SQLITE_TEXT ? (const char *)sqlite3_column_text(s, col + 1) : NULL;
  if (!type || strcmp(type, "blob")) {
    put_why(why, why_size, "cubin is %s, not a blob",
            !type                   ? "unreadable"
            : !strcmp(type, "null") ? "NULL"
            : !strcmp(type, "text") ? "text"
                                    : "a number");
    return -1;
  }
  const int64_t n = sqlite3_column_int64(s, col);
  if (n <= 0 || n > SCREE__CACHE_MAX_CUBIN) {
    put_why(why, why_size, "cubin is %lld bytes, outside [1, %d]", (long long)n,
            SCREE__CACHE_MAX_CUBIN);
    return -1;
  }
  *size = (size_t)n;
  return 0;
}

int row_to_miss(sqlite3_stmt *s, scree__cmiss *m, char *why, size_t why_size) {
  memset(m, 0, sizeof *m);
  scree__ckey *k = &m->key;
  if (col_key(s, k, why, why_size) ||
      col_text(s, 5, m->example, sizeof m->example, TXT_FREE, "example", why, why_size) ||
      col_int(s, 6, 0, INT64_MAX, &m->count, "count", why, why_size) ||
      col_int(s, 7, 0, INT64_MAX, &m->first_seen, "first_seen", why, why_size) ||
      col_int(s, 8, 0, INT64_MAX, &m->last_seen, "last_seen", why, why_size)) {
    memset(m, 0, sizeof *m);
    return -1;
  }
  return 0;
}

int row_to_bad(sqlite3_stmt *s, scree__cbad *b, char *why, size_t why_size) {
  memset(b, 0, sizeof *b);
  scree__ckey *k = &b->key;
  int64_t nv;
  if (col_text(s, 0, k->op, sizeof k->op, TXT_KEY, "op", why, why_size) ||
      col_text(s, 1, k->dtype, sizeof k->dtype, TXT_KEY, "dtype", why, why_size) ||
      col_causal(s, 2, &k->causal, why, why_size) ||
      col_text(s, 3, k->arch, sizeof k->arch, TXT_KEY, "arch", why, why_size) ||
      col_text(s, 4, k->src_hash, sizeof k->src_hash, TXT_HEX64, "src_hash", why, why_size) ||
      col_text(s, 5, b->config, sizeof b->config, TXT_KEY, "config", why, why_size) ||
      col_int(s, 6, 0, INT_MAX, &nv, "nvrtc_version", why, why_size) ||
      col_text(s, 7, k->bucket, sizeof k->bucket, TXT_KEY, "bucket", why, why_size) ||
      col_text(s, 8, b->reason, sizeof b->reason, TXT_FREE, "reason", why, why_size) ||
      col_int(s, 9, 0, INT64_MAX, &b->when, "created", why, why_size)) {
    memset(b, 0, sizeof *b);
    return -1;
  }
  b->nvrtc_version = (int)nv;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Entries about to be written                                               */
/* ------------------------------------------------------------------------ */

/* A fixed char field: terminated inside the field, and fine for kind. */
static int field_ok(const char *f, size_t cap, cache_text kind, const char *name, char *why,
                    size_t why_size) {
  const size_t n = strnlen(f, cap);
  return scree__cache_text_ok(f, n, cap, kind, name, why, why_size);
}

int key_ok(const scree__ckey *k, int with_bucket, int with_hash, char *why, size_t why_size) {
  if (!k) {
    put_why(why, why_size, "no key");
    return 0;
  }
  if (field_ok(k->op, sizeof k->op, TXT_KEY, "op", why, why_size) ||
      (with_bucket &&
       field_ok(k->bucket, sizeof k->bucket, TXT_KEY, "bucket", why, why_size)) ||
      field_ok(k->dtype, sizeof k->dtype, TXT_KEY, "dtype", why, why_size) ||
      field_ok(k->arch, sizeof k->arch, TXT_KEY, "arch", why, why_size) ||
      (with_hash &&
       field_ok(k->src_hash, sizeof k->src_hash, TXT_HEX64, "src_hash", why, why_size)))
    return 0;
  if (k->causal != 0 && k->causal != 1) {
    put_why(why, why_size, "causal is %d, not 0 or 1", k->causal);
    return 0;
  }
  return 1;
}

int entry_ok(const scree__centry *e, char *why, size_t why_size) {
  if (!e) {
    put_why(why, why_size, "no entry");
    return 0;
  }
  if (!key_ok(&e->key, 1, 1, why, why_size) ||
      field_ok(e->config, sizeof e->config, TXT_KEY, "config", why, why_size) ||
      field_ok(e->device_name, sizeof e->device_name, TXT_FREE, "device_name", why,
               why_size) ||
      field_ok(e->scree_version, sizeof e->scree_version, TXT_FREE, "scree_version", why,
               why_size))
    return 0;
  if (!isfinite(e->median_us) || e->median_us <= 0) {
    put_why(why, why_size, "median_us is %g, not a finite positive number", e->median_us);
    return 0;
  }
  if (scree__median_below_floor(e->median_us, "median_us", why, why_size)) return 0;
  if (!isfinite(e->spread_us) || e->spread_us < 0) {
    put_why(why, why_size, "spread_us is %g, not a finite non-negative number",
            e->spread_us);
    return 0;
  }
  if (e->sm_count < 0 || e->driver_version < 0 || e->nvrtc_version < 0 || e->created < 0) {
    put_why(why, why_size, "a negative sm_count, driver_version, nvrtc_version or created");
    return 0;
  }
  if (!e->cubin || !e->cubin_size || e->cubin_size > SCREE__CACHE_MAX_CUBIN) {
    put_why(why, why_size, "cubin is %zu bytes, outside [1, %d]", e->cubin ? e->cubin_size : 0,
            SCREE__CACHE_MAX_CUBIN);
    return 0;
  }
  return 1;
}

/* ------------------------------------------------------------------------ */
/* Refused rows                                                              */
/* ------------------------------------------------------------------------ */

void note_refused(scree__cache *c, const char *table, int64_t rowid, const char *why) {
  if (!c->refused)
    snprintf(c->refused_first, sizeof c->refused_first, "%s row %lld: %s", table,
             (long long)rowid, why);
  c->refused++;
}

int scree__cache_refused(scree__cache *c, char *why, size_t why_size) {
  if (why && why_size) why[0] = 0;
  if (!c) return 0;
  hold(c);
  const int n = c->refused;
  if (why && why_size) copy_str(why, why_size, c->refused_first);
  release(c);
  return n;
}

/* ------------------------------------------------------------------------ */
/* Rows that cross machines: what this build would write                     */
/* ------------------------------------------------------------------------ */

/* "sm_" and two or three digits (no leading 0), optionally a lowercase
 * feature letter: the archs caches are keyed by. */
static int arch_ok(const char *a) {
  if (strncmp(a, "sm_", 3) || a[3] < '1' || a[3] > '9') return 0;
  int nd = 0;
  while (a[3 + nd] >= '0' && a[3 + nd] <= '9') nd++;
  const char *rest = a + 3 + nd;
  return nd >= 2 && nd <= 3 && (!*rest || (*rest >= 'a' && *rest <= 'z' && !rest[1]));
}

/* The op, variant and arch a key names, checked: the op is in this build,
 * the dtype its canonical variant text, causal the variant's flag, the
 * arch a valid name. */
static const scree__op *key_for_op(const scree__ckey *k, scree__variant *var, scree__target *t,
                                   char *why, size_t why_size) {
  const scree__op *op = scree__op_find(k->op);
  char w[256], canon[128];
  if (!op) {
    put_why(why, why_size, "op %s is not in this build", k->op);
    return NULL;
  }
  if (scree__variant_parse(op, k->dtype, var, w, sizeof w)) {
    put_why(why, why_size, "dtype: %s", w);
    return NULL;
  }
  scree__variant_str(op, var, canon, sizeof canon);
  if (strcmp(canon, k->dtype)) {
    put_why(why, why_size, "dtype %s is not in canonical form (%s)", k->dtype, canon);
    return NULL;
  }
  if (scree__variant_causal(op, var) != k->causal) {
    put_why(why, why_size, "causal is %d but the variant says %d", k->causal,
            scree__variant_causal(op, var));
    return NULL;
  }
  if (!arch_ok(k->arch) || scree__target_for_arch(k->arch, t)) {
    put_why(why, why_size, "arch %s is not sm_<number> with an optional feature letter",
            k->arch);
    return NULL;
  }
  return op;
}

/* A bucket in the op's canonical form ("*" too when star is 1). */
static int bucket_for_op(const scree__op *op, const char *bucket, int star, char *why,
                         size_t why_size) {
  if (star && !strcmp(bucket, "*")) return 1;
  scree__bucket b;
  char w[256], canon[128];
  if (scree__bucket_parse(op, bucket, &b, w, sizeof w)) {
    put_why(why, why_size, "bucket: %s", w);
    return 0;
  }
  scree__bucket_str(op, &b, canon, sizeof canon);
  if (strcmp(canon, bucket)) {
    put_why(why, why_size, "bucket %s is not in canonical form (%s)", bucket, canon);
    return 0;
  }
  return 1;
}

/* A config in the op's canonical form, parsed into cfg. */
static int config_for_op(const scree__op *op, const char *config, scree__config *cfg, char *why,
                         size_t why_size) {
  char w[256], canon[128];
  if (scree__config_parse(op, config, cfg, w, sizeof w)) {
    put_why(why, why_size, "config %s: %s", config, w);
    return 0;
  }
  scree__config_str(op, cfg, canon, sizeof canon);
  if (strcmp(canon, config)) {
    put_why(why, why_size, "config %s is not in canonical form (%s)", config, canon);
    return 0;
  }
  return 1;
}

/* A row's key (key_for_op), its bucket ("*" too when star is 1) and its
 * config in canonical form; with check_config, the config also passes the
 * op's check for the key's variant and arch. 1, or 0 with the reason. */
static int keyed_config_ok(const scree__ckey *k, const char *config, int star, int check_config,
                           char *why, size_t why_size) {
  scree__variant var;
  scree__target t;
  scree__config cfg;
  char w[256];
  const scree__op *op = key_for_op(k, &var, &t, why, why_size);
  if (!op || !bucket_for_op(op, k->bucket, star, why, why_size) ||
      !config_for_op(op, config, &cfg, why, why_size))
    return 0;
  if (check_config && !scree__config_check(op, &cfg, &var, &t, w, sizeof w)) {
    put_why(why, why_size, "config %s fails %s's check for %s on %s: %s", config, op->name,
            k->dtype, k->arch, w);
    return 0;
  }
  return 1;
}

int scree__centry_check(const scree__centry *e, char *why, size_t why_size) {
  return keyed_config_ok(&e->key, e->config, 0, 1, why, why_size);
}

/* A bad config failed somewhere: the op's check is not asked of it. */
int scree__cbad_check(const scree__cbad *b, char *why, size_t why_size) {
  return keyed_config_ok(&b->key, b->config, 1, 0, why, why_size);
}
