/* cache_trust.c - who can change a cache file before scree reads it. A
 * cache holds cubins that scree loads and runs: whoever can write the file,
 * or replace it, can run code in the process that reads it. docs/security.md
 * gives the rules; ssh's StrictModes is the model. */
#include "store/cache_internal.h"

#include <limits.h>

/* The reason p (the cache file itself when is_file, else a directory on
 * the way to it) lets a user other than me and root change the cache, in
 * why; 0 if it does not. A sticky directory is fine even when others may
 * write it: only an entry's owner (or root) may rename or remove the entry,
 * and the entry itself is checked next. */
static int loose(const char *p, const struct stat *sb, int is_file, uid_t me, char *why,
                 size_t why_size) {
  const char *what = is_file ? "" : "directory ";
  if (sb->st_uid != 0 && sb->st_uid != me) {
    put_why(why, why_size, "%s%s is owned by uid %u, neither you (uid %u) nor root", what, p,
            (unsigned)sb->st_uid, (unsigned)me);
    return 1;
  }
  if (!(sb->st_mode & (S_IWGRP | S_IWOTH))) return 0;
  if (!is_file && (sb->st_mode & S_ISVTX)) return 0;
  put_why(why, why_size, "%s%s is writable by %s (mode %04o)", what, p,
          sb->st_mode & S_IWOTH ? "every user" : "its group", (unsigned)(sb->st_mode & 07777));
  return 1;
}

/* Resolves path as the kernel would, one component at a time, following
 * every symbolic link by hand: each directory entered, on the path as given
 * and on the way through every link's target, must pass loose(), and so
 * must the file at the end. The result, in real, is absolute and free of
 * links; since nobody but me and root can change any directory on it,
 * opening it opens what was checked. A path that ends early (a component
 * missing or not a directory) is left for the open to describe: real is
 * then the checked part with the rest appended. 0, or 1 with the reason. */
static int walk(const char *path, uid_t me, char *real, size_t real_size, char *why,
                size_t why_size) {
  char todo[2 * PATH_MAX + 2], cand[PATH_MAX + NAME_MAX + 2], link[PATH_MAX];
  int n;
  if (path[0] == '/') {
    n = snprintf(todo, sizeof todo, "%s", path);
  } else {
    char cwd[PATH_MAX];
    n = getcwd(cwd, sizeof cwd) ? snprintf(todo, sizeof todo, "%s/%s", cwd, path) : -1;
  }
  if (n < 0 || n >= PATH_MAX) {
    put_why(why, why_size, "cannot tell which directories lead to %s", path);
    return 1;
  }
  struct stat sb;
  if (stat("/", &sb) != 0 || loose("/", &sb, 0, me, why, why_size)) return 1;
  real[0] = 0; /* "" is "/" */
  int hops = 0;
  for (char *rest = todo;;) {
    while (*rest == '/') rest++;
    if (!*rest) break;
    char *end = strchr(rest, '/');
    const size_t len = end ? (size_t)(end - rest) : strlen(rest);
    const int last = !end || !end[strspn(end, "/")];
    if (len == 1 && rest[0] == '.') {
      rest += len;
      continue;
    }
    if (len == 2 && rest[0] == '.' && rest[1] == '.') {
      char *slash = strrchr(real, '/');
      if (slash) *slash = 0;
      rest += len;
      continue;
    }
    n = snprintf(cand, sizeof cand, "%s/%.*s", real, (int)len, rest);
    if (n < 0 || n >= PATH_MAX) {
      put_why(why, why_size, "cannot tell which directories lead to %s", path);
      return 1;
    }
    rest += len;
    if (lstat(cand, &sb) != 0) {
      if (errno != ENOENT && errno != ENOTDIR) {
        put_why(why, why_size, "cannot check %s: %s", cand, strerror(errno));
        return 1;
      }
      snprintf(real, real_size, "%s%s", cand, last ? "" : rest); /* the open says why */
      return 0;
    }
    if (S_ISLNK(sb.st_mode)) {
      /* A link's mode means nothing, its owner does: in a sticky directory
       * the owner may replace it. */
      if (sb.st_uid != 0 && sb.st_uid != me) {
        put_why(why, why_size, "the link %s is owned by uid %u, neither you (uid %u) nor root",
                cand, (unsigned)sb.st_uid, (unsigned)me);
        return 1;
      }
      const ssize_t ln = readlink(cand, link, sizeof link - 1);
      if (ln < 0 || ++hops > 40) {
        put_why(why, why_size, "cannot follow the link %s: %s", cand,
                ln < 0 ? strerror(errno) : "too many levels of links");
        return 1;
      }
      link[ln] = 0;
      /* The link's target, then what followed it; it is read from the
       * directory that holds the link (already checked). */
      char next[sizeof todo];
      n = snprintf(next, sizeof next, "%s%s", link, last ? "" : rest);
      if (n < 0 || (size_t)n >= sizeof todo) {
        put_why(why, why_size, "cannot tell which directories lead to %s", path);
        return 1;
      }
      memcpy(todo, next, (size_t)n + 1);
      rest = todo;
      if (link[0] == '/') real[0] = 0;
      continue;
    }
    if (S_ISDIR(sb.st_mode) || (last && S_ISREG(sb.st_mode))) {
      if (loose(cand, &sb, !S_ISDIR(sb.st_mode), me, why, why_size)) return 1;
    }
    if (!S_ISDIR(sb.st_mode)) {
      snprintf(real, real_size, "%s%s", cand, last ? "" : rest);
      return 0;
    }
    snprintf(real, real_size, "%s", cand);
  }
  if (!real[0]) snprintf(real, real_size, "/");
  return 0;
}

/* The files SQLite reads beside a database: they can supply its content
 * (a -wal's frames are read as pages of the file) or change it (a hot
 * -journal is rolled back into it), so each one present passes the file's
 * rules, and none may be a link. 0, or 1 with the reason. */
static int loose_sidecars(const char *real, uid_t me, char *why, size_t why_size) {
  static const char *const sfx[] = {"-wal", "-shm", "-journal"};
  for (int i = 0; i < 3; i++) {
    char p[PATH_MAX + 16];
    snprintf(p, sizeof p, "%s%s", real, sfx[i]);
    struct stat sb;
    if (lstat(p, &sb) != 0) {
      if (errno == ENOENT) continue;
      put_why(why, why_size, "cannot check %s: %s", p, strerror(errno));
      return 1;
    }
    if (!S_ISREG(sb.st_mode)) {
      put_why(why, why_size, "%s is not a regular file", p);
      return 1;
    }
    if (loose(p, &sb, 1, me, why, why_size)) return 1;
  }
  return 0;
}

int scree__cache_strict_modes(void) {
  const char *v = getenv("SCREE_CACHE_STRICT_MODES");
  return !(v && !strcmp(v, "0"));
}

scree_status scree__cache_trust_resolve(const char *path, char *real, size_t real_size,
                                       char *why, size_t why_size) {
  put_why(why, why_size, "%s", "");
  if (real && real_size) real[0] = 0;
  if (!path || !*path || !real || real_size < PATH_MAX) return SCREE_ERROR_INVALID_ARGUMENT;
  const uid_t me = geteuid();
  char reason[PATH_MAX + 128] = "";
  int bad = walk(path, me, real, real_size, reason, sizeof reason);
  struct stat sb;
  if (!bad && stat(real, &sb) == 0 && S_ISREG(sb.st_mode))
    bad = loose_sidecars(real, me, reason, sizeof reason);
  if (!bad) return SCREE_OK;
  real[0] = 0;
  put_why(why, why_size,
          "refusing %s: %s; a cache holds compiled code that scree loads and runs, so only you"
          " or root may be able to change it (fix the permissions, or set"
          " SCREE_CACHE_STRICT_MODES=0 to accept it; docs/security.md)",
          path, reason);
  return SCREE_ERROR_CACHE;
}

scree_status scree__cache_trust_check(const char *path, char *why, size_t why_size) {
  char real[PATH_MAX];
  return scree__cache_trust_resolve(path, real, sizeof real, why, why_size);
}
