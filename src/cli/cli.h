/* cli.h - what the scree-tune command files share. The CLI reaches the
 * library through scree.h and the administration interface (api/admin.h)
 * only. */
#ifndef SCREE_CLI_H
#define SCREE_CLI_H

#include <getopt.h>
#include <stdio.h>

#include "api/admin.h"
#include "scree.h"

/* Exit codes (docs/cli.md). */
enum {
  CLI_OK = 0,        /* success */
  CLI_FAIL = 1,      /* the command ran and something failed (a wrong answer, a tune with no winner) */
  CLI_USAGE = 2,     /* bad command line */
  CLI_NO_GPU = 3,    /* the command needs a GPU (or NVRTC) and there is none */
  CLI_CACHE = 4,     /* a cache file could not be opened, read or written */
  CLI_DISAGREE = 5   /* verify --agree: the caches hold different winners for a key */
};

/* ---- command lines ------------------------------------------------------------
 * Every command parses its options with getopt_long (cli_next): `--opt
 * value` and `--opt=value` alike, options and arguments in any order, an
 * unambiguous prefix of a long option for the option. A command takes
 * only the options its table lists; any other is a usage error, never
 * ignored. */

/* Option ids past the characters of short options. */
enum {
  OPT_CACHE = 256, OPT_ARCH, OPT_OP, OPT_JSON, OPT_BUCKET, OPT_DTYPE, OPT_MISSES, OPT_BAD,
  OPT_TEXT, OPT_NO_STRICT, OPT_ALL, OPT_RETIME, OPT_SHIPPED, OPT_DEVICE, OPT_DEVICES,
  OPT_ROWS, OPT_COLS, OPT_ROWS_MAX, OPT_SHAPE, OPT_SHAPES, OPT_VARIANT, OPT_MODEL, OPT_HF_CONFIG,
  OPT_PRESETS, OPT_FROM_MISSES, OPT_FROM_SHIPPED, OPT_SHARD, OPT_SHARD_COUNT, OPT_DRY_RUN,
  OPT_EXPLORE, OPT_FORCE, OPT_REPS, OPT_AGREE
};

/* The options many commands take. */
#define CLI_OPT_CACHE {"cache", required_argument, NULL, OPT_CACHE}
#define CLI_OPT_ARCH {"arch", required_argument, NULL, OPT_ARCH}
#define CLI_OPT_OP {"op", required_argument, NULL, OPT_OP}
#define CLI_OPT_QUIET {"quiet", no_argument, NULL, 'q'}
#define CLI_OPT_JSON {"json", no_argument, NULL, OPT_JSON}
#define CLI_OPT_END {NULL, 0, NULL, 0}

/* What cli_next returns for a bad option, after saying why on stderr. */
#define CLI_BAD_OPTION (-2)

typedef struct cli_args {
  const char *cmd;            /* "list", for messages */
  int argc;
  char **argv;                /* argv[0] is the command */
  const struct option *opts;  /* ends with CLI_OPT_END */
  const char *shortopts;      /* "q", "qo:" */
  int npos;                   /* the arguments met so far */
  char **pos;                 /* room for argc of them (merge takes any number) */
} cli_args;

/* Starts parsing a command's arguments. */
void cli_args_init(cli_args *a, const char *cmd, int argc, char **argv,
                   const struct option *opts, const char *shortopts);
/* The next option's id (its `val`) with its value in *val, -1 when the
 * options are done (the arguments left are cli_positional's), or
 * CLI_BAD_OPTION after naming the problem on stderr: an option this
 * command does not take, an ambiguous prefix, a missing or empty value
 * (an empty filter would match every row). */
int cli_next(cli_args *a, const char **val);
/* The arguments that are not options, in order (those after `--`
included); *n of them. */
char **cli_positional(cli_args *a, int *n);

/* Options every cache command shares. */
typedef struct cli_common {
  const char *cache;  /* --cache PATH: the user cache (default: scree's default path) */
  int quiet;          /* --quiet: no progress, only results and errors */
  int json;           /* --json: machine-readable output */
  const char *arch;   /* --arch sm_90: filter */
  const char *op;     /* --op rmsnorm: filter */
} cli_common;

/* Takes one of the common options (id and value from cli_next) into c:
 * 1 if it was one, 0 if not. */
int cli_common_opt(cli_common *c, int id, const char *val);
/* The filter of c's --arch and --op. */
scree__admin_filter cli_filter(const cli_common *c);
/* Says that a command takes no (or no more) arguments: CLI_USAGE. */
int cli_unexpected(const char *cmd, const char *arg);
/* Parses --dtype's list ("bf16,fp16"): at most cap, each once. CLI_OK,
 * or CLI_USAGE naming the dtype that is not one. */
int cli_parse_dtypes(const char *cmd, const char *s, scree_dtype *out, int cap, int *n);
/* A non-negative integer option value in [lo, hi]: CLI_OK or CLI_USAGE
 * naming the option. */
int cli_parse_int(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out);

/* Opens the user cache (--cache or the default path). readonly = 1 for
 * commands that only read: a missing or empty file is then not created or
 * changed, *out is NULL and the result CLI_OK (nothing cached yet, said on
 * stderr unless --quiet or --json); readonly = CLI_CACHE_NEEDED the same
 * for commands that fail without a cache, said on stderr always. A file
 * that cannot be reached is CLI_CACHE, a --cache path too long for the
 * system CLI_USAGE. */
#define CLI_CACHE_NEEDED 2
/* 1, after saying so on stderr, when path is the file that SCREE_PIN names
 * (the same file, however reached): a pinned cache is never written. */
int cli_refuse_pinned(const char *cmd, const char *path);
int cli_open_user_cache(const cli_common *c, scree__admin_cache **out, const char *cmd,
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
int cli_cache_failed(scree__admin_cache *cache, scree_status st, const char *cmd);
/* Says on stderr how many rows of cache failed their checks and were
 * skipped (none: says nothing); returns that number. */
int cli_report_refused(scree__admin_cache *cache, const char *cmd);

/* A progress bar with ETA on stderr when it is a terminal and not --quiet. */
typedef struct cli_progress {
  int enabled;
  double start;
  const char *label;
} cli_progress;
void cli_progress_init(cli_progress *p, int quiet, const char *label);
void cli_progress_update(void *p, int done, int total, const char *stage);
void cli_progress_done(cli_progress *p);

/* Starts the JSON document a command prints ("{"), so that main knows
 * one was printed: a command given --json that fails before printing
 * one gets {"error": ...} from main instead (docs/cli.md). */
void cli_json_open(void);

/* Prints a string as a JSON string literal, valid and safe to show
 * (scree__admin_json_string). */
void cli_json_str(FILE *f, const char *s);
/* Prints a number with printf format fmt, or null when it is not finite:
 * JSON has no inf or nan. */
void cli_json_num(FILE *f, const char *fmt, double v);
/* A CUDA version (major*1000 + minor*10) as "13.0", or null when 0. */
void cli_json_version(FILE *f, int v);
/* The first fields of a key in a JSON row, `"op": ..., "bucket": ...,
 * "dtype": ...`, which the row goes on with (", ..."). */
void cli_json_key_start(const scree__admin_key *k);
/* The fields that name a bucket, as cli_json_key_start writes them:
 * `"op": ..., "bucket": ..., "<vname>": ...` (vname "dtype" for a cache
 * key, "variant" for a task to tune), strings escaped. */
void cli_json_bucket_fields(const char *op, const char *bucket, const char *vname,
                            const char *variant);
/* Text from a cache (buckets, device names, reasons) made safe for a
 * terminal (scree__admin_escape). The result lives in one of 8 static
 * buffers, reused in turn: use it before the 9th call. */
const char *cli_esc(const char *s);
double cli_now(void);
/* The start of the JSON reports of info, doctor and demo: `{"scree_version":
 * "<version>"`, which the caller goes on with (", ..."). */
void cli_json_begin(void);
/* What info and doctor say of the CUDA driver: `, "driver": {"loaded": ...,
 * "version": ..., "error": ...}` with json, else the line "CUDA driver:
 * 13.0" (or "not available (<why>)"). */
void cli_report_driver(const scree_runtime_info *ri, int json);
/* The text line of info and doctor on the GPUs: "GPUs: 2", or "GPUs: none
 * (<why>)". */
void cli_report_gpu_count(const scree_runtime_info *ri);
/* "312.5 TFLOP/s" when flops > 0, else "2950 GB/s". */
void cli_rate(char *buf, size_t size, double flops, double bytes, double us);

/* A table on stdout whose columns are as wide as their widest cell:
 * rows are kept until cli_table_print. Cells are copied. */
typedef struct cli_table {
  int ncols, nrows, cap;
  const char *const *heads;
  const char *align; /* per column: 'l' or 'r' */
  char **cells;      /* nrows * ncols, malloc'd */
} cli_table;
void cli_table_init(cli_table *t, int ncols, const char *const *heads, const char *align);
/* Adds a row of ncols cells (NULL for an empty one). 0, or -1 when out of
 * memory. */
int cli_table_add(cli_table *t, const char *const *cells);
/* Prints the heading and the rows (nothing when there are none), then
 * frees the rows. */
void cli_table_print(cli_table *t, FILE *f);

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
 * verify --shipped, prewarm --from-shipped. Each returns an exit code.
 * cli_shipped_summary prints verify's closing line on them. */
int cli_export_text(const cli_common *c, const char *out);
int cli_verify_shipped(const cli_common *c);
int cli_shipped_summary(const cli_common *c);
int cli_prewarm_from_shipped(const cli_common *c, int force);
/* verify --agree FILE... (cli_agree.c): every file read-only; CLI_OK when
 * all hold the same winner for every key, CLI_DISAGREE when not. */
int cli_verify_agree(const cli_common *c, char **files, int nfiles);

int cmd_prewarm(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_show(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_clear(int argc, char **argv);
int cmd_safelist(int argc, char **argv);
int cmd_doctor(int argc, char **argv);

extern const char *const usage_prewarm, *const usage_verify, *const usage_list,
    *const usage_show, *const usage_export, *const usage_merge, *const usage_import,
    *const usage_clear, *const usage_safelist, *const usage_doctor;

#endif
