/* source.c - kernel sources as NVRTC compiles them, and their hash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sha256.h"
#include "jit/jit.h"

/* Generated at build time by cmake/embed_kernels.cmake. */
extern const scree__embedded scree__embedded_kernels[];
extern const size_t scree__embedded_kernel_count;

#ifndef SCREE_DEFAULT_KERNEL_DIR
#define SCREE_DEFAULT_KERNEL_DIR ""
#endif

/* One kernel file, or NULL with the reason in why (may be NULL). */
static char *read_file(const char *name, char *why, size_t why_size) {
  const char *env = getenv("SCREE_KERNEL_DIR");
  const char *dir = env && *env ? env : SCREE_DEFAULT_KERNEL_DIR;
  if (*dir) {
    char path[4096], err[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *text = scree__read_text(path, err, sizeof err);
    if (!text)
      scree__set_why(why, why_size, "%s%s", env && *env ? "SCREE_KERNEL_DIR: " : "", err);
    return text;
  }
  char *text =
      scree__embedded_text(scree__embedded_kernels, scree__embedded_kernel_count, name);
  if (!text) scree__set_why(why, why_size, "embedded kernel %s: not found or out of memory", name);
  return text;
}

static char *read_one(const char *name) { return read_file(name, NULL, 0); }

int scree__kernel_sources_error(char *why, size_t why_size) {
  for (int i = 0; scree__ops[i]; i++)
    for (int k = 0; k < scree__ops[i]->nimpls; k++) {
      char *text = read_file(scree__ops[i]->impls[k].source, why, why_size);
      if (!text) return -1;
      free(text);
    }
  return 0;
}

/* Appends text to a growing buffer; -1 when out of memory. */
static int append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
  if (*len + n + 1 > *cap) {
    size_t nc = *cap ? *cap : 4096;
    while (*len + n + 1 > nc) nc *= 2;
    char *nb = realloc(*buf, nc);
    if (!nb) return -1;
    *buf = nb;
    *cap = nc;
  }
  memcpy(*buf + *len, s, n);
  *len += n;
  (*buf)[*len] = 0;
  return 0;
}

/* common.cuh, then the file with its quoted .cuh includes inlined (one
 * level: headers include nothing). #line keeps NVRTC's messages pointing
 * at the right file and line. */
static char *assemble(const char *file) {
  char *body = read_one(file), *common = read_one("common.cuh");
  char *out = NULL;
  size_t len = 0, cap = 0;
  int ok = body && common;
  if (ok) ok = !append(&out, &len, &cap, common, strlen(common));
  int line = 1;
  char mark[320];
  if (ok) {
    snprintf(mark, sizeof mark, "\n#line 1 \"%s\"\n", file);
    ok = !append(&out, &len, &cap, mark, strlen(mark));
  }
  for (const char *p = body; ok && p && *p; line++) {
    const char *nl = strchr(p, '\n');
    const size_t n = nl ? (size_t)(nl - p + 1) : strlen(p);
    char inc[128];
    if (sscanf(p, "#include \"%127[^\"]\"", inc) == 1 && strlen(inc) > 4 &&
        !strcmp(inc + strlen(inc) - 4, ".cuh")) {
      char *h = read_one(inc);
      ok = h != NULL;
      if (ok) {
        snprintf(mark, sizeof mark, "#line 1 \"%s\"\n", inc);
        ok = !append(&out, &len, &cap, mark, strlen(mark)) &&
             !append(&out, &len, &cap, h, strlen(h));
        snprintf(mark, sizeof mark, "\n#line %d \"%s\"\n", line + 1, file);
        ok = ok && !append(&out, &len, &cap, mark, strlen(mark));
      }
      free(h);
    } else {
      ok = !append(&out, &len, &cap, p, n);
    }
    p += n;
  }
  free(body);
  free(common);
  if (!ok) {
    free(out);
    return NULL;
  }
  return out;
}

/* Sources are assembled once per process and kept: a few kB per file. */
#define MAX_SOURCES 32
static struct {
  char name[64];
  char *text;
} g_src[MAX_SOURCES];
static int g_nsrc;
static pthread_mutex_t g_src_lock = PTHREAD_MUTEX_INITIALIZER;

const char *scree__kernel_source(const char *file) {
  const char *result = NULL;
  pthread_mutex_lock(&g_src_lock);
  for (int i = 0; i < g_nsrc && !result; i++)
    if (!strcmp(g_src[i].name, file)) result = g_src[i].text;
  if (!result && g_nsrc < MAX_SOURCES) {
    char *all = assemble(file);
    if (all) {
      snprintf(g_src[g_nsrc].name, sizeof g_src[g_nsrc].name, "%s", file);
      g_src[g_nsrc++].text = all;
      result = all;
    }
  }
  pthread_mutex_unlock(&g_src_lock);
  return result;
}

const char *scree__source_hash(const scree__op *op) {
  static struct {
    const scree__op *op;
    char hex[65];
  } memo[32];
  static int n;
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  const char *r = "";
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n && !*r; i++)
    if (memo[i].op == op) r = memo[i].hex;
  if (!*r && n < 32) {
    /* What NVRTC compiles for every implementation, with the options every
     * config shares (the config's and variant's -D options are in the
     * cache key already). */
    char *all = NULL;
    size_t len = 0, cap = 0;
    int ok = 1;
    for (int i = 0; i < op->nimpls && ok; i++) {
      const char *src = scree__kernel_source(op->impls[i].source);
      char head[640];
      snprintf(head, sizeof head, "//impl %s %s%s%s%.500s\n", op->impls[i].name,
               op->impls[i].arch_specific ? "arch-specific " : "", op->impls[i].entries[0],
               op->impls[i].defines ? " -D " : "",
               op->impls[i].defines ? op->impls[i].defines : "");
      ok = src && !append(&all, &len, &cap, head, strlen(head)) &&
           !append(&all, &len, &cap, src, strlen(src));
    }
    ok = ok && !append(&all, &len, &cap, "\n//nvrtc " SCREE__FIXED_NVRTC_OPTS,
                       strlen("\n//nvrtc " SCREE__FIXED_NVRTC_OPTS));
    if (ok) {
      memo[n].op = op;
      scree__sha256_hex(all, len, memo[n].hex);
      r = memo[n++].hex;
    }
    free(all);
  }
  pthread_mutex_unlock(&lock);
  return r;
}
