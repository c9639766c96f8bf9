/* cli_cache.c - scree-tune list, show, export, import/merge, clear and
 * safelist export: the commands that read and write caches (no GPU). */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"

const char *const usage_list =
    "usage: scree-tune list [--misses | --bad] [--arch A] [--op OP] [--cache PATH] [--json]\n\n"
    "Lists the user cache's tuned winners as a table (or JSON): op, arch,\n"
    "bucket, dtype, config, median time and device. --misses lists the calls\n"
    "that found no tuned config (what prewarm --from-misses tunes); --bad lists\n"
    "the configs recorded as bad, with the reason.\n";
const char *const usage_show =
    "usage: scree-tune show [--op OP] [--arch A] [--bucket B] [--dtype D] [--cache PATH] [--json]\n\n"
    "Shows every field of the matching winners: key, config, time and\n"
    "spread, device, SM count, driver, NVRTC and scree versions, when, and\n"
    "the cubin's size and sha256 (and whether it still matches).\n";
const char *const usage_export =
    "usage: scree-tune export OUT.db [--arch A] [--op OP] [--cache PATH] [--quiet]\n"
    "       scree-tune export --text FILE|- [--arch A] [--op OP] [--cache PATH] [--quiet]\n\n"
    "Writes the matching winners, cubins included, into a new standalone\n"
    "cache file to ship with a deployment (list it in SCREE_CACHE_PATH there).\n"
    "OUT.db must not exist. --text writes them as reviewable text instead,\n"
    "one line a winner without its cubin (op bucket dtype causal arch device\n"
    "config median_us src_hash), as the shipped tuned configs in caches/ are\n"
    "kept; FILE is replaced atomically, - is stdout.\n";
const char *const usage_merge =
    "usage: scree-tune merge SRC.db [SRC.db ...] [--no-strict-modes] [--cache PATH] [--quiet]\n"
    "                        [--json]\n\n"
    "Merges each source cache into the user cache. Per key the faster entry\n"
    "is kept; keys whose configs differ between the two are reported as\n"
    "conflicts (with both configs and times). Bad-config records are merged\n"
    "too. Rows that fail their checks are skipped and counted. A source that\n"
    "a user other than you or root could change (its permissions or those of\n"
    "a directory on the way) is refused: a cache holds code that scree runs.\n"
    "--no-strict-modes (or SCREE_CACHE_STRICT_MODES=0) accepts it anyway.\n"
    "`import` is the same command.\n";
const char *const usage_import =
    "usage: scree-tune import SRC.db [SRC.db ...] [--no-strict-modes] [--cache PATH] [--quiet]\n"
    "                         [--json]\n\n"
    "Same as merge: brings another cache's winners into the user cache,\n"
    "keeping the faster entry per key and reporting conflicts. A source that\n"
    "others could change is refused unless --no-strict-modes is given.\n";
const char *const usage_clear =
    "usage: scree-tune clear (--all | --arch A | --op OP) [--cache PATH] [--quiet]\n\n"
    "Deletes winners, bad-config records and misses matching the filter.\n"
    "--all is required to delete everything.\n";
const char *const usage_safelist =
    "usage: scree-tune safelist export --arch A [--op OP] [--cache PATH] [-o FILE]\n\n"
    "Writes the safelist for arch A in the safe_configs/ format, ready to\n"
    "commit: the current list, with configs the user cache learned to be bad\n"
    "turned into deny lines (with their reasons) and cached winners that the\n"
    "list lacks added as allow lines.\n";

static const char *age(int64_t t, char *buf, size_t n) {
  const int64_t d = (int64_t)time(NULL) - t;
  if (d < 120)
    snprintf(buf, n, "%llds", (long long)d);
  else if (d < 7200)
    snprintf(buf, n, "%lldm", (long long)(d / 60));
  else if (d < 172800)
    snprintf(buf, n, "%lldh", (long long)(d / 3600));
  else
    snprintf(buf, n, "%lldd", (long long)(d / 86400));
  return buf;
}

typedef struct lctx {
  const cli_common *c;
  int n;
  const char *bucket, *dtype; /* show's filters */
  int show;
} lctx;

static void json_key(const scree__ckey *k) {
  printf("\"op\": ");
  cli_json_str(stdout, k->op);
  printf(", \"bucket\": ");
  cli_json_str(stdout, k->bucket);
  printf(", \"dtype\": ");
  cli_json_str(stdout, k->dtype);
  printf(", \"causal\": %d, \"arch\": ", k->causal);
  cli_json_str(stdout, k->arch);
  printf(", \"src_hash\": ");
  cli_json_str(stdout, k->src_hash);
}

/* Text from the cache goes through cli_esc before it reaches the terminal,
 * and through cli_json_str / cli_json_num into JSON. */
static int on_entry(void *user, const scree__centry *e) {
  lctx *l = user;
  if (l->bucket && strcmp(l->bucket, e->key.bucket)) return 0;
  if (l->dtype && strcmp(l->dtype, e->key.dtype)) return 0;
  char a[32];
  if (l->c->json) {
    printf("%s\n {", l->n ? "," : "");
    json_key(&e->key);
    printf(", \"config\": ");
    cli_json_str(stdout, e->config);
    printf(", \"median_us\": ");
    cli_json_num(stdout, "%.3f", e->median_us);
    printf(", \"spread_us\": ");
    cli_json_num(stdout, "%.3f", e->spread_us);
    printf(", \"device\": ");
    cli_json_str(stdout, e->device_name);
    printf(", \"sm_count\": %d, \"driver_version\": %d, \"nvrtc_version\": %d, "
           "\"scree_version\": ", e->sm_count, e->driver_version, e->nvrtc_version);
    cli_json_str(stdout, e->scree_version);
    printf(", \"created\": %lld, \"cubin_size\": %zu, \"cubin_sha256\": ",
           (long long)e->created, e->cubin_size);
    cli_json_str(stdout, e->cubin_hash);
    if (l->show) printf(", \"cubin_ok\": %s", e->cubin_ok ? "true" : "false");
    printf("}");
  } else if (l->show) {
    printf("%s %s %s%s on %s\n", cli_esc(e->key.op), cli_esc(e->key.bucket),
           cli_esc(e->key.dtype), e->key.causal ? " causal" : "", cli_esc(e->key.arch));
    printf("  config        %s\n", cli_esc(e->config));
    printf("  time          %.3f us median, %.3f us interquartile spread\n", e->median_us,
           e->spread_us);
    printf("  device        %s, %d SMs, driver %d, NVRTC %d.%d\n", cli_esc(e->device_name),
           e->sm_count, e->driver_version, e->nvrtc_version / 1000,
           (e->nvrtc_version % 1000) / 10);
    printf("  tuned         by scree %s, %s ago\n", cli_esc(e->scree_version),
           age(e->created, a, sizeof a));
    printf("  kernel source sha256 %s\n", cli_esc(e->key.src_hash));
    printf("  cubin         %zu bytes, sha256 %s (%s)\n\n", e->cubin_size, cli_esc(e->cubin_hash),
           e->cubin_ok ? "matches" : "MISMATCH: will not be loaded");
  } else {
    if (!l->n)
      printf("%-8s %-6s %-24s %-20s %-32s %9s %-22s %5s\n", "op", "arch", "bucket", "dtype",
             "config", "us", "device", "age");
    printf("%-8s %-6s %-24s %-20s %-32s %9.2f %-22.22s %5s\n", cli_esc(e->key.op),
           cli_esc(e->key.arch), cli_esc(e->key.bucket), cli_esc(e->key.dtype),
           cli_esc(e->config), e->median_us, cli_esc(e->device_name),
           age(e->created, a, sizeof a));
  }
  l->n++;
  return 0;
}

static int on_miss(void *user, const scree__cmiss *m) {
  lctx *l = user;
  char a[32];
  if (l->c->json) {
    printf("%s\n {", l->n ? "," : "");
    json_key(&m->key);
    printf(", \"count\": %lld, \"first_seen\": %lld, \"last_seen\": %lld, \"example\": ",
           (long long)m->count, (long long)m->first_seen, (long long)m->last_seen);
    cli_json_str(stdout, m->example);
    printf("}");
  } else {
    if (!l->n)
      printf("%-8s %-6s %-24s %-20s %8s %6s\n", "op", "arch", "bucket", "dtype", "count",
             "last");
    printf("%-8s %-6s %-24s %-20s %8lld %6s\n", cli_esc(m->key.op), cli_esc(m->key.arch),
           cli_esc(m->key.bucket), cli_esc(m->key.dtype), (long long)m->count,
           age(m->last_seen, a, sizeof a));
  }
  l->n++;
  return 0;
}

static int on_bad(void *user, const scree__cbad *b) {
  lctx *l = user;
  if (l->c->json) {
    printf("%s\n {", l->n ? "," : "");
    json_key(&b->key);
    printf(", \"config\": ");
    cli_json_str(stdout, b->config);
    printf(", \"nvrtc_version\": %d, \"reason\": ", b->nvrtc_version);
    cli_json_str(stdout, b->reason);
    printf(", \"when\": %lld}", (long long)b->when);
  } else {
    if (!l->n)
      printf("%-8s %-6s %-24s %-20s %-32s %s\n", "op", "arch", "bucket", "dtype", "config",
             "reason");
    printf("%-8s %-6s %-24s %-20s %-32s %s\n", cli_esc(b->key.op), cli_esc(b->key.arch),
           cli_esc(b->key.bucket), cli_esc(b->key.dtype), cli_esc(b->config),
           cli_esc(b->reason));
  }
  l->n++;
  return 0;
}

int cmd_list(int argc, char **argv) {
  cli_common c = {0};
  int misses = 0, bad = 0;
  for (int i = 1; i < argc; i++) {
    int r = cli_common_opt(&c, argc, argv, &i, "list");
    if (r < 0) return CLI_USAGE;
    if (r) continue;
    if (!strcmp(argv[i], "--misses"))
      misses = 1;
    else if (!strcmp(argv[i], "--bad"))
      bad = 1;
    else
      return cli_unknown("list", argv[i]);
  }
  if (misses && bad) {
    fprintf(stderr, "scree-tune list: --misses and --bad exclude each other\n");
    return CLI_USAGE;
  }
  scree__cache *cache;
  int rc = cli_open_user_cache(&c, &cache, "list", 1);
  if (rc) return rc;
  lctx l = {.c = &c};
  if (!cache) {
    if (c.json)
      printf("{\"cache\": null, \"%s\": [], \"skipped\": 0}\n",
             misses ? "misses" : bad ? "bad" : "entries");
    return CLI_OK;
  }
  const char *what = misses ? "misses" : bad ? "bad" : "entries";
  if (c.json) {
    printf("{\"cache\": ");
    cli_json_str(stdout, scree__cache_path(cache));
    printf(", \"%s\": [", what);
  }
  scree_status st = misses ? scree__cache_foreach_miss(cache, c.arch, c.op, on_miss, &l)
                    : bad  ? scree__cache_foreach_bad(cache, c.arch, c.op, on_bad, &l)
                           : scree__cache_foreach_entry(cache, c.arch, c.op, 0, on_entry, &l);
  const int skipped = cli_report_refused(cache, "list");
  if (c.json)
    printf("\n], \"skipped\": %d}\n", skipped);
  else if (!c.quiet)
    printf("%d %s in %s%s\n", l.n, misses ? "miss(es)" : bad ? "bad config(s)" : "winner(s)",
           scree__cache_path(cache), skipped ? " (rows skipped: see above)" : "");
  rc = cli_cache_failed(cache, st, "list");
  scree__cache_close(cache);
  return rc;
}

int cmd_show(int argc, char **argv) {
  cli_common c = {0};
  lctx l = {.c = &c, .show = 1};
  for (int i = 1; i < argc; i++) {
    int r = cli_common_opt(&c, argc, argv, &i, "show");
    if (r < 0) return CLI_USAGE;
    if (r) continue;
    const char *v;
    if ((v = cli_value(argc, argv, &i, "--bucket", "show")))
      l.bucket = v;
    else if ((v = cli_value(argc, argv, &i, "--dtype", "show")))
      l.dtype = v;
    else if (!strcmp(argv[i], "--bucket") || !strcmp(argv[i], "--dtype"))
      return CLI_USAGE;
    else
      return cli_unknown("show", argv[i]);
  }
  scree__cache *cache;
  int rc = cli_open_user_cache(&c, &cache, "show", 1);
  if (rc) return rc;
  if (!cache) return CLI_FAIL;
  if (c.json) printf("{\"entries\": [");
  scree_status st = scree__cache_foreach_entry(cache, c.arch, c.op, 1, on_entry, &l);
  const int skipped = cli_report_refused(cache, "show");
  if (c.json) printf("\n], \"skipped\": %d}\n", skipped);
  else if (!l.n)
    printf("no matching entry in %s\n", scree__cache_path(cache));
  rc = cli_cache_failed(cache, st, "show");
  scree__cache_close(cache);
  if (rc) return rc;
  return l.n ? CLI_OK : CLI_FAIL;
}

int cmd_export(int argc, char **argv) {
  cli_common c = {0};
  const char *out = NULL, *text = NULL;
  for (int i = 1; i < argc; i++) {
    int r = cli_common_opt(&c, argc, argv, &i, "export");
    if (r < 0) return CLI_USAGE;
    if (r) continue;
    if (!strcmp(argv[i], "--text")) {
      if (!(text = cli_value(argc, argv, &i, "--text", "export"))) return CLI_USAGE;
      continue;
    }
    if (argv[i][0] == '-' || out) return cli_unknown("export", argv[i]);
    if (!argv[i][0]) {
      fprintf(stderr, "scree-tune export: the output file name is empty (give OUT.db)\n");
      return CLI_USAGE;
    }
    out = argv[i];
  }
  if (text && out) {
    fprintf(stderr, "scree-tune export: give OUT.db or --text FILE, not both\n");
    return CLI_USAGE;
  }
  if (text) return cli_export_text(&c, text);
  if (!out) {
    fprintf(stderr, "scree-tune export: give the output file (see --help)\n");
    return CLI_USAGE;
  }
  scree__cache *cache;
  int rc = cli_open_user_cache(&c, &cache, "export", 1);
  if (rc) return rc;
  if (!cache) return CLI_CACHE;
  int n = 0, skipped = 0;
  char why[1024] = "";
  scree_status st = scree__cache_export(cache, out, c.arch, c.op, &n, &skipped, why, sizeof why);
  scree__cache_close(cache);
  if (st) {
    fprintf(stderr, "scree-tune export: %s\n", cli_esc(why));
    return CLI_CACHE;
  }
  /* Rows left out are said even with --quiet: the shipped file lacks them. */
  if (skipped) fprintf(stderr, "scree-tune export: warning: %s\n", cli_esc(why));
  if (!c.quiet) printf("exported %d winner(s) to %s, %d skipped\n", n, out, skipped);
  return CLI_OK;
}

typedef struct mctx {
  const cli_common *c;
  const char *src;
  int first;
} mctx;

static void on_conflict(void *user, const scree__centry *mine, const scree__centry *theirs) {
  mctx *m = user;
  if (m->c->json) {
    printf("%s\n {\"source\": ", m->first ? "" : ",");
    cli_json_str(stdout, m->src);
    printf(", ");
    json_key(&mine->key);
    printf(", \"mine\": ");
    cli_json_str(stdout, mine->config);
    printf(", \"mine_us\": ");
    cli_json_num(stdout, "%.3f", mine->median_us);
    printf(", \"theirs\": ");
    cli_json_str(stdout, theirs->config);
    printf(", \"theirs_us\": ");
    cli_json_num(stdout, "%.3f", theirs->median_us);
    printf("}");
    m->first = 0;
  } else {
    printf("conflict %s %s %s %s: mine %s (%.2f us, %s) vs theirs %s (%.2f us, %s): kept %s\n",
           cli_esc(mine->key.op), cli_esc(mine->key.arch), cli_esc(mine->key.bucket),
           cli_esc(mine->key.dtype), cli_esc(mine->config), mine->median_us,
           cli_esc(mine->device_name), cli_esc(theirs->config), theirs->median_us,
           cli_esc(theirs->device_name), theirs->median_us < mine->median_us ? "theirs" : "mine");
  }
}

int cmd_merge(int argc, char **argv) {
  cli_common c = {0};
  const char *srcs[64];
  int nsrc = 0, loose_ok = 0;
  for (int i = 1; i < argc; i++) {
    int r = cli_common_opt(&c, argc, argv, &i, argv[0]);
    if (r < 0) return CLI_USAGE;
    if (r) continue;
    if (!strcmp(argv[i], "--no-strict-modes")) {
      loose_ok = 1;
      continue;
    }
    if (argv[i][0] == '-' || nsrc == 64) return cli_unknown(argv[0], argv[i]);
    if (!argv[i][0]) {
      fprintf(stderr, "scree-tune %s: a source cache name is empty (give SRC.db)\n", argv[0]);
      return CLI_USAGE;
    }
    srcs[nsrc++] = argv[i];
  }
  if (!nsrc) {
    fprintf(stderr, "scree-tune %s: give at least one source cache (see --help)\n", argv[0]);
    return CLI_USAGE;
  }
  scree__cache *cache;
  int rc = cli_open_user_cache(&c, &cache, argv[0], 0);
  if (rc) return rc;
  mctx m = {.c = &c, .first = 1};
  int ta = 0, tr = 0, tc = 0, ts = 0;
  if (c.json) printf("{\"conflicts\": [");
  for (int s = 0; s < nsrc && !rc; s++) {
    scree__merge_counts n;
    char why[1024] = "";
    m.src = srcs[s];
    /* A source is code: one that others could have changed is refused
     * (docs/security.md) unless the operator says otherwise. */
    const int strict = !loose_ok && scree__cache_strict_modes();
    scree_status st =
        scree__cache_merge(cache, srcs[s], strict, &n, on_conflict, &m, why, sizeof why);
    if (st) {
      fprintf(stderr, "scree-tune %s: %s: %s\n", argv[0], srcs[s], cli_esc(why));
      if (strict && strstr(why, "refusing "))
        fprintf(stderr, "scree-tune %s: to merge it anyway, pass --no-strict-modes\n", argv[0]);
      rc = CLI_CACHE;
      break;
    }
    const int skipped = n.skipped_hash + n.skipped_invalid;
    ta += n.added, tr += n.replaced, tc += n.conflicts, ts += skipped;
    /* Rows left out are said even with --quiet, as conflicts are. */
    if (skipped) fprintf(stderr, "scree-tune %s: warning: %s\n", argv[0], cli_esc(why));
    if (!c.json && !c.quiet)
      printf("%s: %d added, %d replaced by faster entries, %d conflict(s), %d skipped\n",
             srcs[s], n.added, n.replaced, n.conflicts, skipped);
  }
  if (c.json)
    printf("\n], \"added\": %d, \"replaced\": %d, \"conflict_count\": %d, \"skipped\": %d}\n",
           ta, tr, tc, ts);
  scree__cache_close(cache);
  return rc;
}

int cmd_clear(int argc, char **argv) {
  cli_common c = {0};
  int all = 0;
  for (int i = 1; i < argc; i++) {
    int r = cli_common_opt(&c, argc, argv, &i, "clear");
    if (r < 0) return CLI_USAGE;
    if (r) continue;
    if (!strcmp(argv[i], "--all"))
      all = 1;
    else
      return cli_unknown("clear", argv[i]);
  }
  if (!all && !c.arch && !c.op) {
    fprintf(stderr, "scree-tune clear: give --arch, --op or --all\n");
    return CLI_USAGE;
  }
  scree__cache *cache;
  int rc = cli_open_user_cache(&c, &cache, "clear", 0);
  if (rc) return rc;
  int n = 0;
  scree_status st = scree__cache_clear(cache, c.arch, c.op, &n);
  if (!st && !c.quiet) printf("deleted %d winner(s) from %s\n", n, scree__cache_path(cache));
  rc = cli_cache_failed(cache, st, "clear");
  scree__cache_close(cache);
  return rc;
}

/* ---- safelist export --------------------------------------------------- */

typedef struct sctx {
  scree__safelist *sl;
  int cap;
  const char *op;
  int skipped_stale, skipped_local, skipped_check, oom;
} sctx;

static scree__sl_entry *push(sctx *s) {
  if (s->sl->n == s->cap) {
    int cap = s->cap ? s->cap * 2 : 64;
    scree__sl_entry *e = realloc(s->sl->entries, (size_t)cap * sizeof *e);
    if (!e) {
      s->oom = 1;
      return NULL;
    }
    s->sl->entries = e;
    s->cap = cap;
  }
  scree__sl_entry *e = &s->sl->entries[s->sl->n++];
  memset(e, 0, sizeof *e);
  return e;
}

/* The selector of a learned line, as the parser will check it: "*" when the
 * config passes the op's check with the op's example variant on the list's
 * arch, else the variant it was learned on if the config passes for that
 * one. 0 if neither (the line would not load: it is left out). */
static int selector_for(const sctx *s, const scree__op *op, const scree__config *cfg,
                        const char *variant, char *out, size_t n) {
  scree__variant ex, var;
  scree__target t;
  char canon[128];
  if (scree__target_for_arch(s->sl->arch, &t)) return 0;
  scree__variant_example(op, &ex);
  if (scree__config_check(op, cfg, &ex, &t, NULL, 0)) {
    snprintf(out, n, "*");
    return 1;
  }
  if (scree__variant_parse(op, variant, &var, NULL, 0)) return 0;
  scree__variant_str(op, &var, canon, sizeof canon);
  if (strcmp(canon, variant) || strlen(variant) >= n ||
      !scree__config_check(op, cfg, &var, &t, NULL, 0))
    return 0;
  snprintf(out, n, "%s", variant);
  return 1;
}

/* Drops every line of op/cfg (any verb, any dtype selector). */
static void drop_lines(scree__safelist *sl, const scree__op *op, const scree__config *cfg) {
  int m = 0;
  for (int i = 0; i < sl->n; i++)
    if (!(sl->entries[i].op == op && !memcmp(&sl->entries[i].cfg, cfg, sizeof *cfg)))
      sl->entries[m++] = sl->entries[i];
  sl->n = m;
}

/* A learned reason: built from cache text, so escaped (scree__escape_text)
 * to fit the reason field as it will be written. */
static void learned_reason(scree__sl_entry *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void learned_reason(scree__sl_entry *e, const char *fmt, ...) {
  char raw[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(raw, sizeof raw, fmt, ap);
  va_end(ap);
  for (char *r = raw; *r; r++)
    if (*r == '\n' || *r == '\r') *r = ' ';
  scree__escape_text(e->reason, sizeof e->reason, raw);
}

/* A bad record becomes a deny line when it says the config is wrong
 * everywhere: it failed to compile or load (bucket "*"), or computed a
 * wrong answer. Timeouts and launch failures of one bucket stay in the
 * cache, where they apply to that bucket only. Records for another kernel
 * source say nothing about this one and are skipped, as are records whose
 * line would not pass the op's check (the list would not load). */
static int learn_bad(void *user, const scree__cbad *b) {
  sctx *s = user;
  const scree__op *op = scree__op_find(b->key.op);
  scree__config cfg;
  char why[256], sel[64];
  if (!op || scree__config_parse(op, b->config, &cfg, why, sizeof why)) return 0;
  if (strcmp(b->key.src_hash, scree__source_hash(op))) {
    s->skipped_stale++;
    return 0;
  }
  const int global = !strcmp(b->key.bucket, "*") || !strncmp(b->reason, "wrong answer", 12);
  if (!global) {
    s->skipped_local++;
    return 0;
  }
  if (!selector_for(s, op, &cfg, b->key.dtype, sel, sizeof sel)) {
    s->skipped_check++;
    return 0;
  }
  for (int i = 0; i < s->sl->n; i++)
    if (s->sl->entries[i].op == op && s->sl->entries[i].verb == SCREE__SL_DENY &&
        !memcmp(&s->sl->entries[i].cfg, &cfg, sizeof cfg) && !strcmp(s->sl->entries[i].dtype, "*"))
      return 0; /* denied already */
  drop_lines(s->sl, op, &cfg);
  scree__sl_entry *e = push(s);
  if (!e) return 1;
  e->op = op;
  e->verb = SCREE__SL_DENY;
  e->cfg = cfg;
  snprintf(e->dtype, sizeof e->dtype, "%s", sel);
  learned_reason(e, "learned: %.120s (%.40s, %.60s, NVRTC %d.%d)", b->reason, b->key.dtype,
                 b->key.bucket, b->nvrtc_version / 1000, (b->nvrtc_version % 1000) / 10);
  return 0;
}

static int learn_good(void *user, const scree__centry *w) {
  sctx *s = user;
  const scree__op *op = scree__op_find(w->key.op);
  scree__config cfg;
  char why[256], sel[64];
  if (!op || scree__config_parse(op, w->config, &cfg, why, sizeof why)) return 0;
  if (strcmp(w->key.src_hash, scree__source_hash(op))) return 0; /* another kernel */
  for (int i = 0; i < s->sl->n; i++)
    if (s->sl->entries[i].op == op && !memcmp(&s->sl->entries[i].cfg, &cfg, sizeof cfg))
      return 0; /* listed already (allowed, denied or default) */
  if (!selector_for(s, op, &cfg, w->key.dtype, sel, sizeof sel)) {
    s->skipped_check++;
    return 0;
  }
  scree__sl_entry *e = push(s);
  if (!e) return 1;
  e->op = op;
  e->verb = SCREE__SL_ALLOW;
  e->cfg = cfg;
  snprintf(e->dtype, sizeof e->dtype, "%s", sel);
  learned_reason(e, "learned: won %s %s at %.2f us on %.60s", w->key.bucket, w->key.dtype,
                 w->median_us, w->device_name);
  return 0;
}

int cmd_safelist(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "export")) {
    fputs(usage_safelist, stderr);
    return CLI_USAGE;
  }
  cli_common c = {0};
  const char *out = NULL;
  for (int i = 2; i < argc; i++) {
    int r = cli_common_opt(&c, argc, argv, &i, "safelist export");
    if (r < 0) return CLI_USAGE;
    if (r) continue;
    const char *v;
    if ((v = cli_value(argc, argv, &i, "-o", "safelist export")))
      out = v;
    else if (!strcmp(argv[i], "-o"))
      return CLI_USAGE; /* cli_value said why */
    else
      return cli_unknown("safelist export", argv[i]);
  }
  if (!c.arch) {
    fprintf(stderr, "scree-tune safelist export: --arch is required (e.g. --arch sm_90)\n");
    return CLI_USAGE;
  }
  scree__safelist sl;
  char why[1024];
  scree_status lst = scree__safelist_for_arch(c.arch, &sl, why, sizeof why);
  if (lst == SCREE_ERROR_INVALID_ARGUMENT) {
    fprintf(stderr, "scree-tune safelist export: --arch: %s\n", why);
    return CLI_USAGE;
  } else if (lst == SCREE_ERROR_NOT_FOUND) {
    memset(&sl, 0, sizeof sl); /* none yet: start an empty list */
    snprintf(sl.arch, sizeof sl.arch, "%s", c.arch);
  } else if (lst != SCREE_OK) {
    fprintf(stderr, "scree-tune safelist export: the current list does not load: %s\n", why);
    return CLI_FAIL;
  } else if (strcmp(sl.arch, c.arch)) {
    snprintf(sl.arch, sizeof sl.arch, "%s", c.arch); /* a fallback family list */
  }
  sctx s = {.sl = &sl, .cap = sl.n, .op = c.op};
  scree__cache *cache;
  int rc = cli_open_user_cache(&c, &cache, "safelist export", 1);
  if (rc) {
    scree__safelist_free(&sl);
    return rc;
  }
  scree_status st = SCREE_OK;
  if (cache) {
    st = scree__cache_foreach_bad(cache, c.arch, c.op, learn_bad, &s);
    if (!st) st = scree__cache_foreach_entry(cache, c.arch, c.op, 0, learn_good, &s);
    if (!st && s.oom) st = SCREE_ERROR_OUT_OF_MEMORY;
    cli_report_refused(cache, "safelist export");
    rc = cli_cache_failed(cache, st, "safelist export");
    scree__cache_close(cache);
  }
  if (!c.quiet && (s.skipped_stale || s.skipped_local))
    fprintf(stderr,
            "scree-tune safelist export: left out %d bad record(s) of another kernel source "
            "and %d that apply to one bucket only\n", s.skipped_stale, s.skipped_local);
  if (s.skipped_check)
    fprintf(stderr,
            "scree-tune safelist export: warning: left out %d learned line(s) whose config "
            "fails the op's check on %s (the list would not load)\n", s.skipped_check, c.arch);
  if (rc) {
    scree__safelist_free(&sl);
    return rc;
  }
  /* The text is built in memory and parsed back before anything is
   * written: what this writes always loads. */
  char comment[256], name[64], *text = NULL;
  size_t len = 0;
  snprintf(comment, sizeof comment,
           "written by scree-tune safelist export --arch %s (scree %s)", c.arch,
           scree_version());
  FILE *m = open_memstream(&text, &len);
  const int werr = !m || scree__safelist_write(m, &sl, comment) != 0;
  if (m && fclose(m) != 0) rc = CLI_FAIL;
  scree__safelist_free(&sl);
  if (werr || rc || !text) {
    fprintf(stderr, "scree-tune safelist export: out of memory\n");
    free(text);
    return CLI_FAIL;
  }
  snprintf(name, sizeof name, "%s.txt", c.arch);
  scree__safelist back;
  if (scree__safelist_parse(text, name, &back, why, sizeof why) != SCREE_OK) {
    fprintf(stderr, "scree-tune safelist export: the list it would write does not load, so"
                    " nothing was written: %s\n", why);
    free(text);
    return CLI_FAIL;
  }
  scree__safelist_free(&back);
  if (out) {
    if (cli_write_file(out, text, len, why, sizeof why)) {
      fprintf(stderr, "scree-tune safelist export: %s\n", why);
      rc = CLI_FAIL;
    }
  } else if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
    fprintf(stderr, "scree-tune safelist export: writing to standard output: %s\n",
            strerror(errno));
    rc = CLI_FAIL;
  }
  free(text);
  return rc;
}
