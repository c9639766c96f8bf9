/* tuned.c - shipped tuned configs as text (the caches/ files): reading, checking,
 * looking up and writing them. Format and rules in store/tuned.h and
 * docs/cache.md ("Shipped tuned configs"). */
#include "store/cache_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>

#include "store/tuned.h"

extern const scree__embedded scree__embedded_tuneds[];
extern const size_t scree__embedded_tuned_count;

enum { NFIELDS = 9 };
static const char *const field_names[NFIELDS] = {"op",     "bucket", "dtype",     "causal",
                                                 "arch",   "device", "config",    "median_us",
                                                 "src_hash"};

/* One line into e; 0, or -1 with the reason (no "name:line: "). */
static int parse_line(char *s, scree__tentry *e, char *why, size_t n) {
  char *f[NFIELDS + 1];
  int nf = 0;
  for (char *save = NULL, *t = strtok_r(s, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
    if (nf == NFIELDS) {
      put_why(why, n, "more than %d fields (op bucket dtype causal arch device config "
                      "median_us src_hash)", NFIELDS);
      return -1;
    }
    f[nf++] = t;
  }
  if (nf < NFIELDS) {
    put_why(why, n, "%d field(s), expected %d: op bucket dtype causal arch device config "
                    "median_us src_hash (no %s)", nf, NFIELDS, field_names[nf]);
    return -1;
  }
  memset(e, 0, sizeof *e);
  struct {
    int i;
    char *dst;
    size_t cap;
    cache_text kind;
  } text[] = {{0, e->key.op, sizeof e->key.op, TXT_KEY},
              {1, e->key.bucket, sizeof e->key.bucket, TXT_KEY},
              {2, e->key.dtype, sizeof e->key.dtype, TXT_KEY},
              {4, e->key.arch, sizeof e->key.arch, TXT_KEY},
              {5, e->device, sizeof e->device, TXT_KEY},
              {6, e->config, sizeof e->config, TXT_KEY},
              {8, e->key.src_hash, sizeof e->key.src_hash, TXT_HEX64}};
  for (size_t k = 0; k < sizeof text / sizeof text[0]; k++) {
    const char *v = f[text[k].i];
    if (text_ok(v, strlen(v), text[k].cap, text[k].kind, field_names[text[k].i], why, n))
      return -1;
    memcpy(text[k].dst, v, strlen(v) + 1);
  }
  if (strcmp(f[3], "0") && strcmp(f[3], "1")) {
    put_why(why, n, "causal is \"%s\", not 0 or 1", f[3]);
    return -1;
  }
  e->key.causal = f[3][0] == '1';
  char *end;
  errno = 0;
  e->median_us = strtod(f[7], &end);
  if (*end || end == f[7] || errno || !isfinite(e->median_us) || e->median_us <= 0) {
    put_why(why, n, "median_us is \"%s\", not a finite number > 0", f[7]);
    return -1;
  }
  if (scree__median_below_floor(e->median_us, "median_us", why, n)) return -1;
  /* What a cache row that leaves its file must be (merge, export). */
  scree__centry c;
  memset(&c, 0, sizeof c);
  c.key = e->key;
  memcpy(c.config, e->config, sizeof c.config);
  return scree__centry_check(&c, why, n) ? 0 : -1;
}

scree_status scree__tuned_parse(const char *text, const char *name, scree__tuned *t,
                                char *why, size_t why_size) {
  if (why && why_size) why[0] = 0;
  if (!name) name = "tuned configs";
  const int n0 = t->n;
  char (*files)[256] = realloc(t->files, (size_t)(t->nfiles + 1) * sizeof *files);
  if (!files) {
    put_why(why, why_size, "%s: out of memory", name);
    return SCREE_ERROR_OUT_OF_MEMORY;
  }
  t->files = files;
  snprintf(t->files[t->nfiles], sizeof t->files[0], "%s", name);
  int cap = t->n, line = 0;
  char buf[1024], r[384];
  for (const char *s = text; *s;) {
    const size_t len = strcspn(s, "\n");
    line++;
    if (len >= sizeof buf) {
      put_why(why, why_size, "%s:%d: a line longer than %zu bytes", name, line, sizeof buf - 1);
      goto bad;
    }
    memcpy(buf, s, len);
    buf[len] = 0;
    s += len + (s[len] == '\n');
    if (len && buf[len - 1] == '\r') buf[len - 1] = 0;
    char *b = buf;
    while (*b == ' ' || *b == '\t') b++;
    if (!*b || *b == '#') continue;
    scree__tentry e;
    if (parse_line(b, &e, r, sizeof r)) {
      put_why(why, why_size, "%s:%d: %s", name, line, r);
      goto bad;
    }
    e.line = line;
    e.file = t->nfiles;
    if (t->n == cap) {
      cap = cap ? cap * 2 : 64;
      scree__tentry *ne = realloc(t->e, (size_t)cap * sizeof *ne);
      if (!ne) {
        put_why(why, why_size, "%s: out of memory", name);
        t->n = n0;
        return SCREE_ERROR_OUT_OF_MEMORY;
      }
      t->e = ne;
    }
    t->e[t->n++] = e;
  }
  t->nfiles++;
  return SCREE_OK;
bad:
  t->n = n0;
  return SCREE_ERROR_PARSE;
}

void scree__tuned_free(scree__tuned *t) {
  if (!t) return;
  free(t->e);
  free(t->files);
  memset(t, 0, sizeof *t);
}

static scree_status load_one(scree__tuned *t, const char *name, char *text, char *warn,
                             size_t warn_size) {
  char why[512];
  const scree_status st = scree__tuned_parse(text, name, t, why, sizeof why);
  if (st == SCREE_ERROR_OUT_OF_MEMORY) return st;
  if (st) append_line(warn, warn_size, "shipped tuned configs skipped: %s", why);
  return SCREE_OK;
}

/* scree__tuned_load's sources: an embedded file, a file named in
 * SCREE_TUNED_CONFIGS (one that cannot be read is skipped with a warning). */
typedef struct tload {
  scree__tuned *t;
  char *warn;
  size_t warn_size;
} tload;

static scree_status load_embedded(void *user, const char *name, char *text) {
  tload *l = user;
  return load_one(l->t, name, text, l->warn, l->warn_size);
}

static scree_status load_listed(void *user, const char *path) {
  tload *l = user;
  char why[512];
  char *text = scree__read_text(path, why, sizeof why);
  if (!text) {
    append_line(l->warn, l->warn_size, "shipped tuned configs skipped: %s", why);
    return SCREE_OK;
  }
  const scree_status st = load_one(l->t, path, text, l->warn, l->warn_size);
  free(text);
  return st;
}

scree_status scree__tuned_load(scree__tuned *t, char *warn, size_t warn_size) {
  memset(t, 0, sizeof *t);
  const char *env = getenv("SCREE_TUNED_CONFIGS");
  tload l = {t, warn, warn_size};
  scree_status st = SCREE_OK;
  if (!env)
    st = scree__embedded_each(scree__embedded_tuneds, scree__embedded_tuned_count,
                              load_embedded, &l);
  else if (*env && strcmp(env, "none"))
    st = scree__path_list_each(env, load_listed, &l);
  if (st) scree__tuned_free(t);
  return st;
}

/* Device names compare with blanks and '_' alike. */
static int same_device(const char *written, const char *name) {
  for (; *written && *name; written++, name++) {
    const char a = *written == ' ' ? '_' : *written, b = *name == ' ' ? '_' : *name;
    if (a != b) return 0;
  }
  return !*written && !*name;
}

const scree__tentry *scree__tuned_find(const scree__tuned *t, const scree__ckey *k,
                                       const char *device) {
  const scree__tentry *any = NULL;
  for (int i = 0; t && i < t->n; i++) {
    const scree__tentry *e = &t->e[i];
    if (strcmp(e->key.op, k->op) || strcmp(e->key.bucket, k->bucket) ||
        strcmp(e->key.dtype, k->dtype) || e->key.causal != k->causal ||
        strcmp(e->key.arch, k->arch) || strcmp(e->key.src_hash, k->src_hash))
      continue;
    if (device && same_device(e->device, device)) return e;
    if (!any) any = e;
  }
  return any;
}

int scree__tuned_write(FILE *f, const scree__centry *e) {
  char dev[128];
  size_t n = 0;
  for (const char *s = e->device_name; *s && n + 1 < sizeof dev; s++) {
    const unsigned char ch = (unsigned char)*s;
    dev[n++] = ch == ' ' ? '_' : (ch < ' ' || ch >= 0x7f) ? '?' : (char)ch;
  }
  dev[n] = 0;
  if (!n) snprintf(dev, sizeof dev, "unknown");
  /* Three decimals read best; a time below a nanosecond, or one too long
   * for them (a crafted row's 7e31 us, which a %.3f in 32 bytes cut to
   * 7e30), keeps its significant digits instead. */
  char us[32];
  const double m = e->median_us;
  const int k = snprintf(us, sizeof us, m >= 0.001 && m < 1e12 ? "%.3f" : "%.9g", m);
  if (k < 0 || (size_t)k >= sizeof us) return -1;
  fprintf(f, "%s %s %s %d %s %s %s %s %s\n", e->key.op, e->key.bucket, e->key.dtype,
          e->key.causal, e->key.arch, dev, e->config, us, e->key.src_hash);
  return ferror(f) ? -1 : 0;
}
