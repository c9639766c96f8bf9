/* worker.c - a bucket's candidates checked and timed in a worker process:
 * scree__worker_trials on the caller's side, scree__worker_serve on the
 * worker's, which runs each as a trial (tuner/trial.h).
 *
 * A kernel that faults leaves its CUDA context unusable for good, and one
 * that never finishes blocks whatever waits for it; neither may reach the
 * process that tunes. The caller compiles the candidates (NVRTC does not
 * touch the GPU) and hands the cubins to a worker process, `scree-tune
 * worker`, which has a context of its own on the same device, builds the
 * bucket's check and timing problems from the same seed, and answers one
 * line per candidate. The caller waits for each answer with a wall-clock
 * limit. A worker that reports a broken context, dies, or stays silent
 * past the limit is killed and restarted, the candidate at fault is
 * recorded as bad with the reason, and tuning goes on with the rest. The
 * worker stays up between tunes of a context (one start per context, not
 * per bucket) and ends when the caller closes its socket.
 *
 * Protocol (one stream socket; text lines, cubins as raw bytes):
 *   caller: req OP VARIANT BUCKET SEED REPS WARMUP LIMIT_MS N
 *           cand CONFIG SIZE MODE      (N times, each followed by SIZE bytes)
 *   worker: ready FLOPS BYTES PROBLEM  (or: fail STATUS MESSAGE)
 *           res STATUS MEDIAN SPREAD RECORD FATAL WHY  (one per candidate, in order)
 * after a res with FATAL 1 the worker exits. Fields are single words but
 * the last; reasons have their line breaks replaced. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tuner/worker.h"

extern char **environ;

/* ---- the wire ------------------------------------------------------------ */

/* Replaces line breaks (and tabs) by spaces: a reason is one field. */
static void one_line(char *s) {
  for (; *s; s++)
    if (*s == '\n' || *s == '\r' || *s == '\t') *s = ' ';
}

static int send_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    /* MSG_NOSIGNAL: a dead worker must not raise SIGPIPE in the caller. */
    ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == ENOTSOCK) k = write(fd, c, n); /* a worker run by hand */
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    c += k;
    n -= (size_t)k;
  }
  return 0;
}

static int send_fmt(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int send_fmt(int fd, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof buf) return -1;
  return send_all(fd, buf, (size_t)n);
}

/* A buffered reader over a socket, with a deadline per line. */
typedef struct rbuf {
  int fd;
  char b[8192];
  size_t start, len;
} rbuf;

/* Reads one line (without its newline) into line. 1: a line; 0: the
 * deadline (scree__now() seconds; 0 = none) passed; -1: end of input or an
 * error; -2: a line longer than n. */
static int read_line(rbuf *r, char *line, size_t n, double deadline) {
  for (;;) {
    char *nl = memchr(r->b + r->start, '\n', r->len);
    if (nl) {
      const size_t k = (size_t)(nl - (r->b + r->start));
      if (k >= n) return -2;
      memcpy(line, r->b + r->start, k);
      line[k] = 0;
      r->start += k + 1;
      r->len -= k + 1;
      return 1;
    }
    if (r->len == sizeof r->b) return -2;
    if (r->start) {
      memmove(r->b, r->b + r->start, r->len);
      r->start = 0;
    }
    if (deadline > 0) {
      const double left = deadline - scree__now();
      if (left <= 0) return 0;
      struct pollfd p = {.fd = r->fd, .events = POLLIN};
      const int pr = poll(&p, 1, left > 3600 ? 3600000 : (int)(left * 1e3) + 1);
      if (pr < 0 && errno == EINTR) continue;
      if (pr < 0) return -1;
      if (pr == 0) continue; /* the deadline is checked above */
    }
    const ssize_t k = read(r->fd, r->b + r->len, sizeof r->b - r->len);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    r->len += (size_t)k;
  }
}

/* Reads exactly n bytes (the worker's side: no deadline). */
static int read_bytes(rbuf *r, void *dst, size_t n) {
  char *d = dst;
  const size_t have = r->len < n ? r->len : n;
  memcpy(d, r->b + r->start, have);
  r->start += have;
  r->len -= have;
  for (size_t got = have; got < n;) {
    const ssize_t k = read(r->fd, d + got, n - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    got += (size_t)k;
  }
  return 0;
}

/* ---- the worker's side ----------------------------------------------------- */

#define MAX_TRIALS 4096
#define MAX_CUBIN ((size_t)256 << 20)

static int answer_fail(int out, scree_context *ctx, scree_status st) {
  char err[512];
  scree__error_copy(ctx, err, sizeof err);
  one_line(err);
  return send_fmt(out, "fail %d %s\n", (int)st, err);
}

/* Serves one request whose header is `line`. Returns 0 to go on, 3 after a
 * fatal candidate, 2 on a protocol error. */
static int serve_one(scree_context *ctx, rbuf *in, int out, const char *line) {
  char opn[64], vs[128], bs[128];
  unsigned long long seed;
  int reps, warmup, n;
  double limit_ms;
  if (sscanf(line, "req %63s %127s %127s %llu %d %d %lf %d", opn, vs, bs, &seed, &reps, &warmup,
             &limit_ms, &n) != 8 ||
      n < 0 || n > MAX_TRIALS || reps < 1 || reps > 100000 || warmup < 0 || warmup > 100000 ||
      !(limit_ms > 0))
    return 2;
  scree__trial *t = calloc((size_t)(n ? n : 1), sizeof *t);
  if (!t) return 2;
  int rc = 0;
  const scree__op *op = scree__op_find(opn);
  scree__variant var;
  scree__bucket b;
  int bad = !op || scree__variant_parse(op, vs, &var, NULL, 0) ||
            scree__bucket_parse(op, bs, &b, NULL, 0);
  for (int i = 0; i < n && rc == 0; i++) {
    char cl[256], cs[128], mode[16];
    unsigned long long size;
    if (read_line(in, cl, sizeof cl, 0) != 1 ||
        sscanf(cl, "cand %127s %llu %15s", cs, &size, mode) != 3 || size > MAX_CUBIN ||
        !(t[i].cubin = malloc(size ? size : 1)) ||
        read_bytes(in, (void *)t[i].cubin, size)) {
      rc = 2;
      break;
    }
    t[i].cubin_size = size;
    t[i].mode = !strcmp(mode, "wrong")   ? SCREE__TRIAL_WRONG
                : !strcmp(mode, "fault") ? SCREE__TRIAL_FAULT
                : !strcmp(mode, "hang")  ? SCREE__TRIAL_HANG
                                         : SCREE__TRIAL_NORMAL;
    if (!bad && scree__config_parse(op, cs, &t[i].cfg, NULL, 0)) bad = 1;
  }
  if (rc == 0 && bad) {
    scree__fail(ctx, SCREE_ERROR_INVALID_ARGUMENT, "the worker could not parse the request");
    rc = answer_fail(out, ctx, SCREE_ERROR_INVALID_ARGUMENT) ? 2 : 0;
    goto done;
  }
  if (rc) goto done;
  /* A batch-invariant bucket's candidates run as its calls will (paged
   * attention's fixed key chunks). */
  ctx->batch_invariant = scree__bucket_is_invariant(op, &b);
  const scree__trial_opts o = {.reps = reps, .warmup = warmup, .time_limit_ms = limit_ms};
  const int pushed = scree__ctx_enter(ctx);
  scree__run chk, tp;
  CUstream stream = NULL;
  scree_status st = scree__run_make_bucket(ctx, op, &var, &b, 1, seed, &chk);
  if (!st && (st = scree__run_make_bucket(ctx, op, &var, &b, 0, seed + 1, &tp)))
    scree__run_free(ctx, &chk);
  if (!st && ctx->cu->StreamCreate(&stream, CU_STREAM_NON_BLOCKING)) {
    scree__run_free(ctx, &chk);
    scree__run_free(ctx, &tp);
    st = scree__fail(ctx, SCREE_ERROR_CUDA, "cuStreamCreate");
  }
  if (st) {
    rc = answer_fail(out, ctx, st) ? 2 : 0;
    scree__ctx_leave(ctx, pushed);
    goto done;
  }
  char desc[sizeof tp.p.desc];
  snprintf(desc, sizeof desc, "%s", tp.p.desc);
  one_line(desc);
  if (send_fmt(out, "ready %.17g %.17g %s\n", tp.p.flops, tp.p.bytes, desc)) rc = 2;
  for (int i = 0; i < n && rc == 0; i++) {
    scree__trial_run(ctx, op, &var, &chk, &tp, stream, &o, &t[i]);
    one_line(t[i].why);
    if (send_fmt(out, "res %d %.17g %.17g %d %d %s\n", (int)t[i].st, t[i].median, t[i].spread,
                 t[i].record, t[i].fatal, t[i].why))
      rc = 2;
    else if (t[i].fatal)
      rc = 3; /* the context is gone: exit, the caller starts another worker */
  }
  if (rc != 3) {
    ctx->cu->StreamDestroy(stream);
    scree__run_free(ctx, &chk);
    scree__run_free(ctx, &tp);
  }
  scree__ctx_leave(ctx, pushed);
done:
  for (int i = 0; i < n; i++) free((void *)t[i].cubin);
  free(t);
  return rc;
}

int scree__worker_serve(scree_context *ctx, int in, int out) {
  /* Ends with the thread that started it (the caller's tune), not later. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  rbuf r = {.fd = in};
  char line[512];
  for (;;) {
    const int k = read_line(&r, line, sizeof line, 0);
    if (k == -1) return 0; /* the caller closed the socket */
    if (k != 1) return 2;
    const int rc = serve_one(ctx, &r, out, line);
    if (rc) return rc;
  }
}

/* ---- the caller's side ------------------------------------------------------ */

struct scree__worker {
  pid_t pid; /* 0: none running */
  int fd;
  rbuf r;
  char path[PATH_MAX];
};

/* Ends the worker: at once (hard), or after it exits by itself (within
 * 5 s); how it ended goes to how. */
static void stop(struct scree__worker *w, int hard, char *how, size_t n) {
  if (w->pid <= 0) return;
  if (hard) kill(w->pid, SIGKILL);
  close(w->fd);
  int status = 0;
  const double until = scree__now() + 5.0;
  pid_t p;
  while ((p = waitpid(w->pid, &status, WNOHANG)) == 0 || (p < 0 && errno == EINTR)) {
    if (scree__now() > until) {
      kill(w->pid, SIGKILL);
      while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    usleep(1000);
  }
  if (how) {
    if (WIFSIGNALED(status))
      snprintf(how, n, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
      snprintf(how, n, "exited with status %d", WEXITSTATUS(status));
  }
  w->pid = 0;
  w->fd = -1;
}

void scree__worker_free(struct scree__worker *w) {
  if (!w) return;
  /* Closing the socket ends a worker between requests; one that is stuck
   * on the GPU is killed after stop's wait. */
  stop(w, 0, NULL, 0);
  free(w);
}

static int executable(const char *p) {
  struct stat s;
  return stat(p, &s) == 0 && S_ISREG(s.st_mode) && access(p, X_OK) == 0;
}

/* Tries dir/rel; 1 and path set if it is an executable file. */
static int try_path(char *path, size_t n, const char *dir, const char *rel) {
  if (snprintf(path, n, "%s/%s", dir, rel) >= (int)n) return 0;
  return executable(path);
}

/* The worker executable: $SCREE_WORKER, this process if it is scree-tune,
 * else scree-tune beside (or in ../bin of) the library or the program. */
static scree_status find_worker(scree_context *ctx, char *path, size_t n) {
  const char *env = getenv("SCREE_WORKER");
  if (env && *env) {
    if (snprintf(path, n, "%s", env) < (int)n && executable(path)) return SCREE_OK;
    return scree__fail(ctx, SCREE_ERROR_NOT_FOUND,
                       "SCREE_WORKER=%s is not an executable file (it names scree-tune, "
                       "which runs the tuning worker)", env);
  }
  char self[PATH_MAX];
  const ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  if (k > 0) {
    self[k] = 0;
    const char *base = strrchr(self, '/');
    if (base && !strcmp(base + 1, "scree-tune") && snprintf(path, n, "%s", self) < (int)n)
      return SCREE_OK;
  }
  char dirs[2][PATH_MAX];
  int nd = 0;
  Dl_info info;
  if (dladdr((void *)scree__worker_serve, &info) && info.dli_fname &&
      snprintf(dirs[nd], PATH_MAX, "%s", info.dli_fname) < PATH_MAX) {
    char *s = strrchr(dirs[nd], '/');
    if (s) *s = 0, nd++;
  }
  if (k > 0 && snprintf(dirs[nd], PATH_MAX, "%s", self) < PATH_MAX) {
    char *s = strrchr(dirs[nd], '/');
    if (s) *s = 0, nd++;
  }
  static const char *const rel[] = {"scree-tune", "../bin/scree-tune", "../scree-tune"};
  for (int d = 0; d < nd; d++)
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++)
      if (try_path(path, n, dirs[d], rel[i])) return SCREE_OK;
  return scree__fail(ctx, SCREE_ERROR_NOT_FOUND,
                     "tuning runs candidates in a worker process (scree-tune worker), but "
                     "scree-tune was not found beside the library or the program: set "
                     "SCREE_WORKER to its path, or SCREE_TUNE_ISOLATION=off to tune in this "
                     "process (a faulting candidate then breaks its CUDA context)");
}

static scree_status start(scree_context *ctx, struct scree__worker *w) {
  if (!w->path[0]) {
    scree_status st = find_worker(ctx, w->path, sizeof w->path);
    if (st) return st;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
    return scree__fail(ctx, SCREE_ERROR_INTERNAL, "socketpair: %s", strerror(errno));
  char dev[16];
  snprintf(dev, sizeof dev, "%d", ctx->info.ordinal);
  char *argv[] = {w->path, "worker", "--device", dev, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 1);
  pid_t pid;
  const int e = posix_spawn(&pid, w->path, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(sv[1]);
  if (e) {
    close(sv[0]);
    return scree__fail(ctx, SCREE_ERROR_INTERNAL, "cannot start the tuning worker %s: %s",
                       w->path, strerror(e));
  }
  w->pid = pid;
  w->fd = sv[0];
  memset(&w->r, 0, sizeof w->r);
  w->r.fd = sv[0];
  return SCREE_OK;
}

static const char *mode_name(scree__trial_mode m) {
  switch (m) {
    case SCREE__TRIAL_WRONG: return "wrong";
    case SCREE__TRIAL_FAULT: return "fault";
    case SCREE__TRIAL_HANG: return "hang";
    default: return "normal";
  }
}

/* Sends the request for trials [from, n). */
static int send_request(struct scree__worker *w, const scree__op *op, const scree__variant *var,
                        const scree__bucket *b, uint64_t seed, const scree__trial_opts *o,
                        const scree__trial *t, int from, int n) {
  char vs[128], bs[128];
  scree__variant_str(op, var, vs, sizeof vs);
  scree__bucket_str(op, b, bs, sizeof bs);
  if (send_fmt(w->fd, "req %s %s %s %llu %d %d %.17g %d\n", op->name, vs, bs,
               (unsigned long long)seed, o->reps, o->warmup, o->time_limit_ms, n - from))
    return -1;
  for (int i = from; i < n; i++) {
    char cs[128];
    scree__config_str(op, &t[i].cfg, cs, sizeof cs);
    if (send_fmt(w->fd, "cand %s %zu %s\n", cs, t[i].cubin_size, mode_name(t[i].mode)) ||
        send_all(w->fd, t[i].cubin, t[i].cubin_size))
      return -1;
  }
  return 0;
}

scree_status scree__worker_trials(scree_context *ctx, const scree__op *op,
                                  const scree__variant *var, const scree__bucket *b,
                                  uint64_t seed, const scree__trial_opts *o, scree__trial *t,
                                  int n, scree__trials_info *info, struct scree__worker **wp) {
  if (!*wp && !(*wp = calloc(1, sizeof **wp)))
    return scree__fail(ctx, SCREE_ERROR_OUT_OF_MEMORY, "tuning worker");
  struct scree__worker *w = *wp;
  const double cand_s = o->candidate_limit_s;
  const double bucket_s = o->bucket_limit_s;
  const double bucket_end = scree__now() + bucket_s;
  /* A worker that ended since the last tune (its parent thread exited,
   * or it was killed from outside) is replaced without blame. */
  if (w->pid > 0) {
    const pid_t p = waitpid(w->pid, NULL, WNOHANG);
    /* ECHILD: the process ignores SIGCHLD (children are reaped unasked);
     * then whether the worker still exists is what counts. */
    if (p == w->pid || (p < 0 && errno == ECHILD && kill(w->pid, 0) != 0)) {
      close(w->fd);
      w->pid = 0;
    }
  }
  int next = 0, fresh_fail = 0;
  char line[1024];
  while (next < n) {
    int fresh = 0;
    if (w->pid <= 0) {
      scree_status st = start(ctx, w);
      if (st) return st;
      info->workers++;
      fresh = 1;
    }
    if (send_request(w, op, var, b, seed, o, t, next, n)) {
      char how[128] = "";
      stop(w, 1, how, sizeof how);
      if (fresh || fresh_fail++)
        return scree__fail(ctx, SCREE_ERROR_INTERNAL,
                           "the tuning worker %s ended before it took a request (%s)", w->path,
                           how);
      continue; /* an old worker had gone: start a new one */
    }
    /* The worker builds the problems (CPU references included) first:
     * that wait counts against the bucket only. */
    int k = read_line(&w->r, line, sizeof line, bucket_end);
    if (k == 1 && !strncmp(line, "fail ", 5)) {
      int code = SCREE_ERROR_INTERNAL, off = 0;
      sscanf(line, "fail %d %n", &code, &off);
      return scree__fail(ctx, (scree_status)code, "tuning worker: %s", off ? line + off : line);
    }
    double flops, bytes;
    int off = 0;
    if (k != 1 || sscanf(line, "ready %lf %lf %n", &flops, &bytes, &off) != 2) {
      char how[128] = "";
      stop(w, 1, how, sizeof how);
      if (k == 0)
        return scree__fail(ctx, SCREE_ERROR_TIMEOUT,
                           "tune %s: the worker built no problem within the bucket's %.0f s", 
                           op->name, bucket_s);
      if (fresh || fresh_fail++)
        return scree__fail(ctx, SCREE_ERROR_INTERNAL,
                           "the tuning worker %s failed to start (%s); run `%s worker "
                           "--device %d` to see why", w->path, how, w->path, ctx->info.ordinal);
      continue;
    }
    info->flops = flops;
    info->bytes = bytes;
    snprintf(info->problem, sizeof info->problem, "%s", line + off);
    while (next < n) {
      const double now = scree__now();
      const double until = now + cand_s < bucket_end ? now + cand_s : bucket_end;
      if (o->progress) o->progress(o->user, next + 1, n, "time");
      k = read_line(&w->r, line, sizeof line, until);
      scree__trial *x = &t[next];
      int code = 0, rec = 0, fatal = 0;
      double med = 0, spr = 0;
      off = 0;
      if (k == 1 && sscanf(line, "res %d %lf %lf %d %d %n", &code, &med, &spr, &rec, &fatal,
                           &off) == 5 && off) {
        x->ran = 1;
        x->st = (scree_status)code;
        x->median = med;
        x->spread = spr;
        x->record = rec < 0 || rec > 2 ? 1 : rec;
        x->fatal = fatal;
        snprintf(x->why, sizeof x->why, "%s", line + off);
        if (!x->st && !(isfinite(med) && med > 0)) {
          x->st = SCREE_ERROR_INTERNAL;
          snprintf(x->why, sizeof x->why, "the worker reported a time of %g us", med);
          x->record = 0;
        }
        next++;
        if (fatal) {
          char how[128] = "";
          stop(w, 0, how, sizeof how);
          const size_t len = strlen(x->why);
          snprintf(x->why + len, sizeof x->why - len, " (the worker's CUDA context did not "
                   "survive it; worker restarted)");
          break;
        }
        continue;
      }
      if (k == 0 && scree__now() >= bucket_end && until == bucket_end) {
        /* The bucket's time is up: what was not reached stays untimed. */
        stop(w, 1, NULL, 0);
        scree__log(ctx, SCREE_LOG_WARN,
                   "tune %s: the bucket's limit of %.0f s passed with %d of %d candidates "
                   "left untimed", op->name, bucket_s, n - next, n);
        return SCREE_OK;
      }
      char how[128] = "";
      stop(w, 1, how, sizeof how);
      x->ran = 1;
      x->fatal = 1;
      x->record = 1;
      if (k == 0) {
        x->st = SCREE_ERROR_TIMEOUT;
        snprintf(x->why, sizeof x->why,
                 "hang: no answer within %.0f s (the worker was killed and restarted)", cand_s);
      } else {
        x->st = SCREE_ERROR_LAUNCH;
        snprintf(x->why, sizeof x->why, "the worker died running it: %s", how);
      }
      next++;
      break;
    }
  }
  return SCREE_OK;
}
