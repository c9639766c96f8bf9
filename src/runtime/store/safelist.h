/*
 * safelist.h - the per-architecture safelist (safe_configs/<arch>.txt): which
 * configs of each op are known to compile and compute correctly on an
 * architecture (allow), which are known bad and why (deny), and optionally
 * the architecture's default config. The format is in docs/safelist.md.
 * Not API.
 *
 * The files are embedded into the library at build time
 * (generated/scree_safelists.c); $SCREE_SAFELIST_DIR replaces the embedded
 * set with the files of a directory (development, overrides).
 */
#ifndef SCREE_SAFELIST_H
#define SCREE_SAFELIST_H

#include <stdio.h>

#include "ops/op.h"

typedef enum scree__sl_verb {
  SCREE__SL_ALLOW = 1,
  SCREE__SL_DENY = 2,
  SCREE__SL_DEFAULT = 3
} scree__sl_verb;

/* One entry line. */
typedef struct scree__sl_entry {
  const scree__op *op;
  scree__sl_verb verb;
  scree__config cfg;  /* fields past the implementation's are 0 */
  char dtype[64];     /* "*" or a canonical variant string */
  char reason[256];   /* the text after "--", trimmed; "" if none */
  int line;           /* 1-based line in the source */
} scree__sl_entry;

typedef struct scree__safelist {
  char arch[16];      /* the file's `arch` header: "sm_80" */
  char source[256];   /* the file path, or "embedded:sm_80.txt" */
  scree__sl_entry *entries; /* in file order; malloc'd */
  int n;
} scree__safelist;

/* "allow", "deny", "default", or "?" . */
const char *scree__sl_verb_name(scree__sl_verb verb);

/* Parses `text` (NUL-terminated). `name` is used in messages and, if its
 * last path component ends in ".txt", must name the header's arch
 * ("sm_90.txt" needs "arch sm_90"). On failure returns SCREE_ERROR_PARSE
 * (or SCREE_ERROR_OUT_OF_MEMORY), leaves *out empty, and writes
 * "name:line: message" to `why` (may be NULL). */
scree_status scree__safelist_parse(const char *text, const char *name,
                                   scree__safelist *out, char *why,
                                   size_t why_size);

/* Reads and parses a file; messages name `path`. SCREE_ERROR_IO if it cannot
 * be read. */
scree_status scree__safelist_load_file(const char *path, scree__safelist *out,
                                       char *why, size_t why_size);

/* The safelist for `arch` ("sm_86", "sm_90a"). The set of files is the
 * directory $SCREE_SAFELIST_DIR if that is set and not empty, else the copies
 * embedded at build time. Tries, in order, and takes the first that exists:
 *   1. <arch>.txt                          sm_90a.txt
 *   2. without the feature suffix          sm_90.txt (for sm_90a)
 *   3. the nearest lower arch of the same major version, no suffix
 *                                          sm_86 -> sm_85 ... sm_80
 *   4. sm_80.txt, for archs sm_80 and above (the portable baseline)
 * out->arch is the arch of the file taken, so callers can see a fallback.
 * SCREE_ERROR_NOT_FOUND if none exists (any arch below sm_80 without its own
 * file), SCREE_ERROR_INVALID_ARGUMENT if `arch` is not "sm_<digits>[a-z]",
 * SCREE_ERROR_PARSE or SCREE_ERROR_IO if the file taken is bad.
 * Parses afresh each call; reads the environment. */
scree_status scree__safelist_for_arch(const char *arch, scree__safelist *out,
                                      char *why, size_t why_size);

/* Frees the entries and empties *s. NULL and empty lists are fine. */
void scree__safelist_free(scree__safelist *s);

/* Queries. `variant_str` is the call's variant string as scree__variant_str
 * renders it; NULL matches only lines whose selector is "*". Only the first
 * op->nfields values of `cfg` are compared. */

/* 1 if an allow line matches (selector "*" or equal to variant_str) and no
 * deny line matches, else 0. */
int scree__safelist_allows(const scree__safelist *s, const scree__op *op,
                           const char *variant_str, const scree__config *cfg);
/* The deny line that matches (a dtype-specific one before "*"), or NULL. */
const scree__sl_entry *scree__safelist_denied(const scree__safelist *s,
                                              const scree__op *op,
                                              const char *variant_str,
                                              const scree__config *cfg);
/* The allowed configs for op + variant in file order (the tuner's candidate
 * list and its fixed tie-break order), each once, denied ones left out.
 * Returns how many there are; fills up to `cap` of them (out may be NULL
 * when cap is 0). */
int scree__safelist_candidates(const scree__safelist *s, const scree__op *op,
                               const char *variant_str, scree__config *out,
                               int cap);
/* The default line for op + variant: a dtype-specific line beats "*"; a
 * default denied for this variant (a "*" default next to a dtype-specific
 * deny) does not count. Returns 1 and fills *out if there is one, else 0
 * (then the op's built-in default_config applies). */
int scree__safelist_default(const scree__safelist *s, const scree__op *op,
                            const char *variant_str, scree__config *out);

/* Writes `s` in the file format: `comment` (may be NULL or multi-line) as
 * "# " lines, the arch header, then the entries grouped by op in registry
 * order, file order within an op. What it writes parses back to the same
 * entries (line numbers aside); newlines in reasons become spaces and the
 * other characters scree__escape_text escapes are written as \xNN (an
 * escaped reason may then outgrow the parser's limit: callers that build
 * reasons from untrusted text escape them first). Returns 0, or -1 if f
 * reports a write error (ferror). Used by `scree-tune safelist export`. */
int scree__safelist_write(FILE *f, const scree__safelist *s,
                          const char *comment);

#endif
