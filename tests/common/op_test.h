/* op_test.h - what the GPU tests of the ops (tests/runtime/ops/
 * test_<op>_gpu.c) share: their setup, the checks of a call's outputs, the
 * op's problems run through the harness, and the configs they sweep. Each
 * check fails the running Check test, with a message that names what it
 * checked; `fmt` and what follows it (printf) name the case. GPU tests run
 * unforked (scree_suite_def's nofork), in the context's thread. */
#ifndef SCREE_OP_TEST_H
#define SCREE_OP_TEST_H

#include "test_util.h"

/* The shared context (scree_test_gpu_context: exits 77 with a reason where
 * there is no GPU) made current on this thread for the whole run, since
 * the harness calls the driver directly; a non-blocking stream for the
 * harness's checked runs; and the op named. */
const scree__op *scree_test_op_setup(const char *name, scree_context **ctx, CUstream *stream);

/* A context of its own on the same GPU, with validation on (scree_options'
 * validate: device-side arguments are copied and checked before a launch)
 * and no cache; scree_destroy it. */
scree_context *scree_test_validating_context(void);

/* The context's count of calls that launched work (scree_get_counters): a
 * call with nothing to do must leave it as it was. */
uint64_t scree_test_calls(scree_context *ctx);

/* The n bytes at p, a guard region past a buffer, still hold the poison
 * (0xff) that scree_test_dpoison wrote. */
void scree_test_check_guard(scree_context *ctx, scree_devptr p, size_t n, const char *buffer);

/* rows rows of cols elements of `dtype`, stride elements apart: got within
 * rtol and atol of want, and the padding between cols and stride byte for
 * byte as in want (NaN == NaN there). `buffer` names the output. */
void scree_test_compare_rows(const void *got, const void *want, scree_dtype dtype, int64_t rows,
                             int64_t cols, int64_t stride, double rtol, double atol,
                             const char *buffer, const char *fmt, ...)
    __attribute__((format(printf, 10, 11)));

/* The op's check problem (edge cases) for var and the shape fields of args,
 * with its reference outputs; lens fixes a varlen op's sequence lengths
 * (NULL: the op's own). Free it with scree__run_free. */
void scree_test_make(scree_context *ctx, const scree__op *op, const scree__variant *var,
                     const void *args, const scree__lens *lens, scree__run *r);

/* r run once through runner(user) on stream, every output compared with
 * the reference (scree__run_check). */
void scree_test_check_run(scree_context *ctx, scree__run *r, scree__runner runner, void *user,
                          CUstream stream, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* scree_test_make, then one run through the op's public entry (the
 * default config, adapted to the call) checked, then the problem freed. */
void scree_test_check_public(scree_context *ctx, const scree__op *op, const scree__variant *var,
                             const void *args, const scree__lens *lens, CUstream stream,
                             const char *fmt, ...) __attribute__((format(printf, 7, 8)));

/* cfg compiled and loaded for var (scree__kernel_get), and r run once with
 * exactly that config and checked. */
void scree_test_check_config(scree_context *ctx, scree__run *r, const scree__op *op,
                             const scree__config *cfg, const scree__variant *var,
                             CUstream stream, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

/* Every config of op's space that passes the host check for var on this
 * GPU, compiled and loaded first on threads (scree__parallel_for); a
 * malloc'd array of *n configs. */
scree__config *scree_test_checked_space(scree_context *ctx, const scree__op *op,
                                        const scree__variant *var, size_t *n);

/* A config in its text form ("tpr=128,rows=1,..."), which must parse and
 * pass the host check for var on this GPU. */
scree__config scree_test_config(scree_context *ctx, const scree__op *op, const char *text,
                                const scree__variant *var);

/* The allow and default lines for op of this GPU's safelist, in file
 * order: the next after entry *e (start with *e = -1), with the variant it
 * names in var, or for a "*" line the op's example variant. NULL after the
 * last, and at once where the GPU has no safelist (printed). */
const scree__sl_entry *scree_test_next_safelisted(scree_context *ctx, const scree__op *op, int *e,
                                                  scree__variant *var);

/* Every config the GPU's safelist allows for op (as above), on the op's
 * check problem for each shape that shape(cfg, i, args) writes into a
 * zeroed args struct, for i = 0, 1, ... until it returns 0; the config
 * adapted to the shape's alignment as the tuner adapts a candidate (an odd
 * row length allows only scalar accesses). Returns the runs. */
int scree_test_check_safelisted(scree_context *ctx, const scree__op *op, CUstream stream,
                                int (*shape)(const scree__config *cfg, int i, void *args));

/* ---- the packed-sequence ops (the ragged softmax and its backward) -------- */

/* Batches of sequence lengths their GPU tests share: the edge lengths 0, 1
 * and just off the token tiles, groups and stages (up to 257), with a long
 * one (1000) past every register cache and small stage; a few short ones,
 * for the widest rows; a long one (5000) past every default stage (the
 * rest streamed) and two short ones; one token. */
extern const int64_t scree_test_lens_edge[21], scree_test_lens_small[5], scree_test_lens_long[3],
    scree_test_lens_one[1];
/* A batch as a (lengths, count) argument pair. */
#define SCREE_TEST_LENS(a) (a), (int)(sizeof(a) / sizeof((a)[0]))
#define SCREE_TEST_EDGE SCREE_TEST_LENS(scree_test_lens_edge)
#define SCREE_TEST_SMALL SCREE_TEST_LENS(scree_test_lens_small)
#define SCREE_TEST_LONG SCREE_TEST_LENS(scree_test_lens_long)
#define SCREE_TEST_ONE SCREE_TEST_LENS(scree_test_lens_one)

/* n random lengths in [0, 6), malloc'd (free it): many sequences, most of
 * them empty or short. */
int64_t *scree_test_short_lens(int n);

/* The cu_seqlens of the n lengths lens: n + 1 offsets from 0, malloc'd
 * (free it); the longest length in *maxlen. */
int32_t *scree_test_cu_seqlens(const int64_t *lens, int n, int64_t *maxlen);

/* A harness runner (scree__runner) for one config of op, adapted to each
 * call (the implementation's adapt) as the tuner adapts a candidate, then
 * run exactly (scree__run_exact loads its kernel); user is a
 * scree__config_runner (tuner/harness.h) whose k is not used. */
scree_status scree_test_run_adapted(void *user, scree_context *ctx, const void *args,
                                    CUstream stream);

#endif
