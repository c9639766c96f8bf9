/* test_text.c - UTF-8 reading and the escaping of text that came from a
 * file (src/runtime/base/util.c). */
#include <string.h>

#include "test_util.h"

START_TEST(utf8_chars) {
  unsigned cp = 0;
  ck_assert_int_eq(scree__utf8_char("A", 1, &cp), 1);
  ck_assert_uint_eq(cp, 'A');
  ck_assert_int_eq(scree__utf8_char("\xc2\xb5", 2, &cp), 2); /* µ */
  ck_assert_uint_eq(cp, 0xb5);
  ck_assert_int_eq(scree__utf8_char("\xe2\x82\xac", 3, &cp), 3); /* € */
  ck_assert_uint_eq(cp, 0x20ac);
  ck_assert_int_eq(scree__utf8_char("\xf0\x9f\x98\x80", 4, &cp), 4);
  ck_assert_uint_eq(cp, 0x1f600);
  /* Not UTF-8: stray continuation, truncated, overlong, surrogate, too big. */
  ck_assert_int_eq(scree__utf8_char("\x9b", 1, &cp), 0);
  ck_assert_int_eq(scree__utf8_char("\xe2\x82", 2, &cp), 0);
  ck_assert_int_eq(scree__utf8_char("\xe2\x82\xac", 2, &cp), 0);
  ck_assert_int_eq(scree__utf8_char("\xc0\xaf", 2, &cp), 0);
  ck_assert_int_eq(scree__utf8_char("\xe0\x80\xaf", 3, &cp), 0);
  ck_assert_int_eq(scree__utf8_char("\xed\xa0\x80", 3, &cp), 0);
  ck_assert_int_eq(scree__utf8_char("\xf4\x90\x80\x80", 4, &cp), 0);
  ck_assert_int_eq(scree__utf8_char("", 0, &cp), 0);
}
END_TEST

START_TEST(unsafe_chars) {
  static const unsigned bad[] = {0, 7, 10, 13, 0x1b, 0x7f, 0x80, 0x9b, 0x9d, 0x2028, 0x202e,
                                 0x2066};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    ck_assert_msg(scree__unsafe_char(bad[i]), "U+%04X", bad[i]);
  static const unsigned good[] = {' ', 'a', '~', 0xa0, 0xb5, 0x20ac, 0x1f600};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
    ck_assert_msg(!scree__unsafe_char(good[i]), "U+%04X", good[i]);
}
END_TEST

START_TEST(escape_text) {
  char buf[128];
  ck_assert_str_eq(scree__escape_text(buf, sizeof buf, "NVIDIA H100 80GB HBM3"),
                   "NVIDIA H100 80GB HBM3");
  /* ANSI colour, OSC title, a newline, a bell, a raw C1 CSI byte. */
  ck_assert_str_eq(scree__escape_text(buf, sizeof buf, "a\x1b[31mb\x1b]0;t\x07\nc\x9b"),
                   "a\\x1b[31mb\\x1b]0;t\\x07\\x0ac\\x9b");
  /* C1 CSI and a bidi override written as UTF-8: every byte escaped. */
  ck_assert_str_eq(scree__escape_text(buf, sizeof buf, "\xc2\x9b|\xe2\x80\xae"),
                   "\\xc2\\x9b|\\xe2\\x80\\xae");
  ck_assert_str_eq(scree__escape_text(buf, sizeof buf, "12 \xc2\xb5s"), "12 \xc2\xb5s");
  ck_assert_str_eq(scree__escape_text(buf, sizeof buf, NULL), "");
  /* Cut between whole escapes and characters, always terminated. */
  ck_assert_str_eq(scree__escape_text(buf, 6, "ab\x1b"), "ab");
  ck_assert_str_eq(scree__escape_text(buf, 7, "ab\x1b"), "ab\\x1b");
  ck_assert_str_eq(scree__escape_text(buf, 4, "a\xe2\x82\xac"), "a");
  ck_assert_str_eq(scree__escape_text(buf, 1, "abc"), "");
  char one = 'x';
  scree__escape_text(&one, 0, "abc"); /* size 0: nothing written */
  ck_assert_int_eq(one, 'x');
}
END_TEST

SCREE_TEST_MAIN(.name = "text", .tests = SCREE_TESTS(utf8_chars, unsafe_chars, escape_text))
