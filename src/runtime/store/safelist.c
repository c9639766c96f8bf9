/* safelist.c - the per-architecture safelist: the parser, the arch fallback,
 * the queries the tuner and dispatch ask, and the writer. The format is in
 * docs/safelist.md; safe_configs/<arch>.txt are the files. */
#include "store/safelist.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Generated at build time by cmake/embed_kernels.cmake from safe_configs/. */
extern const scree__embedded scree__embedded_safelists[];
extern const size_t scree__embedded_safelist_count;

const char *scree__sl_verb_name(scree__sl_verb verb) {
  switch (verb) {
  case SCREE__SL_ALLOW: return "allow";
  case SCREE__SL_DENY: return "deny";
  case SCREE__SL_DEFAULT: return "default";
  }
  return "?";
}

/* ---- small helpers ---------------------------------------------------------- */

#define set_why scree__set_why

/* "sm_<2 or 3 digits>" with an optional lowercase feature letter ("sm_90a").
 * Fills the number and the letter (0 if none). */
static int arch_split(const char *a, int *num, char *suffix) {
  if (strncmp(a, "sm_", 3)) return 0;
  const char *d = a + 3;
  int n = 0, nd = 0;
  while (isdigit((unsigned char)d[nd])) {
    if (nd == 3) return 0; /* more than 3 digits, before n can overflow */
    n = n * 10 + (d[nd++] - '0');
  }
  if (nd < 2 || d[0] == '0') return 0;
  char s = 0;
  if (d[nd]) {
    if (!islower((unsigned char)d[nd]) || d[nd + 1]) return 0;
    s = d[nd];
  }
  if (num) *num = n;
  if (suffix) *suffix = s;
  return 1;
}

static int cfg_eq(const scree__op *op, const scree__config *a,
                  const scree__config *b) {
  if (a->impl != b->impl) return 0;
  for (int i = 0; i < op->impls[a->impl].nfields; i++)
    if (a->v[i] != b->v[i]) return 0;
  return 1;
}

static int is_star(const char *sel) { return sel[0] == '*' && !sel[1]; }

static int sel_matches(const char *sel, const char *variant_str) {
  return is_star(sel) || (variant_str && !strcmp(sel, variant_str));
}

/* "rmsnorm allow tpr=128,rows=1,vec=8,cache=4" plus " dtype=..." if set. */
static void describe(const scree__sl_entry *e, char *buf, size_t size) {
  char cs[256];
  scree__config_str(e->op, &e->cfg, cs, sizeof cs);
  snprintf(buf, size, "%s %s %s%s%s", e->op->name, scree__sl_verb_name(e->verb),
           cs, is_star(e->dtype) ? "" : " dtype=",
           is_star(e->dtype) ? "" : e->dtype);
}

/* ---- the parser -------------------------------------------------------------- */

typedef struct parser {
  const char *name;
  int line;
  char *why;
  size_t why_size;
  char expect_arch[16]; /* from the file name, "" if it names none */
  int header_line;      /* line of the `arch` header, 0 before it */
  scree__safelist sl;
  int cap;
} parser;

static scree_status perr(parser *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static scree_status perr(parser *p, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  set_why(p->why, p->why_size, "%s:%d: %s", p->name, p->line, msg);
  return SCREE_ERROR_PARSE;
}

/* Cuts the next blank-separated token out of *s (NUL-terminating it);
 * NULL at the end of the line. */
static char *next_token(char **s) {
  char *p = *s;
  while (*p == ' ' || *p == '\t') p++;
  if (!*p) {
    *s = p;
    return NULL;
  }
  char *t = p;
  while (*p && *p != ' ' && *p != '\t') p++;
  if (*p) *p++ = 0;
  *s = p;
  return t;
}

static void op_names(char *buf, size_t size) {
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; scree__ops[i] && n < size; i++)
    n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? ", " : "",
                          scree__ops[i]->name);
}

/* Parses a dtype selector: "*" or the canonical variant string. Fills the
 * canonical string and the variant (the op's example variant for "*"). */
static int parse_selector(const scree__op *op, const char *text, char *canon,
                          size_t canon_size, scree__variant *var, char *why,
                          size_t why_size) {
  if (is_star(text)) {
    snprintf(canon, canon_size, "*");
    scree__variant_example(op, var);
    return 0;
  }
  if (!*text) {
    snprintf(why, why_size, "dtype= needs a variant or \"*\"");
    return -1;
  }
  char w[400];
  if (scree__variant_parse(op, text, var, w, sizeof w)) {
    /* 'variant "x=..": ...' from the parser reads 'dtype selector "x=..": ...' */
    snprintf(why, why_size, "dtype selector %s", strncmp(w, "variant ", 8) ? w : w + 8);
    return -1;
  }
  if (strlen(text) >= canon_size) {
    snprintf(why, why_size, "dtype selector \"%s\" is too long", text);
    return -1;
  }
  snprintf(canon, canon_size, "%s", text);
  return 0;
}

static scree_status parse_header(parser *p, char *rest) {
  if (p->header_line)
    return perr(p, "second arch header (the first is on line %d)", p->header_line);
  char *a = next_token(&rest);
  if (!a) return perr(p, "expected an arch name after \"arch\", as in \"arch sm_90\"");
  if (!arch_split(a, NULL, NULL) || strlen(a) >= sizeof p->sl.arch)
    return perr(p, "bad arch name \"%s\" (expected sm_<number>, optionally with a "
                   "feature letter, as in sm_90 or sm_90a)", a);
  char *extra = next_token(&rest);
  if (extra) return perr(p, "unexpected \"%s\" after the arch name", extra);
  if (p->expect_arch[0] && strcmp(p->expect_arch, a))
    return perr(p, "arch %s does not match the file name (expected arch %s)", a,
                p->expect_arch);
  snprintf(p->sl.arch, sizeof p->sl.arch, "%s", a);
  p->header_line = p->line;
  return SCREE_OK;
}

/* Checks a new entry against the earlier ones: duplicates, allow/default
 * against a deny that covers it, two defaults for one selector. */
static scree_status cross_check(parser *p, const scree__sl_entry *e) {
  char d[512];
  for (int i = 0; i < p->sl.n; i++) {
    const scree__sl_entry *o = &p->sl.entries[i];
    if (o->op != e->op || !cfg_eq(e->op, &o->cfg, &e->cfg)) continue;
    if (o->verb == e->verb && !strcmp(o->dtype, e->dtype)) {
      describe(e, d, sizeof d);
      return perr(p, "duplicate of line %d: %s", o->line, d);
    }
    /* A deny covers a line if its selector is "*" or the same. An allow "*"
     * next to a deny for one variant is fine: it narrows the allow. */
    const scree__sl_entry *deny = NULL, *other = NULL;
    if (o->verb == SCREE__SL_DENY && e->verb != SCREE__SL_DENY) deny = o, other = e;
    if (e->verb == SCREE__SL_DENY && o->verb != SCREE__SL_DENY) deny = e, other = o;
    if (deny && (is_star(deny->dtype) || !strcmp(deny->dtype, other->dtype))) {
      describe(e, d, sizeof d);
      return perr(p, "%s conflicts with %s on line %d (a config cannot be both "
                     "%s and denied for the same dtypes)",
                  d, scree__sl_verb_name(o->verb), o->line,
                  other->verb == SCREE__SL_ALLOW ? "allowed" : "the default");
    }
  }
  if (e->verb == SCREE__SL_DEFAULT)
    for (int i = 0; i < p->sl.n; i++) {
      const scree__sl_entry *o = &p->sl.entries[i];
      if (o->op == e->op && o->verb == SCREE__SL_DEFAULT && !strcmp(o->dtype, e->dtype))
        return perr(p, "second default for %s dtype=%s (the first is on line %d)",
                    e->op->name, e->dtype, o->line);
    }
  return SCREE_OK;
}

static scree_status parse_entry(parser *p, char *opname, char *rest) {
  scree__sl_entry e;
  memset(&e, 0, sizeof e);
  e.line = p->line;
  e.op = scree__op_find(opname);
  if (!e.op) {
    char names[512]; /* every registered op: past 256 bytes at 19 ops */
    op_names(names, sizeof names);
    return perr(p, "unknown op \"%s\" (expected one of: %s)", opname, names);
  }
  char *verb = next_token(&rest);
  if (!verb || !strcmp(verb, "--"))
    return perr(p, "expected a verb (allow, deny or default) after \"%s\"", opname);
  if (!strcmp(verb, "allow")) e.verb = SCREE__SL_ALLOW;
  else if (!strcmp(verb, "deny")) e.verb = SCREE__SL_DENY;
  else if (!strcmp(verb, "default")) e.verb = SCREE__SL_DEFAULT;
  else return perr(p, "unknown verb \"%s\" (expected allow, deny or default)", verb);

  char *cs = next_token(&rest);
  if (!cs || !strcmp(cs, "--") || !strncmp(cs, "dtype=", 6))
    return perr(p, "expected a config after \"%s %s\", as in %s %s %s", opname,
                verb, opname, verb, "tpr=128,rows=1,vec=8,cache=4");
  char why[512];
  if (scree__config_parse(e.op, cs, &e.cfg, why, sizeof why) != 0)
    return perr(p, "%s config %s: %s", opname, cs, why);
  char canon[256];
  scree__config_str(e.op, &e.cfg, canon, sizeof canon);
  if (strcmp(canon, cs))
    return perr(p, "%s config %s is not in canonical form (expected %s)", opname,
                cs, canon);

  /* Then, in any order: dtype=<selector>; and last "--" and the reason. */
  scree__variant var;
  scree__variant_example(e.op, &var);
  snprintf(e.dtype, sizeof e.dtype, "*");
  int have_sel = 0;
  for (;;) {
    while (*rest == ' ' || *rest == '\t') rest++;
    if (!*rest) break;
    if (rest[0] == '-' && rest[1] == '-' && (!rest[2] || rest[2] == ' ' || rest[2] == '\t')) {
      char *r = rest + 2;
      while (*r == ' ' || *r == '\t') r++;
      if (strlen(r) >= sizeof e.reason)
        return perr(p, "reason is longer than %d characters", (int)sizeof e.reason - 1);
      snprintf(e.reason, sizeof e.reason, "%s", r);
      break;
    }
    char *t = next_token(&rest);
    if (!strncmp(t, "dtype=", 6)) {
      if (have_sel) return perr(p, "dtype= given twice");
      have_sel = 1;
      if (parse_selector(e.op, t + 6, e.dtype, sizeof e.dtype, &var, why, sizeof why))
        return perr(p, "%s", why);
    } else if (!strncmp(t, "--", 2)) {
      return perr(p, "expected a space after \"--\", found \"%s\"", t);
    } else if (t[0] == '#') {
      return perr(p, "unexpected \"%s\" (a comment must be on a line of its own)", t);
    } else {
      return perr(p, "unexpected \"%s\" (expected dtype=<variant> or \"--\" and a reason)", t);
    }
  }
  if (e.verb == SCREE__SL_DENY && !e.reason[0])
    return perr(p, "deny needs a reason after \"--\"");

  scree__target target;
  if (scree__target_for_arch(p->sl.arch, &target))
    return perr(p, "bad arch %s", p->sl.arch);
  if (!scree__config_check(e.op, &e.cfg, &var, &target, why, sizeof why)) {
    if (is_star(e.dtype)) return perr(p, "%s config %s: %s", opname, cs, why);
    return perr(p, "%s config %s for %s: %s", opname, cs, e.dtype, why);
  }
  scree_status st = cross_check(p, &e);
  if (st != SCREE_OK) return st;

  if (p->sl.n == p->cap) {
    const int ncap = p->cap ? p->cap * 2 : 64;
    scree__sl_entry *ne = realloc(p->sl.entries, (size_t)ncap * sizeof *ne);
    if (!ne) {
      set_why(p->why, p->why_size, "%s:%d: out of memory", p->name, p->line);
      return SCREE_ERROR_OUT_OF_MEMORY;
    }
    p->sl.entries = ne;
    p->cap = ncap;
  }
  p->sl.entries[p->sl.n++] = e;
  return SCREE_OK;
}

static scree_status parse_line(parser *p, char *s) {
  size_t len = strlen(s);
  while (len && (s[len - 1] == '\r' || s[len - 1] == ' ' || s[len - 1] == '\t'))
    s[--len] = 0;
  while (*s == ' ' || *s == '\t') s++;
  if (!*s || *s == '#') return SCREE_OK;
  char *first = next_token(&s);
  if (!strcmp(first, "arch")) return parse_header(p, s);
  if (!p->header_line)
    return perr(p, "expected the header \"arch <name>\" before the first entry, found \"%s\"",
                first);
  return parse_entry(p, first, s);
}

/* The arch a name like "dir/sm_90.txt" or "embedded:sm_90.txt" promises. */
static void arch_of_name(const char *name, char *out, size_t size) {
  out[0] = 0;
  const char *base = name;
  for (const char *c = name; *c; c++)
    if (*c == '/' || *c == ':') base = c + 1;
  const size_t n = strlen(base);
  if (n > 4 && !strcmp(base + n - 4, ".txt") && n - 4 < size)
    snprintf(out, size, "%.*s", (int)(n - 4), base);
}

scree_status scree__safelist_parse(const char *text, const char *name,
                                   scree__safelist *out, char *why,
                                   size_t why_size) {
  if (why && why_size) why[0] = 0;
  if (!out) return SCREE_ERROR_INVALID_ARGUMENT;
  memset(out, 0, sizeof *out);
  if (!name) name = "<safelist>";
  if (!text) {
    set_why(why, why_size, "%s: no text", name);
    return SCREE_ERROR_INVALID_ARGUMENT;
  }
  parser p;
  memset(&p, 0, sizeof p);
  p.name = name;
  p.why = why;
  p.why_size = why_size;
  arch_of_name(name, p.expect_arch, sizeof p.expect_arch);
  snprintf(p.sl.source, sizeof p.sl.source, "%s", name);

  char *buf = strdup(text);
  if (!buf) {
    set_why(why, why_size, "%s: out of memory", name);
    return SCREE_ERROR_OUT_OF_MEMORY;
  }
  scree_status st = SCREE_OK;
  for (char *line = buf; line;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = 0;
    p.line++;
    if ((st = parse_line(&p, line)) != SCREE_OK) break;
    line = nl ? nl + 1 : NULL;
  }
  free(buf);
  if (st == SCREE_OK && !p.header_line) {
    if (p.expect_arch[0])
      st = perr(&p, "expected the header \"arch %s\", found the end of the file",
                p.expect_arch);
    else
      st = perr(&p, "expected the header \"arch <name>\", found the end of the file");
  }
  if (st != SCREE_OK) {
    free(p.sl.entries);
    return st;
  }
  *out = p.sl;
  return SCREE_OK;
}

/* ---- files and the arch fallback -------------------------------------------- */

scree_status scree__safelist_load_file(const char *path, scree__safelist *out,
                                       char *why, size_t why_size) {
  if (why && why_size) why[0] = 0;
  if (!out) return SCREE_ERROR_INVALID_ARGUMENT;
  memset(out, 0, sizeof *out);
  if (!path) return SCREE_ERROR_INVALID_ARGUMENT;
  char *text = scree__read_text(path, why, why_size);
  if (!text) return errno == ENOMEM ? SCREE_ERROR_OUT_OF_MEMORY : SCREE_ERROR_IO;
  scree_status st = scree__safelist_parse(text, path, out, why, why_size);
  free(text);
  return st;
}

/* Tries one arch's file. 1 if it exists (then *st says how loading went),
 * 0 if there is none. */
static int try_arch(const char *dir, const char *arch, scree__safelist *out,
                    scree_status *st, char *why, size_t why_size) {
  char file[32];
  snprintf(file, sizeof file, "%.15s.txt", arch); /* arch_split: <= 8 chars */
  if (dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    /* stat, not open: opening a FIFO would wait for a writer; whatever is
     * there, the loader reads only a regular file. */
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT) return 0;
    *st = scree__safelist_load_file(path, out, why, why_size);
    return 1;
  }
  int found = 0;
  for (size_t i = 0; i < scree__embedded_safelist_count; i++)
    found |= !strcmp(scree__embedded_safelists[i].name, file);
  if (!found) return 0;
  char *text = scree__embedded_text(scree__embedded_safelists,
                                    scree__embedded_safelist_count, file);
  if (!text) {
    set_why(why, why_size, "embedded:%s: out of memory", file);
    *st = SCREE_ERROR_OUT_OF_MEMORY;
    return 1;
  }
  char name[64];
  snprintf(name, sizeof name, "embedded:%s", file);
  *st = scree__safelist_parse(text, name, out, why, why_size);
  free(text);
  return 1;
}

scree_status scree__safelist_for_arch(const char *arch, scree__safelist *out,
                                      char *why, size_t why_size) {
  if (why && why_size) why[0] = 0;
  if (!out) return SCREE_ERROR_INVALID_ARGUMENT;
  memset(out, 0, sizeof *out);
  int num;
  char suffix;
  if (!arch || !arch_split(arch, &num, &suffix)) {
    set_why(why, why_size, "bad arch name \"%s\" (expected sm_<number>, as in sm_90)",
            arch ? arch : "(null)");
    return SCREE_ERROR_INVALID_ARGUMENT;
  }
  const char *dir = getenv("SCREE_SAFELIST_DIR");
  if (dir && !*dir) dir = NULL;
  /* A directory that is not there is a mistake to report, not an empty set
   * of lists (which would let `safelist export` write an empty list). */
  if (dir) {
    struct stat sb;
    const int bad = stat(dir, &sb) != 0 ? errno : !S_ISDIR(sb.st_mode) ? ENOTDIR : 0;
    if (bad) {
      set_why(why, why_size, "SCREE_SAFELIST_DIR=%s: %s", dir, strerror(bad));
      return SCREE_ERROR_IO;
    }
  }

  /* The order of docs/safelist.md "Which file an arch gets". */
  char tried[16][16];
  int ntried = 0;
  snprintf(tried[ntried++], sizeof tried[0], "%s", arch);
  if (suffix) snprintf(tried[ntried++], sizeof tried[0], "sm_%d", num);
  for (int n = num - 1; n / 10 == num / 10 && ntried < 15; n--)
    snprintf(tried[ntried++], sizeof tried[0], "sm_%d", n);
  if (num > 80) snprintf(tried[ntried++], sizeof tried[0], "sm_80");

  char list[256];
  size_t len = 0;
  list[0] = 0;
  for (int i = 0; i < ntried; i++) {
    int dup = 0;
    for (int j = 0; j < i; j++) dup |= !strcmp(tried[i], tried[j]);
    if (dup) continue;
    scree_status st = SCREE_OK;
    if (try_arch(dir, tried[i], out, &st, why, why_size)) return st;
    if (len < sizeof list)
      len += (size_t)snprintf(list + len, sizeof list - len, "%s%s.txt",
                              len ? ", " : "", tried[i]);
  }
  set_why(why, why_size, "no safelist for %s in %s (tried %s)", arch,
          dir ? dir : "the embedded safe_configs", list);
  return SCREE_ERROR_NOT_FOUND;
}

void scree__safelist_free(scree__safelist *s) {
  if (!s) return;
  free(s->entries);
  memset(s, 0, sizeof *s);
}

/* ---- queries ----------------------------------------------------------------- */

static int entry_matches(const scree__sl_entry *e, scree__sl_verb verb,
                         const scree__op *op, const char *variant_str,
                         const scree__config *cfg) {
  return e->verb == verb && e->op == op && sel_matches(e->dtype, variant_str) &&
         (!cfg || cfg_eq(op, &e->cfg, cfg));
}

const scree__sl_entry *scree__safelist_denied(const scree__safelist *s,
                                              const scree__op *op,
                                              const char *variant_str,
                                              const scree__config *cfg) {
  if (!s || !op || !cfg) return NULL;
  const scree__sl_entry *star = NULL;
  for (int i = 0; i < s->n; i++) {
    const scree__sl_entry *e = &s->entries[i];
    if (!entry_matches(e, SCREE__SL_DENY, op, variant_str, cfg)) continue;
    if (!is_star(e->dtype)) return e;
    if (!star) star = e;
  }
  return star;
}

int scree__safelist_allows(const scree__safelist *s, const scree__op *op,
                           const char *variant_str, const scree__config *cfg) {
  if (!s || !op || !cfg) return 0;
  int allowed = 0;
  for (int i = 0; i < s->n && !allowed; i++)
    allowed = entry_matches(&s->entries[i], SCREE__SL_ALLOW, op, variant_str, cfg);
  return allowed && !scree__safelist_denied(s, op, variant_str, cfg);
}

int scree__safelist_candidates(const scree__safelist *s, const scree__op *op,
                               const char *variant_str, scree__config *out,
                               int cap) {
  if (!s || !op) return 0;
  int count = 0;
  for (int i = 0; i < s->n; i++) {
    const scree__sl_entry *e = &s->entries[i];
    if (!entry_matches(e, SCREE__SL_ALLOW, op, variant_str, NULL)) continue;
    if (scree__safelist_denied(s, op, variant_str, &e->cfg)) continue;
    int seen = 0; /* allowed by "*" and by a dtype line: list it once */
    for (int j = 0; j < i && !seen; j++)
      seen = entry_matches(&s->entries[j], SCREE__SL_ALLOW, op, variant_str, &e->cfg);
    if (seen) continue;
    if (out && count < cap) out[count] = e->cfg;
    count++;
  }
  return count;
}

int scree__safelist_default(const scree__safelist *s, const scree__op *op,
                            const char *variant_str, scree__config *out) {
  if (!s || !op) return 0;
  const scree__sl_entry *best = NULL;
  for (int i = 0; i < s->n; i++) {
    const scree__sl_entry *e = &s->entries[i];
    if (!entry_matches(e, SCREE__SL_DEFAULT, op, variant_str, NULL)) continue;
    if (scree__safelist_denied(s, op, variant_str, &e->cfg)) continue;
    if (!best || (is_star(best->dtype) && !is_star(e->dtype))) best = e;
  }
  if (!best) return 0;
  if (out) *out = best->cfg;
  return 1;
}

/* ---- the writer ---------------------------------------------------------------- */

int scree__safelist_write(FILE *f, const scree__safelist *s, const char *comment) {
  if (comment && *comment) {
    const char *c = comment;
    while (*c) {
      const char *nl = strchr(c, '\n');
      const int len = nl ? (int)(nl - c) : (int)strlen(c);
      if (len) fprintf(f, "# %.*s\n", len, c);
      else fputs("#\n", f);
      c = nl ? nl + 1 : c + len;
    }
    fputc('\n', f);
  }
  fprintf(f, "arch %s\n", s->arch);
  for (int k = 0; scree__ops[k]; k++) {
    const scree__op *op = scree__ops[k];
    int first = 1;
    for (int i = 0; i < s->n; i++) {
      const scree__sl_entry *e = &s->entries[i];
      if (e->op != op) continue;
      if (first) fputc('\n', f);
      first = 0;
      char cs[256];
      scree__config_str(op, &e->cfg, cs, sizeof cs);
      fprintf(f, "%s %s %s", op->name, scree__sl_verb_name(e->verb), cs);
      if (e->dtype[0] && !is_star(e->dtype)) fprintf(f, " dtype=%s", e->dtype);
      if (e->reason[0]) {
        /* One line, and nothing that drives a terminal showing the file;
         * cut to fit the field (escapes can make it longer), since the
         * parser refuses a longer reason. */
        char flat[sizeof e->reason], esc[sizeof e->reason];
        snprintf(flat, sizeof flat, "%s", e->reason);
        for (char *r = flat; *r; r++)
          if (*r == '\n' || *r == '\r') *r = ' ';
        fprintf(f, " -- %s", scree__escape_text(esc, sizeof esc, flat));
      }
      fputc('\n', f);
    }
  }
  return ferror(f) ? -1 : 0;
}
