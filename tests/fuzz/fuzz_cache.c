/* fuzz_cache.c - importing a cache file of any bytes: the input is written
 * to a file and merged (scree__cache_merge, what scree-tune merge and import
 * run) into a fresh user cache that holds rows of its own (cache_rows.h).
 * Before that it is opened read-only, listed (scree-tune list, show) and
 * exported (scree-tune export) where it opens.
 *
 * A merge that fails must leave the user cache as it was; one that succeeds
 * must have added as many winners as it says, every one with a cubin that
 * passes its hash check, and merging the same file again must add and
 * replace nothing. Conflicts must name one key with two configs. An export
 * must open read-only, with no more winners than it says, all with good
 * cubins.
 *
 * The user cache stays open from one input to the next while it holds what
 * a fresh copy holds, every field of every row compared (tally.digest):
 * most inputs do not open, or merge nothing, and writing, opening, listing
 * and closing a fresh copy each time took a third of an input's time. An
 * input whose merges changed it closes it, and the next one gets a fresh
 * copy.
 *
 * One scratch directory per process (make_dir), removed at exit; its file
 * names are reused for every input. Seeds: tests/fuzz/corpus/cache/
 * (make_cache_seed.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache_rows.h"
#include "fuzz.h"

/* The scratch directory; the input, the user cache and the export in it. */
static char g_dir[512], g_src[600], g_dst[600], g_out[600];
/* The user cache each input is merged into, as bytes (make_mine). */
static uint8_t *g_mine;
static size_t g_mine_size;
/* The user cache, open while it holds what a fresh copy does (user_cache). */
static scree__cache *g_user;

/* Removes a cache file and the files SQLite keeps beside it. */
static void remove_db(const char *path) {
  static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
  char p[700];
  for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++) {
    snprintf(p, sizeof p, "%s%s", path, sfx[i]);
    unlink(p);
  }
}

/* Removes the scratch directory and what is in it (at exit). */
static void remove_dir(void) {
  scree__cache_close(g_user);
  g_user = NULL;
  remove_db(g_src);
  remove_db(g_dst);
  remove_db(g_out);
  rmdir(g_dir);
  free(g_mine);
}

/* The scratch directory: under $TMPDIR, else /dev/shm where it can be
 * written (SQLite syncs its files often; memory is ten times faster than a
 * disk here), else /tmp. */
static void make_dir(void) {
  const char *tmp = getenv("TMPDIR");
  if (!tmp || !*tmp) tmp = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf(g_dir, sizeof g_dir, "%s/scree-fuzz-cache-XXXXXX", tmp);
  if (!mkdtemp(g_dir)) {
    perror("fuzz_cache: mkdtemp");
    abort();
  }
  snprintf(g_src, sizeof g_src, "%s/theirs.db", g_dir);
  snprintf(g_dst, sizeof g_dst, "%s/mine.db", g_dir);
  snprintf(g_out, sizeof g_out, "%s/export.db", g_dir);
  atexit(remove_dir);
}

/* Writes the input to the source file. */
static void write_src(const uint8_t *data, size_t size) {
  remove_db(g_src);
  FILE *f = fopen(g_src, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f)) {
    perror("fuzz_cache: writing the input");
    abort();
  }
}

/* Makes the user cache each input is merged into: fuzz_mine's winners and
 * one bad config. Made once; each input gets a fresh copy of its bytes. */
static void make_mine(void) {
  remove_db(g_dst);
  scree__cache *c;
  char why[1024];
  if (scree__cache_open(g_dst, 0, &c, NULL, why, sizeof why) != SCREE_OK)
    fuzz_fail("cannot create %s: %s", g_dst, why);
  for (size_t i = 0; i < sizeof fuzz_mine / sizeof fuzz_mine[0]; i++) {
    scree__centry e;
    fuzz_row_entry(&fuzz_mine[i], &e);
    if (scree__cache_put(c, &e, NULL) != SCREE_OK) fuzz_fail("cannot fill %s", g_dst);
  }
  scree__centry e;
  fuzz_row_entry(&fuzz_mine[0], &e);
  if (scree__cache_record_bad(c, &e.key, "tpr=1024,rows=1,vec=8,cache=16", 13000,
                              "compile: too many registers") != SCREE_OK)
    fuzz_fail("cannot fill %s", g_dst);
  scree__cache_close(c); /* checkpoints: everything is in the one file */
  FILE *f = fopen(g_dst, "rb");
  if (!f || fseek(f, 0, SEEK_END) || (g_mine_size = (size_t)ftell(f)) == 0 ||
      fseek(f, 0, SEEK_SET) || !(g_mine = malloc(g_mine_size)) ||
      fread(g_mine, 1, g_mine_size, f) != g_mine_size)
    fuzz_fail("cannot read back %s", g_dst);
  fclose(f);
}

/* What a cache holds: winners (all with a good cubin?), bad rows, misses,
 * and a digest of every field of every row, in listing order. */
typedef struct tally {
  int winners, bad_cubins, bad, misses;
  uint64_t digest;
} tally;

/* Folds n bytes into a digest (FNV-1a, 64 bits). */
static void fold(uint64_t *h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) *h = (*h ^ b[i]) * 0x100000001b3ull;
}

/* Folds a string with its terminator, so that "ab", "c" differs from "a", "bc". */
static void fold_str(uint64_t *h, const char *str) { fold(h, str, strlen(str) + 1); }

static void fold_key(uint64_t *h, const scree__ckey *k) {
  fold_str(h, k->op);
  fold_str(h, k->bucket);
  fold_str(h, k->dtype);
  fold(h, &k->causal, sizeof k->causal);
  fold_str(h, k->arch);
  fold_str(h, k->src_hash);
}

/* foreach callbacks: count and fold into a tally. */
static int count_winner(void *user, const scree__centry *e) {
  tally *t = user;
  t->winners++;
  t->bad_cubins += !e->cubin_ok || !e->cubin || !e->cubin_size;
  uint64_t *h = &t->digest;
  fold(h, "w", 1);
  fold_key(h, &e->key);
  fold_str(h, e->config);
  fold(h, &e->median_us, sizeof e->median_us);
  fold(h, &e->spread_us, sizeof e->spread_us);
  fold_str(h, e->device_name);
  fold(h, &e->sm_count, sizeof e->sm_count);
  fold(h, &e->driver_version, sizeof e->driver_version);
  fold(h, &e->nvrtc_version, sizeof e->nvrtc_version);
  fold_str(h, e->scree_version);
  fold(h, &e->created, sizeof e->created);
  fold_str(h, e->cubin_hash);
  fold(h, &e->cubin_size, sizeof e->cubin_size);
  if (e->cubin) fold(h, e->cubin, e->cubin_size);
  return 0;
}

static int count_bad(void *user, const scree__cbad *b) {
  tally *t = user;
  t->bad++;
  uint64_t *h = &t->digest;
  fold(h, "b", 1);
  fold_key(h, &b->key);
  fold_str(h, b->config);
  fold(h, &b->nvrtc_version, sizeof b->nvrtc_version);
  fold_str(h, b->reason);
  fold(h, &b->when, sizeof b->when);
  return 0;
}

static int count_miss(void *user, const scree__cmiss *m) {
  tally *t = user;
  t->misses++;
  uint64_t *h = &t->digest;
  fold(h, "m", 1);
  fold_key(h, &m->key);
  fold_str(h, m->example);
  fold(h, &m->count, sizeof m->count);
  fold(h, &m->first_seen, sizeof m->first_seen);
  fold(h, &m->last_seen, sizeof m->last_seen);
  return 0;
}

/* 1 if two tallies agree on every count and the digest. */
static int same(const tally *a, const tally *b) {
  return a->winners == b->winners && a->bad_cubins == b->bad_cubins && a->bad == b->bad &&
         a->misses == b->misses && a->digest == b->digest;
}

/* Lists c: its winners with their cubins, bad rows and misses. */
static scree_status list(scree__cache *c, tally *t) {
  memset(t, 0, sizeof *t);
  t->digest = 0xcbf29ce484222325ull;
  scree_status st = scree__cache_foreach_entry(c, NULL, NULL, 1, count_winner, t);
  if (st == SCREE_OK) st = scree__cache_foreach_bad(c, NULL, NULL, count_bad, t);
  if (st == SCREE_OK) st = scree__cache_foreach_miss(c, NULL, NULL, count_miss, t);
  return st;
}

/* Lists a cache that must be readable. */
static tally count(scree__cache *c) {
  tally t;
  if (list(c, &t) != SCREE_OK) fuzz_fail("cannot read back %s", scree__cache_path(c));
  return t;
}

/* The user cache: the one left open by the last input, else a fresh copy,
 * opened read-write. *before: what it holds, which is what every fresh
 * copy must hold. */
static scree__cache *user_cache(tally *before) {
  static tally fresh;
  if (g_user) {
    *before = fresh;
    return g_user;
  }
  if (!g_mine) make_mine();
  remove_db(g_dst);
  FILE *f = fopen(g_dst, "wb");
  if (!f || fwrite(g_mine, 1, g_mine_size, f) != g_mine_size || fclose(f))
    fuzz_fail("cannot write %s", g_dst);
  char why[1024];
  if (scree__cache_open(g_dst, 0, &g_user, NULL, why, sizeof why) != SCREE_OK)
    fuzz_fail("cannot open %s: %s", g_dst, why);
  static int counted;
  *before = count(g_user);
  FUZZ_CHECK(!counted || same(before, &fresh),
             "a fresh copy of the user cache reads back differently: %d winners, %d bad, were"
             " %d, %d", before->winners, before->bad, fresh.winners, fresh.bad);
  fresh = *before;
  counted = 1;
  return g_user;
}

/* Done with the user cache for this input: kept open for the next one if it
 * holds what it held before, which a fresh copy holds; else closed and
 * removed. */
static void done_with_user_cache(const tally *before, const tally *now) {
  if (same(before, now)) return;
  scree__cache_close(g_user);
  g_user = NULL;
  remove_db(g_dst);
}

/* Opens the input read-only, lists it and exports its winners. */
static void list_and_export(void) {
  scree__cache *src, *out;
  char why[1024];
  if (scree__cache_open(g_src, 1, &src, NULL, why, sizeof why) != SCREE_OK) {
    FUZZ_CHECK(why[0], "a read-only open failed without a reason");
    return;
  }
  tally t;
  list(src, &t); /* damage deeper in the file may show here: an error is fine */
  remove_db(g_out);
  int exported = -1;
  if (scree__cache_export(src, g_out, NULL, NULL, &exported, NULL, why, sizeof why) ==
      SCREE_OK) {
    if (scree__cache_open(g_out, 1, &out, NULL, why, sizeof why) != SCREE_OK)
      fuzz_fail("the export does not open read-only: %s", why);
    t = count(out);
    FUZZ_CHECK(t.winners <= exported && !t.bad_cubins && !t.bad && !t.misses,
               "exported %d winners, read back %d (%d bad cubins), %d bad, %d misses",
               exported, t.winners, t.bad_cubins, t.bad, t.misses);
    scree__cache_close(out);
  } else {
    FUZZ_CHECK(why[0] && access(g_out, F_OK) != 0, "a failed export without a reason, or a file");
  }
  remove_db(g_out);
  scree__cache_close(src);
}

/* merge's conflict callback: one key, two configs, no cubin; counts them. */
static void on_conflict(void *user, const scree__centry *mine, const scree__centry *theirs) {
  const scree__ckey *a = &mine->key, *b = &theirs->key;
  FUZZ_CHECK(!strcmp(a->op, b->op) && !strcmp(a->bucket, b->bucket) &&
                 !strcmp(a->dtype, b->dtype) && a->causal == b->causal &&
                 !strcmp(a->arch, b->arch) && !strcmp(a->src_hash, b->src_hash),
             "a conflict between two keys: %s %s and %s %s", a->op, a->bucket, b->op, b->bucket);
  FUZZ_CHECK(strcmp(mine->config, theirs->config), "a conflict with one config, %s",
             mine->config);
  FUZZ_CHECK(!theirs->cubin, "a conflict hands out a cubin");
  (*(int *)user)++;
}

/* Lists and exports the input, then merges it twice into a fresh cache. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_dir[0]) make_dir();
  write_src(data, size);
  list_and_export();
  tally before;
  scree__cache *c = user_cache(&before);

  /* strict 0: the scratch files' permissions are not what is fuzzed. */
  scree__merge_counts n1;
  int seen = 0;
  char why[1024];
  const scree_status st = scree__cache_merge(c, g_src, 0, &n1, on_conflict, &seen, why,
                                             sizeof why);
  const int added = n1.added, replaced = n1.replaced, conflicts = n1.conflicts;
  const tally after = count(c);
  tally now = after;
  if (st != SCREE_OK) {
    FUZZ_CHECK(why[0], "merge failed (%d) without a reason", (int)st);
    FUZZ_CHECK(same(&after, &before),
               "a failed merge changed the cache: %d winners, %d bad, were %d, %d%s",
               after.winners, after.bad, before.winners, before.bad,
               after.digest != before.digest ? " (rows differ)" : "");
  } else {
    FUZZ_CHECK(added >= 0 && replaced >= 0 && conflicts == seen,
               "merge says %d added, %d replaced, %d conflicts (%d seen)", added, replaced,
               conflicts, seen);
    FUZZ_CHECK(after.winners == before.winners + added,
               "merge says %d added, the cache went from %d to %d winners", added,
               before.winners, after.winners);
    FUZZ_CHECK(after.bad >= before.bad, "merge lost bad configs");

    scree__merge_counts n2;
    seen = 0;
    const scree_status st2 = scree__cache_merge(c, g_src, 0, &n2, on_conflict, &seen, why,
                                                sizeof why);
    const int added2 = n2.added, replaced2 = n2.replaced;
    FUZZ_CHECK(st2 == SCREE_OK, "the second merge of the same file failed: %s", why);
    FUZZ_CHECK(added2 == 0 && replaced2 == 0,
               "the second merge of the same file added %d and replaced %d", added2, replaced2);
    now = count(c);
    FUZZ_CHECK(same(&now, &after), "the second merge changed the cache");
  }
  FUZZ_CHECK(after.bad_cubins == 0, "%d winners with a bad cubin after a merge",
             after.bad_cubins);
  done_with_user_cache(&before, &now);
  remove_db(g_src);
  return 0;
}
