/* cli_cache.c - scree-tune list, show, export, import/merge, clear and
 * safelist export: the commands that read and write caches (no GPU). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"

const char *const usage_list =
    "usage: scree-tune list [--misses | --bad] [--arch A] [--op OP] [--cache PATH] [--quiet]\n"
    "                       [--json]\n\n"
    "Lists the user cache's tuned winners as a table (or JSON): op, arch,\n"
    "bucket, dtype, config, median time and device. --misses lists the calls\n"
    "that found no tuned config (what prewarm --from-misses tunes); --bad lists\n"
    "the configs recorded as bad, with the reason.\n";
const char *const usage_show =
    "usage: scree-tune show [--op OP] [--arch A] [--bucket B] [--dtype D] [--cache PATH]\n"
    "                       [--quiet] [--json]\n\n"
    "Shows every field of the matching winners: key, config, time and\n"
    "spread, device, SM count, driver, NVRTC and scree versions, when, and\n"
    "the cubin's size and sha256 (and whether it still matches). Rows compiled\n"
    "from the shipped tuned configs say which facts they do not have.\n";
const char *const usage_export =
    "usage: scree-tune export OUT.db [--arch A] [--op OP] [--cache PATH] [--quiet] [--json]\n"
    "       scree-tune export --text FILE|- [--arch A] [--op OP] [--cache PATH] [--quiet]\n"
    "                         [--json]\n\n"
    "Writes the matching winners, cubins included, into a new standalone\n"
    "cache file to ship with a deployment (list it in SCREE_CACHE_PATH there).\n"
    "OUT.db must not exist. --text writes them as reviewable text instead,\n"
    "one line a winner without its cubin (op bucket dtype causal arch device\n"
    "config median_us src_hash), as the shipped tuned configs in caches/ are\n"
    "kept; FILE is replaced atomically, - is stdout (not with --json).\n";
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
    "usage: scree-tune clear (--all | --arch A | --op OP) [--cache PATH] [--quiet] [--json]\n\n"
    "Deletes winners, bad-config records and misses matching the filter.\n"
    "--all is required to delete everything.\n";
const char *const usage_safelist =
    "usage: scree-tune safelist export --arch A [--op OP] [--cache PATH] [--quiet] [-o FILE]\n\n"
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

/* "13.0" from a version the cache stores as major*1000 + minor*10. */
static const char *version(int v, char *buf, size_t n) {
  snprintf(buf, n, "%d.%d", v / 1000, (v % 1000) / 10);
  return buf;
}

typedef struct lctx {
  const cli_common *c;
  int n, show, oom;
  cli_table table;
  int nvrtc_here; /* this machine's NVRTC (major*1000 + minor*10), 0 if none */
} lctx;

static void json_key(const scree__admin_key *k) {
  cli_json_key_start(k);
  printf(", \"causal\": %d, \"arch\": ", k->causal);
  cli_json_str(stdout, k->arch);
  printf(", \"src_hash\": ");
  cli_json_str(stdout, k->src_hash);
}

static void json_winner(const lctx *l, const scree__admin_row *e) {
  json_key(&e->key);
  printf(", \"config\": ");
  cli_json_str(stdout, e->config);
  printf(", \"median_us\": ");
  cli_json_num(stdout, "%.3f", e->median_us);
  printf(", \"spread_us\": ");
  cli_json_num(stdout, "%.3f", e->spread_us);
  printf(", \"device\": ");
  cli_json_str(stdout, e->device);
  /* A row compiled from a shipped tuned config has no SM count or driver:
   * null, not an invented 0. */
  printf(", \"origin\": \"%s\"", e->device_known ? "tuned" : "shipped");
  if (e->device_known)
    printf(", \"sm_count\": %d, \"driver_version\": %d", e->sm_count, e->driver_version);
  else
    printf(", \"sm_count\": null, \"driver_version\": null");
  printf(", \"nvrtc_version\": %d, \"scree_version\": ", e->nvrtc_version);
  cli_json_str(stdout, e->scree_version);
  printf(", \"created\": %lld, \"cubin_size\": %zu, \"cubin_sha256\": ", (long long)e->created,
         e->cubin_size);
  cli_json_str(stdout, e->cubin_hash);
  printf(", \"stale\": %s", e->stale ? "true" : "false");
  if (l->show) printf(", \"cubin_ok\": %s", e->cubin_ok == 1 ? "true" : "false");
}

/* show: every field, and what a row does not know. */
static void show_winner(const lctx *l, const scree__admin_row *e) {
  char a[32], v[16], here[16];
  printf("%s %s %s%s on %s\n", cli_esc(e->key.op), cli_esc(e->key.bucket), cli_esc(e->key.dtype),
         e->key.causal ? " causal" : "", cli_esc(e->key.arch));
  printf("  config        %s\n", cli_esc(e->config));
  if (e->device_known)
    printf("  time          %.3f us median, %.3f us interquartile spread\n", e->median_us,
           e->spread_us);
  else
    printf("  time          %.3f us median, as shipped (no spread recorded)\n", e->median_us);
  char nvrtc[64];
  snprintf(nvrtc, sizeof nvrtc, "NVRTC %s", version(e->nvrtc_version, v, sizeof v));
  if (l->nvrtc_here && l->nvrtc_here != e->nvrtc_version)
    snprintf(nvrtc + strlen(nvrtc), sizeof nvrtc - strlen(nvrtc), " (this machine has %s)",
             version(l->nvrtc_here, here, sizeof here));
  if (e->device_known) {
    char drv[16];
    printf("  device        %s, %d SMs, driver %s, cubin by %s\n", cli_esc(e->device),
           e->sm_count, version(e->driver_version, drv, sizeof drv), nvrtc);
    printf("  tuned         by scree %s, %s ago\n", cli_esc(e->scree_version),
           age(e->created, a, sizeof a));
  } else {
    /* prewarm --from-shipped compiled a line of caches/: the text holds
     * the device model and the time, nothing else of the tune. */
    printf("  device        %s (tuned there; SM count and driver not recorded), cubin by %s\n",
           cli_esc(e->device), nvrtc);
    printf("  tuned         from a shipped tuned config, when not recorded; compiled here by "
           "scree %s, %s ago\n", cli_esc(e->scree_version), age(e->created, a, sizeof a));
  }
  printf("  kernel source sha256 %s%s\n", cli_esc(e->key.src_hash),
         e->stale ? " (stale: not this build's kernels; no call reaches it)" : "");
  printf("  cubin         %zu bytes, sha256 %s (%s)\n\n", e->cubin_size, cli_esc(e->cubin_hash),
         e->cubin_ok == 1 ? "matches" : "MISMATCH: will not be loaded");
}

/* Text from the cache goes through cli_esc before it reaches the terminal,
 * and through cli_json_str / cli_json_num into JSON. */
static int on_winner(void *user, const scree__admin_row *e) {
  lctx *l = user;
  char a[32], us[32];
  if (l->c->json) {
    printf("%s\n {", l->n ? "," : "");
    json_winner(l, e);
    printf("}");
  } else if (l->show) {
    show_winner(l, e);
  } else {
    snprintf(us, sizeof us, "%.2f", e->median_us);
    /* A row compiled from a shipped config was not tuned here: its age
     * would be the compile's. */
    const char *cells[] = {cli_esc(e->key.op),  cli_esc(e->key.arch),   cli_esc(e->key.bucket),
                           cli_esc(e->key.dtype), cli_esc(e->config), us, cli_esc(e->device),
                           e->device_known ? age(e->created, a, sizeof a) : "shipped"};
    if (cli_table_add(&l->table, cells)) l->oom = 1;
  }
  l->n++;
  return l->oom;
}

static int on_miss(void *user, const scree__admin_row *m) {
  lctx *l = user;
  char a[32], count[32];
  if (l->c->json) {
    printf("%s\n {", l->n ? "," : "");
    json_key(&m->key);
    printf(", \"count\": %lld, \"first_seen\": %lld, \"last_seen\": %lld, \"example\": ",
           (long long)m->count, (long long)m->first_seen, (long long)m->last_seen);
    cli_json_str(stdout, m->example);
    printf("}");
  } else {
    snprintf(count, sizeof count, "%lld", (long long)m->count);
    const char *cells[] = {cli_esc(m->key.op),    cli_esc(m->key.arch), cli_esc(m->key.bucket),
                           cli_esc(m->key.dtype), count,                age(m->last_seen, a, sizeof a)};
    if (cli_table_add(&l->table, cells)) l->oom = 1;
  }
  l->n++;
  return l->oom;
}

static int on_bad(void *user, const scree__admin_row *b) {
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
    const char *cells[] = {cli_esc(b->key.op),    cli_esc(b->key.arch), cli_esc(b->key.bucket),
                           cli_esc(b->key.dtype), cli_esc(b->config),   cli_esc(b->reason)};
    if (cli_table_add(&l->table, cells)) l->oom = 1;
  }
  l->n++;
  return l->oom;
}

int cmd_list(int argc, char **argv) {
  static const struct option opts[] = {{"misses", no_argument, NULL, OPT_MISSES},
                                       {"bad", no_argument, NULL, OPT_BAD},
                                       CLI_OPT_ARCH, CLI_OPT_OP, CLI_OPT_CACHE, CLI_OPT_QUIET,
                                       CLI_OPT_JSON, CLI_OPT_END};
  cli_common c = {0};
  int misses = 0, bad = 0, ch, npos;
  const char *v;
  cli_args a;
  cli_args_init(&a, "list", argc, argv, opts, "q");
  while ((ch = cli_next(&a, &v)) != -1) {
    if (ch == CLI_BAD_OPTION) return CLI_USAGE;
    if (cli_common_opt(&c, ch, v)) continue;
    if (ch == OPT_MISSES) misses = 1;
    if (ch == OPT_BAD) bad = 1;
  }
  char **pos = cli_positional(&a, &npos);
  if (npos) return cli_unexpected("list", pos[0]);
  if (misses && bad) {
    fprintf(stderr, "scree-tune list: --misses and --bad exclude each other\n");
    return CLI_USAGE;
  }
  scree__admin_cache *cache;
  int rc = cli_open_user_cache(&c, &cache, "list", 1);
  if (rc) return rc;
  const char *what = misses ? "misses" : bad ? "bad" : "entries";
  if (!cache) {
    if (c.json) {
      cli_json_open();
      printf("\"cache\": null, \"%s\": [], \"skipped\": 0}\n", what);
    }
    return CLI_OK;
  }
  static const char *const winner_heads[] = {"op", "arch", "bucket", "dtype", "config", "us",
                                             "device", "age"};
  static const char *const miss_heads[] = {"op", "arch", "bucket", "dtype", "count", "last"};
  static const char *const bad_heads[] = {"op", "arch", "bucket", "dtype", "config", "reason"};
  lctx l = {.c = &c};
  if (misses)
    cli_table_init(&l.table, 6, miss_heads, "llllrr");
  else if (bad)
    cli_table_init(&l.table, 6, bad_heads, "llllll");
  else
    cli_table_init(&l.table, 8, winner_heads, "lllllrlr");
  if (c.json) {
    cli_json_open();
    printf("\"cache\": ");
    cli_json_str(stdout, scree__admin_path(cache));
    printf(", \"%s\": [", what);
  }
  const scree__admin_filter f = cli_filter(&c);
  scree_status st = misses ? scree__admin_rows(cache, SCREE__ADMIN_MISSES, &f, 0, on_miss, &l)
                    : bad  ? scree__admin_rows(cache, SCREE__ADMIN_BAD, &f, 0, on_bad, &l)
                           : scree__admin_rows(cache, SCREE__ADMIN_WINNERS, &f, 0, on_winner, &l);
  if (!st && l.oom) st = SCREE_ERROR_OUT_OF_MEMORY;
  cli_table_print(&l.table, stdout);
  const int skipped = cli_report_refused(cache, "list");
  if (c.json)
    printf("\n], \"skipped\": %d}\n", skipped);
  else if (!c.quiet)
    printf("%d %s in %s%s\n", l.n, misses ? "miss(es)" : bad ? "bad config(s)" : "winner(s)",
           scree__admin_path(cache), skipped ? " (rows skipped: see above)" : "");
  rc = cli_cache_failed(cache, st, "list");
  scree__admin_close(cache);
  return rc;
}

int cmd_show(int argc, char **argv) {
  static const struct option opts[] = {CLI_OPT_OP, CLI_OPT_ARCH,
                                       {"bucket", required_argument, NULL, OPT_BUCKET},
                                       {"dtype", required_argument, NULL, OPT_DTYPE},
                                       CLI_OPT_CACHE, CLI_OPT_QUIET, CLI_OPT_JSON, CLI_OPT_END};
  cli_common c = {0};
  lctx l = {.c = &c, .show = 1};
  const char *bucket = NULL, *dtype = NULL, *v;
  int ch, npos;
  cli_args a;
  cli_args_init(&a, "show", argc, argv, opts, "q");
  while ((ch = cli_next(&a, &v)) != -1) {
    if (ch == CLI_BAD_OPTION) return CLI_USAGE;
    if (cli_common_opt(&c, ch, v)) continue;
    if (ch == OPT_BUCKET) bucket = v;
    if (ch == OPT_DTYPE) dtype = v;
  }
  char **pos = cli_positional(&a, &npos);
  if (npos) return cli_unexpected("show", pos[0]);
  scree__admin_cache *cache;
  int rc = cli_open_user_cache(&c, &cache, "show", CLI_CACHE_NEEDED);
  if (rc) return rc;
  if (!cache) return CLI_FAIL;
  scree__admin_nvrtc nv;
  scree__admin_nvrtc_info(&nv);
  if (nv.loaded) l.nvrtc_here = nv.major * 1000 + nv.minor * 10;
  if (c.json) {
    cli_json_open();
    printf("\"entries\": [");
  }
  scree__admin_filter f = cli_filter(&c);
  f.bucket = bucket;
  f.dtype = dtype;
  scree_status st = scree__admin_rows(cache, SCREE__ADMIN_WINNERS, &f, 1, on_winner, &l);
  const int skipped = cli_report_refused(cache, "show");
  if (c.json)
    printf("\n], \"skipped\": %d}\n", skipped);
  else if (!l.n && st == SCREE_OK)
    printf("no matching entry in %s\n", scree__admin_path(cache));
  rc = cli_cache_failed(cache, st, "show");
  scree__admin_close(cache);
  if (rc) return rc;
  return l.n ? CLI_OK : CLI_FAIL;
}

int cmd_export(int argc, char **argv) {
  static const struct option opts[] = {{"text", required_argument, NULL, OPT_TEXT},
                                       CLI_OPT_ARCH, CLI_OPT_OP, CLI_OPT_CACHE, CLI_OPT_QUIET,
                                       CLI_OPT_JSON, CLI_OPT_END};
  cli_common c = {0};
  const char *text = NULL, *v;
  int ch, npos;
  cli_args a;
  cli_args_init(&a, "export", argc, argv, opts, "q");
  while ((ch = cli_next(&a, &v)) != -1) {
    if (ch == CLI_BAD_OPTION) return CLI_USAGE;
    if (cli_common_opt(&c, ch, v)) continue;
    if (ch == OPT_TEXT) text = v;
  }
  char **pos = cli_positional(&a, &npos);
  if (npos > 1) return cli_unexpected("export", pos[1]);
  const char *out = npos ? pos[0] : NULL;
  if (out && !out[0]) {
    fprintf(stderr, "scree-tune export: the output file name is empty (give OUT.db)\n");
    return CLI_USAGE;
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
  scree__admin_cache *cache;
  int rc = cli_open_user_cache(&c, &cache, "export", CLI_CACHE_NEEDED);
  if (rc) return rc;
  if (!cache) return CLI_CACHE;
  int n = 0, skipped = 0;
  char why[1024] = "";
  const scree__admin_filter f = cli_filter(&c);
  scree_status st = scree__admin_export(cache, out, &f, &n, &skipped, why, sizeof why);
  scree__admin_close(cache);
  if (st) {
    fprintf(stderr, "scree-tune export: %s\n", cli_esc(why));
    return CLI_CACHE;
  }
  /* Rows left out are said even with --quiet: the shipped file lacks them. */
  if (skipped) fprintf(stderr, "scree-tune export: warning: %s\n", cli_esc(why));
  if (c.json) {
    cli_json_open();
    printf("\"path\": ");
    cli_json_str(stdout, out);
    printf(", \"exported\": %d, \"skipped\": %d}\n", n, skipped);
  } else if (!c.quiet) {
    printf("exported %d winner(s) to %s, %d skipped\n", n, out, skipped);
  }
  return CLI_OK;
}

typedef struct mctx {
  const cli_common *c;
  const char *src;
  int first;
} mctx;

static void on_conflict(void *user, const scree__admin_row *mine, const scree__admin_row *theirs) {
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
           cli_esc(mine->device), cli_esc(theirs->config), theirs->median_us,
           cli_esc(theirs->device), theirs->median_us < mine->median_us ? "theirs" : "mine");
  }
}

int cmd_merge(int argc, char **argv) {
  static const struct option opts[] = {{"no-strict-modes", no_argument, NULL, OPT_NO_STRICT},
                                       CLI_OPT_CACHE, CLI_OPT_QUIET, CLI_OPT_JSON, CLI_OPT_END};
  const char *cmd = argv[0]; /* merge or import */
  cli_common c = {0};
  int loose_ok = 0, ch, nsrc;
  const char *v;
  cli_args a;
  cli_args_init(&a, cmd, argc, argv, opts, "q");
  while ((ch = cli_next(&a, &v)) != -1) {
    if (ch == CLI_BAD_OPTION) return CLI_USAGE;
    if (cli_common_opt(&c, ch, v)) continue;
    if (ch == OPT_NO_STRICT) loose_ok = 1;
  }
  char **srcs = cli_positional(&a, &nsrc);
  if (!nsrc) {
    fprintf(stderr, "scree-tune %s: give at least one source cache (see --help)\n", cmd);
    return CLI_USAGE;
  }
  for (int s = 0; s < nsrc; s++)
    if (!srcs[s][0]) {
      fprintf(stderr, "scree-tune %s: a source cache name is empty (give SRC.db)\n", cmd);
      return CLI_USAGE;
    }
  /* The flag is the variable for this command: the destination, which the
   * trust check covers as any cache a command writes, is accepted too. */
  if (loose_ok) setenv("SCREE_CACHE_STRICT_MODES", "0", 1);
  scree__admin_cache *cache;
  int rc = cli_open_user_cache(&c, &cache, cmd, 0);
  if (rc) return rc;
  mctx m = {.c = &c, .first = 1};
  int ta = 0, tr = 0, tc = 0, ts = 0;
  if (c.json) {
    cli_json_open();
    printf("\"conflicts\": [");
  }
  for (int s = 0; s < nsrc && !rc; s++) {
    scree__admin_merge_counts n;
    char why[1024] = "";
    m.src = srcs[s];
    /* A source is code: one that others could have changed is refused
     * (docs/security.md) unless the operator says otherwise. */
    const int strict = !loose_ok && scree__admin_strict_modes();
    scree_status st =
        scree__admin_merge(cache, srcs[s], strict, &n, on_conflict, &m, why, sizeof why);
    if (st) {
      fprintf(stderr, "scree-tune %s: %s: %s\n", cmd, srcs[s], cli_esc(why));
      if (strict && strstr(why, "refusing "))
        fprintf(stderr, "scree-tune %s: to merge it anyway, pass --no-strict-modes\n", cmd);
      rc = CLI_CACHE;
      break;
    }
    const int skipped = n.skipped_hash + n.skipped_invalid;
    ta += n.added, tr += n.replaced, tc += n.conflicts, ts += skipped;
    /* Rows left out are said even with --quiet, as conflicts are. */
    if (skipped) fprintf(stderr, "scree-tune %s: warning: %s\n", cmd, cli_esc(why));
    if (!c.json && !c.quiet)
      printf("%s: %d added, %d replaced by faster entries, %d conflict(s), %d skipped\n",
             srcs[s], n.added, n.replaced, n.conflicts, skipped);
  }
  if (c.json)
    printf("\n], \"added\": %d, \"replaced\": %d, \"conflict_count\": %d, \"skipped\": %d}\n",
           ta, tr, tc, ts);
  scree__admin_close(cache);
  return rc;
}

int cmd_clear(int argc, char **argv) {
  static const struct option opts[] = {{"all", no_argument, NULL, OPT_ALL}, CLI_OPT_ARCH,
                                       CLI_OPT_OP, CLI_OPT_CACHE, CLI_OPT_QUIET, CLI_OPT_JSON,
                                       CLI_OPT_END};
  cli_common c = {0};
  int all = 0, ch, npos;
  const char *v;
  cli_args a;
  cli_args_init(&a, "clear", argc, argv, opts, "q");
  while ((ch = cli_next(&a, &v)) != -1) {
    if (ch == CLI_BAD_OPTION) return CLI_USAGE;
    if (cli_common_opt(&c, ch, v)) continue;
    if (ch == OPT_ALL) all = 1;
  }
  char **pos = cli_positional(&a, &npos);
  if (npos) return cli_unexpected("clear", pos[0]);
  if (!all && !c.arch && !c.op) {
    fprintf(stderr, "scree-tune clear: give --arch, --op or --all\n");
    return CLI_USAGE;
  }
  scree__admin_cache *cache;
  int rc = cli_open_user_cache(&c, &cache, "clear", 0);
  if (rc) return rc;
  int n = 0;
  const scree__admin_filter f = cli_filter(&c);
  scree_status st = scree__admin_clear(cache, &f, &n);
  if (!st && c.json) {
    cli_json_open();
    printf("\"cache\": ");
    cli_json_str(stdout, scree__admin_path(cache));
    printf(", \"deleted\": %d}\n", n);
  } else if (!st && !c.quiet) {
    printf("deleted %d winner(s) from %s\n", n, scree__admin_path(cache));
  }
  rc = cli_cache_failed(cache, st, "clear");
  scree__admin_close(cache);
  return rc;
}

/* ---- safelist export --------------------------------------------------- */

int cmd_safelist(int argc, char **argv) {
  static const struct option opts[] = {CLI_OPT_ARCH, CLI_OPT_OP, CLI_OPT_CACHE, CLI_OPT_QUIET,
                                       CLI_OPT_END};
  cli_common c = {0};
  const char *out = NULL, *v;
  int ch, npos;
  cli_args a;
  cli_args_init(&a, "safelist export", argc, argv, opts, "qo:");
  while ((ch = cli_next(&a, &v)) != -1) {
    if (ch == CLI_BAD_OPTION) return CLI_USAGE;
    if (cli_common_opt(&c, ch, v)) continue;
    if (ch == 'o') out = v;
  }
  char **pos = cli_positional(&a, &npos);
  if (npos < 1 || strcmp(pos[0], "export")) {
    fputs(usage_safelist, stderr);
    return CLI_USAGE;
  }
  if (npos > 1) return cli_unexpected("safelist export", pos[1]);
  if (!c.arch) {
    fprintf(stderr, "scree-tune safelist export: --arch is required (e.g. --arch sm_90)\n");
    return CLI_USAGE;
  }
  scree__admin_cache *cache;
  int rc = cli_open_user_cache(&c, &cache, "safelist export", 1);
  if (rc) return rc;
  char *text = NULL, why[1280];
  size_t len = 0;
  scree__admin_learned n;
  const scree_status st =
      scree__admin_safelist_export(cache, c.arch, c.op, &text, &len, &n, why, sizeof why);
  if (cache) {
    cli_report_refused(cache, "safelist export");
    scree__admin_close(cache);
  }
  if (st == SCREE_ERROR_INVALID_ARGUMENT) {
    fprintf(stderr, "scree-tune safelist export: --arch: %s\n", why);
    return CLI_USAGE;
  }
  if (!c.quiet && (n.stale || n.one_bucket))
    fprintf(stderr,
            "scree-tune safelist export: left out %d bad record(s) of another kernel source "
            "and %d that apply to one bucket only\n", n.stale, n.one_bucket);
  if (n.failed_check)
    fprintf(stderr,
            "scree-tune safelist export: warning: left out %d learned line(s) whose config "
            "fails the op's check on %s (the list would not load)\n", n.failed_check, c.arch);
  if (st) {
    fprintf(stderr, "scree-tune safelist export: %s%s\n",
            st == SCREE_ERROR_CACHE ? "cannot read the cache: " : "", cli_esc(why));
    return st == SCREE_ERROR_CACHE ? CLI_CACHE : CLI_FAIL;
  }
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
