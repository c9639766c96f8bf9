/* sha256.h - SHA-256 (FIPS 180-4). Not API. */
#ifndef SCREE_SHA256_H
#define SCREE_SHA256_H

#include <stddef.h>
#include <stdint.h>

/* The SHA-256 digest of n bytes at data (data may be NULL when n is 0).
 * Pure functions of their input: thread-safe. */
void scree__sha256(const void *data, size_t n, uint8_t out[32]);
/* The same digest as 64 lowercase hex digits and a NUL. */
void scree__sha256_hex(const void *data, size_t n, char out[65]);

#endif
