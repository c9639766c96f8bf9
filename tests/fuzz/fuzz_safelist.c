/* fuzz_safelist.c - the safelist parser (src/runtime/store/safelist.c) on any text.
 * A list that parses must answer the queries as safelist.h says, and what
 * scree__safelist_write makes of it must parse back to the same entries
 * (docs/safelist.md, "Regenerating"). Seeds: tests/fuzz/corpus/safelist/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "fuzz.h"
#include "store/safelist.h"

/* A reason as it reads back after the writer: newlines and carriage returns
 * become spaces, what must not reach a terminal or a line-based file is
 * escaped (scree__escape_text) and cut to fit the field, and the parser
 * trims the blanks at either end. */
static void written_reason(const char *r, char *out, size_t size) {
  char flat[sizeof((scree__sl_entry *)0)->reason], esc[sizeof flat];
  size_t n = 0;
  for (; *r && n + 1 < sizeof flat; r++) flat[n++] = *r == '\n' || *r == '\r' ? ' ' : *r;
  flat[n] = 0;
  scree__escape_text(esc, sizeof esc, flat);
  n = strlen(esc);
  while (n && (esc[n - 1] == ' ' || esc[n - 1] == '\t')) n--;
  esc[n] = 0;
  size_t lead = 0;
  while (esc[lead] == ' ' || esc[lead] == '\t') lead++;
  snprintf(out, size, "%s", esc + lead);
}

/* 1 if a and b say the same thing (their line numbers aside). */
static int same_entry(const scree__sl_entry *a, const scree__sl_entry *b) {
  char ra[sizeof a->reason];
  written_reason(a->reason, ra, sizeof ra);
  return a->op == b->op && a->verb == b->verb && !memcmp(&a->cfg, &b->cfg, sizeof a->cfg) &&
         !strcmp(a->dtype, b->dtype) && !strcmp(ra, b->reason);
}

/* The queries for each line's op and selector, against what safelist.h
 * promises: an allow line's config is allowed unless a deny matches; a deny
 * line matches itself; candidates are allowed and listed once; a default
 * is not denied. */
static void check_queries(const scree__safelist *s) {
  scree__config *cand = NULL;
  for (int i = 0; i < s->n; i++) {
    const scree__sl_entry *e = &s->entries[i];
    const char *v = strcmp(e->dtype, "*") ? e->dtype : NULL;
    const int allowed = scree__safelist_allows(s, e->op, v, &e->cfg);
    const scree__sl_entry *denied = scree__safelist_denied(s, e->op, v, &e->cfg);
    FUZZ_CHECK(!(allowed && denied), "line %d: allowed and denied at once", e->line);
    if (e->verb == SCREE__SL_ALLOW)
      FUZZ_CHECK(allowed == !denied, "line %d: an allow line neither allowed nor denied",
                 e->line);
    if (e->verb == SCREE__SL_DENY)
      FUZZ_CHECK(denied != NULL, "line %d: a deny line that does not deny", e->line);

    const int n = scree__safelist_candidates(s, e->op, v, NULL, 0);
    FUZZ_CHECK(n >= 0 && n <= s->n, "line %d: %d candidates from %d lines", e->line, n, s->n);
    cand = realloc(cand, ((size_t)n + 1) * sizeof *cand);
    if (!cand) abort();
    FUZZ_CHECK(scree__safelist_candidates(s, e->op, v, cand, n) == n,
               "line %d: candidates counted twice differ", e->line);
    for (int k = 0; k < n; k++) {
      FUZZ_CHECK(scree__safelist_allows(s, e->op, v, &cand[k]),
                 "line %d: candidate %d is not allowed", e->line, k);
      for (int j = 0; j < k; j++)
        FUZZ_CHECK(memcmp(&cand[j], &cand[k], sizeof cand[k]),
                   "line %d: candidates %d and %d are the same", e->line, j, k);
    }
    scree__config def;
    if (scree__safelist_default(s, e->op, v, &def))
      FUZZ_CHECK(!scree__safelist_denied(s, e->op, v, &def), "line %d: the default is denied",
                 e->line);
  }
  free(cand);
}

/* Writes s and parses the text back as the embedded file of its arch. */
static void check_round_trip(const scree__safelist *s) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) abort();
  scree__safelist_write(f, s, "fuzz_safelist\nround trip");
  fclose(f);
  char name[64], why[1024];
  snprintf(name, sizeof name, "embedded:%s.txt", s->arch);
  scree__safelist back;
  const scree_status st = scree__safelist_parse(text, name, &back, why, sizeof why);
  FUZZ_CHECK(st == SCREE_OK, "the writer's output does not parse: %s\n%s", why, text);
  FUZZ_CHECK(back.n == s->n && !strcmp(back.arch, s->arch),
             "the writer's output parses to %d entries of %s, not %d of %s", back.n, back.arch,
             s->n, s->arch);
  /* The writer groups the lines by op in registry order, file order within
   * an op. */
  int k = 0;
  for (int o = 0; scree__ops[o]; o++)
    for (int i = 0; i < s->n; i++)
      if (s->entries[i].op == scree__ops[o]) {
        FUZZ_CHECK(same_entry(&s->entries[i], &back.entries[k]),
                   "line %d reads back differently from the writer's output:\n%s",
                   s->entries[i].line, text);
        k++;
      }
  scree__safelist_free(&back);
  free(text);
}

/* Parses the input; a list that parses is queried and written back. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_cstr(data, size);
  scree__safelist s;
  char why[1024];
  const scree_status st = scree__safelist_parse(text, "fuzz", &s, why, sizeof why);
  if (st == SCREE_OK) {
    FUZZ_CHECK(s.arch[0] && (s.n == 0 || s.entries), "a parsed list without arch or entries");
    check_queries(&s);
    check_round_trip(&s);
  } else {
    FUZZ_CHECK(st == SCREE_ERROR_PARSE && s.n == 0 && !s.entries && why[0],
               "a failed parse returns %d with %d entries and \"%s\"", (int)st, s.n, why);
  }
  scree__safelist_free(&s);
  free(text);
  return 0;
}
