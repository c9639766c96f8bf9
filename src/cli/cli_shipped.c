/* cli_shipped.c - the shipped tuned configs (caches/<device>.txt, text):
 * export --text writes them from a cache, verify --shipped checks them
 * without a GPU, prewarm --from-shipped compiles them into the user cache
 * without timing anything. docs/cache.md ("Shipped tuned configs"),
 * docs/cluster.md. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* ---- export --text -------------------------------------------------------- */

int cli_export_text(const cli_common *c, const char *out) {
  const int to_stdout = !strcmp(out, "-");
  if (to_stdout && c->json) {
    fprintf(stderr, "scree-tune export: --text - writes the text to standard output; --json "
                    "goes with --text FILE\n");
    return CLI_USAGE;
  }
  scree__admin_cache *cache;
  int rc = cli_open_user_cache(c, &cache, "export", CLI_CACHE_NEEDED);
  if (rc) return rc;
  if (!cache) return CLI_CACHE;
  char *buf = NULL, why[1024];
  size_t len = 0;
  int n = 0, skipped = 0;
  const scree__admin_filter f = cli_filter(c);
  const scree_status st =
      scree__admin_export_text(cache, &f, &buf, &len, &n, &skipped, why, sizeof why);
  const int refused = cli_report_refused(cache, "export");
  scree__admin_close(cache);
  if (st == SCREE_ERROR_PARSE) {
    fprintf(stderr, "scree-tune export: %s; nothing written\n", cli_esc(why));
    return CLI_FAIL;
  } else if (st == SCREE_ERROR_OUT_OF_MEMORY) {
    fprintf(stderr, "scree-tune export: out of memory\n");
    return CLI_FAIL;
  } else if (st) {
    fprintf(stderr, "scree-tune export: %s: %s\n", scree_status_name(st), cli_esc(why));
    return CLI_CACHE;
  }
  char werr[1024];
  if (to_stdout) {
    fwrite(buf, 1, len, stdout);
  } else if (cli_write_file(out, buf, len, werr, sizeof werr)) {
    fprintf(stderr, "scree-tune export: %s\n", werr);
    free(buf);
    return CLI_FAIL;
  }
  free(buf);
  if (skipped)
    fprintf(stderr, "scree-tune export: warning: skipped %d winner(s) that fail their checks "
                    "(first: %s)\n", skipped, cli_esc(why));
  if (c->json) {
    cli_json_open();
    printf("\"path\": ");
    cli_json_str(stdout, out);
    printf(", \"text\": true, \"exported\": %d, \"skipped\": %d}\n", n, skipped + refused);
  } else if (!c->quiet && !to_stdout) {
    printf("exported %d winner(s) as text to %s, %d skipped\n", n, out, skipped + refused);
  }
  return CLI_OK;
}

/* ---- verify --shipped ------------------------------------------------------- */

/* The rows of verify --shipped and prewarm --from-shipped: a JSON list or
 * a table. */
typedef struct rows_out {
  const cli_common *c;
  int first;
  cli_table table;
  int oom;
} rows_out;

static int on_shipped(void *user, const scree__admin_shipped_row *r) {
  rows_out *s = user;
  if (s->c->json) {
    printf("%s\n {", s->first ? "" : ",");
    cli_json_key_start(&r->key);
    printf(", \"causal\": %d, \"arch\": ", r->key.causal);
    cli_json_str(stdout, r->key.arch);
    printf(", \"device\": ");
    cli_json_str(stdout, r->device);
    printf(", \"config\": ");
    cli_json_str(stdout, r->config);
    printf(", \"median_us\": ");
    cli_json_num(stdout, "%.3f", r->median_us);
    printf(", \"src_hash\": ");
    cli_json_str(stdout, r->key.src_hash);
    printf(", \"file\": ");
    cli_json_str(stdout, r->file);
    printf(", \"line\": %d, \"verdict\": \"%s\"}", r->line, r->stale ? "stale" : "ok");
    s->first = 0;
  } else if (r->stale || !s->c->quiet) {
    const char *cells[] = {r->key.op, r->key.bucket, r->key.dtype, r->key.arch, r->device,
                           r->config,
                           r->stale ? "stale (tuned for another kernel source: ignored)" : "ok"};
    if (cli_table_add(&s->table, cells)) s->oom = 1;
  }
  return s->oom;
}

/* The closing line on the shipped configs (verify prints it after its own
 * summary); CLI_FAIL when a file of them did not load. */
/* The end of verify --shipped, and the closing line of verify: the warning
 * on a file that does not load (stderr: CLI_FAIL), then the counts. */
static int shipped_counts(const cli_common *c, const scree__admin_shipped_summary *sum) {
  if (sum->warn[0]) fprintf(stderr, "scree-tune verify: warning: %s\n", sum->warn);
  if (c->json) {
    printf("\n], \"count\": %d, \"stale\": %d, \"files\": %d, \"file_names\": ", sum->matched,
           sum->stale, sum->files);
    cli_json_str(stdout, sum->names);
    printf(", \"warning\": ");
    cli_json_str(stdout, sum->warn);
    printf("}\n");
  } else {
    printf("%d shipped tuned config(s) in %d file(s): %d stale (ignored: tuned for another "
           "kernel source; regenerate them, docs/cluster.md)%s\n",
           sum->matched, sum->files, sum->stale,
           sum->warn[0] ? ", and a file that does not load" : "");
  }
  return sum->warn[0] ? CLI_FAIL : CLI_OK;
}

/* Says why the kernel sources cannot be read, if they cannot (every
 * shipped config would look stale): CLI_FAIL, else CLI_OK. */
static int sources_unreadable(const char *cmd) {
  char why[4200];
  if (!scree__admin_kernel_sources(why, sizeof why)) return CLI_OK;
  fprintf(stderr, "scree-tune %s: cannot read the kernel sources, so no shipped config can be "
                  "matched to them: %s\n", cmd, cli_esc(why));
  return CLI_FAIL;
}

int cli_shipped_summary(const cli_common *c) {
  scree__admin_shipped_summary s;
  const scree__admin_filter f = cli_filter(c);
  if (scree__admin_shipped(&f, NULL, NULL, &s)) {
    fprintf(stderr, "scree-tune verify: out of memory\n");
    return CLI_FAIL;
  }
  return shipped_counts(c, &s);
}

int cli_verify_shipped(const cli_common *c) {
  if (sources_unreadable("verify")) return CLI_FAIL;
  static const char *const heads[] = {"op", "bucket", "dtype", "arch", "device", "config",
                                      "verdict"};
  rows_out s = {.c = c, .first = 1};
  cli_table_init(&s.table, 7, heads, "lllllll");
  if (c->json) {
    cli_json_open();
    printf("\"shipped\": [");
  }
  scree__admin_shipped_summary sum;
  const scree__admin_filter f = cli_filter(c);
  const scree_status st = scree__admin_shipped(&f, on_shipped, &s, &sum);
  cli_table_print(&s.table, stdout);
  if (st || s.oom) {
    fprintf(stderr, "scree-tune verify: out of memory\n");
    return CLI_FAIL;
  }
  return shipped_counts(c, &sum);
}

/* ---- prewarm --from-shipped ------------------------------------------------- */

static int on_compiled(void *user, const scree__admin_compiled *r) {
  rows_out *p = user;
  const scree__admin_shipped_row *e = &r->row;
  if (p->c->json) {
    printf("%s\n {", p->first ? "" : ",");
    cli_json_key_start(&e->key);
    printf(", \"arch\": \"%s\", \"target\": \"%s\", \"config\": ", e->key.arch, r->target);
    cli_json_str(stdout, e->config);
    printf(", \"median_us\": ");
    cli_json_num(stdout, "%.3f", e->median_us);
    printf(", \"device\": ");
    cli_json_str(stdout, e->device);
    printf(", \"status\": \"%s\", \"cubin_bytes\": %zu", scree_status_name(r->st),
           r->st ? (size_t)0 : r->cubin_size);
    if (r->st) {
      printf(", \"error\": ");
      cli_json_str(stdout, r->why);
    }
    printf("}");
    p->first = 0;
    return 0;
  }
  if (r->st) {
    /* Failures are said even with --quiet. */
    fprintf(stderr, "scree-tune prewarm: %s %s %s: %s %s for %s: %s\n", e->key.op, e->key.bucket,
            e->key.dtype, e->config, r->st == SCREE_ERROR_COMPILE ? "does not compile" : "failed",
            r->target, cli_esc(r->why));
  } else if (!p->c->quiet) {
    char us[32], size[32], device[sizeof e->device];
    snprintf(us, sizeof us, "%.2f", e->median_us);
    snprintf(size, sizeof size, "%zu", r->cubin_size);
    /* The text writes the model's blanks as '_'; the cache row has them back. */
    for (size_t k = 0; k < sizeof device; k++)
      device[k] = e->device[k] == '_' ? ' ' : e->device[k];
    const char *cells[] = {e->key.op, e->key.bucket, e->key.dtype, e->config, us,
                           cli_esc(device), r->target, size};
    if (cli_table_add(&p->table, cells)) p->oom = 1;
  }
  return p->oom;
}

int cli_prewarm_from_shipped(const cli_common *c, int force) {
  scree__admin_cache *user = NULL;
  int rc = sources_unreadable("prewarm");
  if (rc) return rc;
  rc = cli_open_user_cache(c, &user, "prewarm", 0);
  if (rc) return rc;
  static const char *const heads[] = {"op", "bucket", "dtype", "config", "us (shipped)",
                                      "tuned on", "target", "cubin"};
  rows_out p = {.c = c, .first = 1};
  cli_table_init(&p.table, 8, heads, "llllrllr");
  cli_progress bar;
  cli_progress_init(&bar, c->quiet || c->json, "shipped configs");
  if (c->json) {
    cli_json_open();
    printf("\"compiled\": [");
  }
  fflush(stdout);
  scree__admin_compile_counts n;
  char why[4096];
  const scree__admin_compile_opts o = {c->arch, c->op, force, cli_progress_update, &bar};
  const scree_status st =
      scree__admin_compile_shipped(user, &o, on_compiled, &p, &n, why, sizeof why);
  cli_progress_done(&bar);
  if (st == SCREE_ERROR_NO_NVRTC) {
    if (c->json) printf("\n]}\n");
    fprintf(stderr, "scree-tune prewarm: --from-shipped compiles with NVRTC, which is not "
                    "available: %s\n", why);
    scree__admin_close(user);
    return CLI_NO_GPU;
  }
  cli_table_print(&p.table, stdout);
  if (st == SCREE_ERROR_CACHE)
    fprintf(stderr, "scree-tune prewarm: cannot store in %s: %s\n", scree__admin_path(user),
            cli_esc(why));
  else if (st)
    fprintf(stderr, "scree-tune prewarm: %s: %s\n", scree_status_name(st), why);
  else if (why[0])
    fprintf(stderr, "scree-tune prewarm: warning: %s\n", why);
  if (c->json)
    printf("\n], \"stored\": %d, \"compiles\": %d, \"cached\": %d, \"stale\": %d, "
           "\"other_arch\": %d, \"other_op\": %d, \"failed\": %d, \"seconds\": %.3f}\n",
           n.stored, n.compiles, n.cached, n.stale, n.other_arch, n.other_op, n.failed,
           n.seconds);
  else if (!c->quiet)
    printf("%d shipped config(s) compiled (%d compile(s), %.1f s) into %s for %s, %d cached "
           "already, %d stale, %d for other archs, %d for other ops, %d failed\n",
           n.stored, n.compiles, n.seconds, scree__admin_path(user),
           n.arch[0] ? cli_esc(n.arch) : "every arch", n.cached, n.stale, n.other_arch,
           n.other_op, n.failed);
  scree__admin_close(user);
  if (st == SCREE_ERROR_CACHE) return CLI_CACHE;
  if (st) return CLI_FAIL;
  /* Nothing to do is said, never a silent success: no shipped config of
   * this kernel source for --arch (and --op) is a failure (a wrong --arch,
   * or configs that went stale), all of them cached already is not. */
  if (n.total == 0 && n.cached == 0) {
    fprintf(stderr, "scree-tune prewarm: nothing to compile: the shipped tuned configs hold no "
                    "config for %s%s%s of this build's kernel sources (%d stale, %d for other "
                    "archs, %d for other ops; scree-tune verify --shipped lists them)\n",
            n.arch[0] ? cli_esc(n.arch) : "any arch", c->op ? " and op " : "",
            c->op ? cli_esc(c->op) : "", n.stale, n.other_arch, n.other_op);
    return CLI_FAIL;
  }
  if (n.total == 0 && !c->quiet && !c->json)
    fprintf(stderr, "scree-tune prewarm: nothing left to compile: the %d shipped config(s) for %s "
                    "are cached already (--force compiles them again)\n",
            n.cached, n.arch[0] ? cli_esc(n.arch) : "every arch");
  return n.failed ? CLI_FAIL : CLI_OK;
}
