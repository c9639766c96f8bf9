/* test_cache_trust.c - who may change a cache before scree reads it: the
 * permission check on shipped caches and merge sources
 * (src/runtime/store/cache_trust.c). The check reads owners and mode bits, so it
 * gives the same answers when the tests run as root. */
#include "cache_fixtures.h"

/* A cache file with one winner at dir/name. */
static char *make_cache(const char *dir, const char *name) {
  char *p = pjoin(dir, name);
  scree__cache *c = open_rw(p);
  scree__ckey k = keyi(0);
  put_ok(c, &k, CFG[0], 10, 1, 1);
  scree__cache_close(c);
  return p;
}

static void trusted(const char *path) {
  char why[2048];
  ck_assert_msg(scree__cache_trust_check(path, why, sizeof why) == SCREE_OK, "%s: %s", path,
                why);
  ck_assert_str_eq(why, "");
}

static char g_last_why[2048];

static void refused(const char *path, const char *want) {
  char *why = g_last_why;
  ck_assert_int_eq(scree__cache_trust_check(path, why, sizeof g_last_why), SCREE_ERROR_CACHE);
  ck_assert_msg(strstr(why, want), "%s: want \"%s\" in: %s", path, want, why);
  ck_assert_msg(strstr(why, "refusing ") && strstr(why, "SCREE_CACHE_STRICT_MODES=0"), "%s", why);
}

START_TEST(file_and_directory_modes) {
  char *dir = tdir();
  char *p = make_cache(dir, "tune.db");
  trusted(p);
  ck_assert_int_eq(chmod(p, 0664), 0);
  refused(p, "is writable by its group (mode 0664)");
  ck_assert_int_eq(chmod(p, 0646), 0);
  refused(p, "is writable by every user (mode 0646)");
  ck_assert_int_eq(chmod(p, 0444), 0);
  trusted(p);
  ck_assert_int_eq(chmod(dir, 0775), 0);
  refused(p, "directory ");
  refused(p, "is writable by its group (mode 0775)");
  ck_assert_int_eq(chmod(dir, 0777), 0);
  refused(p, "is writable by every user (mode 0777)");
  /* Sticky, as /tmp: others may not rename or remove what is ours. */
  ck_assert_int_eq(chmod(dir, 01777), 0);
  trusted(p);
  ck_assert_int_eq(chmod(dir, 0700), 0);
  /* Further up counts too. */
  char *sub = pjoin(dir, "sub");
  ck_assert_int_eq(mkdir(sub, 0700), 0);
  char *deep = make_cache(sub, "deep.db");
  ck_assert_int_eq(chmod(dir, 0757), 0);
  refused(deep, "every user");
  ck_assert_int_eq(chmod(dir, 0700), 0);
  trusted(deep);
  /* A missing file is the open's business. */
  trusted(pjoin(dir, "missing.db"));
}
END_TEST

START_TEST(owners) {
  if (geteuid() != 0) return; /* only root can give a file away; modes are tested above */
  char *dir = tdir();
  char *p = make_cache(dir, "tune.db");
  ck_assert_int_eq(chown(p, 12345, 12345), 0);
  refused(p, "is owned by uid 12345, neither you (uid 0) nor root");
  ck_assert_int_eq(chown(p, 0, 0), 0);
  trusted(p);
  char *sub = pjoin(dir, "sub");
  ck_assert_int_eq(mkdir(sub, 0755), 0);
  char *q = make_cache(sub, "q.db");
  ck_assert_int_eq(chown(sub, 12345, 12345), 0);
  refused(q, "is owned by uid 12345");
}
END_TEST

/* Symlinks: the file's own directories and those of the path as given. */
START_TEST(symlinks_and_relative_paths) {
  char *safe = tdir(), *open_dir = tdir();
  char *p = make_cache(safe, "tune.db");
  char *q = make_cache(open_dir, "tune.db");
  ck_assert_int_eq(chmod(open_dir, 0777), 0);
  /* A link in a safe place to a file in a loose one. */
  char *l1 = pjoin(safe, "link.db");
  ck_assert_int_eq(symlink(q, l1), 0);
  refused(l1, "is writable by every user");
  /* A link in a loose place to a safe file: the link can be replaced. */
  char *l2 = pjoin(open_dir, "link.db");
  ck_assert_int_eq(symlink(p, l2), 0);
  refused(l2, "is writable by every user");
  ck_assert_int_eq(chmod(open_dir, 0700), 0);
  trusted(l1);
  trusted(l2);
  /* A relative path is judged from the working directory. */
  char cwd[1024];
  ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
  ck_assert_int_eq(chdir(safe), 0);
  trusted("tune.db");
  ck_assert_int_eq(chmod(safe, 0770), 0);
  refused("tune.db", "its group");
  ck_assert_int_eq(chmod(safe, 0700), 0);
  ck_assert_int_eq(chdir(cwd), 0);
}
END_TEST

/* Shipped caches of the stack and merge sources are checked; the operator
 * can turn the check off. */
START_TEST(stack_and_merge_apply_it) {
  char *dir = tdir();
  char *p = make_cache(dir, "shipped.db");
  char *up = pjoin(dir, "user.db");
  ck_assert_int_eq(chmod(p, 0666), 0);
  unsetenv("SCREE_CACHE_STRICT_MODES");
  ck_assert_int_eq(scree__cache_strict_modes(), 1);
  scree__cache_stack s;
  char warn[4096];
  ck_assert_int_eq(scree__cache_stack_open(&s, up, p, warn, sizeof warn), SCREE_OK);
  ck_assert_int_eq(s.nshipped, 0);
  ck_assert_msg(strstr(warn, "shipped cache") && strstr(warn, "writable by every user") &&
                    strstr(warn, "SCREE_CACHE_STRICT_MODES=0"),
                "warn: %s", warn);
  scree__cache_stack_close(&s);
  setenv("SCREE_CACHE_STRICT_MODES", "1", 1); /* anything but 0 keeps it on */
  ck_assert_int_eq(scree__cache_strict_modes(), 1);
  setenv("SCREE_CACHE_STRICT_MODES", "0", 1);
  ck_assert_int_eq(scree__cache_strict_modes(), 0);
  ck_assert_int_eq(scree__cache_stack_open(&s, up, p, warn, sizeof warn), SCREE_OK);
  ck_assert_int_eq(s.nshipped, 1);
  ck_assert_str_eq(warn, "");
  scree__cache_stack_close(&s);
  unsetenv("SCREE_CACHE_STRICT_MODES");

  scree__cache *c = open_rw(up);
  scree__merge_counts n;
  char why[2048];
  ck_assert_int_eq(scree__cache_merge(c, p, 1, &n, NULL, NULL, why, sizeof why),
                   SCREE_ERROR_CACHE);
  ck_assert_msg(strstr(why, "refusing "), "why: %s", why);
  ck_assert_int_eq(count_entries(c, NULL, NULL), 0);
  ck_assert_int_eq(scree__cache_merge(c, p, 0, &n, NULL, NULL, why, sizeof why), SCREE_OK);
  ck_assert_int_eq(n.added, 1);
  scree__cache_close(c);
}
END_TEST

/* Every hop of every link is checked: a safe link to a link in a loose
 * directory that leads back to a safe file is refused (the second link
 * could be pointed anywhere between the check and the open), and what is
 * opened is the resolved path that was checked. */
START_TEST(every_link_hop) {
  char *safe = tdir(), *loose_dir = tdir();
  char *p = make_cache(safe, "s.db");
  char *l2 = pjoin(loose_dir, "link2");
  ck_assert_int_eq(symlink(p, l2), 0);
  char *l1 = pjoin(safe, "link1");
  ck_assert_int_eq(symlink(l2, l1), 0);
  ck_assert_int_eq(chmod(loose_dir, 0777), 0);
  refused(l1, "is writable by every user");
  /* A relative link through the loose directory counts as well. */
  char *l3 = pjoin(safe, "link3");
  char rel[600];
  snprintf(rel, sizeof rel, "../%s/link2", strrchr(loose_dir, '/') + 1);
  ck_assert_int_eq(symlink(rel, l3), 0);
  refused(l3, "is writable by every user");
  char *up = pjoin(safe, "user.db");
  scree__cache *c = open_rw(up);
  scree__merge_counts n;
  char why[2048];
  ck_assert_int_eq(scree__cache_merge(c, l1, 1, &n, NULL, NULL, why, sizeof why),
                   SCREE_ERROR_CACHE);
  ck_assert_int_eq(count_entries(c, NULL, NULL), 0);
  scree__cache_stack s;
  char warn[4096];
  ck_assert_int_eq(scree__cache_stack_open(&s, up, l1, warn, sizeof warn), SCREE_OK);
  ck_assert_int_eq(s.nshipped, 0);
  ck_assert_msg(strstr(warn, "every user"), "warn: %s", warn);
  scree__cache_stack_close(&s);
  ck_assert_int_eq(chmod(loose_dir, 0700), 0);
  trusted(l1);
  trusted(l3);
  if (geteuid() == 0) {
    /* A link somebody else owns (in a sticky directory, they may replace it). */
    ck_assert_int_eq(lchown(l2, 12345, 12345), 0);
    refused(l1, "the link ");
    refused(l1, "is owned by uid 12345");
    ck_assert_int_eq(lchown(l2, 0, 0), 0);
  }
  char real[4096];
  ck_assert_int_eq(scree__cache_trust_resolve(l1, real, sizeof real, why, sizeof why), SCREE_OK);
  ck_assert_str_eq(real, p);
  ck_assert_int_eq(scree__cache_merge(c, l1, 1, &n, NULL, NULL, why, sizeof why), SCREE_OK);
  ck_assert_int_eq(n.added, 1);
  scree__cache_close(c);
}
END_TEST

/* The -wal, -shm and -journal beside a cache supply or change its content:
 * each present one passes the file's rules. */
START_TEST(wal_and_shm_beside_it) {
  char *dir = tdir();
  char *p = make_cache(dir, "s.db");
  ck_assert_int_eq(chmod(p, 0644), 0);
  static const char *const sfx[] = {"-wal", "-shm", "-journal"};
  for (int i = 0; i < 3; i++) {
    char side[600];
    snprintf(side, sizeof side, "%s%s", p, sfx[i]);
    unlink(side);
    trusted(p);
    int fd = open(side, O_WRONLY | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    trusted(p);
    ck_assert_int_eq(chmod(side, 0666), 0);
    refused(p, "is writable by every user");
    ck_assert_msg(strstr(g_last_why, sfx[i]), "%s", g_last_why);
    ck_assert_int_eq(chmod(side, 0644), 0);
    if (geteuid() == 0) {
      ck_assert_int_eq(chown(side, 12345, 12345), 0);
      refused(p, "is owned by uid 12345");
    }
    unlink(side);
    ck_assert_int_eq(symlink(p, side), 0);
    refused(p, "is not a regular file");
    unlink(side);
  }
  trusted(p);
}
END_TEST

/* The user cache gets the same check: the runtime's stack and every
 * command that writes a cache. */
START_TEST(user_cache_checked) {
  char *dir = tdir();
  char *sub = pjoin(dir, "cache");
  char *up = pjoin(sub, "tune.db");
  ck_assert_int_eq(mkdir(sub, 0777), 0);
  ck_assert_int_eq(chmod(sub, 0777), 0);
  unsetenv("SCREE_CACHE_STRICT_MODES");
  scree__cache_stack s;
  char warn[4096];
  ck_assert_int_eq(scree__cache_stack_open(&s, up, "", warn, sizeof warn), SCREE_OK);
  ck_assert_ptr_null(s.user);
  ck_assert_msg(strstr(warn, "user cache") && strstr(warn, "every user") &&
                    strstr(warn, "SCREE_CACHE_STRICT_MODES=0"),
                "warn: %s", warn);
  scree__cache_stack_close(&s);
  ck_assert(!exists(up));
  scree__cache *c = NULL;
  char why[2048];
  ck_assert_int_eq(scree__cache_open_trusted(up, 0, 1, &c, NULL, why, sizeof why),
                   SCREE_ERROR_CACHE);
  ck_assert_ptr_null(c);
  setenv("SCREE_CACHE_STRICT_MODES", "0", 1);
  ck_assert_int_eq(scree__cache_stack_open(&s, up, "", warn, sizeof warn), SCREE_OK);
  ck_assert_ptr_nonnull(s.user);
  scree__cache_stack_close(&s);
  unsetenv("SCREE_CACHE_STRICT_MODES");
  ck_assert_int_eq(chmod(sub, 0700), 0);
  ck_assert_int_eq(scree__cache_stack_open(&s, up, "", warn, sizeof warn), SCREE_OK);
  ck_assert_ptr_nonnull(s.user);
  ck_assert_str_eq(scree__cache_path(s.user), up);
  scree__cache_stack_close(&s);
  if (geteuid() == 0) {
    /* A tune.db that another user put there. */
    ck_assert_int_eq(chown(up, 12345, 12345), 0);
    ck_assert_int_eq(scree__cache_stack_open(&s, up, "", warn, sizeof warn), SCREE_OK);
    ck_assert_ptr_null(s.user);
    ck_assert_msg(strstr(warn, "owned by uid 12345"), "warn: %s", warn);
    scree__cache_stack_close(&s);
  }
  /* A relative SCREE_CACHE_DIR would follow the working directory. */
  char buf[4096];
  setenv("SCREE_CACHE_DIR", "rel/dir", 1);
  ck_assert_int_eq(scree__cache_default_path(buf, sizeof buf), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_int_eq(scree__cache_stack_open(&s, NULL, "", warn, sizeof warn), SCREE_OK);
  ck_assert_ptr_null(s.user);
  ck_assert_msg(strstr(warn, "SCREE_CACHE_DIR is not an absolute path"), "warn: %s", warn);
  scree__cache_stack_close(&s);
  setenv("SCREE_CACHE_DIR", sub, 1);
  ck_assert_int_eq(scree__cache_default_path(buf, sizeof buf), SCREE_OK);
  ck_assert_str_eq(buf, up);
  unsetenv("SCREE_CACHE_DIR");
}
END_TEST

SCREE_TEST_MAIN(.name = "cache_trust", .setup_once = base_setup, .teardown_once = base_teardown,
                .tests = SCREE_TESTS(file_and_directory_modes, owners, symlinks_and_relative_paths,
                                     stack_and_merge_apply_it, every_link_hop,
                                     wal_and_shm_beside_it, user_cache_checked))
