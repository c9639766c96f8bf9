/* cache_stack.c - the default path and the layered stack: one read-write
 * user cache over read-only shipped caches, over the shipped tuned configs
 * (text). docs/cache.md describes the file format and the order. */
#include "store/cache_internal.h"

#include "store/tuned.h"

/* ------------------------------------------------------------------------ */
/* Layering                                                                  */
/* ------------------------------------------------------------------------ */

scree_status scree__cache_default_path(char *buf, size_t size) {
  if (!buf || !size) return SCREE_ERROR_INVALID_ARGUMENT;
  buf[0] = 0;
  const char *base, *tail;
  const char *d = getenv("SCREE_CACHE_DIR");
  const char *x = getenv("XDG_CACHE_HOME");
  const char *h = getenv("HOME");
  char pwbuf[4096];
  if (d && *d) {
    /* A relative one would follow the working directory: refused, not
     * passed over, since the operator asked for a place. */
    if (d[0] != '/') return SCREE_ERROR_INVALID_ARGUMENT;
    base = d;
    tail = "/tune.db";
  } else if (x && x[0] == '/') {
    base = x;
    tail = "/scree/tune.db";
  } else {
    /* A relative HOME would put the cache under whatever directory the
     * process runs in: it counts as unset, as a relative XDG_CACHE_HOME. */
    if (!h || h[0] != '/') {
      struct passwd pw, *res = NULL;
      if (getpwuid_r(getuid(), &pw, pwbuf, sizeof pwbuf, &res) == 0 && res &&
          res->pw_dir && res->pw_dir[0] == '/')
        h = res->pw_dir;
      else
        return SCREE_ERROR_NOT_FOUND;
    }
    base = h;
    tail = "/.cache/scree/tune.db";
  }
  size_t bl = strlen(base);
  while (bl > 1 && base[bl - 1] == '/') bl--;
  if (bl == 1 && base[0] == '/') bl = 0;
  int n = snprintf(buf, size, "%.*s%s", (int)bl, base, tail);
  if (n < 0 || (size_t)n >= size) {
    buf[0] = 0;
    return SCREE_ERROR_INVALID_ARGUMENT;
  }
  return SCREE_OK;
}

/* scree__cache_stack_open's shipped caches, one path of the search path
 * at a time: one that is refused or does not open is skipped with the
 * reason in warn; only running out of memory stops the list. */
typedef struct shipped_open {
  scree__cache_stack *s;
  int cap, strict;
  char *warn;
  size_t warn_size;
} shipped_open;

static scree_status open_shipped(void *user, const char *p) {
  shipped_open *o = user;
  scree__cache_stack *s = o->s;
  char why[2048] = "";
  scree__cache *c = NULL;
  scree_status st = scree__cache_open_trusted(p, 1, o->strict, &c, NULL, why, sizeof why);
  if (st != SCREE_OK) {
    append_line(o->warn, o->warn_size, "shipped cache %s skipped: %s", p, why);
    return SCREE_OK;
  }
  if (s->nshipped == o->cap) {
    const int nc = o->cap ? o->cap * 2 : 4;
    scree__cache **q = realloc(s->shipped, (size_t)nc * sizeof *q);
    if (!q) {
      scree__cache_close(c);
      return SCREE_ERROR_OUT_OF_MEMORY;
    }
    s->shipped = q;
    o->cap = nc;
  }
  s->shipped[s->nshipped++] = c;
  return SCREE_OK;
}

scree_status scree__cache_stack_open(scree__cache_stack *s,
                                     const char *user_path,
                                     const char *search_path, char *warn,
                                     size_t warn_size) {
  if (warn && warn_size) warn[0] = 0;
  if (!s) return SCREE_ERROR_INVALID_ARGUMENT;
  memset(s, 0, sizeof *s);
  char dflt[4096], why[2048];
  const char *up = user_path;
  if (!up) {
    scree_status d = scree__cache_default_path(dflt, sizeof dflt);
    if (d == SCREE_OK) {
      up = dflt;
    } else {
      append_line(warn, warn_size,
                  "no user cache: %s; running without one",
                  d == SCREE_ERROR_INVALID_ARGUMENT
                      ? "SCREE_CACHE_DIR is not an absolute path (or the path is too long)"
                      : "cannot find a default path (set SCREE_CACHE_DIR or HOME)");
    }
  }
  if (up) {
    int rec = 0;
    why[0] = 0;
    scree_status st = scree__cache_open_trusted(up, 0, scree__cache_strict_modes(), &s->user,
                                                &rec, why, sizeof why);
    if (st == SCREE_ERROR_OUT_OF_MEMORY) return st;
    if (st != SCREE_OK)
      append_line(warn, warn_size,
                  "user cache %s unusable (%s); running without a user cache",
                  up, why);
    else if (rec)
      append_line(warn, warn_size, "user cache %s: %s", up, why);
  }

  /* The shipped tuned configs (text): the lowest level. */
  s->tuned = calloc(1, sizeof *s->tuned);
  if (!s->tuned || scree__tuned_load(s->tuned, warn, warn_size) != SCREE_OK) {
    scree__cache_stack_close(s);
    return SCREE_ERROR_OUT_OF_MEMORY;
  }
  const char *sp = search_path ? search_path : getenv("SCREE_CACHE_PATH");
  if (!sp) return SCREE_OK;
  shipped_open o = {s, 0, scree__cache_strict_modes(), warn, warn_size};
  if (scree__path_list_each(sp, open_shipped, &o) != SCREE_OK) {
    scree__cache_stack_close(s);
    return SCREE_ERROR_OUT_OF_MEMORY;
  }
  return SCREE_OK;
}

scree_status scree__cache_stack_open_pinned(scree__cache_stack *s, const char *path, char *why,
                                            size_t why_size) {
  if (why && why_size) why[0] = 0;
  if (!s) return SCREE_ERROR_INVALID_ARGUMENT;
  memset(s, 0, sizeof *s);
  if (!path || !*path) {
    put_why(why, why_size, "the pinned cache path is empty");
    return SCREE_ERROR_INVALID_ARGUMENT;
  }
  s->shipped = calloc(1, sizeof *s->shipped);
  if (!s->shipped) return SCREE_ERROR_OUT_OF_MEMORY;
  char w[2048] = "";
  scree__cache *c = NULL;
  /* Read-only: never created, converted, moved aside or written. */
  const scree_status st =
      scree__cache_open_trusted(path, 1, scree__cache_strict_modes(), &c, NULL, w, sizeof w);
  if (st != SCREE_OK) {
    free(s->shipped);
    s->shipped = NULL;
    put_why(why, why_size, "pinned cache %s: %s", path,
            st == SCREE_ERROR_NOT_FOUND ? "missing or empty: nothing to run from" : w);
    return st;
  }
  s->shipped[0] = c;
  s->nshipped = 1;
  s->pinned = 1;
  return SCREE_OK;
}

int scree__cache_stack_pinned_miss(const scree__cache_stack *s, const scree__ckey *k, char *why,
                                   size_t why_size) {
  if (why && why_size) why[0] = 0;
  if (!s || !s->pinned || !k) return 0;
  put_why(why, why_size,
          "no usable entry for %s %s %s causal=%d on %s in the pinned cache %s: a pinned cache is"
          " never tuned or added to (merge a cache that holds this bucket, check the ranks' "
          "caches with scree-tune verify --agree, and pin that file)",
          k->op, k->bucket, k->dtype, k->causal, k->arch,
          s->nshipped ? scree__cache_path(s->shipped[0]) : "?");
  return 1;
}

void scree__cache_stack_close(scree__cache_stack *s) {
  if (!s) return;
  scree__cache_close(s->user);
  for (int i = 0; i < s->nshipped; i++) scree__cache_close(s->shipped[i]);
  free(s->shipped);
  scree__tuned_free(s->tuned);
  free(s->tuned);
  memset(s, 0, sizeof *s);
}

/* 1 if c answered with a usable entry (left in out). */
static int level_get(scree__cache *c, const scree__ckey *k,
                     scree__centry *out) {
  if (!c) return 0;
  if (scree__cache_get(c, k, out) != SCREE_OK) return 0;
  if (out->cubin_ok) return 1;
  scree__centry_free(out);
  return 0;
}

/* 1 if the shipped tuned configs hold k (left in out, without a cubin). */
static int tuned_get(const scree__cache_stack *s, const scree__ckey *k, scree__centry *out) {
  const scree__tentry *te =
      s->tuned ? scree__tuned_find(s->tuned, k, s->device[0] ? s->device : NULL) : NULL;
  if (!te) return 0;
  out->key = te->key;
  snprintf(out->config, sizeof out->config, "%s", te->config);
  out->median_us = te->median_us;
  snprintf(out->device_name, sizeof out->device_name, "%s", te->device);
  return 1;
}

scree_status scree__cache_stack_next(scree__cache_stack *s, const scree__ckey *k, int *pos,
                                     scree__centry *out, scree__cache_level *level) {
  if (level) *level = SCREE__LEVEL_NONE;
  if (!s || !k || !pos || !out) return SCREE_ERROR_INVALID_ARGUMENT;
  /* Levels: 0 the user cache, 1..nshipped the shipped caches, then the
   * shipped tuned configs. */
  for (; *pos >= 0 && *pos <= s->nshipped + 1; ++*pos) {
    const int p = *pos;
    const scree__cache_level lv = p == 0              ? SCREE__LEVEL_USER
                                  : p <= s->nshipped ? SCREE__LEVEL_SHIPPED
                                                     : SCREE__LEVEL_TUNED;
    memset(out, 0, sizeof *out);
    const int hit = lv == SCREE__LEVEL_TUNED
                        ? tuned_get(s, k, out)
                        : level_get(p == 0 ? s->user : s->shipped[p - 1], k, out);
    /* A row of another key is never handed out (a bf16 call must not
     * load an fp32 kernel), whatever a level returned. */
    if (hit && !scree__ckey_same(&out->key, k)) {
      scree__centry_free(out);
      continue;
    }
    if (hit) {
      ++*pos;
      if (level) *level = lv;
      return SCREE_OK;
    }
  }
  memset(out, 0, sizeof *out);
  return SCREE_ERROR_NOT_FOUND;
}

scree_status scree__cache_stack_get(scree__cache_stack *s,
                                    const scree__ckey *k, scree__centry *out,
                                    scree__cache_level *level) {
  int pos = 0;
  return scree__cache_stack_next(s, k, &pos, out, level);
}
