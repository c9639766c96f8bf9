/* test_cache_records.c - winners, bad configs and misses, from one thread, several threads and several processes (src/runtime/store/cache_records.c). */
#include "cache_fixtures.h"

/* ------------------------------------------------------------------------ */
/* Winners                                                                   */
/* ------------------------------------------------------------------------ */

START_TEST(put_get_roundtrip) {
  char *path = pjoin(tdir(), "tune.db");
  scree__cache *c = open_rw(path);
  scree__ckey k = key("rmsnorm", "rows=16384,cols=4096",
                      "x=fp16,w=fp16,y=fp16", 0, "sm_90");
  scree__centry e = entry(&k, "tpr=128,rows=1,vec=8,cache=4", 12.5, 7, 10000);
  e.spread_us = 0.25;
  int rep = -1;
  ck_assert_int_eq(scree__cache_put(c, &e, &rep), SCREE_OK);
  ck_assert_int_eq(rep, 1);

  scree__centry g;
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_str_eq(g.key.op, "rmsnorm");
  ck_assert_str_eq(g.key.bucket, "rows=16384,cols=4096");
  ck_assert_str_eq(g.key.dtype, "x=fp16,w=fp16,y=fp16");
  ck_assert_int_eq(g.key.causal, 0);
  ck_assert_str_eq(g.key.arch, "sm_90");
  ck_assert_str_eq(g.key.src_hash, k.src_hash);
  ck_assert_str_eq(g.config, "tpr=128,rows=1,vec=8,cache=4");
  ck_assert_double_eq(g.median_us, 12.5);
  ck_assert_double_eq(g.spread_us, 0.25);
  ck_assert_str_eq(g.device_name, "NVIDIA H100 80GB HBM3");
  ck_assert_int_eq(g.sm_count, 132);
  ck_assert_int_eq(g.driver_version, 13000);
  ck_assert_int_eq(g.nvrtc_version, 12080);
  ck_assert_str_eq(g.scree_version, "9.9.9");
  ck_assert_int_eq(g.created, 1700000000);
  ck_assert_int_eq(g.cubin_ok, 1);
  ck_assert_uint_eq(g.cubin_size, 10000);
  ck_assert_ptr_nonnull(g.cubin);
  ck_assert_int_eq(memcmp(g.cubin, e.cubin, 10000), 0);
  char h[65];
  scree__sha256_hex(e.cubin, 10000, h);
  ck_assert_str_eq(g.cubin_hash, h); /* computed by put, not the caller's */
  scree__centry_free(&g);
  ck_assert_ptr_null(g.cubin);
  ck_assert_uint_eq(g.cubin_size, 0);
  scree__centry_free(&g); /* twice is harmless */

  /* Every key field matters. */
  scree__ckey m = k;
  m.causal = 1;
  ck_assert_int_eq(scree__cache_get(c, &m, &g), SCREE_ERROR_NOT_FOUND);
  ck_assert_ptr_null(g.cubin);
  m = k;
  m.src_hash[0] = m.src_hash[0] == 'a' ? 'b' : 'a';
  ck_assert_int_eq(scree__cache_get(c, &m, &g), SCREE_ERROR_NOT_FOUND);
  m = k;
  snprintf(m.arch, sizeof m.arch, "sm_80");
  ck_assert_int_eq(scree__cache_get(c, &m, &g), SCREE_ERROR_NOT_FOUND);
  m = k;
  snprintf(m.bucket, sizeof m.bucket, "rows=16384,cols=4095");
  ck_assert_int_eq(scree__cache_get(c, &m, &g), SCREE_ERROR_NOT_FOUND);
  m = k;
  snprintf(m.dtype, sizeof m.dtype, "x=bf16,w=fp16,y=fp16");
  ck_assert_int_eq(scree__cache_get(c, &m, &g), SCREE_ERROR_NOT_FOUND);
  m = k;
  snprintf(m.op, sizeof m.op, "softmax");
  ck_assert_int_eq(scree__cache_get(c, &m, &g), SCREE_ERROR_NOT_FOUND);

  /* Defaults: "" scree_version and created 0. */
  scree__ckey k2 = keyi(3);
  scree__centry e2 = entry(&k2, "tpr=64", 3, 9, 100);
  e2.scree_version[0] = 0;
  e2.created = 0;
  int64_t t0 = (int64_t)time(NULL);
  ck_assert_int_eq(scree__cache_put(c, &e2, NULL), SCREE_OK);
  scree__cache_close(c);

  /* Persisted across handles. */
  c = open_rw(path);
  ck_assert_int_eq(scree__cache_get(c, &k2, &g), SCREE_OK);
  ck_assert_str_eq(g.scree_version, SCREE_VERSION_STRING);
  ck_assert_int_ge(g.created, t0);
  ck_assert_int_le(g.created, (int64_t)time(NULL));
  ck_assert_int_eq(g.cubin_ok, 1);
  ck_assert_int_eq(memcmp(g.cubin, e2.cubin, 100), 0);
  scree__centry_free(&g);
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_int_eq(memcmp(g.cubin, e.cubin, 10000), 0);
  scree__centry_free(&g);
  scree__cache_close(c);
  scree__centry_free(&e);
  scree__centry_free(&e2);
}
END_TEST

START_TEST(put_keeps_the_faster) {
  char *path = pjoin(tdir(), "tune.db");
  scree__cache *c = open_rw(path);
  scree__ckey k = keyi(0);
  scree__centry a = entry(&k, "cfg=A", 10.0, 1, 300);
  scree__centry b = entry(&k, "cfg=B", 12.0, 2, 400);
  scree__centry cc = entry(&k, "cfg=C", 10.0, 3, 500);
  scree__centry d = entry(&k, "cfg=D", 8.0, 4, 600);
  int rep = -1;
  scree__centry g;

  ck_assert_int_eq(scree__cache_put(c, &a, &rep), SCREE_OK);
  ck_assert_int_eq(rep, 1);
  /* Slower: the existing row stays. */
  ck_assert_int_eq(scree__cache_put(c, &b, &rep), SCREE_OK);
  ck_assert_int_eq(rep, 0);
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_str_eq(g.config, "cfg=A");
  ck_assert_double_eq(g.median_us, 10.0);
  ck_assert_uint_eq(g.cubin_size, 300);
  ck_assert_int_eq(memcmp(g.cubin, a.cubin, 300), 0);
  scree__centry_free(&g);
  /* Equal: the existing row stays. */
  ck_assert_int_eq(scree__cache_put(c, &cc, &rep), SCREE_OK);
  ck_assert_int_eq(rep, 0);
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_str_eq(g.config, "cfg=A");
  scree__centry_free(&g);
  /* Faster: replaced, cubin and all. */
  ck_assert_int_eq(scree__cache_put(c, &d, &rep), SCREE_OK);
  ck_assert_int_eq(rep, 1);
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_str_eq(g.config, "cfg=D");
  ck_assert_double_eq(g.median_us, 8.0);
  ck_assert_uint_eq(g.cubin_size, 600);
  ck_assert_int_eq(memcmp(g.cubin, d.cubin, 600), 0);
  ck_assert_int_eq(g.cubin_ok, 1);
  scree__centry_free(&g);
  /* The slower one again, from the other direction. */
  ck_assert_int_eq(scree__cache_put(c, &a, &rep), SCREE_OK);
  ck_assert_int_eq(rep, 0);
  ck_assert_int_eq(scree__cache_put(c, &b, NULL), SCREE_OK);
  scree__cache_close(c);
  ck_assert_int_eq(db_int(path, "SELECT count(*) FROM winners"), 1);
  ck_assert_int_eq(db_int(path, "SELECT median_us FROM winners"), 8);
  scree__centry_free(&a);
  scree__centry_free(&b);
  scree__centry_free(&cc);
  scree__centry_free(&d);
}
END_TEST

/* put writes only what a read accepts, and replaces a row a read refuses
 * whatever its median. */
START_TEST(put_checks_what_it_writes) {
  char *path = pjoin(tdir(), "tune.db");
  scree__cache *c = open_rw(path);
  scree__ckey k = keyi(0);
  char err[512];
  static const struct {
    const char *what;
    double median;
    const char *config;
  } bad[] = {
      {"median_us is 0", 0, "cfg=A"},
      {"median_us is -1", -1, "cfg=A"},
      {"median_us is inf", INFINITY, "cfg=A"},
      {"median_us is nan", NAN, "cfg=A"},
      {"config is empty", 1, ""},
      {"config holds byte 0x20", 1, "tpr=1 rows=2"},
      {"config holds byte 0x1b", 1, "tpr=1\x1b[2J"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    scree__centry e = entry(&k, bad[i].config, bad[i].median, 1, 64);
    ck_assert_int_eq(scree__cache_put(c, &e, NULL), SCREE_ERROR_INVALID_ARGUMENT);
    scree__cache_last_error(c, err, sizeof err);
    ck_assert_msg(strstr(err, bad[i].what), "%s: %s", bad[i].what, err);
    scree__centry_free(&e);
  }
  scree__centry e = entry(&k, "cfg=A", 1, 1, 64);
  memset(e.key.bucket, 'b', sizeof e.key.bucket); /* not terminated: never cut */
  ck_assert_int_eq(scree__cache_put(c, &e, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  scree__cache_last_error(c, err, sizeof err);
  ck_assert_msg(strstr(err, "bucket is 96 bytes, longer than 95"), "%s", err);
  e.key = k;
  e.cubin_size = SCREE__CACHE_MAX_CUBIN + 1; /* not read: refused on its size */
  ck_assert_int_eq(scree__cache_put(c, &e, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  e.cubin_size = 64;
  snprintf(e.key.src_hash, sizeof e.key.src_hash, "%s", "not a hash");
  ck_assert_int_eq(scree__cache_put(c, &e, NULL), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(db_int(path, "SELECT count(*) FROM winners"), 0);
  /* A bad record's config and a miss's key are checked too; a long reason
   * is cut to the field. */
  ck_assert_int_eq(scree__cache_record_bad(c, &k, "tpr=1 rows=2", 13000, "x"),
                   SCREE_ERROR_INVALID_ARGUMENT);
  char reason[600];
  memset(reason, 'r', sizeof reason);
  reason[sizeof reason - 1] = 0;
  ck_assert_int_eq(scree__cache_record_bad(c, &k, "cfg=A", 13000, reason), SCREE_OK);
  ck_assert_int_eq(db_int(path, "SELECT length(reason) FROM bad_configs"), 255);
  scree__ckey m = k;
  m.op[0] = 0;
  ck_assert_int_eq(scree__cache_record_miss(c, &m, "rows=1"), SCREE_ERROR_INVALID_ARGUMENT);

  /* A row that a read refuses (here a NULL median, as a hand edit or
   * another program can leave) is replaced by a slower good entry. */
  put_ok(c, &k, "cfg=A", 10, 1, 1);
  db_exec(path, "UPDATE winners SET median_us = 'fast'");
  scree__centry g;
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_ERROR_CACHE);
  put_ok(c, &k, "cfg=B", 50, 2, 1);
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_str_eq(g.config, "cfg=B");
  scree__centry_free(&g);
  ck_assert_int_eq(db_int(path, "SELECT count(*) FROM winners"), 1);
  scree__centry_free(&e);
  scree__cache_close(c);
}
END_TEST

START_TEST(cubin_hash_mismatch_detected) {
  char *dir = tdir();
  char *up = pjoin(dir, "user.db"), *sp = pjoin(dir, "shipped.db");
  scree__ckey k = keyi(1);
  scree__cache *c = open_rw(up);
  put_ok(c, &k, "from=user", 5, 11, 1);
  scree__cache_close(c);
  c = open_rw(sp);
  put_ok(c, &k, "from=shipped", 6, 12, 1);
  scree__cache_close(c);

  flip_cubin_byte(up, &k, 100);

  c = open_rw(up);
  scree__centry g;
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_int_eq(g.cubin_ok, 0);
  ck_assert_ptr_null(g.cubin);
  ck_assert_str_eq(g.config, "from=user");
  scree__centry_free(&g);
  /* foreach with cubins reports it the same way. */
  scree__cache_close(c);

  scree__cache_stack s;
  char warn[1024];
  ck_assert_int_eq(scree__cache_stack_open(&s, up, sp, warn, sizeof warn),
                   SCREE_OK);
  ck_assert_str_eq(warn, "");
  scree__cache_level lv = SCREE__LEVEL_NONE;
  ck_assert_int_eq(scree__cache_stack_get(&s, &k, &g, &lv), SCREE_OK);
  ck_assert_int_eq(lv, SCREE__LEVEL_SHIPPED);
  ck_assert_str_eq(g.config, "from=shipped");
  ck_assert_int_eq(g.cubin_ok, 1);
  ck_assert_ptr_nonnull(g.cubin);
  scree__centry_free(&g);
  scree__cache_stack_close(&s);

  /* With no other level the lookup misses rather than hand out bad bytes. */
  ck_assert_int_eq(scree__cache_stack_open(&s, up, "", warn, sizeof warn),
                   SCREE_OK);
  ck_assert_int_eq(scree__cache_stack_get(&s, &k, &g, &lv),
                   SCREE_ERROR_NOT_FOUND);
  ck_assert_int_eq(lv, SCREE__LEVEL_NONE);
  ck_assert_ptr_null(g.cubin);
  scree__cache_stack_close(&s);

  /* A good put of the same key replaces the damaged row when faster. */
  c = open_rw(up);
  put_ok(c, &k, "from=user2", 4, 13, 1);
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_int_eq(g.cubin_ok, 1);
  scree__centry_free(&g);
  scree__cache_close(c);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Bad configs and misses                                                    */
/* ------------------------------------------------------------------------ */

typedef struct bad_list {
  scree__cbad b[8];
  int n;
} bad_list;

static int bad_collect(void *user, const scree__cbad *b) {
  bad_list *l = user;
  ck_assert_int_lt(l->n, 8);
  l->b[l->n++] = *b;
  return 0;
}

START_TEST(bad_configs) {
  char *path = pjoin(tdir(), "tune.db");
  scree__cache *c = open_rw(path);
  scree__ckey k16 = key("rmsnorm", "rows=16", "x=fp16", 0, "sm_90");
  scree__ckey k32 = key("rmsnorm", "rows=32", "x=fp16", 0, "sm_90");
  scree__ckey star = key("rmsnorm", "*", "x=fp16", 0, "sm_90");
  char reason[256];

  ck_assert_int_eq(scree__cache_is_bad(c, &k16, "cfgX", 12080, reason,
                                       sizeof reason),
                   0);
  ck_assert_int_eq(scree__cache_record_bad(c, &k16, "cfgX", 12080,
                                           "wrong answer: max err 3.2"),
                   SCREE_OK);
  ck_assert_int_eq(scree__cache_is_bad(c, &k16, "cfgX", 12080, reason,
                                       sizeof reason),
                   1);
  ck_assert_str_eq(reason, "wrong answer: max err 3.2");
  ck_assert_int_eq(scree__cache_is_bad(c, &k16, "cfgX", 12080, NULL, 0), 1);
  /* Bad for one bucket only. */
  ck_assert_int_eq(scree__cache_is_bad(c, &k32, "cfgX", 12080, reason,
                                       sizeof reason),
                   0);
  ck_assert_str_eq(reason, "");
  /* "*" means every bucket. */
  ck_assert_int_eq(scree__cache_record_bad(c, &star, "cfgY", 12080,
                                           "compile: too many registers"),
                   SCREE_OK);
  ck_assert_int_eq(scree__cache_is_bad(c, &k16, "cfgY", 12080, reason,
                                       sizeof reason),
                   1);
  ck_assert_str_eq(reason, "compile: too many registers");
  ck_assert_int_eq(scree__cache_is_bad(c, &k32, "cfgY", 12080, NULL, 0), 1);
  ck_assert_int_eq(scree__cache_is_bad(c, &star, "cfgY", 12080, NULL, 0), 1);
  /* Another compiler, kernel source, dtype, causal flag or arch: not bad. */
  ck_assert_int_eq(scree__cache_is_bad(c, &k16, "cfgY", 13000, NULL, 0), 0);
  ck_assert_int_eq(scree__cache_is_bad(c, &k16, "cfgX", 13000, NULL, 0), 0);
  scree__ckey m = k16;
  m.src_hash[0] = m.src_hash[0] == 'a' ? 'b' : 'a';
  ck_assert_int_eq(scree__cache_is_bad(c, &m, "cfgY", 12080, NULL, 0), 0);
  m = k16;
  snprintf(m.dtype, sizeof m.dtype, "x=bf16");
  ck_assert_int_eq(scree__cache_is_bad(c, &m, "cfgY", 12080, NULL, 0), 0);
  m = k16;
  m.causal = 1;
  ck_assert_int_eq(scree__cache_is_bad(c, &m, "cfgY", 12080, NULL, 0), 0);
  m = k16;
  snprintf(m.arch, sizeof m.arch, "sm_80");
  ck_assert_int_eq(scree__cache_is_bad(c, &m, "cfgY", 12080, NULL, 0), 0);
  ck_assert_int_eq(scree__cache_is_bad(c, &k16, "cfgZ", 12080, NULL, 0), 0);

  /* A bucket's own row is preferred over the "*" row. */
  ck_assert_int_eq(
      scree__cache_record_bad(c, &k16, "cfgY", 12080, "timeout: 5 s"),
      SCREE_OK);
  ck_assert_int_eq(scree__cache_is_bad(c, &k16, "cfgY", 12080, reason,
                                       sizeof reason),
                   1);
  ck_assert_str_eq(reason, "timeout: 5 s");
  ck_assert_int_eq(scree__cache_is_bad(c, &k32, "cfgY", 12080, reason,
                                       sizeof reason),
                   1);
  ck_assert_str_eq(reason, "compile: too many registers");
  /* Recording again updates, it does not duplicate. */
  ck_assert_int_eq(scree__cache_record_bad(c, &k16, "cfgX", 12080,
                                           "wrong answer: max err 4.0"),
                   SCREE_OK);
  ck_assert_int_eq(scree__cache_is_bad(c, &k16, "cfgX", 12080, reason,
                                       sizeof reason),
                   1);
  ck_assert_str_eq(reason, "wrong answer: max err 4.0");
  /* Reason truncated safely. */
  char small[8];
  ck_assert_int_eq(
      scree__cache_is_bad(c, &k16, "cfgX", 12080, small, sizeof small), 1);
  ck_assert_str_eq(small, "wrong a");

  bad_list l;
  memset(&l, 0, sizeof l);
  int64_t now = (int64_t)time(NULL);
  ck_assert_int_eq(scree__cache_foreach_bad(c, NULL, NULL, bad_collect, &l),
                   SCREE_OK);
  ck_assert_int_eq(l.n, 3);
  /* ordered by op, arch, dtype, causal, config, bucket */
  ck_assert_str_eq(l.b[0].config, "cfgX");
  ck_assert_str_eq(l.b[0].key.bucket, "rows=16");
  ck_assert_str_eq(l.b[0].reason, "wrong answer: max err 4.0");
  ck_assert_str_eq(l.b[1].config, "cfgY");
  ck_assert_str_eq(l.b[1].key.bucket, "*");
  ck_assert_str_eq(l.b[2].config, "cfgY");
  ck_assert_str_eq(l.b[2].key.bucket, "rows=16");
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(l.b[i].nvrtc_version, 12080);
    ck_assert_str_eq(l.b[i].key.op, "rmsnorm");
    ck_assert_str_eq(l.b[i].key.arch, "sm_90");
    ck_assert_str_eq(l.b[i].key.dtype, "x=fp16");
    ck_assert_str_eq(l.b[i].key.src_hash, k16.src_hash);
    ck_assert_int_ge(l.b[i].when, now - 5);
    ck_assert_int_le(l.b[i].when, now + 5);
  }
  memset(&l, 0, sizeof l);
  ck_assert_int_eq(scree__cache_foreach_bad(c, "sm_80", NULL, bad_collect, &l),
                   SCREE_OK);
  ck_assert_int_eq(l.n, 0);
  scree__cache_close(c);
}
END_TEST

typedef struct miss_list {
  scree__cmiss m[8];
  int n, stop_at;
} miss_list;

static int miss_collect(void *user, const scree__cmiss *m) {
  miss_list *l = user;
  ck_assert_int_lt(l->n, 8);
  l->m[l->n++] = *m;
  return l->n == l->stop_at;
}

START_TEST(misses) {
  char *path = pjoin(tdir(), "tune.db");
  scree__cache *c = open_rw(path);
  scree__ckey k = key("rmsnorm", "rows=16384", "x=fp16", 0, "sm_90");
  scree__ckey k_other_src = k;
  snprintf(k_other_src.src_hash, sizeof k_other_src.src_hash, "ffff");
  scree__ckey k2 = key("rmsnorm", "rows=8192", "x=fp16", 0, "sm_90");
  scree__ckey k3 = key("rmsnorm", "rows=4096", "x=fp16", 1, "sm_90");
  int64_t t0 = (int64_t)time(NULL);
  ck_assert_int_eq(scree__cache_record_miss(c, &k, "rows=16000,cols=4096"),
                   SCREE_OK);
  ck_assert_int_eq(
      scree__cache_record_miss(c, &k_other_src, "rows=16001,cols=4096"),
      SCREE_OK); /* src_hash is ignored: same row */
  ck_assert_int_eq(scree__cache_record_miss(c, &k2, "rows=8000,cols=4096"),
                   SCREE_OK);
  for (int i = 0; i < 3; i++)
    ck_assert_int_eq(scree__cache_record_miss(c, &k3, NULL), SCREE_OK);

  miss_list l;
  memset(&l, 0, sizeof l);
  ck_assert_int_eq(scree__cache_foreach_miss(c, NULL, NULL, miss_collect, &l),
                   SCREE_OK);
  ck_assert_int_eq(l.n, 3);
  ck_assert_str_eq(l.m[0].key.bucket, "rows=4096");
  ck_assert_int_eq(l.m[0].count, 3);
  ck_assert_int_eq(l.m[0].key.causal, 1);
  ck_assert_str_eq(l.m[0].example, "");
  /* count 2 before count 1 */
  ck_assert_str_eq(l.m[1].key.bucket, "rows=16384");
  ck_assert_int_eq(l.m[1].count, 2);
  ck_assert_str_eq(l.m[1].example, "rows=16000,cols=4096"); /* first kept */
  ck_assert_str_eq(l.m[1].key.src_hash, "");
  ck_assert_str_eq(l.m[1].key.op, "rmsnorm");
  ck_assert_str_eq(l.m[1].key.dtype, "x=fp16");
  ck_assert_str_eq(l.m[1].key.arch, "sm_90");
  ck_assert_int_ge(l.m[1].first_seen, t0);
  ck_assert_int_ge(l.m[1].last_seen, l.m[1].first_seen);
  ck_assert_int_le(l.m[1].last_seen, (int64_t)time(NULL));
  ck_assert_str_eq(l.m[2].key.bucket, "rows=8192");
  ck_assert_int_eq(l.m[2].count, 1);
  ck_assert_int_eq(db_int(path, "SELECT count(*) FROM misses"), 3);

  memset(&l, 0, sizeof l);
  l.stop_at = 1;
  ck_assert_int_eq(scree__cache_foreach_miss(c, NULL, NULL, miss_collect, &l),
                   SCREE_OK);
  ck_assert_int_eq(l.n, 1);
  memset(&l, 0, sizeof l);
  ck_assert_int_eq(
      scree__cache_foreach_miss(c, NULL, "softmax", miss_collect, &l),
      SCREE_OK);
  ck_assert_int_eq(l.n, 0);
  ck_assert_int_eq(
      scree__cache_foreach_miss(c, "sm_80", "rmsnorm", miss_collect, &l),
      SCREE_OK);
  ck_assert_int_eq(l.n, 0);
  ck_assert_int_eq(
      scree__cache_foreach_miss(c, "sm_90", "rmsnorm", miss_collect, &l),
      SCREE_OK);
  ck_assert_int_eq(l.n, 3);

  ck_assert_int_eq(scree__cache_delete_miss(c, &k_other_src), SCREE_OK);
  ck_assert_int_eq(scree__cache_delete_miss(c, &k), SCREE_ERROR_NOT_FOUND);
  memset(&l, 0, sizeof l);
  ck_assert_int_eq(scree__cache_foreach_miss(c, NULL, NULL, miss_collect, &l),
                   SCREE_OK);
  ck_assert_int_eq(l.n, 2);
  /* A miss recorded again after deletion starts over. Equal counts come
   * in key order: "rows=16384" < "rows=8192". */
  ck_assert_int_eq(scree__cache_record_miss(c, &k, "rows=1"), SCREE_OK);
  memset(&l, 0, sizeof l);
  ck_assert_int_eq(scree__cache_foreach_miss(c, NULL, NULL, miss_collect, &l),
                   SCREE_OK);
  ck_assert_int_eq(l.n, 3);
  ck_assert_str_eq(l.m[1].key.bucket, "rows=16384");
  ck_assert_int_eq(l.m[1].count, 1);
  ck_assert_str_eq(l.m[1].example, "rows=1");
  ck_assert_str_eq(l.m[2].key.bucket, "rows=8192");
  scree__cache_close(c);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Concurrency                                                               */
/* ------------------------------------------------------------------------ */

#define NCHILD 6
#define NPUT 200
#define NKEY 40

typedef struct write_rec {
  int child, i, key;
  double median;
} write_rec;

static uint64_t xs(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Runs in a forked grandchild: no Check macros here, only exit codes. */
static int child_main(const char *path, int child, uint64_t seed, int wfd) {
  scree__cache *c = NULL;
  char why[1024];
  if (scree__cache_open(path, 0, &c, NULL, why, sizeof why) != SCREE_OK) {
    fprintf(stderr, "child %d: open: %s\n", child, why);
    return 2;
  }
  for (int i = 0; i < NPUT; i++) {
    write_rec r = {child, i, (int)(xs(&seed) % NKEY),
                   1.0 + (double)(xs(&seed) % 1000000) / 1000.0 +
                       child * 1e-9};
    scree__ckey k = keyi(r.key);
    scree__centry e;
    memset(&e, 0, sizeof e);
    e.key = k;
    snprintf(e.config, sizeof e.config, "child=%d,i=%d", child, i);
    e.median_us = r.median;
    snprintf(e.device_name, sizeof e.device_name, "dev");
    uint8_t cubin[300];
    fill_bytes(cubin, sizeof cubin, (uint32_t)(child * 1000 + i));
    e.cubin = cubin;
    e.cubin_size = sizeof cubin;
    int rep;
    scree_status st = scree__cache_put(c, &e, &rep);
    if (st != SCREE_OK) {
      scree__cache_last_error(c, why, sizeof why);
      fprintf(stderr, "child %d: put %d: %s: %s\n", child, i,
              scree_status_name(st), why);
      return 3;
    }
    if (write(wfd, &r, sizeof r) != (ssize_t)sizeof r) return 4;
    if (scree__cache_record_miss(c, &k, "rows=1") != SCREE_OK) {
      scree__cache_last_error(c, why, sizeof why);
      fprintf(stderr, "child %d: miss %d: %s\n", child, i, why);
      return 5;
    }
  }
  scree__cache_close(c);
  return 0;
}

static int sum_miss_cb(void *user, const scree__cmiss *m) {
  *(int64_t *)user += m->count;
  return 0;
}

START_TEST(concurrent_processes) {
  char *dir = tdir();
  /* Nobody has created it yet: the children also race on creation. */
  char *path = pjoin(dir, "shared/tune.db");
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pids[NCHILD];
  for (int ch = 0; ch < NCHILD; ch++) {
    uint64_t seed = scree_test_rand() | 1;
    pid_t p = fork();
    ck_assert_int_ge(p, 0);
    if (p == 0) {
      close(fds[0]);
      _exit(child_main(path, ch, seed, fds[1]));
    }
    pids[ch] = p;
  }
  close(fds[1]);

  static write_rec recs[NCHILD * NPUT];
  size_t nrec = 0;
  for (;;) {
    ssize_t r = read(fds[0], (char *)recs + nrec * sizeof(write_rec),
                     sizeof recs - nrec * sizeof(write_rec));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    ck_assert_int_eq(r % (ssize_t)sizeof(write_rec), 0);
    nrec += (size_t)r / sizeof(write_rec);
  }
  close(fds[0]);
  for (int ch = 0; ch < NCHILD; ch++) {
    int status = 0;
    ck_assert_int_eq(waitpid(pids[ch], &status, 0), pids[ch]);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "child %d failed: status %d", ch, status);
  }
  ck_assert_uint_eq(nrec, NCHILD * NPUT);

  double best[NKEY];
  int seen[NKEY] = {0}, nkeys = 0;
  for (int i = 0; i < NKEY; i++) best[i] = INFINITY;
  for (size_t i = 0; i < nrec; i++) {
    write_rec *r = &recs[i];
    if (!seen[r->key]) nkeys++;
    seen[r->key] = 1;
    if (r->median < best[r->key]) best[r->key] = r->median;
  }

  char buf[256];
  db_text(path, "PRAGMA integrity_check", buf, sizeof buf);
  ck_assert_str_eq(buf, "ok");
  ck_assert_int_eq(db_int(path, "SELECT count(*) FROM winners"), nkeys);

  scree__cache *c = open_rw(path);
  for (int key_i = 0; key_i < NKEY; key_i++) {
    scree__ckey k = keyi(key_i);
    scree__centry g;
    if (!seen[key_i]) {
      ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_ERROR_NOT_FOUND);
      continue;
    }
    ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
    ck_assert_int_eq(g.cubin_ok, 1);
    ck_assert_msg(g.median_us == best[key_i],
                  "key %d holds %.9f, the fastest written was %.9f", key_i,
                  g.median_us, best[key_i]);
    /* The config and cubin are the ones written with that median. */
    int ch = -1, it = -1;
    ck_assert_int_eq(sscanf(g.config, "child=%d,i=%d", &ch, &it), 2);
    int found = 0;
    for (size_t i = 0; i < nrec; i++)
      if (recs[i].child == ch && recs[i].i == it) {
        ck_assert_int_eq(recs[i].key, key_i);
        ck_assert(recs[i].median == g.median_us);
        found = 1;
      }
    ck_assert(found);
    uint8_t want[300];
    fill_bytes(want, sizeof want, (uint32_t)(ch * 1000 + it));
    ck_assert_uint_eq(g.cubin_size, sizeof want);
    ck_assert_int_eq(memcmp(g.cubin, want, sizeof want), 0);
    scree__centry_free(&g);
  }
  int64_t total = 0;
  ck_assert_int_eq(scree__cache_foreach_miss(c, NULL, NULL, sum_miss_cb,
                                             &total),
                   SCREE_OK);
  ck_assert_int_eq(total, NCHILD * NPUT);
  ck_assert_int_eq(db_int(path, "SELECT count(*) FROM misses"), nkeys);
  char why[256];
  ck_assert_int_eq(scree__cache_check(c, 1, why, sizeof why), SCREE_OK);
  scree__cache_close(c);
}
END_TEST

#define NTHREAD 4
#define TPUT 100

typedef struct thread_arg {
  scree__cache *c;
  int id;
  uint64_t seed;
  double best[NKEY];
  int fails;
} thread_arg;

static void *thread_main(void *p) {
  thread_arg *a = p;
  for (int i = 0; i < NKEY; i++) a->best[i] = INFINITY;
  for (int i = 0; i < TPUT; i++) {
    int ki = (int)(xs(&a->seed) % NKEY);
    double med = 1.0 + (double)(xs(&a->seed) % 100000) / 100.0 + a->id * 1e-9;
    scree__ckey k = keyi(ki);
    scree__centry e;
    memset(&e, 0, sizeof e);
    e.key = k;
    snprintf(e.config, sizeof e.config, "thread=%d,i=%d", a->id, i);
    e.median_us = med;
    uint8_t cubin[64];
    fill_bytes(cubin, sizeof cubin, (uint32_t)(a->id * 1000 + i));
    e.cubin = cubin;
    e.cubin_size = sizeof cubin;
    if (scree__cache_put(a->c, &e, NULL) != SCREE_OK) a->fails++;
    if (med < a->best[ki]) a->best[ki] = med;
    scree__centry g;
    if (scree__cache_get(a->c, &k, &g) != SCREE_OK || !g.cubin_ok ||
        g.median_us > med)
      a->fails++;
    scree__centry_free(&g);
    if (scree__cache_record_miss(a->c, &k, NULL) != SCREE_OK) a->fails++;
    if (scree__cache_is_bad(a->c, &k, "x", 1, NULL, 0) != 0) a->fails++;
  }
  return NULL;
}

START_TEST(threads_share_one_handle) {
  char *path = pjoin(tdir(), "tune.db");
  scree__cache *c = open_rw(path);
  pthread_t th[NTHREAD];
  static thread_arg args[NTHREAD];
  for (int i = 0; i < NTHREAD; i++) {
    args[i].c = c;
    args[i].id = i;
    args[i].seed = scree_test_rand() | 1;
    args[i].fails = 0;
    ck_assert_int_eq(pthread_create(&th[i], NULL, thread_main, &args[i]), 0);
  }
  for (int i = 0; i < NTHREAD; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < NTHREAD; i++) ck_assert_int_eq(args[i].fails, 0);
  for (int ki = 0; ki < NKEY; ki++) {
    double best = INFINITY;
    for (int i = 0; i < NTHREAD; i++)
      if (args[i].best[ki] < best) best = args[i].best[ki];
    scree__ckey k = keyi(ki);
    scree__centry g;
    if (isinf(best)) {
      ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_ERROR_NOT_FOUND);
      continue;
    }
    ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
    ck_assert(g.median_us == best);
    scree__centry_free(&g);
  }
  int64_t total = 0;
  scree__cache_foreach_miss(c, NULL, NULL, sum_miss_cb, &total);
  ck_assert_int_eq(total, NTHREAD * TPUT);
  scree__cache_close(c);
}
END_TEST

/* Keys compare field by field. */
START_TEST(key_comparison) {
  scree__ckey a = keyi(0), b = keyi(0);
  ck_assert(scree__ckey_same(&a, &b));
  b.causal = 1;
  ck_assert(!scree__ckey_same(&a, &b));
  b = a;
  snprintf(b.dtype, sizeof b.dtype, "x=bf16,w=bf16,y=bf16");
  ck_assert(!scree__ckey_same(&a, &b));
  b = a;
  snprintf(b.arch, sizeof b.arch, "sm_80");
  ck_assert(!scree__ckey_same(&a, &b));
  b = keyi(1);
  ck_assert(!scree__ckey_same(&a, &b));
  b = a;
  b.src_hash[0] = b.src_hash[0] == '0' ? '1' : '0';
  ck_assert(!scree__ckey_same(&a, &b));
  b = a;
  snprintf(b.op, sizeof b.op, "softmax");
  ck_assert(!scree__ckey_same(&a, &b));
}
END_TEST

/* Readers against a writer that deletes one key and inserts another under
 * the same rowid, for a bounded time: every lookup returns its own key (or
 * nothing), never the other key's row. */
typedef struct swap_reader {
  const char *path;
  volatile int *stop;
  long lookups, wrong, errors;
} swap_reader;

static void *swap_read(void *p) {
  swap_reader *r = p;
  scree__cache *c = NULL;
  char why[1024];
  if (scree__cache_open(r->path, 1, &c, NULL, why, sizeof why) != SCREE_OK) {
    r->errors++;
    return NULL;
  }
  for (long i = 0; !*r->stop; i++) {
    scree__ckey k = keyi((int)(i & 1));
    scree__centry g;
    const scree_status st = scree__cache_get(c, &k, &g);
    if (st == SCREE_OK) {
      r->lookups++;
      if (!scree__ckey_same(&g.key, &k) || !g.cubin_ok) r->wrong++;
      scree__centry_free(&g);
    } else if (st != SCREE_ERROR_NOT_FOUND) {
      r->errors++;
    }
  }
  scree__cache_close(c);
  return NULL;
}

static double mono_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

START_TEST(lookups_never_return_another_key) {
  char *path = pjoin(tdir(), "tune.db");
  scree__cache *c = open_rw(path);
  scree__ckey k0 = keyi(0), k1 = keyi(1);
  put_ok(c, &k0, CFG[0], 10, 1, 1);
  put_ok(c, &k1, CFG[1], 20, 2, 1);
  scree__cache_close(c);
  sqlite3 *w = NULL;
  ck_assert_int_eq(sqlite3_open(path, &w), SQLITE_OK);
  sqlite3_busy_timeout(w, 5000);
  ck_assert_int_eq(sqlite3_exec(w, "ATTACH ':memory:' AS m; CREATE TABLE m.saved AS SELECT *"
                                   " FROM main.winners; DELETE FROM main.winners WHERE rowid > 1",
                                NULL, NULL, NULL),
                   SQLITE_OK);
  volatile int stop = 0;
  enum { NREAD = 2 };
  swap_reader r[NREAD];
  pthread_t th[NREAD];
  for (int i = 0; i < NREAD; i++) {
    r[i] = (swap_reader){.path = path, .stop = &stop};
    ck_assert_int_eq(pthread_create(&th[i], NULL, swap_read, &r[i]), 0);
  }
  /* Each swap empties the table and inserts the other key's row: SQLite
   * gives it rowid 1 again. */
  sqlite3_stmt *del = NULL, *ins = NULL;
  ck_assert_int_eq(sqlite3_prepare_v2(w, "DELETE FROM main.winners", -1, &del, NULL), SQLITE_OK);
  ck_assert_int_eq(sqlite3_prepare_v2(w, "INSERT INTO main.winners SELECT * FROM m.saved"
                                         " WHERE bucket = ?1", -1, &ins, NULL),
                   SQLITE_OK);
  const double t0 = mono_now();
  long swaps = 0;
  while (mono_now() - t0 < 2.0) {
    const scree__ckey *k = swaps++ & 1 ? &k0 : &k1;
    int rc1 = sqlite3_step(del);
    sqlite3_reset(del);
    sqlite3_bind_text(ins, 1, k->bucket, -1, SQLITE_STATIC);
    int rc2 = sqlite3_step(ins);
    sqlite3_reset(ins);
    ck_assert_int_eq(rc1, SQLITE_DONE);
    ck_assert_int_eq(rc2, SQLITE_DONE);
    ck_assert_int_eq(sqlite3_last_insert_rowid(w), 1);
  }
  stop = 1;
  for (int i = 0; i < NREAD; i++) pthread_join(th[i], NULL);
  sqlite3_finalize(del);
  sqlite3_finalize(ins);
  sqlite3_close(w);
  long lookups = 0;
  for (int i = 0; i < NREAD; i++) {
    ck_assert_int_eq(r[i].errors, 0);
    ck_assert_msg(r[i].wrong == 0, "%ld of %ld lookups returned the other key's row", r[i].wrong,
                  r[i].lookups);
    lookups += r[i].lookups;
  }
  ck_assert_int_gt(lookups, 0);
  ck_assert_int_gt(swaps, 10);
}
END_TEST

/* A damaged row (its cubin fails its hash check) loses to any good one,
 * whatever its median; a median below the floor is refused on write and
 * on read. */
/* Every winner of path gets a fast median and a cubin_hash of the right
 * form that its cubin fails. */
static void damage_winners(const char *path) {
  db_exec(path, "UPDATE winners SET median_us = 0.5, cubin_hash = printf('%064d', 0)");
}

START_TEST(damaged_rows_lose) {
  char *dir = tdir();
  char *path = pjoin(dir, "tune.db");
  scree__cache *c = open_rw(path);
  scree__ckey k = keyi(0);
  put_ok(c, &k, CFG[0], 10, 1, 1);
  scree__cache_close(c);
  damage_winners(path);
  c = open_rw(path);
  scree__centry g;
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_int_eq(g.cubin_ok, 0);
  scree__centry_free(&g);
  put_ok(c, &k, CFG[1], 20, 2, 1); /* slower, and good: it replaces the damaged row */
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_int_eq(g.cubin_ok, 1);
  ck_assert(g.median_us == 20);
  ck_assert_str_eq(g.config, CFG[1]);
  scree__centry_free(&g);
  put_ok(c, &k, CFG[2], 30, 3, 0); /* a good row keeps the slower one out */
  scree__cache_close(c);

  /* Merge: a good source row replaces a damaged destination row. */
  char *src = pjoin(dir, "src.db");
  c = open_rw(src);
  put_ok(c, &k, CFG[3], 40, 4, 1);
  scree__cache_close(c);
  damage_winners(path);
  c = open_rw(path);
  scree__merge_counts n;
  char why[1024];
  ck_assert_int_eq(scree__cache_merge(c, src, 0, &n, NULL, NULL, why, sizeof why), SCREE_OK);
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_OK);
  ck_assert_int_eq(g.cubin_ok, 1);
  ck_assert_str_eq(g.config, CFG[3]);
  scree__centry_free(&g);

  /* The floor: refused on write, however small, and a row below it on read. */
  static const double tiny[] = {0.001, 1e-300, 0x1p-1074, 0.0099};
  for (size_t i = 0; i < sizeof tiny / sizeof tiny[0]; i++) {
    scree__centry e = entry(&k, CFG[0], tiny[i], 5, 600);
    ck_assert_int_eq(scree__cache_put(c, &e, NULL), SCREE_ERROR_INVALID_ARGUMENT);
    char err[512];
    scree__cache_last_error(c, err, sizeof err);
    ck_assert_msg(strstr(err, "median_us") && strstr(err, "below"), "%s", err);
    scree__centry_free(&e);
  }
  scree__centry e = entry(&k, CFG[0], 0.01, 5, 600);
  ck_assert_int_eq(scree__cache_put(c, &e, NULL), SCREE_OK);
  scree__centry_free(&e);
  scree__cache_close(c);
  db_exec(path, "UPDATE winners SET median_us = 0.001");
  c = open_rw(path);
  ck_assert_int_eq(scree__cache_get(c, &k, &g), SCREE_ERROR_CACHE);
  char err[512];
  scree__cache_last_error(c, err, sizeof err);
  ck_assert_msg(strstr(err, "below"), "%s", err);
  scree__cache_close(c);
}
END_TEST

SCREE_TEST_MAIN(.name = "cache_records", .setup_once = base_setup, .teardown_once = base_teardown,
                .tests = SCREE_TESTS(put_get_roundtrip, put_keeps_the_faster,
                                     put_checks_what_it_writes, cubin_hash_mismatch_detected,
                                     bad_configs, misses, concurrent_processes,
                                     threads_share_one_handle, key_comparison,
                                     lookups_never_return_another_key, damaged_rows_lose))
