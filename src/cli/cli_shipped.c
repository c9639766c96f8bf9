/* cli_shipped.c - the shipped tuned configs (caches/<device>.txt, text):
 * export --text writes them from a cache, verify --shipped checks them
 * without a GPU, prewarm --from-shipped compiles them into the user cache
 * without timing anything. docs/cache.md ("Shipped tuned configs"),
 * docs/cluster.md. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* ---- export --text -------------------------------------------------------- */

typedef struct tctx {
  FILE *f;
  int n, skipped;
  char first[640];
} tctx;

static int on_text_entry(void *user, const scree__centry *e) {
  tctx *t = user;
  char why[256];
  if (!scree__centry_check(e, why, sizeof why)) {
    if (!t->skipped++)
      snprintf(t->first, sizeof t->first, "%s %s %s: %s", e->key.op, e->key.bucket,
               e->key.dtype, why);
    return 0;
  }
  if (scree__tuned_write(t->f, e)) return 1;
  t->n++;
  return 0;
}

int cli_export_text(const cli_common *c, const char *out) {
  scree__cache *cache;
  int rc = cli_open_user_cache(c, &cache, "export", 1);
  if (rc) return rc;
  if (!cache) return CLI_CACHE;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) {
    scree__cache_close(cache);
    fprintf(stderr, "scree-tune export: out of memory\n");
    return CLI_FAIL;
  }
  fprintf(f, "# scree shipped tuned configs: one winner a line (docs/cache.md, \"Shipped tuned"
             " configs\").\n"
             "# Written by scree-tune export --text (scree %s)%s%s%s%s; regenerate rather than"
             " edit.\n"
             "# op bucket dtype causal arch device config median_us src_hash\n",
          scree_version(), c->arch ? " --arch " : "", c->arch ? c->arch : "",
          c->op ? " --op " : "", c->op ? c->op : "");
  tctx t = {.f = f};
  const scree_status st = scree__cache_foreach_entry(cache, c->arch, c->op, 0, on_text_entry, &t);
  const int refused = cli_report_refused(cache, "export");
  rc = cli_cache_failed(cache, st, "export");
  scree__cache_close(cache);
  if (fclose(f) != 0 && !rc) {
    fprintf(stderr, "scree-tune export: out of memory\n");
    rc = CLI_FAIL;
  }
  if (rc) {
    free(buf);
    return rc;
  }
  /* What is written must load: parse it back first. */
  scree__tuned back = {0};
  char why[512];
  if (scree__tuned_parse(buf, out, &back, why, sizeof why) != SCREE_OK || back.n != t.n) {
    fprintf(stderr, "scree-tune export: the text would not load back (%s); nothing written\n",
            cli_esc(why));
    scree__tuned_free(&back);
    free(buf);
    return CLI_FAIL;
  }
  scree__tuned_free(&back);
  if (!strcmp(out, "-")) {
    fwrite(buf, 1, len, stdout);
  } else if (cli_write_file(out, buf, len, why, sizeof why)) {
    fprintf(stderr, "scree-tune export: %s\n", why);
    free(buf);
    return CLI_FAIL;
  }
  free(buf);
  if (t.skipped)
    fprintf(stderr, "scree-tune export: warning: skipped %d winner(s) that fail their checks "
                    "(first: %s)\n", t.skipped, cli_esc(t.first));
  if (!c->quiet && strcmp(out, "-"))
    printf("exported %d winner(s) as text to %s, %d skipped\n", t.n, out, t.skipped + refused);
  return CLI_OK;
}

/* ---- verify --shipped ------------------------------------------------------- */

int cli_shipped_report(const cli_common *c, int list) {
  scree__tuned t;
  char warn[4096] = "";
  if (scree__tuned_load(&t, warn, sizeof warn)) {
    fprintf(stderr, "scree-tune verify: out of memory\n");
    return CLI_FAIL;
  }
  int stale = 0, shown = 0;
  for (int i = 0; i < t.n; i++) {
    const scree__tentry *e = &t.e[i];
    if ((c->arch && strcmp(c->arch, e->key.arch)) || (c->op && strcmp(c->op, e->key.op))) continue;
    shown++;
    const scree__op *op = scree__op_find(e->key.op);
    const int is_stale = !op || strcmp(e->key.src_hash, scree__source_hash(op));
    stale += is_stale;
    if (list && (is_stale || !c->quiet))
      printf("%-8s %-24s %-20s %-6s %-22s %-32s %s\n", e->key.op, e->key.bucket, e->key.dtype,
             e->key.arch, e->device, e->config,
             is_stale ? "stale (tuned for another kernel source: ignored)" : "ok");
  }
  if (warn[0]) fprintf(stderr, "scree-tune verify: warning: %s\n", warn);
  printf("%d shipped tuned config(s) in %d file(s): %d stale (ignored: tuned for another kernel"
         " source; regenerate them, docs/cluster.md)%s\n",
         shown, t.nfiles, stale, warn[0] ? ", and a file that does not load" : "");
  scree__tuned_free(&t);
  return warn[0] ? CLI_FAIL : CLI_OK;
}

/* ---- prewarm --from-shipped ------------------------------------------------- */

typedef struct job {
  const scree__tentry *e;
  const scree__op *op;
  scree__variant var;
  scree__config cfg;
  char target[16];
  int same_as; /* index of an earlier job with the same compile, or -1 */
  void *cubin;
  size_t size;
  scree_status st;
  char *log;
  int todo;
} job;

typedef struct jobs {
  const scree__nvrtc_api *nv;
  job *j;
  int n;
} jobs;

static void compile_job(void *user, int i) {
  jobs *js = user;
  job *j = &js->j[i];
  if (!j->todo || j->same_as >= 0) return;
  j->st = scree__compile(js->nv, j->op, &j->cfg, &j->var, j->target, NULL, &j->cubin, &j->size,
                         &j->log);
}

int cli_prewarm_from_shipped(const cli_common *c, int force) {
  scree__cache *user = NULL;
  int rc = cli_open_user_cache(c, &user, "prewarm", 0);
  if (rc) return rc;
  char why[1024];
  const scree__nvrtc_api *nv = scree__nvrtc_load(why, sizeof why, NULL);
  if (!nv) {
    fprintf(stderr, "scree-tune prewarm: --from-shipped compiles with NVRTC, which is not "
                    "available: %s\n", why);
    scree__cache_close(user);
    return CLI_NO_GPU;
  }
  int major = 0, minor = 0;
  nv->Version(&major, &minor);
  /* The arch: --arch, else this machine's GPU, else every arch listed. */
  const char *arch = c->arch;
  scree_device_info dev;
  if (!arch && scree_get_device_info(0, &dev) == SCREE_OK) arch = dev.arch;
  scree__tuned t;
  char warn[4096] = "";
  if (scree__tuned_load(&t, warn, sizeof warn)) {
    scree__cache_close(user);
    fprintf(stderr, "scree-tune prewarm: out of memory\n");
    return CLI_FAIL;
  }
  if (warn[0]) fprintf(stderr, "scree-tune prewarm: warning: %s\n", warn);
  jobs js = {.nv = nv, .j = calloc((size_t)(t.n ? t.n : 1), sizeof(job))};
  if (!js.j) {
    scree__tuned_free(&t);
    scree__cache_close(user);
    return CLI_FAIL;
  }
  int stale = 0, cached = 0, other = 0;
  for (int i = 0; i < t.n; i++) {
    const scree__tentry *e = &t.e[i];
    job *j = &js.j[js.n];
    memset(j, 0, sizeof *j);
    j->same_as = -1;
    j->e = e;
    if ((arch && strcmp(arch, e->key.arch)) || (c->op && strcmp(c->op, e->key.op))) {
      other++;
      continue;
    }
    j->op = scree__op_find(e->key.op);
    if (!j->op || strcmp(e->key.src_hash, scree__source_hash(j->op))) {
      stale++;
      continue;
    }
    scree__centry have;
    if (!force && scree__cache_get(user, &e->key, &have) == SCREE_OK) {
      const int ok = have.cubin_ok;
      scree__centry_free(&have);
      if (ok) {
        cached++;
        continue;
      }
    }
    scree__target tg;
    if (scree__variant_parse(j->op, e->key.dtype, &j->var, NULL, 0) ||
        scree__config_parse(j->op, e->config, &j->cfg, NULL, 0) ||
        scree__target_for_arch(e->key.arch, &tg))
      continue; /* checked when the file was read */
    scree__target_arch(e->key.arch, tg.sm, &j->op->impls[j->cfg.impl], j->target);
    j->todo = 1;
    /* Buckets share configs: compile each (op, config, variant, target) once. */
    for (int k = 0; k < js.n; k++)
      if (js.j[k].todo && js.j[k].same_as < 0 && js.j[k].op == j->op &&
          !memcmp(&js.j[k].cfg, &j->cfg, sizeof j->cfg) &&
          !memcmp(&js.j[k].var, &j->var, sizeof j->var) && !strcmp(js.j[k].target, j->target)) {
        j->same_as = k;
        break;
      }
    js.n++;
  }
  const double t0 = cli_now();
  scree__parallel_for(js.n, 0, compile_job, &js);
  int stored = 0, failed = 0, compiles = 0;
  for (int i = 0; i < js.n; i++) {
    job *j = &js.j[i];
    const job *src = j->same_as >= 0 ? &js.j[j->same_as] : j;
    compiles += j->same_as < 0;
    if (src->st != SCREE_OK) {
      failed++;
      fprintf(stderr, "scree-tune prewarm: %s %s %s: %s does not compile for %s: %s\n",
              j->e->key.op, j->e->key.bucket, j->e->key.dtype, j->e->config, j->target,
              src->log ? cli_esc(src->log) : scree_status_name(src->st));
      continue;
    }
    scree__centry e;
    memset(&e, 0, sizeof e);
    e.key = j->e->key;
    snprintf(e.config, sizeof e.config, "%s", j->e->config);
    e.median_us = j->e->median_us;
    for (size_t k = 0; k < sizeof e.device_name - 1 && j->e->device[k]; k++)
      e.device_name[k] = j->e->device[k] == '_' ? ' ' : j->e->device[k];
    e.nvrtc_version = major * 1000 + minor * 10;
    e.cubin = src->cubin;
    e.cubin_size = src->size;
    const scree_status st = scree__cache_put(user, &e, NULL);
    if (st) {
      failed++;
      rc = cli_cache_failed(user, st, "prewarm");
      break;
    }
    stored++;
    if (!c->quiet && !c->json)
      printf("%-9s %-24s %-20s %-32s %9.2f us on %s (shipped), %zu-byte cubin for %s\n",
             e.key.op, e.key.bucket, e.key.dtype, e.config, e.median_us, e.device_name,
             src->size, j->target);
  }
  if (c->json)
    printf("{\"stored\": %d, \"compiles\": %d, \"cached\": %d, \"stale\": %d, \"failed\": %d, "
           "\"seconds\": %.3f}\n", stored, compiles, cached, stale, failed, cli_now() - t0);
  else if (!c->quiet)
    printf("%d shipped config(s) compiled (%d compile(s), %.1f s) into %s for %s, %d cached "
           "already, %d stale, %d for other archs, %d failed\n",
           stored, compiles, cli_now() - t0, scree__cache_path(user), arch ? arch : "every arch",
           cached, stale, other, failed);
  for (int i = 0; i < js.n; i++) {
    free(js.j[i].cubin);
    free(js.j[i].log);
  }
  free(js.j);
  scree__tuned_free(&t);
  scree__cache_close(user);
  if (rc) return rc;
  return failed ? CLI_FAIL : CLI_OK;
}
