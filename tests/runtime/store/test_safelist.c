/* test_safelist.c - the per-architecture safelist: the embedded files, the
 * parser and its messages, the queries, the writer, SCREE_SAFELIST_DIR and
 * the arch fallback. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

extern const scree__embedded scree__embedded_safelists[];
extern const size_t scree__embedded_safelist_count;

static const scree__op *rms(void) {
  const scree__op *op = scree__op_find("rmsnorm");
  ck_assert_ptr_nonnull(op);
  return op;
}

static scree__config cfg_of(const char *s) {
  scree__config c;
  char why[256];
  ck_assert_msg(scree__config_parse(rms(), s, &c, why, sizeof why) == 0, "%s: %s", s, why);
  return c;
}

static int cfg_same(const scree__config *a, const scree__config *b) {
  return memcmp(a->v, b->v, sizeof a->v) == 0;
}

static scree__safelist parse_ok(const char *text, const char *name) {
  scree__safelist s;
  char why[1024];
  scree_status st = scree__safelist_parse(text, name, &s, why, sizeof why);
  ck_assert_msg(st == SCREE_OK, "parse failed: %s: %s", scree_status_name(st), why);
  return s;
}

static void mkfile(const char *dir, const char *name, const char *text) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  ck_assert_msg(f != NULL, "cannot write %s", path);
  fputs(text, f);
  fclose(f);
}

static void rm_tmpdir(const char *dir) {
  const char *names[] = {"sm_80.txt", "sm_86.txt", "sm_90.txt", "sm_90a.txt", "sm_95.txt"};
  char path[4096];
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    unlink(path);
  }
  rmdir(dir);
}

static char *make_tmpdir(void) {
  static char dir[64];
  snprintf(dir, sizeof dir, "/tmp/scree_safelist_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  return dir;
}

/* ---- the shipped files ------------------------------------------------------- */

START_TEST(embedded_files_parse_and_pass_check) {
  const scree__op *op = rms();
  ck_assert_uint_ge(scree__embedded_safelist_count, 2);
  int saw80 = 0, saw90 = 0;
  for (size_t i = 0; i < scree__embedded_safelist_count; i++) {
    const scree__embedded *e = &scree__embedded_safelists[i];
    char *text = malloc(e->size + 1);
    memcpy(text, e->data, e->size);
    text[e->size] = 0;
    char name[128], why[1024];
    snprintf(name, sizeof name, "embedded:%s", e->name);
    scree__safelist s;
    scree_status st = scree__safelist_parse(text, name, &s, why, sizeof why);
    free(text);
    ck_assert_msg(st == SCREE_OK, "%s: %s", name, why);
    saw80 |= !strcmp(s.arch, "sm_80");
    saw90 |= !strcmp(s.arch, "sm_90");
    ck_assert_int_gt(s.n, 0);
    for (int k = 0; k < s.n; k++) {
      const scree__sl_entry *en = &s.entries[k];
      /* An entry for one variant passes the op's check for it; a "*" entry
       * passes for the op's example variant (others may reject it, e.g. a
       * larger head_dim's shared memory: the tuner then skips it). */
      scree__variant var;
      char cwhy[256];
      scree__target t;
      scree__target_for_arch(s.arch, &t);
      if (strcmp(en->dtype, "*"))
        ck_assert_int_eq(scree__variant_parse(en->op, en->dtype, &var, cwhy, sizeof cwhy), 0);
      else
        scree__variant_example(en->op, &var);
      ck_assert_msg(scree__config_check(en->op, &en->cfg, &var, &t, cwhy, sizeof cwhy),
                    "%s:%d fails its check: %s", name, en->line, cwhy);
      if (en->verb == SCREE__SL_DENY) ck_assert_str_ne(en->reason, "");
    }
    /* Each allowed config appears once in the candidate list. */
    scree__config c[512];
    const int nc = scree__safelist_candidates(&s, op, "x=fp16,w=fp16,y=fp16", c, 512);
    ck_assert_int_gt(nc, 0);
    ck_assert_int_le(nc, 512);
    for (int a = 0; a < nc; a++)
      for (int b = a + 1; b < nc; b++) ck_assert(!cfg_same(&c[a], &c[b]));
    scree__safelist_free(&s);
  }
  ck_assert(saw80 && saw90);
}
END_TEST

START_TEST(embedded_via_for_arch) {
  unsetenv("SCREE_SAFELIST_DIR");
  const char *archs[] = {"sm_80", "sm_90"};
  for (int i = 0; i < 2; i++) {
    scree__safelist s;
    char why[1024], src[64];
    ck_assert_int_eq(scree__safelist_for_arch(archs[i], &s, why, sizeof why), SCREE_OK);
    ck_assert_str_eq(s.arch, archs[i]);
    snprintf(src, sizeof src, "embedded:%s.txt", archs[i]);
    ck_assert_str_eq(s.source, src);
    /* RMSNorm: allow lines for 16-byte-ish vectors for every dtype, no deny,
     * no default (the built-in heuristic is the default). */
    int nrms = 0;
    scree__config d;
    ck_assert_int_eq(scree__safelist_default(&s, rms(), "x=fp16,w=fp16,y=fp16", &d), 0);
    for (int k = 0; k < s.n; k++) {
      if (s.entries[k].op != rms()) continue;
      nrms++;
      ck_assert_str_eq(s.entries[k].dtype, "*");
    }
    ck_assert_int_ge(nrms, 30);
    scree__safelist_free(&s);
  }
}
END_TEST

/* ---- a good file --------------------------------------------------------------- */

static const char *good_text =
    "# a test safelist\n"
    "\n"
    "   # indented comment\n"
    "arch sm_90\n"
    "rmsnorm allow tpr=128,rows=1,vec=8,cache=4\n"
    "\trmsnorm   allow\ttpr=256,rows=1,vec=8,cache=2  -- two vectors per thread  \r\n"
    "rmsnorm allow tpr=64,rows=2,vec=4,cache=4 dtype=x=fp32,w=fp32,y=fp32\n"
    "rmsnorm deny tpr=1024,rows=1,vec=1,cache=1 -- slow: 3x default on every bucket\n"
    "rmsnorm deny tpr=128,rows=1,vec=8,cache=4 dtype=x=bf16,w=bf16,y=bf16 -- wrong answer: # not a comment\n"
    "rmsnorm default tpr=128,rows=1,vec=8,cache=4\n"
    "rmsnorm default tpr=256,rows=1,vec=8,cache=2 dtype=x=fp16,w=fp16,y=fp16 -- measured\n"
    "rmsnorm allow tpr=32,rows=4,vec=8,cache=2\n"
    "rmsnorm allow tpr=128,rows=1,vec=8,cache=4 dtype=x=fp16,w=fp16,y=fp16\n"
    "rmsnorm default tpr=64,rows=2,vec=4,cache=4 dtype=x=fp32,w=fp32,y=fp32\n"
    "# end";

START_TEST(good_file_entries) {
  scree__safelist s = parse_ok(good_text, "sm_90.txt");
  ck_assert_str_eq(s.arch, "sm_90");
  ck_assert_str_eq(s.source, "sm_90.txt");
  ck_assert_int_eq(s.n, 10);
  const struct {
    scree__sl_verb verb;
    const char *cfg, *dtype, *reason;
    int line;
  } want[] = {
      {SCREE__SL_ALLOW, "tpr=128,rows=1,vec=8,cache=4", "*", "", 5},
      {SCREE__SL_ALLOW, "tpr=256,rows=1,vec=8,cache=2", "*", "two vectors per thread", 6},
      {SCREE__SL_ALLOW, "tpr=64,rows=2,vec=4,cache=4", "x=fp32,w=fp32,y=fp32", "", 7},
      {SCREE__SL_DENY, "tpr=1024,rows=1,vec=1,cache=1", "*", "slow: 3x default on every bucket", 8},
      {SCREE__SL_DENY, "tpr=128,rows=1,vec=8,cache=4", "x=bf16,w=bf16,y=bf16",
       "wrong answer: # not a comment", 9},
      {SCREE__SL_DEFAULT, "tpr=128,rows=1,vec=8,cache=4", "*", "", 10},
      {SCREE__SL_DEFAULT, "tpr=256,rows=1,vec=8,cache=2", "x=fp16,w=fp16,y=fp16", "measured", 11},
      {SCREE__SL_ALLOW, "tpr=32,rows=4,vec=8,cache=2", "*", "", 12},
      {SCREE__SL_ALLOW, "tpr=128,rows=1,vec=8,cache=4", "x=fp16,w=fp16,y=fp16", "", 13},
      {SCREE__SL_DEFAULT, "tpr=64,rows=2,vec=4,cache=4", "x=fp32,w=fp32,y=fp32", "", 14},
  };
  for (int i = 0; i < 10; i++) {
    const scree__sl_entry *e = &s.entries[i];
    scree__config c = cfg_of(want[i].cfg);
    ck_assert_ptr_eq(e->op, rms());
    ck_assert_int_eq(e->verb, want[i].verb);
    ck_assert_msg(cfg_same(&e->cfg, &c), "entry %d config", i);
    ck_assert_str_eq(e->dtype, want[i].dtype);
    ck_assert_str_eq(e->reason, want[i].reason);
    ck_assert_int_eq(e->line, want[i].line);
  }
  scree__safelist_free(&s);
  ck_assert_int_eq(s.n, 0);
  ck_assert_ptr_null(s.entries);
  scree__safelist_free(&s); /* twice is harmless */
  scree__safelist_free(NULL);
}
END_TEST

START_TEST(header_only_and_names_without_txt) {
  scree__safelist s = parse_ok("arch sm_90a\n", "embedded:sm_90a.txt");
  ck_assert_str_eq(s.arch, "sm_90a");
  ck_assert_int_eq(s.n, 0);
  scree__safelist_free(&s);
  /* A name that is no <arch>.txt file name puts no constraint on the arch. */
  s = parse_ok("arch sm_100\nrmsnorm allow tpr=8,rows=16,vec=8,cache=1", "<string>");
  ck_assert_str_eq(s.arch, "sm_100");
  ck_assert_int_eq(s.n, 1);
  scree__safelist_free(&s);
}
END_TEST

/* ---- errors ------------------------------------------------------------------- */

#define H "arch sm_90\n"
#define A1 "rmsnorm allow tpr=128,rows=1,vec=8,cache=4\n"
static const struct {
  const char *text, *why;
} bad[] = {
    /* unknown op, verb */
    {H "rmsnrom allow tpr=128,rows=1,vec=8,cache=4\n",
     "sm_90.txt:2: unknown op \"rmsnrom\" (expected one of: rmsnorm, ..."},
    {H "# c\n\nrmsnorm alow tpr=128,rows=1,vec=8,cache=4\n",
     "sm_90.txt:4: unknown verb \"alow\" (expected allow, deny or default)"},
    {H "rmsnorm\n", "sm_90.txt:2: expected a verb (allow, deny or default) after \"rmsnorm\""},
    {H "rmsnorm allow\n",
     "sm_90.txt:2: expected a config after \"rmsnorm allow\", as in rmsnorm allow "
     "tpr=128,rows=1,vec=8,cache=4"},
    {H "rmsnorm allow -- why\n",
     "sm_90.txt:2: expected a config after \"rmsnorm allow\", as in rmsnorm allow "
     "tpr=128,rows=1,vec=8,cache=4"},
    /* bad config strings */
    {H "rmsnorm allow tpr=128,rows=1,vec=8\n",
     "sm_90.txt:2: rmsnorm config tpr=128,rows=1,vec=8: field cache missing"},
    {H "rmsnorm allow tpr=128,rows=1,vec=8,cache=4,warps=2\n",
     "sm_90.txt:2: rmsnorm config tpr=128,rows=1,vec=8,cache=4,warps=2: rmsnorm has no "
     "config field \"warps\""},
    {H "rmsnorm allow tpr=abc,rows=1,vec=8,cache=4\n",
     "sm_90.txt:2: rmsnorm config tpr=abc,rows=1,vec=8,cache=4: field tpr: expected an "
     "integer at \"abc,rows=1,vec=8,cache=4\""},
    {H "rmsnorm allow rows=1,tpr=128,vec=8,cache=4\n",
     "sm_90.txt:2: rmsnorm config rows=1,tpr=128,vec=8,cache=4 is not in canonical form "
     "(expected tpr=128,rows=1,vec=8,cache=4)"},
    /* configs failing the op's check */
    {H A1 "rmsnorm allow tpr=96,rows=1,vec=8,cache=4\n",
     "sm_90.txt:3: rmsnorm config tpr=96,rows=1,vec=8,cache=4: tpr=96 must be a power of "
     "two in [8, 1024]"},
    {H "rmsnorm deny tpr=128,rows=1,vec=8,cache=16 -- too big\n",
     "sm_90.txt:2: rmsnorm config tpr=128,rows=1,vec=8,cache=16: vec*cache=128 exceeds 64 "
     "elements of registers per thread"},
    {H "rmsnorm allow tpr=1024,rows=2,vec=8,cache=4 dtype=x=fp32,w=fp16,y=fp32\n",
     "sm_90.txt:2: rmsnorm config tpr=1024,rows=2,vec=8,cache=4 for x=fp32,w=fp16,y=fp32: "
     "tpr*rows=2048 must be in [32, 1024]"},
    /* deny without a reason */
    {H "rmsnorm deny tpr=128,rows=1,vec=8,cache=4\n",
     "sm_90.txt:2: deny needs a reason after \"--\""},
    {H "rmsnorm deny tpr=128,rows=1,vec=8,cache=4 --   \n",
     "sm_90.txt:2: deny needs a reason after \"--\""},
    {H "rmsnorm deny tpr=128,rows=1,vec=8,cache=4 --slow\n",
     "sm_90.txt:2: expected a space after \"--\", found \"--slow\""},
    /* duplicates and conflicts */
    {H A1 "# x\n" A1, "sm_90.txt:4: duplicate of line 2: rmsnorm allow tpr=128,rows=1,vec=8,cache=4"},
    {H "rmsnorm deny tpr=128,rows=1,vec=8,cache=4 dtype=x=fp16,w=fp16,y=fp16 -- a\n"
       "rmsnorm deny tpr=128,rows=1,vec=8,cache=4 dtype=x=fp16,w=fp16,y=fp16 -- b\n",
     "sm_90.txt:3: duplicate of line 2: rmsnorm deny tpr=128,rows=1,vec=8,cache=4 "
     "dtype=x=fp16,w=fp16,y=fp16"},
    {H A1 "rmsnorm deny tpr=128,rows=1,vec=8,cache=4 -- slow\n",
     "sm_90.txt:3: rmsnorm deny tpr=128,rows=1,vec=8,cache=4 conflicts with allow on line 2 "
     "(a config cannot be both allowed and denied for the same dtypes)"},
    {H "rmsnorm deny tpr=128,rows=1,vec=8,cache=4 -- slow\n" A1,
     "sm_90.txt:3: rmsnorm allow tpr=128,rows=1,vec=8,cache=4 conflicts with deny on line 2 "
     "(a config cannot be both allowed and denied for the same dtypes)"},
    {H "rmsnorm deny tpr=128,rows=1,vec=8,cache=4 -- slow\n"
       "rmsnorm allow tpr=128,rows=1,vec=8,cache=4 dtype=x=fp16,w=fp16,y=fp16\n",
     "sm_90.txt:3: rmsnorm allow tpr=128,rows=1,vec=8,cache=4 dtype=x=fp16,w=fp16,y=fp16 "
     "conflicts with deny on line 2 (a config cannot be both allowed and denied for the "
     "same dtypes)"},
    {H "rmsnorm default tpr=128,rows=1,vec=8,cache=4\n"
       "rmsnorm deny tpr=128,rows=1,vec=8,cache=4 -- slow\n",
     "sm_90.txt:3: rmsnorm deny tpr=128,rows=1,vec=8,cache=4 conflicts with default on "
     "line 2 (a config cannot be both the default and denied for the same dtypes)"},
    /* two defaults for one selector */
    {H "rmsnorm default tpr=128,rows=1,vec=8,cache=4\n"
       "rmsnorm default tpr=256,rows=1,vec=8,cache=2\n",
     "sm_90.txt:3: second default for rmsnorm dtype=* (the first is on line 2)"},
    {H "rmsnorm default tpr=128,rows=1,vec=8,cache=4 dtype=x=bf16,w=bf16,y=bf16\n" A1
       "rmsnorm default tpr=256,rows=1,vec=8,cache=2 dtype=x=bf16,w=bf16,y=bf16\n",
     "sm_90.txt:4: second default for rmsnorm dtype=x=bf16,w=bf16,y=bf16 (the first is on "
     "line 2)"},
    /* the header */
    {"", "sm_90.txt:1: expected the header \"arch sm_90\", found the end of the file"},
    {"# only comments\n\n", "sm_90.txt:3: expected the header \"arch sm_90\", found the end of the file"},
    {"# c\n" A1 H, "sm_90.txt:2: expected the header \"arch <name>\" before the first entry, "
                   "found \"rmsnorm\""},
    {"arch sm_80\n" A1, "sm_90.txt:1: arch sm_80 does not match the file name (expected arch sm_90)"},
    {H A1 H, "sm_90.txt:3: second arch header (the first is on line 1)"},
    {"arch\n", "sm_90.txt:1: expected an arch name after \"arch\", as in \"arch sm_90\""},
    {"arch gfx90a\n", "sm_90.txt:1: bad arch name \"gfx90a\" (expected sm_<number>, optionally "
                      "with a feature letter, as in sm_90 or sm_90a)"},
    {"arch sm_90 sm_80\n", "sm_90.txt:1: unexpected \"sm_80\" after the arch name"},
    {"arch sm_99999999999999999999\n",
     "sm_90.txt:1: bad arch name \"sm_99999999999999999999\" (expected sm_<number>, "
     "optionally with a feature letter, as in sm_90 or sm_90a)"},
    /* the selector and the rest of the line */
    {H "rmsnorm allow tpr=128,rows=1,vec=8,cache=4 dtype=x=fp8,w=fp16,y=fp16\n",
     "sm_90.txt:2: dtype selector \"x=fp8,w=fp16,y=fp16\": x=fp8 is not fp32, fp16 or bf16"},
    {H "rmsnorm allow tpr=128,rows=1,vec=8,cache=4 dtype=x=fp16,y=fp16\n",
     "sm_90.txt:2: dtype selector \"x=fp16,y=fp16\": field w missing"},
    {H "rmsnorm allow tpr=128,rows=1,vec=8,cache=4 dtype=w=fp16,x=fp16,y=fp16\n",
     "sm_90.txt:2: dtype selector \"w=fp16,x=fp16,y=fp16\" is not in canonical form "
     "(expected x=fp16,w=fp16,y=fp16)"},
    {H "rmsnorm allow tpr=128,rows=1,vec=8,cache=4 dtype=\n",
     "sm_90.txt:2: dtype= needs a variant or \"*\""},
    {H "rmsnorm allow tpr=128,rows=1,vec=8,cache=4 dtype=* dtype=*\n",
     "sm_90.txt:2: dtype= given twice"},
    {H "rmsnorm allow tpr=128,rows=1,vec=8,cache=4 # fast\n",
     "sm_90.txt:2: unexpected \"#\" (a comment must be on a line of its own)"},
    {H "rmsnorm allow tpr=128,rows=1,vec=8,cache=4 fast\n",
     "sm_90.txt:2: unexpected \"fast\" (expected dtype=<variant> or \"--\" and a reason)"},
};
#undef H
#undef A1

START_TEST(parse_errors) {
  const int i = _i;
  scree__safelist s;
  memset(&s, 0x5a, sizeof s);
  char why[1024];
  scree_status st = scree__safelist_parse(bad[i].text, "sm_90.txt", &s, why, sizeof why);
  ck_assert_msg(st == SCREE_ERROR_PARSE, "case %d: status %s, why \"%s\"", i,
                scree_status_name(st), why);
  /* A wanted message ending in "..." is a prefix (the list of ops grows). */
  const size_t n = strlen(bad[i].why);
  const int prefix = n > 3 && !strcmp(bad[i].why + n - 3, "...");
  ck_assert_msg(prefix ? !strncmp(why, bad[i].why, n - 3) : !strcmp(why, bad[i].why),
                "case %d:\n  got  \"%s\"\n  want \"%s\"", i, why, bad[i].why);
  ck_assert_int_eq(s.n, 0);
  ck_assert_ptr_null(s.entries);
}
END_TEST

START_TEST(error_names_the_path_and_embedded_name) {
  scree__safelist s;
  char why[1024];
  ck_assert_int_eq(scree__safelist_parse("arch sm_90\nfoo allow x\n", "embedded:sm_90.txt", &s,
                                         why, sizeof why),
                   SCREE_ERROR_PARSE);
  /* Every registered op is listed, in registry order. */
  char want[512] = "embedded:sm_90.txt:2: unknown op \"foo\" (expected one of: ";
  for (int k = 0; scree__ops[k]; k++)
    snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s", k ? ", " : "",
             scree__ops[k]->name);
  snprintf(want + strlen(want), sizeof want - strlen(want), ")");
  ck_assert_str_eq(why, want);
  ck_assert_int_eq(scree__safelist_parse("arch sm_90\n", "/some/dir/sm_86.txt", &s, why,
                                         sizeof why),
                   SCREE_ERROR_PARSE);
  ck_assert_str_eq(why, "/some/dir/sm_86.txt:1: arch sm_90 does not match the file name "
                        "(expected arch sm_86)");
  /* why may be NULL or tiny. */
  ck_assert_int_eq(scree__safelist_parse("arch sm_90\nfoo\n", "sm_90.txt", &s, NULL, 0),
                   SCREE_ERROR_PARSE);
  char tiny[8];
  ck_assert_int_eq(scree__safelist_parse("arch sm_90\nfoo\n", "sm_90.txt", &s, tiny,
                                         sizeof tiny),
                   SCREE_ERROR_PARSE);
  ck_assert_str_eq(tiny, "sm_90.t");
}
END_TEST

START_TEST(legal_combinations) {
  /* An allow for every variant narrowed by a deny for one; defaults for
   * different selectors; allow and default of one config. */
  scree__safelist s = parse_ok(
      "arch sm_90\n"
      "rmsnorm allow tpr=128,rows=1,vec=8,cache=4\n"
      "rmsnorm deny tpr=128,rows=1,vec=8,cache=4 dtype=x=fp32,w=fp32,y=fp32 -- slow\n"
      "rmsnorm allow tpr=128,rows=1,vec=8,cache=4 dtype=x=fp16,w=fp16,y=fp16\n"
      "rmsnorm default tpr=128,rows=1,vec=8,cache=4\n"
      "rmsnorm default tpr=128,rows=1,vec=8,cache=4 dtype=x=fp16,w=fp16,y=fp16\n",
      "sm_90.txt");
  ck_assert_int_eq(s.n, 5);
  scree__safelist_free(&s);
}
END_TEST

/* ---- queries ------------------------------------------------------------------ */

START_TEST(queries) {
  const scree__op *op = rms();
  scree__safelist s = parse_ok(good_text, "sm_90.txt");
  const char *f16 = "x=fp16,w=fp16,y=fp16", *b16 = "x=bf16,w=bf16,y=bf16",
             *f32 = "x=fp32,w=fp32,y=fp32", *mix = "x=fp16,w=fp32,y=fp16";
  const scree__config c128 = cfg_of("tpr=128,rows=1,vec=8,cache=4"),
                      c256 = cfg_of("tpr=256,rows=1,vec=8,cache=2"),
                      c64 = cfg_of("tpr=64,rows=2,vec=4,cache=4"),
                      c1024 = cfg_of("tpr=1024,rows=1,vec=1,cache=1"),
                      c32 = cfg_of("tpr=32,rows=4,vec=8,cache=2"),
                      other = cfg_of("tpr=16,rows=8,vec=8,cache=4");

  /* allows */
  ck_assert_int_eq(scree__safelist_allows(&s, op, f16, &c128), 1);
  ck_assert_int_eq(scree__safelist_allows(&s, op, mix, &c128), 1);
  ck_assert_int_eq(scree__safelist_allows(&s, op, b16, &c128), 0); /* denied for bf16 */
  ck_assert_int_eq(scree__safelist_allows(&s, op, f32, &c64), 1);
  ck_assert_int_eq(scree__safelist_allows(&s, op, f16, &c64), 0);  /* fp32 only */
  ck_assert_int_eq(scree__safelist_allows(&s, op, f16, &c1024), 0); /* only denied */
  ck_assert_int_eq(scree__safelist_allows(&s, op, f16, &other), 0); /* not listed */
  ck_assert_int_eq(scree__safelist_allows(&s, op, NULL, &c128), 1); /* "*" lines only */
  ck_assert_int_eq(scree__safelist_allows(&s, op, NULL, &c64), 0);
  /* values past op->nfields do not matter */
  scree__config junk = c128;
  junk.v[SCREE__MAX_FIELDS - 1] = 77;
  ck_assert_int_eq(scree__safelist_allows(&s, op, f16, &junk), 1);

  /* denied */
  const scree__sl_entry *d = scree__safelist_denied(&s, op, b16, &c128);
  ck_assert_ptr_nonnull(d);
  ck_assert_int_eq(d->line, 9);
  ck_assert_str_eq(d->reason, "wrong answer: # not a comment");
  ck_assert_ptr_null(scree__safelist_denied(&s, op, f16, &c128));
  d = scree__safelist_denied(&s, op, f32, &c1024);
  ck_assert_ptr_nonnull(d);
  ck_assert_int_eq(d->line, 8);
  ck_assert_ptr_null(scree__safelist_denied(&s, op, f16, &c256));

  /* candidates: file order, once each, denied ones left out */
  scree__config out[8];
  ck_assert_int_eq(scree__safelist_candidates(&s, op, f16, out, 8), 3);
  ck_assert(cfg_same(&out[0], &c128));
  ck_assert(cfg_same(&out[1], &c256));
  ck_assert(cfg_same(&out[2], &c32));
  ck_assert_int_eq(scree__safelist_candidates(&s, op, f32, out, 8), 4);
  ck_assert(cfg_same(&out[0], &c128));
  ck_assert(cfg_same(&out[1], &c256));
  ck_assert(cfg_same(&out[2], &c64));
  ck_assert(cfg_same(&out[3], &c32));
  ck_assert_int_eq(scree__safelist_candidates(&s, op, b16, out, 8), 2);
  ck_assert(cfg_same(&out[0], &c256));
  ck_assert(cfg_same(&out[1], &c32));
  /* the count is the total even past cap; out is not written past cap */
  scree__config two[3];
  memset(two, 0x7f, sizeof two);
  ck_assert_int_eq(scree__safelist_candidates(&s, op, f32, two, 2), 4);
  ck_assert(cfg_same(&two[1], &c256));
  ck_assert_int_eq(two[2].v[0], 0x7f7f7f7f);
  ck_assert_int_eq(scree__safelist_candidates(&s, op, f16, NULL, 0), 3);

  /* default: a dtype-specific line beats "*" wherever it is in the file */
  scree__config dc;
  ck_assert_int_eq(scree__safelist_default(&s, op, f16, &dc), 1);
  ck_assert(cfg_same(&dc, &c256));
  ck_assert_int_eq(scree__safelist_default(&s, op, f32, &dc), 1);
  ck_assert(cfg_same(&dc, &c64));
  /* the "*" default is denied for bf16: no default */
  ck_assert_int_eq(scree__safelist_default(&s, op, b16, &dc), 0);
  ck_assert_int_eq(scree__safelist_default(&s, op, mix, &dc), 1);
  ck_assert(cfg_same(&dc, &c128));
  ck_assert_int_eq(scree__safelist_default(&s, op, NULL, &dc), 1);
  ck_assert(cfg_same(&dc, &c128));

  /* an empty list answers no to everything */
  scree__safelist empty = parse_ok("arch sm_90\n", "sm_90.txt");
  ck_assert_int_eq(scree__safelist_allows(&empty, op, f16, &c128), 0);
  ck_assert_int_eq(scree__safelist_candidates(&empty, op, f16, out, 8), 0);
  ck_assert_int_eq(scree__safelist_default(&empty, op, f16, &dc), 0);
  ck_assert_ptr_null(scree__safelist_denied(&empty, op, f16, &c128));
  scree__safelist_free(&empty);
  scree__safelist_free(&s);
}
END_TEST

/* ---- the writer ----------------------------------------------------------------- */

static void assert_same_entries(const scree__safelist *a, const scree__safelist *b) {
  ck_assert_str_eq(a->arch, b->arch);
  ck_assert_int_eq(a->n, b->n);
  for (int i = 0; i < a->n; i++) {
    const scree__sl_entry *x = &a->entries[i], *y = &b->entries[i];
    ck_assert_ptr_eq(x->op, y->op);
    ck_assert_int_eq(x->verb, y->verb);
    ck_assert_msg(cfg_same(&x->cfg, &y->cfg), "entry %d config differs", i);
    ck_assert_str_eq(x->dtype, y->dtype);
    ck_assert_str_eq(x->reason, y->reason);
  }
}

static char *write_to_string(const scree__safelist *s, const char *comment) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  ck_assert_ptr_nonnull(f);
  scree__safelist_write(f, s, comment);
  fclose(f);
  return buf;
}

/* A reason that escaping makes longer than its field (a tab is written as
 * \x09) is cut to fit, so the written list still loads. */
START_TEST(write_cuts_escaped_reasons_to_fit) {
  char text[1024], reason[256];
  for (int i = 0; i < 254; i++) reason[i] = i % 2 ? '\t' : 'r';
  reason[254] = 'z';
  reason[255] = 0;
  snprintf(text, sizeof text, "arch sm_90\nrmsnorm deny tpr=128,rows=1,vec=8,cache=4 -- %s\n",
           reason);
  scree__safelist s = parse_ok(text, "sm_90.txt");
  char *out = write_to_string(&s, NULL);
  scree__safelist back = parse_ok(out, "sm_90.txt");
  ck_assert_int_eq(back.n, 1);
  ck_assert_uint_lt(strlen(back.entries[0].reason), sizeof back.entries[0].reason);
  ck_assert_ptr_nonnull(strstr(back.entries[0].reason, "r\\x09r"));
  free(out);
  scree__safelist_free(&back);
  scree__safelist_free(&s);
}
END_TEST

START_TEST(write_round_trips) {
  scree__safelist s = parse_ok(good_text, "sm_90.txt");
  char *text = write_to_string(&s, "exported by a test\n\nsecond paragraph");
  ck_assert_str_eq(
      text,
      "# exported by a test\n"
      "#\n"
      "# second paragraph\n"
      "\n"
      "arch sm_90\n"
      "\n"
      "rmsnorm allow tpr=128,rows=1,vec=8,cache=4\n"
      "rmsnorm allow tpr=256,rows=1,vec=8,cache=2 -- two vectors per thread\n"
      "rmsnorm allow tpr=64,rows=2,vec=4,cache=4 dtype=x=fp32,w=fp32,y=fp32\n"
      "rmsnorm deny tpr=1024,rows=1,vec=1,cache=1 -- slow: 3x default on every bucket\n"
      "rmsnorm deny tpr=128,rows=1,vec=8,cache=4 dtype=x=bf16,w=bf16,y=bf16 -- wrong "
      "answer: # not a comment\n"
      "rmsnorm default tpr=128,rows=1,vec=8,cache=4\n"
      "rmsnorm default tpr=256,rows=1,vec=8,cache=2 dtype=x=fp16,w=fp16,y=fp16 -- measured\n"
      "rmsnorm allow tpr=32,rows=4,vec=8,cache=2\n"
      "rmsnorm allow tpr=128,rows=1,vec=8,cache=4 dtype=x=fp16,w=fp16,y=fp16\n"
      "rmsnorm default tpr=64,rows=2,vec=4,cache=4 dtype=x=fp32,w=fp32,y=fp32\n");
  scree__safelist back = parse_ok(text, "sm_90.txt");
  assert_same_entries(&s, &back);
  free(text);
  scree__safelist_free(&back);

  /* Control characters in a reason are written escaped, on one line. */
  snprintf(s.entries[1].reason, sizeof s.entries[1].reason, "two\x1b[2J vectors");
  text = write_to_string(&s, NULL);
  ck_assert_ptr_nonnull(strstr(text, "-- two\\x1b[2J vectors\n"));
  free(text);
  snprintf(s.entries[1].reason, sizeof s.entries[1].reason, "two vectors per thread");

  /* Without a comment; a reason with a newline comes back as one line. */
  s.entries[1].reason[3] = '\n';
  text = write_to_string(&s, NULL);
  ck_assert(!strncmp(text, "arch sm_90\n", 11));
  back = parse_ok(text, "sm_90.txt");
  ck_assert_ptr_nonnull(strstr(text, "-- two vectors per thread\n"));
  s.entries[1].reason[3] = ' ';
  assert_same_entries(&s, &back);
  free(text);
  scree__safelist_free(&back);
  scree__safelist_free(&s);

  /* The shipped files round-trip too. */
  unsetenv("SCREE_SAFELIST_DIR");
  char why[1024];
  ck_assert_int_eq(scree__safelist_for_arch("sm_90", &s, why, sizeof why), SCREE_OK);
  text = write_to_string(&s, "x");
  back = parse_ok(text, "embedded:sm_90.txt");
  assert_same_entries(&s, &back);
  free(text);
  scree__safelist_free(&back);
  scree__safelist_free(&s);
}
END_TEST

/* ---- files, SCREE_SAFELIST_DIR and the arch fallback ------------------------------ */

START_TEST(load_file_errors) {
  scree__safelist s;
  char why[1024];
  ck_assert_int_eq(scree__safelist_load_file("/nonexistent/dir/sm_90.txt", &s, why, sizeof why),
                   SCREE_ERROR_IO);
  ck_assert_str_eq(why, "/nonexistent/dir/sm_90.txt: No such file or directory");
  const char *dir = make_tmpdir();
  mkfile(dir, "sm_90.txt", "arch sm_90\n\nrmsnorm deny tpr=8,rows=16,vec=8,cache=1\n");
  char path[256], want[512];
  snprintf(path, sizeof path, "%s/sm_90.txt", dir);
  ck_assert_int_eq(scree__safelist_load_file(path, &s, why, sizeof why), SCREE_ERROR_PARSE);
  snprintf(want, sizeof want, "%s:3: deny needs a reason after \"--\"", path);
  ck_assert_str_eq(why, want);
  mkfile(dir, "sm_90.txt", "arch sm_90\nrmsnorm allow tpr=8,rows=16,vec=8,cache=1\n");
  ck_assert_int_eq(scree__safelist_load_file(path, &s, why, sizeof why), SCREE_OK);
  ck_assert_str_eq(s.source, path);
  ck_assert_int_eq(s.n, 1);
  scree__safelist_free(&s);
  /* A directory is refused without being read (its ftell was 2^63 bytes). */
  ck_assert_int_eq(scree__safelist_load_file(dir, &s, why, sizeof why), SCREE_ERROR_IO);
  snprintf(want, sizeof want, "%s: a directory, not a regular file", dir);
  ck_assert_str_eq(why, want);
  ck_assert_int_eq(s.n, 0);
  /* A NUL byte ended the text there, the deny line after it unread. */
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  static const char nul[] = "arch sm_90\n\0\nrmsnorm deny tpr=8,rows=16,vec=8,cache=1 -- bad\n";
  ck_assert_uint_eq(fwrite(nul, 1, sizeof nul - 1, f), sizeof nul - 1);
  fclose(f);
  ck_assert_int_eq(scree__safelist_load_file(path, &s, why, sizeof why), SCREE_ERROR_IO);
  snprintf(want, sizeof want, "%s:2: a NUL byte (byte 12): not a text file", path);
  ck_assert_str_eq(why, want);
  rm_tmpdir(dir);
}
END_TEST

/* A FIFO named <arch>.txt in SCREE_SAFELIST_DIR is refused at once: the
 * existence test opened it, waiting for a writer forever. */
START_TEST(fifo_in_dir_refused) {
  const char *dir = make_tmpdir();
  char path[256], want[512], why[1024];
  snprintf(path, sizeof path, "%s/sm_90.txt", dir);
  ck_assert_int_eq(mkfifo(path, 0600), 0);
  ck_assert_int_eq(setenv("SCREE_SAFELIST_DIR", dir, 1), 0);
  scree__safelist s;
  ck_assert_int_eq(scree__safelist_for_arch("sm_90", &s, why, sizeof why), SCREE_ERROR_IO);
  snprintf(want, sizeof want, "%s: a FIFO, not a regular file", path);
  ck_assert_str_eq(why, want);
  unsetenv("SCREE_SAFELIST_DIR");
  rm_tmpdir(dir);
}
END_TEST

/* for_arch(arch) must give the file of arch `want` (NULL: NOT_FOUND). */
static void expect_arch(const char *arch, const char *want, const char *want_source_prefix) {
  scree__safelist s;
  char why[1024];
  scree_status st = scree__safelist_for_arch(arch, &s, why, sizeof why);
  if (!want) {
    ck_assert_msg(st == SCREE_ERROR_NOT_FOUND, "%s: %s (%s)", arch, scree_status_name(st), why);
    ck_assert_int_eq(s.n, 0);
    return;
  }
  ck_assert_msg(st == SCREE_OK, "%s: %s: %s", arch, scree_status_name(st), why);
  ck_assert_msg(!strcmp(s.arch, want), "%s gave %s, want %s", arch, s.arch, want);
  char src[512];
  snprintf(src, sizeof src, "%s%s.txt", want_source_prefix, want);
  ck_assert_str_eq(s.source, src);
  scree__safelist_free(&s);
}

START_TEST(embedded_fallback) {
  unsetenv("SCREE_SAFELIST_DIR");
  expect_arch("sm_80", "sm_80", "embedded:");
  expect_arch("sm_86", "sm_80", "embedded:");
  expect_arch("sm_89", "sm_80", "embedded:");
  expect_arch("sm_90", "sm_90", "embedded:");
  expect_arch("sm_90a", "sm_90", "embedded:");
  expect_arch("sm_100", "sm_80", "embedded:");
  expect_arch("sm_120a", "sm_80", "embedded:");
  expect_arch("sm_75", NULL, NULL);
  expect_arch("sm_70", NULL, NULL);
  setenv("SCREE_SAFELIST_DIR", "", 1); /* empty means unset */
  expect_arch("sm_86", "sm_80", "embedded:");

  scree__safelist s;
  char why[1024];
  ck_assert_int_eq(scree__safelist_for_arch("sm_70", &s, why, sizeof why), SCREE_ERROR_NOT_FOUND);
  ck_assert_str_eq(why, "no safelist for sm_70 in the embedded safe_configs (tried sm_70.txt)");
  /* Long digit strings are refused before the number can overflow an int
   * (UBSan reported sm_99999999999999999999). */
  const char *badnames[] = {"sm_9", "sm_9000", "gfx90a", "sm_90ab", "sm_", "sm_090", "", "SM_90",
                            "sm_2147483648", "sm_99999999999999999999",
                            "sm_99999999999999999999a"};
  for (size_t i = 0; i < sizeof badnames / sizeof *badnames; i++)
    ck_assert_msg(scree__safelist_for_arch(badnames[i], &s, why, sizeof why) ==
                      SCREE_ERROR_INVALID_ARGUMENT,
                  "%s accepted", badnames[i]);
  ck_assert_int_eq(scree__safelist_for_arch(NULL, &s, why, sizeof why),
                   SCREE_ERROR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(dir_override_and_fallback) {
  const char *dir = make_tmpdir();
  mkfile(dir, "sm_80.txt", "arch sm_80\nrmsnorm allow tpr=8,rows=16,vec=8,cache=1\n");
  mkfile(dir, "sm_86.txt", "arch sm_86\nrmsnorm allow tpr=16,rows=8,vec=8,cache=1\n");
  mkfile(dir, "sm_90a.txt", "arch sm_90a\n");
  mkfile(dir, "sm_95.txt", "arch sm_95\nrmsnorm allow tpr=96,rows=1,vec=8,cache=1\n");
  ck_assert_int_eq(setenv("SCREE_SAFELIST_DIR", dir, 1), 0);
  char prefix[256];
  snprintf(prefix, sizeof prefix, "%s/", dir);

  /* The directory replaces the embedded set. */
  scree__safelist s;
  char why[1024];
  ck_assert_int_eq(scree__safelist_for_arch("sm_80", &s, why, sizeof why), SCREE_OK);
  ck_assert_int_eq(s.n, 1);
  scree__config c = cfg_of("tpr=8,rows=16,vec=8,cache=1");
  ck_assert(cfg_same(&s.entries[0].cfg, &c));
  scree__safelist_free(&s);

  expect_arch("sm_80", "sm_80", prefix);
  expect_arch("sm_86", "sm_86", prefix);
  expect_arch("sm_87", "sm_86", prefix); /* nearest lower of the family */
  expect_arch("sm_89", "sm_86", prefix);
  expect_arch("sm_85", "sm_80", prefix);
  expect_arch("sm_90a", "sm_90a", prefix);
  expect_arch("sm_90", "sm_80", prefix); /* no sm_90.txt here; sm_90a is not used */
  expect_arch("sm_91", "sm_80", prefix);
  expect_arch("sm_70", NULL, NULL);

  /* A bad file that is taken is an error naming its path, not a fallback. */
  ck_assert_int_eq(scree__safelist_for_arch("sm_95", &s, why, sizeof why), SCREE_ERROR_PARSE);
  char want[1024];
  snprintf(want, sizeof want,
           "%ssm_95.txt:2: rmsnorm config tpr=96,rows=1,vec=8,cache=1: tpr=96 must be a "
           "power of two in [8, 1024]",
           prefix);
  ck_assert_str_eq(why, want);
  ck_assert_int_eq(scree__safelist_for_arch("sm_97", &s, why, sizeof why), SCREE_ERROR_PARSE);

  /* Without sm_80.txt in the directory, sm_90 has nothing. */
  snprintf(want, sizeof want, "%s/sm_80.txt", dir);
  ck_assert_int_eq(unlink(want), 0);
  expect_arch("sm_90", NULL, NULL);
  ck_assert_int_eq(scree__safelist_for_arch("sm_90", &s, why, sizeof why), SCREE_ERROR_NOT_FOUND);
  snprintf(want, sizeof want, "no safelist for sm_90 in %s (tried sm_90.txt, sm_80.txt)", dir);
  ck_assert_str_eq(why, want);
  /* A directory named sm_90.txt is taken, and refused with its path. */
  char sub[512];
  snprintf(sub, sizeof sub, "%s/sm_90.txt", dir);
  ck_assert_int_eq(mkdir(sub, 0700), 0);
  ck_assert_int_eq(scree__safelist_for_arch("sm_90", &s, why, sizeof why), SCREE_ERROR_IO);
  snprintf(want, sizeof want, "%s: a directory, not a regular file", sub);
  ck_assert_str_eq(why, want);
  ck_assert_int_eq(rmdir(sub), 0);

  /* A directory that is not there (or not a directory) is an error, not
   * an empty set of lists. */
  snprintf(want, sizeof want, "%s/sm_86.txt", dir);
  ck_assert_int_eq(setenv("SCREE_SAFELIST_DIR", want, 1), 0);
  ck_assert_int_eq(scree__safelist_for_arch("sm_90", &s, why, sizeof why), SCREE_ERROR_IO);
  ck_assert_msg(strstr(why, "SCREE_SAFELIST_DIR=") && strstr(why, ": Not a directory"), "%s",
                why);
  ck_assert_int_eq(setenv("SCREE_SAFELIST_DIR", "/nonexistent/safelists", 1), 0);
  ck_assert_int_eq(scree__safelist_for_arch("sm_90", &s, why, sizeof why), SCREE_ERROR_IO);
  ck_assert_str_eq(why, "SCREE_SAFELIST_DIR=/nonexistent/safelists: No such file or directory");
  unsetenv("SCREE_SAFELIST_DIR");
  rm_tmpdir(dir);
}
END_TEST

SCREE_TEST_MAIN(.name = "safelist",
                .tests = SCREE_TESTS(embedded_files_parse_and_pass_check, embedded_via_for_arch,
                                     good_file_entries, header_only_and_names_without_txt,
                                     error_names_the_path_and_embedded_name, legal_combinations,
                                     queries, write_round_trips, write_cuts_escaped_reasons_to_fit,
                                     load_file_errors, fifo_in_dir_refused, embedded_fallback,
                                     dir_override_and_fallback),
                .loops = SCREE_LOOPS({parse_errors, (int)(sizeof bad / sizeof *bad)}))
