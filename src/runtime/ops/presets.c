/* presets.c - model presets read from the presets/ files (embedded) and the
 * user's files: parsing, checking and expanding them into call shapes.
 * The format is in presets.h and docs/cli.md ("Model presets"). */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/presets.h"

extern const scree__embedded scree__embedded_presets[];
extern const size_t scree__embedded_preset_count;

/* The largest value a variable or an expression may take: 2^40, as a
 * shape field (scree__shape_parse refuses more). */
#define VALUE_MAX ((int64_t)1 << 40)

typedef struct perr {
  char *why;
  size_t size;
  const char *name;
} perr;

static int fail(const perr *e, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(const perr *e, int line, const char *fmt, ...) {
  if (e->why && e->size) {
    int n = snprintf(e->why, e->size, "%s:%d: ", e->name, line);
    if (n < 0 || (size_t)n >= e->size) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->why + n, e->size - (size_t)n, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static int all_dtypes(int i) { return i == 0 ? SCREE_DTYPE_FP32 : i == 1 ? SCREE_DTYPE_FP16 : SCREE_DTYPE_BF16; }

static int parse_dtype(const char *s, size_t len, scree_dtype *out) {
  for (int i = 0; i < 3; i++) {
    const char *n = scree_dtype_name((scree_dtype)all_dtypes(i));
    if (strlen(n) == len && !strncmp(n, s, len)) {
      *out = (scree_dtype)all_dtypes(i);
      return 0;
    }
  }
  return -1;
}

/* ---- expressions ------------------------------------------------------------ */

/* An expression's text, the variables in reach and, while expanding, the
 * value index of each. */
typedef struct expr {
  const char *s;
  const scree__preset_var *vars;
  int nvars;
  const int *at; /* value index per variable; NULL: only check the names */
  unsigned used; /* bit per variable named */
  const char *err;
} expr;

static void skip_blank(expr *x) {
  while (*x->s == ' ' || *x->s == '\t') x->s++;
}

static int64_t sum(expr *x);

static int64_t atom(expr *x) {
  skip_blank(x);
  if (*x->s == '(') {
    x->s++;
    const int64_t v = sum(x);
    skip_blank(x);
    if (*x->s != ')') {
      if (!x->err) x->err = "a ( without its )";
      return 0;
    }
    x->s++;
    return v;
  }
  if (isdigit((unsigned char)*x->s)) {
    char *end;
    errno = 0;
    const long long v = strtoll(x->s, &end, 10);
    x->s = end;
    if (errno || v > VALUE_MAX) {
      if (!x->err) x->err = "a number past 2^40";
      return 0;
    }
    return v;
  }
  if (isalpha((unsigned char)*x->s) || *x->s == '_') {
    const char *b = x->s;
    while (isalnum((unsigned char)*x->s) || *x->s == '_') x->s++;
    const size_t len = (size_t)(x->s - b);
    for (int i = 0; i < x->nvars; i++)
      if (strlen(x->vars[i].name) == len && !strncmp(x->vars[i].name, b, len)) {
        x->used |= 1u << i;
        return x->at ? x->vars[i].v[x->at[i]] : 1;
      }
    if (!x->err) x->err = "a variable that no `let` defines";
    return 0;
  }
  if (!x->err) x->err = *x->s ? "an unexpected character" : "a missing value";
  return 0;
}

/* v, or 0 with the reason kept, when an operation overflowed int64 or
 * left [-2^40, 2^40]. */
static int64_t in_range(expr *x, int overflow, int64_t v) {
  if (!overflow && v <= VALUE_MAX && v >= -VALUE_MAX) return v;
  if (!x->err) x->err = v < 0 ? "a value below -2^40" : "a value past 2^40";
  return 0;
}

static int64_t product(expr *x) {
  int64_t v = atom(x);
  for (;;) {
    skip_blank(x);
    const char op = *x->s;
    if (op != '*' && op != '/') return v;
    x->s++;
    const int64_t r = atom(x);
    if (op == '*') {
      int64_t p;
      const int over = __builtin_mul_overflow(v, r, &p);
      /* The sign of the true product, for the message. */
      v = in_range(x, over, over ? ((v < 0) != (r < 0) ? -1 : 1) * (VALUE_MAX + 1) : p);
    } else {
      if (r <= 0) {
        if (!x->err) x->err = "a division by zero or a negative number";
        return 0;
      }
      v = v >= 0 ? (v + r - 1) / r : -((-v) / r); /* rounds up; |v| <= 2^40 */
    }
  }
}

static int64_t sum(expr *x) {
  int64_t v = product(x);
  for (;;) {
    skip_blank(x);
    const char op = *x->s;
    if (op != '+' && op != '-') return v;
    x->s++;
    const int64_t r = product(x);
    int64_t t;
    /* Operands are within 2^40 (or 0 after an error): no int64 overflow,
     * checked all the same. */
    const int over =
        op == '+' ? __builtin_add_overflow(v, r, &t) : __builtin_sub_overflow(v, r, &t);
    v = in_range(x, over, over ? VALUE_MAX + 1 : t);
  }
}

/* Expands a template into out: each {EXPR} replaced by its value, {dtype}
 * by dt's name. at NULL: only checks, and ORs the variables named into
 * *used. 0, or -1 with the reason in err. */
static int expand(const char *tmpl, const scree__preset *p, const int *at, scree_dtype dt,
                  char *out, size_t size, unsigned *used, char *err, size_t err_size) {
  size_t n = 0;
  for (const char *s = tmpl; *s;) {
    if (*s != '{') {
      if (*s == '}') {
        snprintf(err, err_size, "a } without its {");
        return -1;
      }
      if (n + 1 < size) out[n++] = *s;
      s++;
      continue;
    }
    const char *close = strchr(s, '}');
    if (!close) {
      snprintf(err, err_size, "a { without its }");
      return -1;
    }
    char inner[128];
    const size_t len = (size_t)(close - s - 1);
    if (len >= sizeof inner) {
      snprintf(err, err_size, "an expression longer than %zu bytes", sizeof inner - 1);
      return -1;
    }
    memcpy(inner, s + 1, len);
    inner[len] = 0;
    char val[32];
    if (!strcmp(inner, "dtype")) {
      snprintf(val, sizeof val, "%s", scree_dtype_name(dt));
    } else {
      expr x = {.s = inner, .vars = p->vars, .nvars = p->nvars, .at = at};
      const int64_t v = sum(&x);
      skip_blank(&x);
      if (!x.err && *x.s) x.err = "an unexpected character";
      if (x.err) {
        snprintf(err, err_size, "{%s}: %s", inner, x.err);
        return -1;
      }
      if (used) *used |= x.used;
      snprintf(val, sizeof val, "%lld", (long long)v);
    }
    for (const char *v = val; *v; v++)
      if (n + 1 < size) out[n++] = *v;
    s = close + 1;
  }
  if (n + 1 >= size) {
    snprintf(err, err_size, "longer than %zu bytes once expanded", size - 1);
    return -1;
  }
  out[n] = 0;
  return 0;
}

/* Calls fn for every expansion of line l in dtype dt (odometer over the
 * variables it names, first variable slowest). */
static int expand_line(const scree__preset *p, const scree__preset_line *l, scree_dtype dt,
                       int (*fn)(void *user, const scree__preset_line *l, const char *shape,
                                 const char *variant, const char *err),
                       void *user) {
  char err[256] = "";
  unsigned used = 0;
  char shape[512], variant[256];
  if (expand(l->shape, p, NULL, dt, shape, sizeof shape, &used, err, sizeof err) ||
      (l->variant[0] &&
       expand(l->variant, p, NULL, dt, variant, sizeof variant, &used, err, sizeof err)))
    return fn(user, l, NULL, NULL, err);
  int64_t shapes = 1;
  for (int k = 0; k < p->nvars; k++) {
    if (!(used & (1u << k))) continue;
    shapes *= p->vars[k].n; /* stops past the cap: at most 2^16 * 64 */
    if (shapes > SCREE__PRESET_MAX_SHAPES) {
      snprintf(err, sizeof err, "the line makes more than %d call shapes (the values of the "
               "variables it names, multiplied)", SCREE__PRESET_MAX_SHAPES);
      return fn(user, l, NULL, NULL, err);
    }
  }
  int at[SCREE__PRESET_MAX_VARS] = {0};
  for (;;) {
    if (expand(l->shape, p, at, dt, shape, sizeof shape, NULL, err, sizeof err) ||
        (l->variant[0] &&
         expand(l->variant, p, at, dt, variant, sizeof variant, NULL, err, sizeof err))) {
      const int r = fn(user, l, NULL, NULL, err);
      if (r) return r;
    } else {
      const int r = fn(user, l, shape, l->variant[0] ? variant : NULL, NULL);
      if (r) return r;
    }
    int k = p->nvars - 1;
    for (; k >= 0; k--) {
      if (!(used & (1u << k))) continue;
      if (++at[k] < p->vars[k].n) break;
      at[k] = 0;
    }
    if (k < 0) return 0;
  }
}

/* ---- parsing ---------------------------------------------------------------- */

typedef struct check_ctx {
  const perr *e;
  int failed;
} check_ctx;

/* Every expansion must parse as the op's shape and variant. */
static int check_one(void *user, const scree__preset_line *l, const char *shape,
                     const char *variant, const char *err) {
  check_ctx *c = user;
  if (!shape) {
    c->failed = fail(c->e, l->line, "%s", err);
    return 1;
  }
  _Alignas(16) unsigned char args[SCREE__ARGS_MAX];
  memset(args, 0, sizeof args);
  char why[256];
  if (scree__shape_parse(l->op, shape, args, why, sizeof why)) {
    c->failed = fail(c->e, l->line, "%s shape %s: %s", l->op->name, shape, why);
    return 1;
  }
  scree__variant var;
  if (variant && scree__variant_parse(l->op, variant, &var, why, sizeof why)) {
    c->failed = fail(c->e, l->line, "%s variant %s: %s", l->op->name, variant, why);
    return 1;
  }
  return 0;
}

static int parse_let(const char *rest, scree__preset_var *v, const perr *e, int line) {
  const char *eq = strchr(rest, '=');
  if (!eq) return fail(e, line, "let: expected `let NAME = A..B` or `let NAME = a,b,...`");
  size_t nl = (size_t)(eq - rest);
  while (nl && isspace((unsigned char)rest[nl - 1])) nl--;
  if (!nl || nl >= sizeof v->name || !(isalpha((unsigned char)rest[0]) || rest[0] == '_'))
    return fail(e, line, "let: a variable name is a letter or _ then letters, digits or _, "
                         "at most %zu of them", sizeof v->name - 1);
  for (size_t i = 0; i < nl; i++)
    if (!isalnum((unsigned char)rest[i]) && rest[i] != '_')
      return fail(e, line, "let: bad variable name \"%.*s\"", (int)nl, rest);
  memset(v, 0, sizeof *v);
  memcpy(v->name, rest, nl);
  if (!strcmp(v->name, "dtype")) return fail(e, line, "let: dtype is not a variable's name");
  const char *s = eq + 1;
  while (isspace((unsigned char)*s)) s++;
  const char *dots = strstr(s, "..");
  char *end;
  if (dots) {
    errno = 0;
    const long long a = strtoll(s, &end, 10);
    if (end != dots || errno) return fail(e, line, "let %s: bad range start", v->name);
    const long long b = strtoll(dots + 2, &end, 10);
    while (isspace((unsigned char)*end)) end++;
    if (*end || errno || end == dots + 2) return fail(e, line, "let %s: bad range end", v->name);
    if (a < 1 || b < a || b > VALUE_MAX)
      return fail(e, line, "let %s = %lld..%lld: need 1 <= A <= B <= 2^40", v->name, a, b);
    for (int64_t x = 1; x <= b; x *= 2)
      if (x >= a) {
        if (v->n == SCREE__PRESET_MAX_VALUES)
          return fail(e, line, "let %s: more than %d values", v->name, SCREE__PRESET_MAX_VALUES);
        v->v[v->n++] = x;
      }
    if (!v->n) return fail(e, line, "let %s: no power of two in %lld..%lld", v->name, a, b);
    return 0;
  }
  for (;;) {
    errno = 0;
    const long long x = strtoll(s, &end, 10);
    if (end == s || errno || x < 1 || x > VALUE_MAX)
      return fail(e, line, "let %s: values are integers in 1..2^40, separated by commas",
                  v->name);
    if (v->n == SCREE__PRESET_MAX_VALUES)
      return fail(e, line, "let %s: more than %d values", v->name, SCREE__PRESET_MAX_VALUES);
    v->v[v->n++] = x;
    s = end;
    while (isspace((unsigned char)*s)) s++;
    if (!*s) return 0;
    if (*s++ != ',')
      return fail(e, line, "let %s: values are integers separated by commas", v->name);
    while (isspace((unsigned char)*s)) s++;
  }
}

/* Sets (or redefines) a variable of p. */
static int set_var(scree__preset_var *vars, int *nvars, const scree__preset_var *v,
                   const perr *e, int line) {
  for (int i = 0; i < *nvars; i++)
    if (!strcmp(vars[i].name, v->name)) {
      vars[i] = *v;
      return 0;
    }
  if (*nvars == SCREE__PRESET_MAX_VARS)
    return fail(e, line, "more than %d variables", SCREE__PRESET_MAX_VARS);
  vars[(*nvars)++] = *v;
  return 0;
}

/* An op line: OP SHAPE [variant=V] [dtypes=a,b]. */
static int parse_op_line(char *s, scree__preset *p, const perr *e, int line) {
  char *tok[8] = {0};
  int nt = 0;
  for (char *save = NULL, *t = strtok_r(s, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
    if (nt == 8) return fail(e, line, "too many words: OP SHAPE [variant=V] [dtypes=a,b]");
    tok[nt++] = t;
  }
  const scree__op *op = scree__op_find(tok[0]);
  if (!op) {
    char names[256] = "";
    for (int i = 0; scree__ops[i]; i++)
      snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
               scree__ops[i]->name);
    return fail(e, line, "unknown op \"%s\" (ops: %s; or let, model)", tok[0], names);
  }
  if (nt < 2) return fail(e, line, "%s: the line needs a shape, as in rows={T},cols=4096", op->name);
  if (p->nlines == SCREE__PRESET_MAX_LINES)
    return fail(e, line, "model %s: more than %d op lines", p->name, SCREE__PRESET_MAX_LINES);
  scree__preset_line l;
  memset(&l, 0, sizeof l);
  l.op = op;
  l.line = line;
  if (strlen(tok[1]) >= sizeof l.shape) return fail(e, line, "the shape is too long");
  snprintf(l.shape, sizeof l.shape, "%s", tok[1]);
  for (int i = 2; i < nt; i++) {
    if (!strncmp(tok[i], "variant=", 8) && !l.variant[0]) {
      if (strlen(tok[i] + 8) >= sizeof l.variant || !tok[i][8])
        return fail(e, line, "variant= needs a variant of at most %zu bytes",
                    sizeof l.variant - 1);
      snprintf(l.variant, sizeof l.variant, "%s", tok[i] + 8);
    } else if (!strncmp(tok[i], "dtypes=", 7) && !l.dtypes) {
      for (const char *d = tok[i] + 7;;) {
        const size_t len = strcspn(d, ",");
        scree_dtype dt;
        if (parse_dtype(d, len, &dt))
          return fail(e, line, "dtypes=: \"%.*s\" is not fp16, bf16 or fp32", (int)len, d);
        l.dtypes |= 1u << dt;
        if (!d[len]) break;
        d += len + 1;
      }
    } else {
      return fail(e, line, "\"%s\": expected variant=V or dtypes=a,b (once each)", tok[i]);
    }
  }
  scree__preset_line *nl = realloc(p->lines, (size_t)(p->nlines + 1) * sizeof *nl);
  if (!nl) return fail(e, line, "out of memory");
  p->lines = nl;
  p->lines[p->nlines++] = l;
  return 0;
}

/* Checks every line of p in every dtype it is for. */
static int check_preset(const scree__preset *p, const perr *e) {
  if (!p->nlines) return fail(e, p->line, "model %s has no op lines", p->name);
  for (int i = 0; i < p->nlines; i++)
    for (int d = 0; d < 3; d++) {
      const scree_dtype dt = (scree_dtype)all_dtypes(d);
      if (p->lines[i].dtypes && !(p->lines[i].dtypes & (1u << dt))) continue;
      check_ctx c = {.e = e};
      expand_line(p, &p->lines[i], dt, check_one, &c);
      if (c.failed) return -1;
    }
  return 0;
}

static void preset_free(scree__preset *p) {
  free(p->lines);
  p->lines = NULL;
  p->nlines = 0;
}

void scree__presets_free(scree__presets *ps) {
  if (!ps) return;
  for (int i = 0; i < ps->n; i++) preset_free(&ps->p[i]);
  free(ps->p);
  ps->p = NULL;
  ps->n = 0;
}

const scree__preset *scree__preset_find(const scree__presets *ps, const char *name) {
  for (int i = 0; ps && i < ps->n; i++)
    if (!strcmp(ps->p[i].name, name)) return &ps->p[i];
  return NULL;
}

scree_status scree__presets_parse(const char *text, const char *name, scree__presets *out,
                                  char *why, size_t why_size) {
  perr e = {why, why_size, name ? name : "presets"};
  if (why && why_size) why[0] = 0;
  scree__presets got = {0};
  scree__preset_var globals[SCREE__PRESET_MAX_VARS];
  int nglobals = 0, line = 0, rc = 0;
  scree__preset *cur = NULL;
  char buf[1024];
  for (const char *s = text; *s && !rc;) {
    const size_t len = strcspn(s, "\n");
    line++;
    if (len >= sizeof buf) {
      rc = fail(&e, line, "a line longer than %zu bytes", sizeof buf - 1);
      break;
    }
    memcpy(buf, s, len);
    buf[len] = 0;
    s += len + (s[len] == '\n');
    char *hash = strchr(buf, '#');
    if (hash) *hash = 0;
    char *b = buf;
    while (isspace((unsigned char)*b)) b++;
    size_t bl = strlen(b);
    while (bl && isspace((unsigned char)b[bl - 1])) b[--bl] = 0;
    if (!*b) continue;
    for (char *c = b; *c; c++)
      if ((unsigned char)*c < 0x20 && *c != '\t') {
        rc = fail(&e, line, "a control character (0x%02x)", (unsigned char)*c);
        break;
      }
    if (rc) break;
    if (!strncmp(b, "let", 3) && isspace((unsigned char)b[3])) {
      scree__preset_var v;
      if ((rc = parse_let(b + 4, &v, &e, line))) break;
      rc = cur ? set_var(cur->vars, &cur->nvars, &v, &e, line)
               : set_var(globals, &nglobals, &v, &e, line);
    } else if (!strncmp(b, "model", 5) && isspace((unsigned char)b[5])) {
      if (cur && (rc = check_preset(cur, &e))) break;
      char *n = b + 6;
      while (isspace((unsigned char)*n)) n++;
      char *about = strstr(n, "--");
      if (about) {
        *about = 0;
        about += 2;
        while (isspace((unsigned char)*about)) about++;
      }
      size_t nlen = strcspn(n, " \t");
      if (n[nlen] && n[nlen + strspn(n + nlen, " \t")]) {
        rc = fail(&e, line, "model: one name, then optionally -- and a description");
        break;
      }
      n[nlen] = 0;
      if (!nlen || nlen >= sizeof cur->name) {
        rc = fail(&e, line, "model: a name of 1 to %zu characters", sizeof cur->name - 1);
        break;
      }
      for (size_t i = 0; i < nlen; i++)
        if (!isalnum((unsigned char)n[i]) && !strchr("._-", n[i])) {
          rc = fail(&e, line, "model %s: a name is letters, digits, '.', '_' and '-'", n);
          break;
        }
      if (rc) break;
      if (scree__preset_find(&got, n)) {
        rc = fail(&e, line, "model %s is defined twice in this file", n);
        break;
      }
      scree__preset *np = realloc(got.p, (size_t)(got.n + 1) * sizeof *np);
      if (!np) {
        rc = fail(&e, line, "out of memory");
        break;
      }
      got.p = np;
      cur = &got.p[got.n++];
      memset(cur, 0, sizeof *cur);
      snprintf(cur->name, sizeof cur->name, "%s", n);
      cur->line = line;
      snprintf(cur->about, sizeof cur->about, "%s", about ? about : "");
      snprintf(cur->source, sizeof cur->source, "%s", e.name);
      memcpy(cur->vars, globals, sizeof globals);
      cur->nvars = nglobals;
    } else if (!cur) {
      rc = fail(&e, line, "\"%s\": expected `let` or `model NAME` before the first op line", b);
    } else {
      rc = parse_op_line(b, cur, &e, line);
    }
  }
  if (!rc && cur) rc = check_preset(cur, &e);
  if (rc) {
    scree__presets_free(&got);
    return strstr(why ? why : "", "out of memory") ? SCREE_ERROR_OUT_OF_MEMORY
                                                   : SCREE_ERROR_PARSE;
  }
  /* Append, a later model of the same name replacing an earlier one. */
  for (int i = 0; i < got.n; i++) {
    scree__preset *old = (scree__preset *)scree__preset_find(out, got.p[i].name);
    if (old) {
      preset_free(old);
      *old = got.p[i];
      got.p[i].lines = NULL;
      continue;
    }
    scree__preset *np = realloc(out->p, (size_t)(out->n + 1) * sizeof *np);
    if (!np) {
      scree__presets_free(&got);
      if (why && why_size) snprintf(why, why_size, "%s: out of memory", e.name);
      return SCREE_ERROR_OUT_OF_MEMORY;
    }
    out->p = np;
    out->p[out->n++] = got.p[i];
    got.p[i].lines = NULL;
  }
  free(got.p);
  return SCREE_OK;
}

static scree_status load_file(const char *path, scree__presets *out, char *why, size_t n) {
  char *text = scree__read_text(path, why, n);
  if (!text) return SCREE_ERROR_IO;
  const scree_status st = scree__presets_parse(text, path, out, why, n);
  free(text);
  return st;
}

/* scree__presets_load's sources: an embedded file, a file named in
 * SCREE_PRESETS. */
typedef struct pload {
  scree__presets *out;
  char *why;
  size_t why_size;
} pload;

static scree_status load_embedded(void *user, const char *name, char *text) {
  pload *l = user;
  return scree__presets_parse(text, name, l->out, l->why, l->why_size);
}

static scree_status load_listed(void *user, const char *path) {
  pload *l = user;
  return load_file(path, l->out, l->why, l->why_size);
}

scree_status scree__presets_load(const char *file, scree__presets *out, char *why,
                                 size_t why_size) {
  memset(out, 0, sizeof *out);
  pload l = {out, why, why_size};
  scree_status st = scree__embedded_each(scree__embedded_presets, scree__embedded_preset_count,
                                         load_embedded, &l);
  const char *env = getenv("SCREE_PRESETS");
  if (!st && env && *env) st = scree__path_list_each(env, load_listed, &l);
  if (!st && file) st = load_file(file, out, why, why_size);
  if (st) scree__presets_free(out);
  return st;
}

typedef struct fwd {
  int (*fn)(void *user, const scree__preset_line *l, const char *shape, const char *variant);
  void *user;
} fwd;

static int forward(void *user, const scree__preset_line *l, const char *shape,
                   const char *variant, const char *err) {
  const fwd *f = user;
  if (!shape) return 0; /* checked when parsed: cannot happen */
  return f->fn(f->user, l, shape, variant);
}

int scree__preset_expand(const scree__preset *p, scree_dtype dt,
                         int (*fn)(void *user, const scree__preset_line *l, const char *shape,
                                   const char *variant),
                         void *user) {
  fwd f = {fn, user};
  for (int i = 0; i < p->nlines; i++) {
    const scree__preset_line *l = &p->lines[i];
    if (l->dtypes && !(l->dtypes & (1u << dt))) continue;
    const int r = expand_line(p, l, dt, forward, &f);
    if (r) return r;
  }
  return 0;
}
