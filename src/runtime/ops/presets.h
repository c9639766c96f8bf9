/*
 * presets.h - model presets (presets/models.txt): the call shapes of a
 * model's layers, op by op, for `scree-tune prewarm --model NAME`. The
 * files are data, embedded at build time, extended by the user's own
 * (--presets FILE, $SCREE_PRESETS). The format is in docs/cli.md ("Model
 * presets"). Not API.
 *
 * A file is a list of lines:
 *
 *   let T = 1..16384                 a variable: every power of two in range
 *   let L = 1024,4096,8192           or a list of values (at most 64)
 *   model llama-3-8b -- text         a preset starts; `let`s before the first
 *                                    model are every model's
 *   rmsnorm rows={T},cols=4096       an op and a shape in its shape fields
 *   attention batch={B/L},... variant=dtype={dtype},head_dim=128,... dtypes=fp16,bf16
 *
 * {EXPR} is an integer expression of variables and numbers (+ - * /, and
 * parentheses; / rounds up, so a share is never 0 tokens); a line is
 * expanded over every value of each variable it names. {dtype} is the
 * dtype being expanded (--dtype). `variant=` gives the variant in the op's
 * canonical form (default: every dtype field at the dtype, the rest from
 * the shape or the op's example); `dtypes=` limits the dtypes a line is
 * expanded for. `#` starts a comment.
 */
#ifndef SCREE_PRESETS_H
#define SCREE_PRESETS_H

#include "ops/op.h"

#define SCREE__PRESET_MAX_VALUES 64 /* values of one variable */
#define SCREE__PRESET_MAX_VARS 16   /* variables of one preset */
#define SCREE__PRESET_MAX_LINES 256 /* op lines of one preset */
/* Call shapes of one op line in one dtype: the values of the variables it
 * names, multiplied. */
#define SCREE__PRESET_MAX_SHAPES 65536

typedef struct scree__preset_var {
  char name[32];
  int n;
  int64_t v[SCREE__PRESET_MAX_VALUES];
} scree__preset_var;

typedef struct scree__preset_line {
  const scree__op *op;
  char shape[256];   /* the template */
  char variant[128]; /* the template, or "" */
  unsigned dtypes;   /* bit (1 << dtype) of each dtype it is for; 0: every dtype */
  int line;          /* in its file */
} scree__preset_line;

typedef struct scree__preset {
  char name[64];
  char about[256];   /* the text after "--", or "" */
  char source[256];  /* the file it came from ("embedded:models.txt") */
  int line;          /* of its `model` line */
  int nvars;
  scree__preset_var vars[SCREE__PRESET_MAX_VARS];
  int nlines;
  scree__preset_line *lines; /* malloc'd */
} scree__preset;

typedef struct scree__presets {
  int n;
  scree__preset *p; /* malloc'd, in file order */
} scree__presets;

/* Parses one file's text and appends its presets to *out (a preset named
 * like an earlier one replaces it: users override the shipped ones).
 * `name` is used in messages. Every line of every preset is checked:
 * the op is registered, each variable is defined, each expression
 * evaluates, and every expansion parses as the op's shape (and variant).
 * On failure returns SCREE_ERROR_PARSE (or SCREE_ERROR_OUT_OF_MEMORY),
 * leaves *out as it was, and writes "name:line: message" to why. */
scree_status scree__presets_parse(const char *text, const char *name, scree__presets *out,
                                  char *why, size_t why_size);
/* The presets scree knows: the embedded presets/ files, then each file of
 * the colon-separated $SCREE_PRESETS, then `file` (may be NULL).
 * SCREE_ERROR_IO if a file cannot be read, else as parse. */
scree_status scree__presets_load(const char *file, scree__presets *out, char *why,
                                 size_t why_size);
void scree__presets_free(scree__presets *ps);
const scree__preset *scree__preset_find(const scree__presets *ps, const char *name);

/* Calls fn for each call shape of preset p in dtype dt, line by line in
 * file order: the op, the shape text and the variant text (NULL when the
 * line gives none). fn returning nonzero stops and is returned. */
int scree__preset_expand(const scree__preset *p, scree_dtype dt,
                         int (*fn)(void *user, const scree__preset_line *l, const char *shape,
                                   const char *variant),
                         void *user);

/* The preset of a HuggingFace config.json at path (hf_config.c): one
 * preset named "hf-config" in *out (free it with scree__presets_free), the
 * op lines of llama-3-8b's preset with the config's sizes. SCREE_ERROR_IO
 * when the file cannot be read; SCREE_ERROR_PARSE when it is not JSON
 * ("PATH: line L, column C: ..."), lacks a required field, gives a field
 * of the wrong type or a size that does not fit, or names a model_type
 * that is not read (the message names the field). */
scree_status scree__hf_config_preset(const char *path, scree__presets *out, char *why,
                                     size_t why_size);

#endif
