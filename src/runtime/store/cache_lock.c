/* cache_lock.c - one tune per bucket across processes: a byte-range lock
 * per bucket key in a file beside the cache.
 *
 * Eight ranks that start together miss the same buckets at once. Each
 * bucket key hashes to one byte of `<cache>.tune-lock`; the tuner holds
 * that byte's write lock while it tunes, so the others wait (or run the
 * default meanwhile) and then read its row. Open-file-description locks
 * (F_OFD_SETLK) belong to the open file, not the process, so two threads
 * of one process exclude each other too, and the kernel drops the lock
 * when its holder dies: no stale lock survives a crash. Two keys sharing a
 * byte (1 in 2^31) only serialize. Local file systems; on NFS the lock
 * may not reach other nodes (docs/cache.md). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "base/sha256.h"
#include "store/cache.h"

static off_t key_byte(const scree__ckey *key) {
  char text[sizeof *key + 16];
  const int n = snprintf(text, sizeof text, "%s|%s|%s|%d|%s|%s", key->op, key->bucket,
                         key->dtype, key->causal, key->arch, key->src_hash);
  uint8_t h[32];
  scree__sha256(text, n > 0 ? (size_t)n : 0, h);
  return (off_t)(((uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3]) &
                 0x7fffffffu);
}

int scree__cache_tune_lock(const scree__cache *c, const scree__ckey *key, int wait,
                           double timeout_s, int *fd) {
  *fd = -1;
  if (!c || scree__cache_readonly(c)) return -1;
  const char *db = scree__cache_path(c);
  char path[4200];
  if (!db || !*db || snprintf(path, sizeof path, "%s.tune-lock", db) >= (int)sizeof path)
    return -1;
  /* The cache's own permission bits: whoever may write the cache may
   * take its locks. */
  struct stat st;
  const mode_t mode = stat(db, &st) == 0 ? (st.st_mode & 0666) : 0600;
  const int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode);
  if (f < 0) return -1;
  struct flock l;
  memset(&l, 0, sizeof l);
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  l.l_start = key_byte(key);
  l.l_len = 1;
  const double t0 = scree__now();
  for (;;) {
    if (fcntl(f, F_OFD_SETLK, &l) == 0) {
      *fd = f;
      return 1;
    }
    if (errno != EAGAIN && errno != EACCES && errno != EINTR) {
      close(f);
      return -1; /* locks not supported here */
    }
    if (!wait || scree__now() - t0 >= timeout_s) {
      close(f);
      return 0;
    }
    usleep(20000); /* polled, so that the wait has a limit */
  }
}

void scree__cache_tune_unlock(int fd) {
  if (fd >= 0) close(fd); /* closing the description releases its lock */
}
