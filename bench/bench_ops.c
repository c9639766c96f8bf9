/*
 * bench_ops.c - every op's benchmark entries through the public API, with
 * the problem harness the tuner uses: each case is checked against the CPU
 * reference on the op's edge-case batch, then timed on the full problem,
 * and printed with TFLOP/s (ops that count flops) or GB/s beside the
 * device-to-device copy of 1 GiB (%copy) and a copy of the case's own bytes
 * timed the same way (%same: back to back, buffers beyond the L2). Built twice: bench_ops runs every registered op's
 * benchmark entries (the `bench` list of its descriptor, ops/<op>.c), or
 * the cases of a file (--file: one "<op> <variant> <shape> [lens=...]" a
 * line); bench_attention reads the shared attention configurations
 * (bench/attention_configs.json).
 *
 *   bench_ops [--file F] [--json-configs F] [--op NAME] [--only NAME]
 *             [--reps N] [--inner N] [--csv F] [--cache DB] [--sweep]
 *             [--sweep-impl NAME] [--sweep-grep A,B] [--regret]
 *
 * --check-entries parses every case (op, variant, shape, lengths) and builds
 * its problem on the host, without a GPU: a CPU test runs it, so a typo in
 * an entry fails CI.
 *
 * --sweep also times every config of the op's space that this device can
 * run on each case (each checked on the edge-case batch first), prints the
 * five fastest and writes all of them to the CSV: the measurements behind
 * safe_configs/ (tools/make_safelist.py). --sweep-impl NAME sweeps only the
 * configs of that implementation (impl=NAME); --sweep-grep A,B only those
 * whose config string holds every field A, B ("vec=8,band=1").
 *
 * --regret sweeps as --sweep does, but the case's first call tunes its
 * bucket as a user's would (the safelist, the bucket's tuning batch), and
 * each case ends with a line "regret: X% head to head (pick ...; best
 * ...)": the tuned pick's time over that of the fastest config of the
 * whole space on this case, the two timed again side by side after the
 * sweep (bench/regret.py tabulates them).
 *
 * Method: a private cache and the tune-on-miss policy, so the first call of
 * each case tunes its bucket (printed: how long it took); then --reps
 * measurements of --inner back-to-back calls between CUDA events (host
 * launch latency hidden), median, inputs rotated over enough buffer sets to
 * exceed 3x the L2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api.h"
#include "ops/registry.h"
#include "store/cache.h"
#include "store/keys.h"
#include "store/safelist.h"
#include "tuner/harness.h"
#include "tuner/tuner.h"

#ifndef SCREE_BENCH_JSON
#define SCREE_BENCH_JSON ""
#endif

#define MAX_CASES 256
#define MAX_LENS 65536

typedef struct bcase {
  char name[64];
  const scree__op *op;
  char variant[128], shape[512];
  int nlens;
  int64_t *lens;
} bcase;

static int parse_lens(const char *s, bcase *c) {
  c->lens = malloc(MAX_LENS * sizeof *c->lens);
  c->nlens = 0;
  while (c->lens && *s && c->nlens < MAX_LENS) {
    char *end;
    const long long v = strtoll(s, &end, 10);
    if (end == s || v < 0) return -1;
    c->lens[c->nlens++] = v;
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return c->lens ? 0 : -1;
}

/* One case, "<op> <variant> <shape> [lens=L,L,...]" (a blank line or a
 * comment adds none); where and num name it in a message. The new count. */
static int add_case(const char *text, const char *where, int num, bcase *cases, int n) {
  char op[64], var[128], shape[512], lens[8192] = "";
  const int k = sscanf(text, " %63s %127s %511s %8191s", op, var, shape, lens);
  if (k < 1 || op[0] == '#' || n == MAX_CASES) return n;
  bcase *c = &cases[n];
  memset(c, 0, sizeof *c);
  if (k < 3 || !(c->op = scree__op_find(op)) || (k == 4 && strncmp(lens, "lens=", 5)) ||
      (k == 4 && parse_lens(lens + 5, c))) {
    fprintf(stderr, "bench: %s:%d: expected <op> <variant> <shape> [lens=...]\n", where, num);
    exit(2);
  }
  snprintf(c->name, sizeof c->name, "%.40s:%d", op, num);
  snprintf(c->variant, sizeof c->variant, "%s", var);
  snprintf(c->shape, sizeof c->shape, "%s", shape);
  return n + 1;
}

/* A cases file: "<op> <variant> <shape> [lens=L,L,...]" per line. */
static int read_ops_file(const char *path, bcase *cases, int n) {
  char why[1024];
  char *text = scree__read_text(path, why, sizeof why);
  if (!text) {
    fprintf(stderr, "bench: cannot read %s\n", why);
    exit(2);
  }
  int line = 0;
  for (char *p = text; p && *p;) {
    char *nl = strchr(p, '\n');
    if (nl) *nl = 0;
    n = add_case(p, path, ++line, cases, n);
    p = nl ? nl + 1 : NULL;
  }
  free(text);
  return n;
}

/* Every registered op's benchmark entries (its descriptor's bench list),
 * numbered from 1 within each op. */
static int read_registry(bcase *cases, int n) {
  for (int i = 0; scree__ops[i]; i++)
    for (int e = 0; scree__ops[i]->bench && scree__ops[i]->bench[e]; e++) {
      char text[16384];
      snprintf(text, sizeof text, "%s %s", scree__ops[i]->name, scree__ops[i]->bench[e]);
      n = add_case(text, "bench entry", e + 1, cases, n);
    }
  return n;
}

/* The value after "key": in one JSON object's text, or NULL. */
static const char *json_field(const char *obj, const char *end, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\"", key);
  const char *p = strstr(obj, pat);
  if (!p || p > end) return NULL;
  p = strchr(p + strlen(pat), ':');
  if (!p) return NULL;
  p++;
  while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
  return p;
}

/* bench/attention_configs.json: {"configs": [{"name", "seqlens": [...],
 * "hq", "hkv", "d", "causal", "dtype"}, ...]}. */
static int read_attention_json(const char *path, bcase *cases, int n) {
  char why[1024];
  char *text = scree__read_text(path, why, sizeof why);
  if (!text) {
    fprintf(stderr, "bench: cannot read %s\n", why);
    exit(2);
  }
  const char *p = strstr(text, "\"configs\"");
  p = p ? strchr(p, '[') : NULL;
  while (p && (p = strchr(p, '{')) && n < MAX_CASES) {
    const char *end = strchr(p, '}');
    if (!end) break;
    const char *name = json_field(p, end, "name"), *lens = json_field(p, end, "seqlens"),
               *hq = json_field(p, end, "hq"), *hkv = json_field(p, end, "hkv"),
               *d = json_field(p, end, "d"), *causal = json_field(p, end, "causal"),
               *dt = json_field(p, end, "dtype");
    if (!name || !lens || !hq || !hkv || !d || !causal || !dt || *lens != '[') {
      fprintf(stderr, "bench: %s: a config lacks name, seqlens, hq, hkv, d, causal or dtype\n",
              path);
      exit(2);
    }
    bcase *c = &cases[n];
    memset(c, 0, sizeof *c);
    c->op = scree__op_find("attention");
    sscanf(name, "\"%63[^\"]\"", c->name);
    char dts[16] = "";
    sscanf(dt, "\"%15[^\"]\"", dts);
    const int is_causal = !strncmp(causal, "true", 4) || *causal == '1';
    snprintf(c->variant, sizeof c->variant, "dtype=%s,head_dim=%d,causal=%d,window=0", dts,
             atoi(d), is_causal);
    snprintf(c->shape, sizeof c->shape,
             "heads_q=%d,heads_kv=%d,head_dim=%d,window_left=-1,window_right=-1", atoi(hq),
             atoi(hkv), atoi(d));
    c->lens = malloc(MAX_LENS * sizeof *c->lens);
    const char *q = lens + 1;
    while (c->lens && *q && *q != ']' && c->nlens < MAX_LENS) {
      char *e;
      const long long v = strtoll(q, &e, 10);
      if (e == q) {
        q++;
        continue;
      }
      c->lens[c->nlens++] = v;
      q = e;
    }
    n++;
    p = end + 1;
  }
  free(text);
  return n;
}

typedef struct swept {
  scree__config cfg;
  double us;
} swept;

static int by_us(const void *a, const void *b) {
  const double x = ((const swept *)a)->us, y = ((const swept *)b)->us;
  return x < y ? -1 : x > y;
}

typedef struct cjob {
  scree_context *ctx;
  const scree__op *op;
  const scree__variant *var;
  swept *s;
} cjob;

static void compile_one(void *p, int i) {
  cjob *j = p;
  scree__kernel k;
  if (scree__kernel_get(j->ctx, j->op, &j->s[i].cfg, j->var, &k)) j->s[i].us = -1;
}

static const char *g_sweep_impl; /* --sweep-impl: only this implementation */
static const char *g_sweep_grep; /* --sweep-grep: only configs holding each of these */

/* 1 if cs holds every comma-separated part of g_sweep_grep ("vec=8,band=1"
 * matches "...vec=8,...,band=1"; a part matches at a field's start). */
static int sweep_wanted(const char *cs) {
  if (!g_sweep_grep) return 1;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", g_sweep_grep);
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    const size_t n = strlen(tok);
    const char *p = cs;
    int found = 0;
    while ((p = strstr(p, tok))) {
      if ((p == cs || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) {
        found = 1;
        break;
      }
      p++;
    }
    if (!found) return 0;
  }
  return 1;
}

/* Every config this device can run on the case (of --sweep-impl, holding
 * --sweep-grep's fields), checked then timed. */
static int sweep_case(scree_context *ctx, const bcase *c, const scree__variant *var,
                      const void *call, scree__run *big, CUstream stream, FILE *csv,
                      const char *pick) {
  const int total = scree__config_space(c->op, NULL, 0);
  scree__config *all = calloc((size_t)total, sizeof *all);
  swept *s = calloc((size_t)total, sizeof *s);
  scree__config_space(c->op, all, total);
  scree__target t;
  scree__target_of(ctx, &t);
  int n = 0, bad = 0;
  for (int i = 0; i < total; i++) {
    scree__config a = all[i];
    const scree__impl *im = &c->op->impls[a.impl];
    if (g_sweep_impl && strcmp(im->name, g_sweep_impl)) continue;
    if (im->adapt) im->adapt(&a, var, call);
    char cs[128];
    scree__config_str(c->op, &a, cs, sizeof cs);
    if (!sweep_wanted(cs)) continue;
    if (scree__config_check(c->op, &a, var, &t, NULL, 0)) s[n++].cfg = a;
  }
  cjob j = {ctx, c->op, var, s};
  scree__parallel_for(n, 0, compile_one, &j);
  scree__run chk;
  char why[1024];
  if (scree__run_make(ctx, c->op, var, call, 1, scree__fresh_seed(), NULL, &chk)) return 1;
  for (int i = 0; i < n; i++) {
    if (s[i].us < 0) continue;
    scree__kernel k;
    double spread;
    scree__config_runner cr = {c->op, &s[i].cfg, var, &k};
    if (scree__kernel_get(ctx, c->op, &s[i].cfg, var, &k) ||
        scree__run_check(ctx, &chk, scree__run_config, &cr, stream, 10000, why, sizeof why) ||
        scree__run_time(ctx, big, scree__run_config, &cr, stream, 2, 7, 3, 10000, &s[i].us,
                        &spread, why, sizeof why)) {
      char cs[128];
      scree__config_str(c->op, &s[i].cfg, cs, sizeof cs);
      printf("  sweep: %s FAILED: %s\n", cs, why);
      s[i].us = -1;
      bad++;
    }
  }
  scree__run_free(ctx, &chk);
  qsort(s, (size_t)n, sizeof *s, by_us);
  int shown = 0;
  for (int i = 0; i < n; i++) {
    if (s[i].us < 0) continue;
    char cs[128];
    scree__config_str(c->op, &s[i].cfg, cs, sizeof cs);
    const double tf = big->p.flops / (s[i].us * 1e-6) / 1e12,
                 gb = big->p.bytes / (s[i].us * 1e-6) / 1e9;
    if (shown++ < 5)
      printf("  sweep #%d %10.2f us %8.1f %s  %s\n", shown, s[i].us, big->p.flops > 0 ? tf : gb,
             big->p.flops > 0 ? "TFLOP/s" : "GB/s", cs);
    if (csv)
      fprintf(csv, "%s,%s,\"%s\",\"%s\",%.3f,%.2f,%.1f,,\"sweep %s\"\n", c->name,
              c->op->name, c->variant, c->shape, s[i].us, big->p.flops > 0 ? tf : 0, gb, cs);
  }
  printf("  sweep: %d configs timed, %d failed\n", shown, bad);
  /* --regret: the call's own pick (tuned over the safelist on the bucket's
   * tuning batch) against the fastest config of the whole space on this
   * case, both timed by the sweep above. */
  if (pick) {
    double best = -1, mine = -1;
    char bs[128] = "";
    for (int i = 0; i < n; i++) {
      if (s[i].us < 0) continue;
      char cs[128];
      scree__config_str(c->op, &s[i].cfg, cs, sizeof cs);
      if (best < 0) best = s[i].us, snprintf(bs, sizeof bs, "%s", cs);
      if (!strcmp(cs, pick)) mine = s[i].us;
    }
    /* The fastest of hundreds of noisy sweep times is biased low, so the
     * two are timed again head to head (alternating, bench's reps), and
     * the regret is taken from those times. */
    int ip = -1, ib = -1;
    for (int i = 0; i < n; i++) {
      if (s[i].us < 0) continue;
      char cs[128];
      scree__config_str(c->op, &s[i].cfg, cs, sizeof cs);
      if (!strcmp(cs, pick)) ip = i;
      if (!strcmp(cs, bs)) ib = i;
    }
    double hp = 0, hb = 0;
    if (ip >= 0 && ip == ib) hp = hb = mine; /* the pick is the fastest */
    for (int round = 0; round < 2 && ip >= 0 && ib >= 0 && ip != ib && hp >= 0; round++)
      for (int w = 0; w < 2; w++) {
        const int i = w ? ib : ip;
        scree__kernel k;
        double us, spread;
        scree__config_runner cr = {c->op, &s[i].cfg, var, &k};
        if (scree__kernel_get(ctx, c->op, &s[i].cfg, var, &k) ||
            scree__run_time(ctx, big, scree__run_config, &cr, stream, 3, 30, 10, 10000, &us,
                            &spread, why, sizeof why)) {
          hp = -1;
          break;
        }
        *(w ? &hb : &hp) += us / 2;
      }
    if (best > 0 && mine > 0 && hp > 0 && hb > 0) {
      printf("  regret: %.2f%% head to head (pick %.2f us %s; best %.2f us %s; in the sweep "
             "%.2f and %.2f us)\n",
             100 * (hp / hb - 1), hp, pick, hb, bs, mine, best);
      if (csv) {
        fprintf(csv, "%s,%s,\"%s\",\"%s\",%.3f,,,,\"h2h pick %s\"\n", c->name, c->op->name,
                c->variant, c->shape, hp, pick);
        fprintf(csv, "%s,%s,\"%s\",\"%s\",%.3f,,,,\"h2h best %s\"\n", c->name, c->op->name,
                c->variant, c->shape, hb, bs);
      }
    } else
      printf("  regret: pick %s not among the swept configs\n", pick);
  }
  free(all);
  free(s);
  return bad;
}

int main(int argc, char **argv) {
  const char *file = "", *json = SCREE_BENCH_JSON, *only_op = NULL, *only = NULL;
  int registry = !*json; /* bench_ops: every op's own entries */
  const char *csv_path = NULL, *keep_cache = NULL;
  int reps = 30, inner = 10, sweep = 0, check_only = 0, regret = 0;
  /* Each case's first call tunes its bucket: the shipped tuned configs
   * (caches/) must not answer instead, unless SCREE_TUNED_CONFIGS is set. */
  setenv("SCREE_TUNED_CONFIGS", "none", 0);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--file") && i + 1 < argc)
      file = argv[++i], json = "", registry = 0;
    else if (!strcmp(argv[i], "--json-configs") && i + 1 < argc)
      json = argv[++i], file = "", registry = 0;
    else if (!strcmp(argv[i], "--op") && i + 1 < argc)
      only_op = argv[++i];
    else if (!strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--inner") && i + 1 < argc)
      inner = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--check-entries"))
      check_only = 1;
    else if (!strcmp(argv[i], "--sweep"))
      sweep = 1;
    else if (!strcmp(argv[i], "--regret"))
      sweep = regret = 1;
    else if (!strcmp(argv[i], "--sweep-impl") && i + 1 < argc)
      sweep = 1, g_sweep_impl = argv[++i];
    else if (!strcmp(argv[i], "--sweep-grep") && i + 1 < argc)
      sweep = 1, g_sweep_grep = argv[++i];
    else if (!strcmp(argv[i], "--csv") && i + 1 < argc)
      csv_path = argv[++i];
    else if (!strcmp(argv[i], "--cache") && i + 1 < argc)
      keep_cache = argv[++i];
    else {
      fprintf(stderr,
              "usage: %s [--file CASES | --json-configs attention_configs.json] [--op NAME] "
              "[--only NAME] [--reps N] [--inner N] [--csv F] [--cache DB] [--sweep] "
              "[--sweep-impl NAME] [--sweep-grep A,B] [--regret] [--check-entries]\n",
              argv[0]);
      return 2;
    }
  }
  static bcase cases[MAX_CASES];
  int n = 0;
  if (registry) n = read_registry(cases, n);
  if (*file) n = read_ops_file(file, cases, n);
  if (*json) n = read_attention_json(json, cases, n);

  if (check_only) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
      bcase *c = &cases[i];
      _Alignas(16) unsigned char args[SCREE__ARGS_MAX];
      memset(args, 0, sizeof args);
      scree__variant var;
      char why[512] = "";
      scree__problem p;
      memset(&p, 0, sizeof p);
      const scree__lens lens = {c->nlens, c->lens, c->lens};
      const int ok = !scree__shape_parse(c->op, c->shape, args, why, sizeof why) &&
                     !scree__variant_parse(c->op, c->variant, &var, why, sizeof why) &&
                     !c->op->problem(args, &var, 0, 1, c->nlens ? &lens : NULL, &p, why, sizeof why);
      printf("%-22s %-9s %s%s\n", c->name, c->op->name, ok ? p.desc : "BAD: ", ok ? "" : why);
      scree__problem_free(&p);
      bad += !ok;
    }
    if (n == 0) printf("no cases\n");
    return bad || n == 0 ? 1 : 0;
  }
  char dir[] = "/tmp/scree-bench-XXXXXX", db[64];
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(db, sizeof db, "%s/tune.db", dir);
  scree_options o;
  scree_options_init(&o);
  /* --cache keeps the tunes (tools/gen-shipped-configs.sh); a bucket it
   * holds already is not tuned again. */
  o.cache_path = keep_cache ? keep_cache : db;
  o.cache_search_path = "";
  /* A sweep times the whole space itself: its first calls take the default;
   * --regret's first calls tune, as a user's would. */
  o.miss_policy = sweep && !regret ? SCREE_MISS_DEFAULT : SCREE_MISS_TUNE;
  scree_context *ctx;
  char why[1024];
  scree_status st = scree_create(&o, &ctx, why, sizeof why);
  if (st) {
    printf("no GPU: %s: %s\n", scree_status_name(st), why);
    return st == SCREE_ERROR_NO_DEVICE ? 0 : 1;
  }
  scree_device_info dev;
  scree_context_device(ctx, &dev);
  const int pushed = scree__ctx_enter(ctx);
  const double copy = scree__copy_gbps(ctx);
  printf("device: %s (%s, %d SMs), scree %s; device copy %.0f GB/s\n", dev.name, dev.arch,
         dev.sm_count, scree_version(), copy);
  printf("%-22s %-42s %10s %14s %8s %8s %9s  %s\n", "case", "variant", "us", "rate", "%copy",
         "%same", "tune s", "config");
  FILE *csv = csv_path ? fopen(csv_path, "w") : NULL;
  if (csv) fprintf(csv, "case,op,variant,shape,us,tflops,gbps,tune_s,config,same_copy_gbps\n");
  int failures = 0;
  CUstream stream;
  ctx->cu->StreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  for (int i = 0; i < n; i++) {
    bcase *c = &cases[i];
    if ((only_op && strcmp(c->op->name, only_op)) || (only && strcmp(c->name, only))) continue;
    _Alignas(16) unsigned char args[SCREE__ARGS_MAX], call[SCREE__ARGS_MAX];
    memset(args, 0, sizeof args);
    scree__variant var;
    if (scree__shape_parse(c->op, c->shape, args, why, sizeof why) ||
        scree__variant_parse(c->op, c->variant, &var, why, sizeof why)) {
      fprintf(stderr, "bench: %s: %s\n", c->name, why);
      return 2;
    }
    const scree__lens lens = {c->nlens, c->lens, c->lens};
    scree__run big, chk;
    const uint64_t seed = scree__fresh_seed();
    if (scree__run_make(ctx, c->op, &var, args, 0, seed, c->nlens ? &lens : NULL, &big)) {
      fprintf(stderr, "bench: %s: %s\n", c->name, scree_last_error(ctx));
      return 1;
    }
    void *user = (void *)c->op;
    scree__run_bind(&big, 0, call);
    const double t0 = scree__now();
    st = scree__run_config_api(user, ctx, call, stream);
    ctx->cu->StreamSynchronize(stream);
    const double tune_s = scree__now() - t0;
    /* The config the call ran (its plan), checked against the CPU
     * reference on the op's edge-case batch. */
    char cs[128] = "?";
    scree__config cfg;
    const int have = !st && scree__plan_config(ctx, c->op, &var, call, &cfg);
    if (have) scree__config_str(c->op, &cfg, cs, sizeof cs);
    if (!st && !have) {
      st = SCREE_ERROR_NOT_FOUND;
      snprintf(why, sizeof why, "no plan for the call");
    }
    scree__kernel k;
    if (!st) st = scree__kernel_get(ctx, c->op, &cfg, &var, &k);
    scree__config_runner cr = {c->op, &cfg, &var, &k};
    if (!st && !(st = scree__run_make(ctx, c->op, &var, call, 1, seed, NULL, &chk))) {
      st = scree__run_check(ctx, &chk, scree__run_config, &cr, stream, 10000, why, sizeof why);
      scree__run_free(ctx, &chk);
    }
    double us = 0, spread = 0;
    if (!st)
      st = scree__run_time(ctx, &big, scree__run_config_api, user, stream, 3, reps, inner, 10000,
                           &us, &spread, why, sizeof why);
    if (st) {
      printf("%-22s %-42s FAILED: %s: %s\n", c->name, c->variant, scree_status_name(st),
             scree_last_error(ctx));
      failures++;
    } else {
      const double tf = big.p.flops / (us * 1e-6) / 1e12, gb = big.p.bytes / (us * 1e-6) / 1e9;
      char rate[32], pct[16] = "", same[16] = "";
      double sgb = 0;
      if (big.p.flops > 0) {
        snprintf(rate, sizeof rate, "%.1f TFLOP/s", tf);
      } else {
        /* Also against a copy of the op's own bytes, timed the same way
         * (small copies do not reach the 1 GiB copy's rate either). */
        sgb = scree__copy_gbps_sized(ctx, (size_t)big.p.bytes, inner);
        snprintf(rate, sizeof rate, "%.0f GB/s", gb), snprintf(pct, sizeof pct, "%.1f%%", 100 * gb / copy);
        if (sgb > 0) snprintf(same, sizeof same, "%.1f%%", 100 * gb / sgb);
      }
      printf("%-22s %-42s %10.2f %14s %8s %8s %9.2f  %s\n", c->name, c->variant, us, rate, pct,
             same, tune_s, cs);
      if (csv)
        fprintf(csv, "%s,%s,\"%s\",\"%s\",%.3f,%.2f,%.1f,%.3f,\"%s\",%.1f\n", c->name,
                c->op->name, c->variant, c->shape, us, big.p.flops > 0 ? tf : 0, gb, tune_s, cs,
                sgb);
    }
    if (sweep && !st)
      failures += sweep_case(ctx, c, &var, call, &big, stream, csv, regret ? cs : NULL);
    fflush(stdout);
    if (csv) fflush(csv);
    scree__run_free(ctx, &big);
  }
  ctx->cu->StreamDestroy(stream);
  if (csv) fclose(csv);
  scree__ctx_leave(ctx, pushed);
  scree_destroy(ctx);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) {
  }
  return failures ? 1 : 0;
}
