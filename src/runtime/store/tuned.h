/*
 * tuned.h - shipped tuned configs as reviewable text (caches/<device>.txt):
 * one winner per line, without its cubin: the cache stack's lowest level,
 * below every SQLite cache (store/cache.h). Not API. docs/cache.md
 * ("Shipped tuned configs") has the format:
 *
 *   # comment
 *   op bucket dtype causal arch device config median_us src_hash
 *
 * Fields are separated by blanks; the device model is written with each
 * blank as '_' ("NVIDIA_H100_80GB_HBM3"). Every line is checked as a cache
 * row that leaves its file is (scree__centry_check): a registered op, the
 * canonical variant, bucket and config, a config that passes the op's
 * check on the arch, a finite positive time, a 64-digit source hash. A
 * line whose source hash is not this build's is kept (verify reports it)
 * but never matches a lookup, whose key holds the current hash.
 */
#ifndef SCREE_TUNED_H
#define SCREE_TUNED_H

#include <stdio.h>

#include "store/cache.h"

typedef struct scree__tentry {
  scree__ckey key;
  char device[128]; /* as written: blanks as '_' */
  char config[128];
  double median_us;
  int line;         /* in its file */
  int file;         /* index into scree__tuned.files */
} scree__tentry;

typedef struct scree__tuned {
  int n;
  scree__tentry *e;   /* in file order; malloc'd */
  int nfiles;
  char (*files)[256]; /* the names they came from ("embedded:h100-sxm.txt") */
} scree__tuned;

/* Parses one file's text and appends its entries to *t. On the first bad
 * line returns SCREE_ERROR_PARSE (SCREE_ERROR_OUT_OF_MEMORY) with
 * "name:line: reason" in why and leaves *t as it was. */
scree_status scree__tuned_parse(const char *text, const char *name, scree__tuned *t,
                                char *why, size_t why_size);
/* The shipped configs: the embedded caches/ files, or, when
 * $SCREE_TUNED_CONFIGS is set, the colon-separated files it names instead
 * ("none" or "": no shipped configs). A file that cannot be read or does
 * not parse is left out and described in warn (one line each, appended);
 * the others load. Returns SCREE_OK or SCREE_ERROR_OUT_OF_MEMORY. */
scree_status scree__tuned_load(scree__tuned *t, char *warn, size_t warn_size);
void scree__tuned_free(scree__tuned *t);
/* The entry for key k: the first whose device model is `device` (a device
 * name, blanks and '_' alike; may be NULL), else the first of any device.
 * NULL if none. Linear in the number of entries: a plan is built once. */
const scree__tentry *scree__tuned_find(const scree__tuned *t, const scree__ckey *k,
                                       const char *device);
/* Writes e as one line (the device name's blanks as '_', other bytes that
 * do not belong in a field as '?'). 0, or -1 on a write error. */
int scree__tuned_write(FILE *f, const scree__centry *e);

#endif
