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

/* Checks every directory from the one holding file (an absolute path) up
 * to "/". 0 if none is loose, else 1 with the reason. */
static int loose_dirs(const char *file, uid_t me, char *why, size_t why_size) {
  char d[PATH_MAX];
  snprintf(d, sizeof d, "%s", file);
  for (;;) {
    char *slash = strrchr(d, '/');
    if (!slash) return 0;
    if (slash == d)
      slash[1] = 0;
    else
      *slash = 0;
    struct stat sb;
    if (stat(d, &sb) != 0) {
      put_why(why, why_size, "cannot check directory %s: %s", d, strerror(errno));
      return 1;
    }
    if (loose(d, &sb, 0, me, why, why_size)) return 1;
    if (!strcmp(d, "/")) return 0;
  }
}

int scree__cache_strict_modes(void) {
  const char *v = getenv("SCREE_CACHE_STRICT_MODES");
  return !(v && !strcmp(v, "0"));
}

scree_status scree__cache_trust_check(const char *path, char *why, size_t why_size) {
  put_why(why, why_size, "%s", "");
  if (!path || !*path) return SCREE_ERROR_INVALID_ARGUMENT;
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
    return SCREE_OK; /* nothing to trust: the open that follows says why */
  const uid_t me = geteuid();
  char reason[PATH_MAX + 128] = "";
  int bad = loose(path, &sb, 1, me, reason, sizeof reason);
  /* The directories of the file itself (symlinks resolved), and those of
   * the path as given (where a symlink on the way could be replaced). */
  char real[PATH_MAX], given[2 * PATH_MAX + 2];
  if (!bad) {
    if (!realpath(path, real)) {
      put_why(reason, sizeof reason, "cannot resolve %s: %s", path, strerror(errno));
      bad = 1;
    } else {
      bad = loose_dirs(real, me, reason, sizeof reason);
    }
  }
  if (!bad) {
    char cwd[PATH_MAX];
    int n = -1;
    if (path[0] == '/')
      n = snprintf(given, sizeof given, "%s", path);
    else if (getcwd(cwd, sizeof cwd))
      n = snprintf(given, sizeof given, "%s/%s", cwd, path);
    if (n < 0 || n >= PATH_MAX) {
      put_why(reason, sizeof reason, "cannot tell which directories lead to %s", path);
      bad = 1;
    } else {
      bad = loose_dirs(given, me, reason, sizeof reason);
    }
  }
  if (!bad) return SCREE_OK;
  put_why(why, why_size,
          "refusing %s: %s; a cache holds compiled code that scree loads and runs, so only you"
          " or root may be able to change it (fix the permissions, or set"
          " SCREE_CACHE_STRICT_MODES=0 to accept it; docs/security.md)",
          path, reason);
  return SCREE_ERROR_CACHE;
}
