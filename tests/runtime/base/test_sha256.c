/* test_sha256.c - SHA-256 against the FIPS 180-4 vectors (src/runtime/base/sha256.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* ------------------------------------------------------------------------ */
/* SHA-256                                                                   */
/* ------------------------------------------------------------------------ */

static void check_sha(const void *p, size_t n, const char *want) {
  char hex[66];
  memset(hex, 'Z', sizeof hex);
  scree__sha256_hex(p, n, hex);
  ck_assert_int_eq(hex[64], 0);
  ck_assert_str_eq(hex, want);
  uint8_t d[32];
  scree__sha256(p, n, d);
  char again[65];
  for (int i = 0; i < 32; i++) snprintf(again + 2 * i, 3, "%02x", d[i]);
  ck_assert_str_eq(again, want);
}

START_TEST(sha256_vectors) {
  check_sha("", 0,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  check_sha(NULL, 0,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  check_sha("abc", 3,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  check_sha(m448, strlen(m448),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const char *m896 =
      "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmno"
      "pjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
  check_sha(m896, strlen(m896),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  char *million = malloc(1000000);
  ck_assert_ptr_nonnull(million);
  memset(million, 'a', 1000000);
  check_sha(million, 1000000,
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  /* Padding edges: the length field fits, just fits, or spills. */
  static const struct {
    size_t n;
    const char *hex;
  } edges[] = {
      {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
      {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
      {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
      {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
      {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
      {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
      {128, "6836cf13bac400e9105071cd6af47084dfacad4e5e302c94bfed24e013afb73e"},
  };
  for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
    check_sha(million, edges[i].n, edges[i].hex);
  /* All byte values (high bits set). */
  uint8_t all[768];
  for (int i = 0; i < 768; i++) all[i] = (uint8_t)i;
  check_sha(all, sizeof all,
            "f3a25aa93aa2fbba28d79260535bbd6a5eb0fc1c24a8b0f04e12b484c1dfe363");
  free(million);
}
END_TEST

SCREE_TEST_MAIN(.name = "sha256", .tests = SCREE_TESTS(sha256_vectors))
