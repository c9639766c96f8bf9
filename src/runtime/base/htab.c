/* htab.c - one open-addressing hash table for fixed-size keys and values:
 * the module table, the plan table and the tuner's compiled candidates all
 * use it. Linear probing, power-of-two capacity, at most half full. The
 * module and plan tables are shared by threads: they are the table behind
 * a mutex (scree__ltab). */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

uint64_t scree__hash_bytes(const void *p, size_t n) {
  /* Eight bytes at a time: keys are small structs hashed on the hot path. */
  const unsigned char *b = p;
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, b + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  if (i < n) {
    uint64_t w = 0;
    memcpy(&w, b + i, n - i);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
  }
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 29;
  return h ? h : 1; /* 0 marks an empty slot */
}

/* A slot: the 8-byte hash, the key, the value, each 8-aligned. */
static size_t up8(size_t n) { return (n + 7) & ~(size_t)7; }

void scree__htab_init(scree__htab *t, size_t key_size, size_t val_size) {
  memset(t, 0, sizeof *t);
  t->key_size = key_size;
  t->val_size = val_size;
  t->slot_size = 8 + up8(key_size) + up8(val_size);
}

static unsigned char *slot(const scree__htab *t, size_t i) { return t->slots + i * t->slot_size; }
static uint64_t slot_hash(const unsigned char *s) {
  uint64_t h;
  memcpy(&h, s, 8);
  return h;
}

void *scree__htab_find(const scree__htab *t, const void *key) {
  if (!t->cap) return NULL;
  const uint64_t h = scree__hash_bytes(key, t->key_size);
  const size_t mask = t->cap - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    unsigned char *s = slot(t, i);
    const uint64_t sh = slot_hash(s);
    if (!sh) return NULL;
    if (sh == h && !memcmp(s + 8, key, t->key_size)) return s + 8 + up8(t->key_size);
  }
}

static int grow(scree__htab *t) {
  const size_t cap = t->cap ? t->cap * 2 : 64;
  unsigned char *ns = calloc(cap, t->slot_size);
  if (!ns) return -1;
  for (size_t i = 0; i < t->cap; i++) {
    const unsigned char *s = slot(t, i);
    const uint64_t h = slot_hash(s);
    if (!h) continue;
    size_t j = h & (cap - 1);
    while (slot_hash(ns + j * t->slot_size)) j = (j + 1) & (cap - 1);
    memcpy(ns + j * t->slot_size, s, t->slot_size);
  }
  free(t->slots);
  t->slots = ns;
  t->cap = cap;
  return 0;
}

void *scree__htab_insert(scree__htab *t, const void *key, const void *val) {
  void *have = scree__htab_find(t, key);
  if (have) return have;
  if ((t->len + 1) * 2 > t->cap && grow(t)) return NULL;
  const uint64_t h = scree__hash_bytes(key, t->key_size);
  size_t j = h & (t->cap - 1);
  while (slot_hash(slot(t, j))) j = (j + 1) & (t->cap - 1);
  unsigned char *s = slot(t, j);
  memcpy(s, &h, 8);
  memcpy(s + 8, key, t->key_size);
  memcpy(s + 8 + up8(t->key_size), val, t->val_size);
  t->len++;
  return s + 8 + up8(t->key_size);
}

int scree__htab_next(const scree__htab *t, size_t *pos, const void **key, void **val) {
  for (; *pos < t->cap; (*pos)++) {
    unsigned char *s = slot(t, *pos);
    if (!slot_hash(s)) continue;
    if (key) *key = s + 8;
    if (val) *val = s + 8 + up8(t->key_size);
    (*pos)++;
    return 1;
  }
  return 0;
}

void scree__htab_free(scree__htab *t) {
  free(t->slots);
  t->slots = NULL;
  t->cap = t->len = 0;
}

scree__ltab *scree__ltab_new(size_t key_size, size_t val_size) {
  scree__ltab *lt = calloc(1, sizeof *lt);
  if (!lt) return NULL;
  pthread_mutex_init(&lt->lock, NULL);
  scree__htab_init(&lt->t, key_size, val_size);
  return lt;
}

void scree__ltab_free(scree__ltab *lt) {
  if (!lt) return;
  scree__htab_free(&lt->t);
  pthread_mutex_destroy(&lt->lock);
  free(lt);
}

int scree__ltab_get(scree__ltab *lt, const void *key, void *val) {
  pthread_mutex_lock(&lt->lock);
  const void *have = scree__htab_find(&lt->t, key);
  if (have) memcpy(val, have, lt->t.val_size);
  pthread_mutex_unlock(&lt->lock);
  return have != NULL;
}

int scree__ltab_put(scree__ltab *lt, const void *key, const void *val, void *have) {
  pthread_mutex_lock(&lt->lock);
  const void *old = scree__htab_find(&lt->t, key);
  int r = 0;
  if (old && have)
    memcpy(have, old, lt->t.val_size);
  else if (!old)
    r = scree__htab_insert(&lt->t, key, val) ? 1 : -1;
  pthread_mutex_unlock(&lt->lock);
  return r;
}
