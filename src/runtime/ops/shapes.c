/* shapes.c - the row-wise shape lists of bench/rowwise_shapes.json, read by
 * scree-tune prewarm --shapes and the row-wise benchmark.
 *
 * SQLite parses the JSON (json_valid, json_type, json_each in an in-memory
 * database): a maintained, strict RFC 8259 parser that the library links
 * already, so a nested "shapes" key, a trailing comma or a single-quoted
 * string is refused as JSON tools refuse it. json_valid only says yes or
 * no, and json_error_position(), which says where, arrived in SQLite 3.42
 * (Debian 12 has 3.40), so when SQLite refuses a file locate() below scans
 * it to name the line, column and reason. SQLite's verdict decides; the
 * scan only explains it. */
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

/* The largest rows or cols a shapes file may give: 2^40, as prewarm's
 * --rows-max (past any GPU's memory; products of two stay far from
 * overflow). */
#define SHAPE_MAX ((long)1 << 40)

/* The deepest nesting locate() follows: SQLite refuses past 1000 (3.45 and
 * later; 2000 before), and a shapes file needs 2. */
#define JSON_DEPTH 1000

/* ---- where SQLite's refusal is ---------------------------------------------- */

static const char *skip_ws(const char *p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  return p;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A string at *p (the opening quote): NULL with *p past it, or the reason
 * with *p at the offending byte. */
static const char *scan_string(const char **p) {
  const char *s = *p + 1;
  for (;; s++) {
    const unsigned char c = (unsigned char)*s;
    *p = s;
    if (!c) return "the text ends inside a string";
    if (c == '"') break;
    if (c < 0x20) return "a control character inside a string (write it as an escape)";
    if (c != '\\') continue;
    s++;
    *p = s;
    if (*s == 'u') {
      for (int i = 1; i <= 4; i++)
        if (!is_hex(s[i])) {
          *p = s + i;
          return "\\u needs four hex digits";
        }
      s += 4;
    } else if (!*s || !strchr("\"\\/bfnrt", *s)) {
      return "an unknown escape (JSON has \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)";
    }
  }
  *p = s + 1;
  return NULL;
}

/* A number at *p: NULL with *p past it, or the reason with *p where it is
 * wrong. */
static const char *scan_number(const char **p) {
  const char *s = *p;
  if (*s == '-') s++;
  if (!is_digit(*s)) {
    *p = s;
    return "a minus sign without digits";
  }
  if (*s == '0' && is_digit(s[1])) {
    *p = s;
    return "a number with a leading zero";
  }
  while (is_digit(*s)) s++;
  if (*s == '.') {
    s++;
    if (!is_digit(*s)) {
      *p = s;
      return "a decimal point without digits after it";
    }
    while (is_digit(*s)) s++;
  }
  if (*s == 'e' || *s == 'E') {
    s++;
    if (*s == '+' || *s == '-') s++;
    if (!is_digit(*s)) {
      *p = s;
      return "an exponent without digits";
    }
    while (is_digit(*s)) s++;
  }
  *p = s;
  return NULL;
}

/* The first place where text is not RFC 8259 JSON, and why: NULL if it
 * is. An explicit stack, so that deep nesting costs no recursion. */
static const char *locate(const char *text, const char **at) {
  char stack[JSON_DEPTH];
  int depth = 0, first = 1;
  enum { VALUE, KEY, COLON, AFTER } want = VALUE;
  const char *p = text;
  for (;;) {
    p = skip_ws(p);
    *at = p;
    const char top = depth ? stack[depth - 1] : 0;
    const char *r;
    switch (want) {
      case VALUE:
        if (*p == ']' && top == '[' && first) {
          depth--, p++, want = AFTER;
        } else if (*p == '[' || *p == '{') {
          if (depth == JSON_DEPTH) return "nested more than 1000 deep";
          stack[depth++] = *p;
          want = *p == '[' ? VALUE : KEY;
          first = 1;
          p++;
        } else if (*p == '"') {
          if ((r = scan_string(&p))) return *at = p, r;
          want = AFTER;
        } else if (*p == '-' || is_digit(*p)) {
          if ((r = scan_number(&p))) return *at = p, r;
          want = AFTER;
        } else if (!strncmp(p, "true", 4) || !strncmp(p, "null", 4)) {
          p += 4, want = AFTER;
        } else if (!strncmp(p, "false", 5)) {
          p += 5, want = AFTER;
        } else if (!*p) {
          return depth ? "the text ends where a value should be" : "no JSON value (an empty file)";
        } else if (*p == '\'') {
          return "a string in single quotes (JSON strings take double quotes)";
        } else {
          return "expected a value (a number, a string in double quotes, a list, an object, "
                 "true, false or null)";
        }
        break;
      case KEY:
        if (*p == '}' && first) {
          depth--, p++, want = AFTER;
        } else if (*p == '"') {
          if ((r = scan_string(&p))) return *at = p, r;
          want = COLON;
        } else {
          return !*p ? "the text ends inside an object"
                     : first ? "expected a key in double quotes, or }"
                             : "expected a key in double quotes after the comma";
        }
        break;
      case COLON:
        if (*p != ':') return "expected : after the key";
        p++, want = VALUE, first = 0;
        break;
      case AFTER:
        if (!depth) return *p ? "more text after the end of the JSON value" : NULL;
        if (*p == ',') {
          const char *q = skip_ws(p + 1);
          if (*q == ']' || *q == '}') {
            *at = p;
            return *q == ']' ? "a comma before ] (JSON has no trailing commas)"
                             : "a comma before } (JSON has no trailing commas)";
          }
          p++, want = top == '[' ? VALUE : KEY, first = 0;
        } else if ((*p == ']' && top == '[') || (*p == '}' && top == '{')) {
          depth--, p++;
        } else if (!*p) {
          return top == '[' ? "the text ends inside a list" : "the text ends inside an object";
        } else {
          return top == '[' ? "expected , or ] after a list element"
                            : "expected , or } after a value";
        }
        break;
    }
  }
}

void scree__json_syntax_error(const char *text, char *why, size_t why_size) {
  const char *at = text;
  const char *r = locate(text, &at);
  if (!r) {
    /* SQLite refused what the scan accepts: a limit of this SQLite. */
    scree__set_why(why, why_size, "not JSON that SQLite %s reads", sqlite3_libversion());
    return;
  }
  int line = 1;
  const char *bol = text;
  for (const char *q = text; q < at; q++)
    if (*q == '\n') line++, bol = q + 1;
  scree__set_why(why, why_size, "line %d, column %d: %s", line, (int)(at - bol) + 1, r);
}

/* ---- reading the file --------------------------------------------------------- */

/* One statement over the text (bound as ?1): prepared, or -1 with why. */
static int prepare(sqlite3 *db, const char *sql, const char *text, sqlite3_stmt **st,
                   char *why, size_t why_size) {
  if (sqlite3_prepare_v2(db, sql, -1, st, NULL) != SQLITE_OK ||
      sqlite3_bind_text(*st, 1, text, -1, SQLITE_STATIC) != SQLITE_OK) {
    scree__set_why(why, why_size, "SQLite: %s", sqlite3_errmsg(db));
    sqlite3_finalize(*st);
    *st = NULL;
    return -1;
  }
  return 0;
}

/* A step that is not a row or the end is SQLite failing (out of memory). */
static int step_failed(sqlite3 *db, int rc, char *why, size_t why_size) {
  if (rc == SQLITE_ROW || rc == SQLITE_DONE) return 0;
  scree__set_why(why, why_size, "SQLite: %s", sqlite3_errmsg(db));
  return 1;
}

/* Reads one of a shape's values, an integer token as JSON wrote it, at s
 * into *v, *end after it; -1 with the reason in why when it is out of
 * range, naming the value as written. */
static int read_value(const char *s, char **end, long *v, int shape, const char *name,
                      char *why, size_t why_size) {
  errno = 0;
  *v = strtol(s, end, 10);
  if (errno == ERANGE || *v > SHAPE_MAX || *v < -SHAPE_MAX) {
    scree__set_why(why, why_size, "shape %d: %s %.*s is out of range (1 to 2^40 = %ld)", shape,
                   name, (int)(*end - s < 64 ? *end - s : 64), s, SHAPE_MAX);
    return -1;
  }
  return 0;
}

/* What a JSON value of SQLite's json_type is, in words: "a list". */
static const char *describe(const char *type) {
  static const char *const names[][2] = {
      {"object", "an object"}, {"array", "a list"},  {"text", "a string"}, {"integer", "a number"},
      {"real", "a number"},    {"true", "true"},     {"false", "false"},   {"null", "null"}};
  for (size_t i = 0; type && i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(type, names[i][0])) return names[i][1];
  return "nothing";
}

/* The top level: an object whose "shapes" and "dtypes" appear at most
 * once (json_extract would take the first of two silently). */
static int check_top(sqlite3 *db, const char *json, char *why, size_t why_size) {
  sqlite3_stmt *st;
  if (prepare(db, "SELECT json_type(?1)", json, &st, why, why_size)) return -1;
  int rc = sqlite3_step(st);
  if (step_failed(db, rc, why, why_size)) {
    sqlite3_finalize(st);
    return -1;
  }
  const char *type = (const char *)sqlite3_column_text(st, 0);
  const int object = type && !strcmp(type, "object");
  if (!object)
    scree__set_why(why, why_size, "the file holds %s, not an object {\"shapes\": ...}",
                   describe(type));
  sqlite3_finalize(st);
  if (!object) return -1;
  if (prepare(db, "SELECT key, count(*) FROM json_each(?1) WHERE key IN ('shapes', 'dtypes')"
                  " GROUP BY key HAVING count(*) > 1",
              json, &st, why, why_size))
    return -1;
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    scree__set_why(why, why_size, "\"%s\" is given %d times", sqlite3_column_text(st, 0),
                   sqlite3_column_int(st, 1));
  else
    step_failed(db, rc, why, why_size);
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? 0 : -1;
}

/* The type of a top-level key ("array", ...), or "" when it is not there. */
static int key_type(sqlite3 *db, const char *json, const char *path, char *type, size_t n,
                    char *why, size_t why_size) {
  sqlite3_stmt *st;
  if (prepare(db, "SELECT json_type(?1, ?2)", json, &st, why, why_size)) return -1;
  sqlite3_bind_text(st, 2, path, -1, SQLITE_STATIC);
  const int rc = sqlite3_step(st);
  if (step_failed(db, rc, why, why_size)) {
    sqlite3_finalize(st);
    return -1;
  }
  const char *t = (const char *)sqlite3_column_text(st, 0);
  snprintf(type, n, "%s", t ? t : "");
  sqlite3_finalize(st);
  return 0;
}

static int read_dtypes(sqlite3 *db, const char *json, scree_dtype *dtypes, int dcap,
                       int *ndtypes, char *why, size_t why_size) {
  char type[16];
  if (key_type(db, json, "$.dtypes", type, sizeof type, why, why_size)) return -1;
  if (!type[0]) return 0;
  if (strcmp(type, "array")) {
    scree__set_why(why, why_size, "\"dtypes\" is %s, not a list of dtype names",
                   describe(type));
    return -1;
  }
  sqlite3_stmt *st;
  if (prepare(db, "SELECT type, atom FROM json_each(?1, '$.dtypes') ORDER BY key", json, &st,
              why, why_size))
    return -1;
  int rc, i = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    i++;
    const char *t = (const char *)sqlite3_column_text(st, 0);
    const char *name = (const char *)sqlite3_column_text(st, 1);
    if (!t || strcmp(t, "text") || !name) {
      scree__set_why(why, why_size, "dtype %d is %s, not a dtype name in quotes", i,
                     describe(t));
      break;
    }
    int found = -1;
    for (int k = 0; k < 3; k++)
      if (!strcmp(name, scree_dtype_name((scree_dtype)k))) found = k;
    if (found < 0) {
      scree__set_why(why, why_size, "unknown dtype \"%.64s\" (fp32, fp16 or bf16)", name);
      break;
    }
    if (*ndtypes < dcap) dtypes[(*ndtypes)++] = (scree_dtype)found;
  }
  const int bad = rc != SQLITE_DONE;
  if (rc != SQLITE_ROW) step_failed(db, rc, why, why_size);
  sqlite3_finalize(st);
  return bad ? -1 : 0;
}

static int read_shape_list(sqlite3 *db, const char *json, long (*shapes)[2], int cap,
                           char *why, size_t why_size) {
  char type[16];
  if (key_type(db, json, "$.shapes", type, sizeof type, why, why_size)) return -1;
  if (strcmp(type, "array")) {
    if (type[0])
      scree__set_why(why, why_size, "\"shapes\" is %s, not a list of [rows, cols] pairs",
                     describe(type));
    else
      scree__set_why(why, why_size, "expected a \"shapes\" list at the top level");
    return -1;
  }
  /* Each pair as SQLite writes it back ("[16384,4096]") once both of its
   * elements are JSON integers: the values as written, for strtol. */
  sqlite3_stmt *st;
  if (prepare(db,
              "SELECT CASE WHEN type = 'array' AND json_array_length(value) = 2 AND"
              " json_type(value, '$[0]') = 'integer' AND json_type(value, '$[1]') = 'integer'"
              " THEN json(value) END FROM json_each(?1, '$.shapes') ORDER BY key",
              json, &st, why, why_size))
    return -1;
  int rc, count = 0, bad = 0;
  while (!bad && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *pair = (const char *)sqlite3_column_text(st, 0);
    long r = 0, c = 0;
    char *end = NULL;
    if (!pair || pair[0] != '[') {
      bad = 1;
    } else if (read_value(pair + 1, &end, &r, count + 1, "rows", why, why_size) ||
               (*end == ',' && read_value(end + 1, &end, &c, count + 1, "cols", why, why_size))) {
      sqlite3_finalize(st);
      return -1;
    }
    if (bad || *end != ']' || r < 1 || c < 1) {
      scree__set_why(why, why_size, "shape %d: expected [rows, cols] of positive integers",
                     count + 1);
      bad = 1;
      break;
    }
    if (count < cap) shapes[count][0] = r, shapes[count][1] = c;
    count++;
  }
  if (!bad && step_failed(db, rc, why, why_size)) bad = 1;
  sqlite3_finalize(st);
  return bad ? -1 : count;
}

int scree__parse_shapes(const char *json, long (*shapes)[2], int cap,
                        scree_dtype *dtypes, int dcap, int *ndtypes, char *why,
                        size_t why_size) {
  *ndtypes = 0;
  sqlite3 *db = NULL;
  if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_MEMORY, NULL) !=
      SQLITE_OK) {
    scree__set_why(why, why_size, "SQLite: %s", db ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_close(db);
    return -1;
  }
  int n = -1;
  sqlite3_stmt *st;
  if (!prepare(db, "SELECT json_valid(?1)", json, &st, why, why_size)) {
    const int rc = sqlite3_step(st);
    const int valid = rc == SQLITE_ROW && sqlite3_column_int(st, 0) == 1;
    if (!step_failed(db, rc, why, why_size) && !valid)
      scree__json_syntax_error(json, why, why_size);
    sqlite3_finalize(st);
    if (valid && !check_top(db, json, why, why_size) &&
        !read_dtypes(db, json, dtypes, dcap, ndtypes, why, why_size))
      n = read_shape_list(db, json, shapes, cap, why, why_size);
  }
  if (n < 0) *ndtypes = 0;
  sqlite3_close(db);
  return n;
}
