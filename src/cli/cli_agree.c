/* cli_agree.c - scree-tune verify --agree: whether several caches (the
 * caches of a job's ranks) hold the same winning config for every key.
 * Every file is opened read-only. A key is what merge keys a winner by:
 * op, bucket, variant (dtype), causal flag, arch and kernel source hash. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

typedef struct arow {
  scree__admin_key key;
  char config[128];
  int file;
} arow;

typedef struct aset {
  arow *rows;
  int n, cap, file, oom;
} aset;

static int on_row(void *user, const scree__admin_row *r) {
  aset *s = user;
  if (s->n == s->cap) {
    const int nc = s->cap ? s->cap * 2 : 256;
    arow *q = realloc(s->rows, (size_t)nc * sizeof *q);
    if (!q) {
      s->oom = 1;
      return 1;
    }
    s->rows = q;
    s->cap = nc;
  }
  arow *a = &s->rows[s->n++];
  a->key = r->key;
  snprintf(a->config, sizeof a->config, "%s", r->config);
  a->file = s->file;
  return 0;
}

/* The order of keys, field by field (the fields merge compares). */
static int key_cmp(const scree__admin_key *a, const scree__admin_key *b) {
  int d;
  if ((d = strcmp(a->op, b->op))) return d;
  if ((d = strcmp(a->arch, b->arch))) return d;
  if ((d = strcmp(a->bucket, b->bucket))) return d;
  if ((d = strcmp(a->dtype, b->dtype))) return d;
  if (a->causal != b->causal) return a->causal < b->causal ? -1 : 1;
  return strcmp(a->src_hash, b->src_hash);
}

static int row_cmp(const void *pa, const void *pb) {
  const arow *a = pa, *b = pb;
  const int d = key_cmp(&a->key, &b->key);
  if (d) return d;
  return a->file < b->file ? -1 : a->file > b->file;
}

/* One key's rows, rows[0..n), at most one per file (a file holds one
 * winner per key). */
static void print_key_text(const arow *r) {
  printf("%s %s %s %s causal=%d src=%.12s", cli_esc(r->key.op), cli_esc(r->key.arch),
         cli_esc(r->key.bucket), cli_esc(r->key.dtype), r->key.causal,
         cli_esc(r->key.src_hash));
}

int cli_verify_agree(const cli_common *c, char **files, int nfiles) {
  const char *cmd = "verify --agree";
  if (nfiles < 2) {
    fprintf(stderr, "scree-tune verify: --agree compares cache files: give at least two "
                    "(scree-tune verify --agree A.db B.db [C.db ...])\n");
    return CLI_USAGE;
  }
  for (int i = 0; i < nfiles; i++)
    if (!files[i][0]) {
      fprintf(stderr, "scree-tune verify: --agree: cache file name %d is empty\n", i + 1);
      return CLI_USAGE;
    }
  aset s = {0};
  int skipped = 0;
  const scree__admin_filter f = cli_filter(c);
  /* Read every file first: a file that cannot be read is an error before
   * anything is compared (nothing is written either way). */
  for (int i = 0; i < nfiles; i++) {
    scree__admin_cache *cache = NULL;
    char why[1024] = "";
    int rec = 0;
    scree_status st = scree__admin_open(files[i], 1, &cache, &rec, why, sizeof why);
    if (st != SCREE_OK) {
      fprintf(stderr, "scree-tune %s: %s: cannot read it as a scree cache: %s\n", cmd,
              cli_esc(files[i]),
              st == SCREE_ERROR_NOT_FOUND ? "missing or empty (nothing to compare)" : why);
      free(s.rows);
      return st == SCREE_ERROR_INVALID_ARGUMENT ? CLI_USAGE : CLI_CACHE;
    }
    s.file = i;
    st = scree__admin_rows(cache, SCREE__ADMIN_WINNERS, &f, 0, on_row, &s);
    if (st != SCREE_OK || s.oom) {
      scree__admin_cache_error(cache, why, sizeof why);
      fprintf(stderr, "scree-tune %s: %s: cannot read its winners: %s\n", cmd,
              cli_esc(files[i]), s.oom ? "out of memory" : why[0] ? cli_esc(why)
                                                                 : scree_status_str(st));
      scree__admin_close(cache);
      free(s.rows);
      return CLI_CACHE;
    }
    skipped += cli_report_refused(cache, "verify");
    scree__admin_close(cache);
  }
  if (s.n) qsort(s.rows, (size_t)s.n, sizeof *s.rows, row_cmp);

  int keys = 0, agree = 0, differ = 0, missing = 0, first = 1;
  if (c->json) {
    cli_json_open();
    printf("\"files\": [");
    for (int i = 0; i < nfiles; i++) {
      printf("%s", i ? ", " : "");
      cli_json_str(stdout, files[i]);
    }
    printf("], \"disagreements\": [");
  }
  for (int i = 0; i < s.n;) {
    int j = i + 1;
    while (j < s.n && !key_cmp(&s.rows[j].key, &s.rows[i].key)) j++;
    keys++;
    int distinct = 0;
    for (int k = i + 1; k < j; k++)
      if (strcmp(s.rows[k].config, s.rows[i].config)) distinct = 1;
    const int absent = j - i < nfiles;
    if (!distinct && !absent) {
      agree++;
      i = j;
      continue;
    }
    if (distinct)
      differ++;
    else
      missing++;
    /* each file's config, or none */
    const char *cfg[nfiles];
    for (int k = 0; k < nfiles; k++) cfg[k] = NULL;
    for (int k = i; k < j; k++) cfg[s.rows[k].file] = s.rows[k].config;
    if (c->json) {
      printf("%s\n {", first ? "" : ",");
      cli_json_key_start(&s.rows[i].key);
      printf(", \"causal\": %d, \"arch\": ", s.rows[i].key.causal);
      cli_json_str(stdout, s.rows[i].key.arch);
      printf(", \"src_hash\": ");
      cli_json_str(stdout, s.rows[i].key.src_hash);
      printf(", \"kind\": \"%s\", \"configs\": [", distinct ? "differ" : "missing");
      for (int k = 0; k < nfiles; k++) {
        printf("%s", k ? ", " : "");
        if (cfg[k])
          cli_json_str(stdout, cfg[k]);
        else
          printf("null");
      }
      printf("]}");
    } else {
      printf("%s ", distinct ? "differ " : "missing");
      print_key_text(&s.rows[i]);
      printf(":");
      for (int k = 0; k < nfiles; k++)
        printf("%s %s %s", k ? "," : "", cli_esc(files[k]), cfg[k] ? cli_esc(cfg[k]) : "(missing)");
      printf("\n");
    }
    first = 0;
    i = j;
  }
  free(s.rows);
  if (c->json)
    printf("\n], \"keys\": %d, \"agree\": %d, \"differ\": %d, \"missing\": %d, \"skipped\": %d}\n",
           keys, agree, differ, missing, skipped);
  else if (!c->quiet || differ || missing)
    printf("%d key(s) in %d file(s): %d agree, %d differ, %d missing from some file(s)\n", keys,
           nfiles, agree, differ, missing);
  if (differ || missing) return CLI_DISAGREE;
  return skipped ? CLI_FAIL : CLI_OK;
}
