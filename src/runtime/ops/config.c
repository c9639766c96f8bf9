/* config.c - the text forms of configs, variants, buckets and shapes, and
 * their parsers: one of each, generic over the op descriptors. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

#define set_why scree__set_why

/* The largest magnitude of a shape field scree__shape_parse accepts. */
#define SHAPE_MAX (1ll << 40)

/* ---- configs ------------------------------------------------------------- */

void scree__config_str(const scree__op *op, const scree__config *cfg, char *buf,
                       size_t size) {
  size_t n = 0;
  buf[0] = 0;
  if (cfg->impl < 0 || cfg->impl >= op->nimpls) {
    snprintf(buf, size, "impl=%d?", cfg->impl);
    return;
  }
  const scree__impl *im = &op->impls[cfg->impl];
  if (op->nimpls > 1) n += (size_t)snprintf(buf, size, "impl=%s", im->name);
  for (int i = 0; i < im->nfields && n < size; i++)
    n += (size_t)snprintf(buf + n, size - n, "%s%s=%d", n ? "," : "", im->fields[i].name,
                          cfg->v[i]);
}

/* 1 if the token before '=' at p (ending at eq) is exactly name. */
static int token_is(const char *p, const char *eq, const char *name) {
  return strlen(name) == (size_t)(eq - p) && !strncmp(name, p, (size_t)(eq - p));
}

int scree__config_parse(const scree__op *op, const char *s, scree__config *cfg,
                        char *why, size_t why_size) {
  memset(cfg, 0, sizeof *cfg);
  /* The implementation first: its fields are the names to expect. */
  int impl = op->nimpls == 1 ? 0 : -1;
  for (const char *p = s; p && *p;) {
    const char *end = strchr(p, ',');
    const size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len > 5 && !strncmp(p, "impl=", 5)) {
      impl = -2;
      for (int i = 0; i < op->nimpls; i++)
        if (strlen(op->impls[i].name) == len - 5 && !strncmp(op->impls[i].name, p + 5, len - 5))
          impl = i;
      if (impl < 0) {
        set_why(why, why_size, "%s has no implementation \"%.*s\"", op->name, (int)(len - 5), p + 5);
        return -1;
      }
      break;
    }
    p = end ? end + 1 : NULL;
  }
  if (impl < 0) {
    set_why(why, why_size, "%s has %d implementations: the config must name one (impl=%s...)",
            op->name, op->nimpls, op->impls[0].name);
    return -1;
  }
  cfg->impl = impl;
  const scree__impl *im = &op->impls[impl];
  int seen[SCREE__MAX_FIELDS] = {0}, seen_impl = 0;
  const char *p = s;
  while (*p) {
    const char *eq = strchr(p, '=');
    const char *comma = strchr(p, ',');
    if (!eq || (comma && comma < eq)) {
      set_why(why, why_size, "expected name=value at \"%s\"", p);
      return -1;
    }
    if (token_is(p, eq, "impl")) {
      if (seen_impl++) {
        set_why(why, why_size, "impl given twice");
        return -1;
      }
      p = comma ? comma + 1 : eq + strlen(eq);
      continue;
    }
    int f = -1;
    for (int i = 0; i < im->nfields; i++)
      if (token_is(p, eq, im->fields[i].name)) f = i;
    if (f < 0) {
      set_why(why, why_size, "%s%s%s has no config field \"%.*s\"", op->name,
              op->nimpls > 1 ? " impl=" : "", op->nimpls > 1 ? im->name : "", (int)(eq - p), p);
      return -1;
    }
    char *end;
    errno = 0;
    const long v = strtol(eq + 1, &end, 10);
    if (end == eq + 1 || errno || v < -1000000 || v > 1000000 || (*end && *end != ',')) {
      set_why(why, why_size, "field %s: expected an integer at \"%s\"", im->fields[f].name, eq + 1);
      return -1;
    }
    if (seen[f]++) {
      set_why(why, why_size, "field %s given twice", im->fields[f].name);
      return -1;
    }
    cfg->v[f] = (int)v;
    p = *end ? end + 1 : end;
  }
  for (int i = 0; i < im->nfields; i++)
    if (!seen[i]) {
      set_why(why, why_size, "field %s missing", im->fields[i].name);
      return -1;
    }
  return 0;
}

int scree__config_space(const scree__op *op, scree__config *out, int cap) {
  int n = 0;
  for (int k = 0; k < op->nimpls; k++) {
    const scree__impl *im = &op->impls[k];
    int idx[SCREE__MAX_FIELDS] = {0};
    for (;;) {
      if (n < cap) {
        memset(&out[n], 0, sizeof out[n]);
        out[n].impl = k;
        for (int f = 0; f < im->nfields; f++) out[n].v[f] = im->fields[f].values[idx[f]];
      }
      n++;
      int f = 0;
      while (f < im->nfields && ++idx[f] == im->fields[f].nvalues) idx[f++] = 0;
      if (f == im->nfields) break;
    }
  }
  return n;
}

int scree__config_check(const scree__op *op, const scree__config *cfg,
                        const scree__variant *var, const scree__target *t, char *why,
                        size_t why_size) {
  if (cfg->impl < 0 || cfg->impl >= op->nimpls) {
    set_why(why, why_size, "impl %d does not exist", cfg->impl);
    return 0;
  }
  const scree__impl *im = &op->impls[cfg->impl];
  if (t->sm < im->min_sm || (im->max_sm && t->sm > im->max_sm)) {
    if (im->max_sm)
      set_why(why, why_size, "impl %s runs on sm_%d..sm_%d, not sm_%d", im->name, im->min_sm,
              im->max_sm, t->sm);
    else
      set_why(why, why_size, "impl %s needs sm_%d or newer, not sm_%d", im->name, im->min_sm,
              t->sm);
    return 0;
  }
  char w[256] = "";
  if (!im->check(cfg, var, t, w, sizeof w)) {
    set_why(why, why_size, "%s", w);
    return 0;
  }
  return 1;
}

/* ---- variants -------------------------------------------------------------- */

void scree__variant_str(const scree__op *op, const scree__variant *var, char *buf,
                        size_t size) {
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; i < op->nvfields && n < size; i++) {
    if (op->vfields[i].is_dtype)
      n += (size_t)snprintf(buf + n, size - n, "%s%s=%s", i ? "," : "", op->vfields[i].name,
                            scree_dtype_name((scree_dtype)var->v[i]));
    else
      n += (size_t)snprintf(buf + n, size - n, "%s%s=%d", i ? "," : "", op->vfields[i].name,
                            var->v[i]);
  }
}

int scree__variant_parse(const scree__op *op, const char *text, scree__variant *var,
                         char *why, size_t why_size) {
  memset(var, 0, sizeof *var);
  int seen[SCREE__MAX_VARIANT] = {0};
  const char *p = text;
  if (!*p && op->nvfields) {
    set_why(why, why_size, "empty variant (expected e.g. %s=...)", op->vfields[0].name);
    return -1;
  }
  while (*p) {
    const char *comma = strchr(p, ',');
    const size_t len = comma ? (size_t)(comma - p) : strlen(p);
    const char *eq = memchr(p, '=', len);
    if (!eq) {
      set_why(why, why_size, "variant \"%s\": expected name=value at \"%.*s\"", text, (int)len, p);
      return -1;
    }
    int f = -1;
    for (int i = 0; i < op->nvfields; i++)
      if (token_is(p, eq, op->vfields[i].name)) f = i;
    if (f < 0) {
      set_why(why, why_size, "variant \"%s\": %s has no variant field \"%.*s\"", text, op->name,
              (int)(eq - p), p);
      return -1;
    }
    if (seen[f]++) {
      set_why(why, why_size, "variant \"%s\": field %s given twice", text, op->vfields[f].name);
      return -1;
    }
    const char *val = eq + 1;
    const int vlen = (int)(len - (size_t)(val - p));
    int v = -1;
    if (op->vfields[f].is_dtype) {
      for (int d = 0; d <= 2; d++) {
        const char *dn = scree_dtype_name((scree_dtype)d);
        if ((int)strlen(dn) == vlen && !strncmp(dn, val, (size_t)vlen)) v = d;
      }
      if (v < 0) {
        set_why(why, why_size, "variant \"%s\": %s=%.*s is not fp32, fp16 or bf16", text,
                op->vfields[f].name, vlen, val);
        return -1;
      }
    } else {
      char *end;
      errno = 0;
      const long lv = strtol(val, &end, 10);
      if (end == val || errno || end != val + vlen || lv < -1000000 || lv > 1000000) {
        set_why(why, why_size, "variant \"%s\": %s: expected an integer at \"%.*s\"", text,
                op->vfields[f].name, vlen, val);
        return -1;
      }
      v = (int)lv;
    }
    var->v[f] = v;
    p = comma ? comma + 1 : p + len;
    if (comma && !*p) {
      set_why(why, why_size, "variant \"%s\": trailing comma", text);
      return -1;
    }
  }
  for (int i = 0; i < op->nvfields; i++)
    if (!seen[i]) {
      set_why(why, why_size, "variant \"%s\": field %s missing", text, op->vfields[i].name);
      return -1;
    }
  char c[256];
  scree__variant_str(op, var, c, sizeof c);
  if (strcmp(c, text)) {
    set_why(why, why_size, "variant \"%s\" is not in canonical form (expected %s)", text, c);
    return -1;
  }
  return 0;
}

void scree__variant_example(const scree__op *op, scree__variant *var) {
  memset(var, 0, sizeof *var);
  for (int i = 0; i < op->nvfields; i++) var->v[i] = op->vfields[i].example;
}

int scree__check_smem(size_t bytes, const scree__target *t, char *why, size_t why_size) {
  if (bytes <= (size_t)t->smem_optin) return 1;
  set_why(why, why_size, "needs %zu bytes of shared memory; sm_%d allows %d", bytes, t->sm,
          t->smem_optin);
  return 0;
}

int scree__variant_causal(const scree__op *op, const scree__variant *var) {
  for (int i = 0; i < op->nvfields; i++)
    if (!strcmp(op->vfields[i].name, "causal")) return var->v[i] != 0;
  return 0;
}

/* ---- buckets ------------------------------------------------------------------ */

void scree__bucket_of(const scree__op *op, const scree__variant *var, const void *args,
                      scree__bucket *b) {
  memset(b, 0, sizeof *b);
  if (op->bucket)
    op->bucket(var, args, b->v);
  else
    for (int i = 0; i < op->ndims; i++)
      memcpy(&b->v[i], (const char *)args + op->dims[i].arg - 1, sizeof b->v[i]);
  for (int i = 0; i < op->ndims; i++)
    if (op->dims[i].pow2) b->v[i] = scree__pow2_ceil(b->v[i]);
}

void scree__bucket_invariant(const scree__op *op, scree__bucket *b) {
  for (int i = 0; i < op->ndims; i++)
    if (op->dims[i].any) b->v[i] = SCREE__BUCKET_ANY;
}

int scree__bucket_is_invariant(const scree__op *op, const scree__bucket *b) {
  for (int i = 0; i < op->ndims; i++)
    if (b->v[i] == SCREE__BUCKET_ANY) return 1;
  return 0;
}

void scree__bucket_concrete(const scree__op *op, const scree__bucket *b, scree__bucket *out) {
  if (out != b) *out = *b;
  for (int i = 0; i < op->ndims; i++)
    if (out->v[i] == SCREE__BUCKET_ANY) out->v[i] = op->dims[i].any;
}

void scree__bucket_str(const scree__op *op, const scree__bucket *b, char *buf, size_t size) {
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; i < op->ndims && n < size; i++) {
    if (b->v[i] == SCREE__BUCKET_ANY)
      n += (size_t)snprintf(buf + n, size - n, "%s%s=any", i ? "," : "", op->dims[i].name);
    else
      n += (size_t)snprintf(buf + n, size - n, "%s%s%s%lld", i ? "," : "", op->dims[i].name,
                            op->dims[i].pow2 ? "<=" : "=", (long long)b->v[i]);
  }
}

int scree__bucket_parse(const scree__op *op, const char *s, scree__bucket *b, char *why,
                        size_t why_size) {
  memset(b, 0, sizeof *b);
  const char *p = s;
  for (int i = 0; i < op->ndims; i++) {
    const size_t nl = strlen(op->dims[i].name);
    const char *sep = op->dims[i].pow2 ? "<=" : "=";
    if (!strncmp(p, op->dims[i].name, nl) && !strncmp(p + nl, "=any", 4)) {
      /* a batch-invariant bucket's batch dimension */
      if (!op->dims[i].any) {
        set_why(why, why_size, "%s bucket \"%s\": %s=any: %s is not a batch dimension",
                op->name, s, op->dims[i].name, op->dims[i].name);
        return -1;
      }
      b->v[i] = SCREE__BUCKET_ANY;
      p += nl + 4;
      if (i + 1 < op->ndims) {
        if (*p != ',') {
          set_why(why, why_size, "%s bucket \"%s\": expected ',' after %s", op->name, s,
                  op->dims[i].name);
          return -1;
        }
        p++;
      }
      continue;
    }
    if (strncmp(p, op->dims[i].name, nl) || strncmp(p + nl, sep, strlen(sep))) {
      set_why(why, why_size, "%s bucket \"%s\": expected %s%s... at \"%s\"", op->name, s,
              op->dims[i].name, sep, p);
      return -1;
    }
    p += nl + strlen(sep);
    char *end;
    errno = 0;
    const long long v = strtoll(p, &end, 10);
    if (end == p || errno || v < 0) {
      set_why(why, why_size, "%s bucket \"%s\": %s needs a non-negative integer", op->name, s,
              op->dims[i].name);
      return -1;
    }
    if (op->dims[i].pow2 && (v < 1 || (v & (v - 1)))) {
      set_why(why, why_size, "%s bucket \"%s\": %s<=%lld is not a power of two", op->name, s,
              op->dims[i].name, v);
      return -1;
    }
    /* Bounds a call's shape never passes, so that what the op derives from
     * a bucket read from a file (products of its dims) cannot overflow: an
     * exact dim is a row length, head count or head size, a rounded one a
     * token or row count. */
    const long long top = op->dims[i].pow2 ? (1LL << 40) : (1LL << 24);
    if (v > top) {
      set_why(why, why_size, "%s bucket \"%s\": %s=%lld is past 2^%d", op->name, s,
              op->dims[i].name, v, op->dims[i].pow2 ? 40 : 24);
      return -1;
    }
    b->v[i] = v;
    p = end;
    if (i + 1 < op->ndims) {
      if (*p != ',') {
        set_why(why, why_size, "%s bucket \"%s\": expected ',' after %s", op->name, s,
                op->dims[i].name);
        return -1;
      }
      p++;
    }
  }
  if (*p) {
    set_why(why, why_size, "%s bucket \"%s\": unexpected \"%s\"", op->name, s, p);
    return -1;
  }
  return 0;
}

/* ---- shapes --------------------------------------------------------------------- */

void scree__shape_str(const scree__op *op, const void *args, char *buf, size_t size) {
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; i < op->nargs && n < size; i++) {
    const scree__arg *f = &op->args[i];
    if (!(f->flags & SCREE__SHAPE)) continue;
    int64_t v;
    memcpy(&v, (const char *)args + f->offset, sizeof v);
    n += (size_t)snprintf(buf + n, size - n, "%s%s=%lld", n ? "," : "", f->name, (long long)v);
  }
}

void scree__shape_names(const scree__op *op, char *buf, size_t size) {
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; i < op->nargs && n < size; i++)
    if (op->args[i].flags & SCREE__SHAPE)
      n += (size_t)snprintf(buf + n, size - n, "%s%s", n ? ", " : "", op->args[i].name);
}

int scree__shape_parse(const scree__op *op, const char *s, void *args, char *why,
                       size_t why_size) {
  int seen[64] = {0};
  const char *p = s;
  while (*p) {
    const char *eq = strchr(p, '=');
    if (!eq) {
      set_why(why, why_size, "%s shape \"%s\": expected name=value at \"%s\"", op->name, s, p);
      return -1;
    }
    int f = -1;
    for (int i = 0; i < op->nargs && i < 64; i++)
      if ((op->args[i].flags & SCREE__SHAPE) && token_is(p, eq, op->args[i].name)) f = i;
    if (f < 0) {
      char names[512];
      scree__shape_names(op, names, sizeof names);
      set_why(why, why_size, "%s shape \"%s\": no field \"%.*s\" (expected: %s)", op->name, s,
              (int)(eq - p), p, names);
      return -1;
    }
    const scree__arg *field = &op->args[f];
    if (seen[f]++) {
      set_why(why, why_size, "%s shape \"%s\": %s given twice", op->name, s, field->name);
      return -1;
    }
    char *end;
    errno = 0;
    const long long v = strtoll(eq + 1, &end, 10);
    if (end == eq + 1 || (errno && errno != ERANGE) || (*end && *end != ',')) {
      set_why(why, why_size, "%s shape \"%s\": %s needs an integer", op->name, s, field->name);
      return -1;
    }
    /* Past 2^40 (as prewarm's --rows-max) no shape is real, and the ops'
     * problem hooks multiply fields (heads_q * head_dim overflowed). */
    if (errno == ERANGE || v > SHAPE_MAX || v < -SHAPE_MAX) {
      set_why(why, why_size, "%s shape \"%s\": %s=%.*s is out of range (-2^40 to 2^40)",
              op->name, s, field->name, (int)(end - eq - 1), eq + 1);
      return -1;
    }
    const int64_t v64 = v;
    memcpy((char *)args + field->offset, &v64, sizeof v64);
    p = *end ? end + 1 : end;
  }
  return 0;
}

/* ---- targets -------------------------------------------------------------------- */

/* Shared memory a CTA may opt in to, by architecture (the CUDA programming
 * guide's table): what a safelist for an arch is checked against. */
static int smem_optin_of(int sm) {
  switch (sm) {
    case 80: case 87: return 163 * 1024;
    case 90: case 100: case 103: return 227 * 1024;
    case 86: case 89: case 120: case 121: return 99 * 1024;
    default: return 48 * 1024;
  }
}

void scree__target_of(const scree_context *ctx, scree__target *t) {
  t->sm = ctx->sm;
  t->smem_optin = ctx->info.max_smem_per_block_optin > 0 ? ctx->info.max_smem_per_block_optin
                                                         : smem_optin_of(ctx->sm);
  t->tensor_maps = ctx->cu && ctx->cu->TensorMapEncodeTiled;
}

int scree__target_for_arch(const char *arch, scree__target *t) {
  if (!arch || strncmp(arch, "sm_", 3) || !isdigit((unsigned char)arch[3])) return -1;
  t->sm = atoi(arch + 3);
  t->smem_optin = smem_optin_of(t->sm);
  t->tensor_maps = 1; /* a safelist or a compile does not depend on the driver */
  return 0;
}

/* ---- problems ------------------------------------------------------------------------ */

void scree__problem_free(scree__problem *p) {
  for (int i = 0; i < p->nbufs; i++) {
    free(p->bufs[i].host);
    p->bufs[i].host = NULL;
  }
}

scree__buf *scree__problem_buf(scree__problem *p, const char *name, scree__buf_kind kind,
                               int dtype, size_t count, size_t arg_offset) {
  if (p->nbufs == SCREE__MAX_BUFS) return NULL;
  scree__buf *b = &p->bufs[p->nbufs++];
  memset(b, 0, sizeof *b);
  b->name = name;
  b->kind = kind;
  b->dtype = dtype;
  b->count = count;
  b->arg_offset = arg_offset;
  if ((kind == SCREE__BUF_OUT || kind == SCREE__BUF_INOUT) && dtype != SCREE__DTYPE_I32 &&
      dtype != SCREE__DTYPE_I64)
    scree__tolerance((scree_dtype)dtype, &b->rtol, &b->atol);
  return b;
}

int scree__problem_bufs(scree__problem *p, const scree__arg *schema, int nargs, char *why,
                        size_t why_size) {
  p->bytes = 0;
  for (int i = 0; i < nargs; i++) {
    const scree__arg *t = &schema[i];
    if (t->role != SCREE__ROLE_IN && t->role != SCREE__ROLE_OUT && t->role != SCREE__ROLE_INOUT) continue;
    scree_devptr marked;
    memcpy(&marked, p->args + t->offset, sizeof marked);
    if ((t->flags & SCREE__OPTIONAL) && !marked) continue;
    scree__geom g;
    scree__tensor_geom(p->args, t, &g);
    /* Elements from the first to past the last: the extent of the
     * outermost dimension times its stride (dense tensors: the product). */
    int64_t count = 0, touched = 1;
    for (int k = 0; k < g.rank; k++) {
      const int64_t c = g.ext[k] * g.stride[k];
      if (c > count) count = c;
      touched *= g.ext[k];
    }
    const int elem = scree__tensor_elem(p->args, t);
    const int integer = elem == SCREE__DTYPE_I32 || elem == SCREE__DTYPE_I64;
    const scree__buf_kind kind = integer                 ? SCREE__BUF_HOST_IN
                                 : t->role == SCREE__ROLE_IN  ? SCREE__BUF_IN
                                 : t->role == SCREE__ROLE_OUT ? SCREE__BUF_OUT
                                                         : SCREE__BUF_INOUT;
    if (!scree__problem_buf(p, t->name, kind, elem, (size_t)count, t->offset)) {
      set_why(why, why_size, "more than %d buffers", SCREE__MAX_BUFS);
      return -1;
    }
    p->bytes += (double)touched * (double)scree__elem_size(elem);
  }
  return 0;
}

int scree__problem_shape(const void *args, const scree__arg *schema, int nargs, char *why,
                         size_t why_size) {
  for (int i = 0; i < nargs; i++) {
    const scree__arg *f = &schema[i];
    if (!(f->flags & SCREE__SHAPE) || f->role != SCREE__ROLE_DIM) continue;
    int64_t v;
    memcpy(&v, (const char *)args + f->offset, sizeof v);
    if ((f->min || f->max) && (v < f->min || v > f->max)) {
      scree__range_text(f, v, why, why_size);
      return -1;
    }
    if ((f->flags & SCREE__EMPTY) && v < 1) {
      set_why(why, why_size, "%s=%lld: a problem needs %s >= 1", f->name, (long long)v, f->name);
      return -1;
    }
  }
  return 0;
}

void scree__variant_dtypes(const scree__vfield *vfields, int nvfields, const scree__variant *var,
                           void *args) {
  for (int i = 0; i < nvfields; i++)
    if (vfields[i].is_dtype && vfields[i].arg) {
      const int32_t v = var->v[i]; /* a scree_dtype field */
      memcpy((char *)args + vfields[i].arg - 1, &v, sizeof v);
    }
}

scree__buf *scree__problem_find(scree__problem *p, const char *name) {
  for (int b = 0; b < p->nbufs; b++)
    if (!strcmp(p->bufs[b].name, name)) return &p->bufs[b];
  return NULL;
}
