/* cli.h - what the scree-tune command files share. */
#ifndef SCREE_CLI_H
#define SCREE_CLI_H

#include <stdio.h>

#include "api/admin.h"
#include "scree.h"

/* Exit codes (docs/cli.md). */
enum {
  CLI_OK = 0,        /* success */
  CLI_FAIL = 1,      /* the command ran and something failed (a wrong answer, a tune with no winner) */
  CLI_USAGE = 2,     /* bad command line */
  CLI_NO_GPU = 3,    /* the command needs a GPU (or NVRTC) and there is none */
  CLI_CACHE = 4      /* a cache file could not be opened, read or written */
};

/* Options every command accepts. */
typedef struct cli_common {
  const char *cache;  /* --cache PATH: the user cache (default: scree's default path) */
  int quiet;          /* --quiet: no progress, only results and errors */
  int json;           /* --json: machine-readable output */
  const char *arch;   /* --arch sm_90: filter */
  const char *op;     /* --op rmsnorm: filter */
} cli_common;

/* Consumes a common option at argv[*i]; 1 if it was one, 0 if not, -1 on
 * a missing value (message printed). */
int cli_common_opt(cli_common *c, int argc, char **argv, int *i, const char *cmd);
/* The value of option `name` at argv[*i] (advancing *i), or NULL. */
const char *cli_value(int argc, char **argv, int *i, const char *name, const char *cmd);
int cli_unknown(const char *cmd, const char *arg);

/* Opens the user cache (--cache or the default path). readonly = 1 for
 * commands that only read: a missing or empty file is then not created or
 * changed, *out is NULL and the result CLI_OK (nothing cached yet, said on
 * stderr unless --quiet or --json); a file that cannot be reached is
 * CLI_CACHE, a --cache path too long for the system CLI_USAGE. */
int cli_open_user_cache(const cli_common *c, scree__cache **out, const char *cmd,
                        int readonly);

/* Writes len bytes of data to path. A regular file (or a new one; through
 * a symlink, the file it names) is replaced atomically: the bytes go to a
 * temporary file in the same directory, are flushed to disk, and only then
 * renamed over it, keeping its mode, so a failed write (a full file
 * system) leaves it as it was. Anything else (a device such as /dev/full,
 * a pipe) is written in place. Every write, sync and close is checked.
 * 0, or -1 with "<path>: <reason>" in why. */
int cli_write_file(const char *path, const char *data, size_t len, char *why, size_t why_size);
/* Says on stderr why the last call on cache failed (st, its status) and
 * returns CLI_CACHE; CLI_OK when st is SCREE_OK. */
int cli_cache_failed(scree__cache *cache, scree_status st, const char *cmd);
/* Says on stderr how many rows of cache failed their checks and were
 * skipped (none: says nothing); returns that number. */
int cli_report_refused(scree__cache *cache, const char *cmd);

/* A progress bar with ETA on stderr when it is a terminal and not --quiet. */
typedef struct cli_progress {
  int enabled;
  double start;
  const char *label;
} cli_progress;
void cli_progress_init(cli_progress *p, int quiet, const char *label);
void cli_progress_update(void *p, int done, int total, const char *stage);
void cli_progress_done(cli_progress *p);

/* Prints a string as a JSON string literal: quotes, backslashes, controls
 * and the characters scree__unsafe_char names as \uXXXX escapes, bytes that
 * are not well-formed UTF-8 as \ufffd, so that the output is valid JSON and
 * safe to show. */
void cli_json_str(FILE *f, const char *s);
/* Prints a number with printf format fmt, or null when it is not finite:
 * JSON has no inf or nan. */
void cli_json_num(FILE *f, const char *fmt, double v);
/* Text from a cache (buckets, device names, reasons) made safe for a
 * terminal (scree__escape_text). The result lives in one of 8 static
 * buffers, reused in turn: use it before the 9th call. */
const char *cli_esc(const char *s);
double cli_now(void);
/* "312.5 TFLOP/s" when flops > 0, else "2950 GB/s". */
void cli_rate(char *buf, size_t size, double flops, double bytes, double us);
int cli_parse_dtype(const char *s, scree_dtype *out);

/* Shards of a prewarm (cli_shard.c, docs/cluster.md). */
#define CLI_MAX_SHARDS 65536
/* The most GPUs one prewarm --devices uses. */
#define CLI_MAX_DEVICES 64
typedef struct cli_shard {
  int on;          /* 0: the whole list */
  int k, n;        /* this task's shard k of n, 0 <= k < n */
  char source[64]; /* where k/n came from, for messages */
} cli_shard;
/* Parses --shard's value: "K/N", or "auto" (SLURM_ARRAY_TASK_ID less
 * SLURM_ARRAY_TASK_MIN, over SLURM_ARRAY_TASK_STEP, of
 * SLURM_ARRAY_TASK_COUNT; else JOB_COMPLETION_INDEX of count_opt or
 * $SCREE_SHARD_COUNT). CLI_OK, or CLI_USAGE with the reason on stderr. */
int cli_shard_parse(const char *spec, const char *count_opt, cli_shard *out);
/* Marks keep[i] for the ids (distinct strings, one per bucket) of shard
 * s: the ids ranked by their text and dealt round-robin, so that the N
 * shards of one list are disjoint, together the whole list, within one
 * bucket of each other in size, and the same whatever order the list was
 * built in. Returns how many are kept, -1 when out of memory. */
int cli_shard_select(const char *const *ids, int n, const cli_shard *s, unsigned char *keep);

/* The shipped tuned configs (cli_shipped.c): export --text OUT (or "-"),
 * verify --shipped (list = 1: a line per entry, else the summary only),
 * prewarm --from-shipped. Each returns an exit code. */
int cli_export_text(const cli_common *c, const char *out);
int cli_shipped_report(const cli_common *c, int list);
int cli_prewarm_from_shipped(const cli_common *c, int force);

int cmd_prewarm(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_show(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_clear(int argc, char **argv);
int cmd_safelist(int argc, char **argv);

extern const char *const usage_prewarm, *const usage_verify, *const usage_list,
    *const usage_show, *const usage_export, *const usage_merge,
    *const usage_import, *const usage_clear, *const usage_safelist;

#endif
