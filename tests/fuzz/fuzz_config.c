/* fuzz_config.c - the text forms of src/runtime/ops/config.c on any text, for every
 * op of scree__ops: scree__config_parse, scree__variant_parse,
 * scree__bucket_parse and scree__shape_parse (what cache rows, safelist
 * lines and scree-tune's options are read with).
 *
 * Input: the first byte picks the op (modulo the number of ops); the rest
 * is lines, and every line goes through all four parsers. What parses must
 * print and parse back to the same value (a variant only in its canonical
 * form). Every config that parses is checked (scree__config_check) with
 * every variant that parses, and with the op's example variant, against a
 * few architectures; every variant that parses gets the op's shape-free
 * default config, which must print and parse back. Seeds:
 * tests/fuzz/corpus/config/. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "ops/op.h"

/* Lines read per input; the rest are ignored. */
#define MAX_LINES 8

/* The architectures configs are checked against. */
static const char *const archs[] = {"sm_80", "sm_86", "sm_90", "sm_100", "sm_120"};

/* What the lines parsed to. */
typedef struct parsed {
  int ncfg, nvar;
  scree__config cfg[MAX_LINES];
  scree__variant var[MAX_LINES + 1]; /* the example variant first */
} parsed;

/* A config: parses, prints, parses back the same; kept for the checks. */
static void config_line(const scree__op *op, const char *s, parsed *p) {
  scree__config c, back;
  char why[512], text[512], again[512];
  if (scree__config_parse(op, s, &c, why, sizeof why)) {
    FUZZ_CHECK(why[0], "%s config \"%s\": no reason given", op->name, s);
    return;
  }
  FUZZ_CHECK(c.impl >= 0 && c.impl < op->nimpls, "%s config \"%s\": impl %d", op->name, s,
             c.impl);
  scree__config_str(op, &c, text, sizeof text);
  FUZZ_CHECK(!scree__config_parse(op, text, &back, why, sizeof why),
             "%s config \"%s\" prints as \"%s\", which does not parse: %s", op->name, s, text,
             why);
  FUZZ_CHECK(!memcmp(&c, &back, sizeof c), "%s config \"%s\" prints as \"%s\", which differs",
             op->name, s, text);
  scree__config_str(op, &back, again, sizeof again);
  FUZZ_CHECK(!strcmp(text, again), "%s config \"%s\" prints as \"%s\", then \"%s\"", op->name, s,
             text, again);
  p->cfg[p->ncfg++] = c;
}

/* A variant: taken only in its canonical form; kept for the checks. */
static void variant_line(const scree__op *op, const char *s, parsed *p) {
  scree__variant v;
  char why[512], text[512];
  if (scree__variant_parse(op, s, &v, why, sizeof why)) {
    FUZZ_CHECK(why[0], "%s variant \"%s\": no reason given", op->name, s);
    return;
  }
  scree__variant_str(op, &v, text, sizeof text);
  FUZZ_CHECK(!strcmp(s, text), "%s variant \"%s\" is taken but prints as \"%s\"", op->name, s,
             text);
  const int causal = scree__variant_causal(op, &v);
  FUZZ_CHECK(causal == 0 || causal == 1, "%s variant \"%s\": causal %d", op->name, s, causal);
  p->var[p->nvar++] = v;
}

/* A bucket: values as rounded; prints and parses back the same. */
static void bucket_line(const scree__op *op, const char *s) {
  scree__bucket b, back;
  char why[512], text[512];
  if (scree__bucket_parse(op, s, &b, why, sizeof why)) {
    FUZZ_CHECK(why[0], "%s bucket \"%s\": no reason given", op->name, s);
    return;
  }
  for (int i = 0; i < op->ndims; i++)
    FUZZ_CHECK((b.v[i] == SCREE__BUCKET_ANY && op->dims[i].any) ||
               (b.v[i] >= 0 && (!op->dims[i].pow2 || (b.v[i] >= 1 && !(b.v[i] & (b.v[i] - 1))))),
               "%s bucket \"%s\": %s is %lld", op->name, s, op->dims[i].name,
               (long long)b.v[i]);
  scree__bucket_str(op, &b, text, sizeof text);
  FUZZ_CHECK(!scree__bucket_parse(op, text, &back, why, sizeof why),
             "%s bucket \"%s\" prints as \"%s\", which does not parse: %s", op->name, s, text,
             why);
  FUZZ_CHECK(!memcmp(&b, &back, sizeof b), "%s bucket \"%s\" prints as \"%s\", which differs",
             op->name, s, text);
}

/* A shape: fills the op's args fields; prints and parses back the same. */
static void shape_line(const scree__op *op, const char *s) {
  _Alignas(16) unsigned char args[SCREE__ARGS_MAX], back[SCREE__ARGS_MAX];
  char why[1024], text[1024];
  memset(args, 0, sizeof args);
  memset(back, 0, sizeof back);
  if (scree__shape_parse(op, s, args, why, sizeof why)) {
    FUZZ_CHECK(why[0], "%s shape \"%s\": no reason given", op->name, s);
    return;
  }
  scree__shape_str(op, args, text, sizeof text);
  FUZZ_CHECK(!scree__shape_parse(op, text, back, why, sizeof why),
             "%s shape \"%s\" prints as \"%s\", which does not parse: %s", op->name, s, text,
             why);
  FUZZ_CHECK(!memcmp(args, back, sizeof args), "%s shape \"%s\" prints as \"%s\", which differs",
             op->name, s, text);
}

/* Checks and defaults: only that they hold up and say why they refuse. */
static void check_configs(const scree__op *op, const parsed *p) {
  for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
    scree__target t;
    if (scree__target_for_arch(archs[a], &t)) abort();
    for (int v = 0; v < p->nvar; v++) {
      for (int c = 0; c < p->ncfg; c++) {
        char why[512] = "";
        if (!scree__config_check(op, &p->cfg[c], &p->var[v], &t, why, sizeof why))
          FUZZ_CHECK(why[0], "%s: a config refused on %s without a reason", op->name, archs[a]);
      }
      scree__config d, back;
      char text[512], why[512];
      memset(&d, 0, sizeof d);
      op->default_config(&t, &p->var[v], NULL, &d);
      scree__config_str(op, &d, text, sizeof text);
      FUZZ_CHECK(!scree__config_parse(op, text, &back, why, sizeof why) &&
                     !memcmp(&d, &back, sizeof d),
                 "%s: the default config \"%s\" on %s does not read back: %s", op->name, text,
                 archs[a], why);
    }
  }
}

/* Every line through every parser of the op the first byte picks. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int nops;
  if (!nops)
    while (scree__ops[nops]) nops++;
  if (!size) return 0;
  const scree__op *op = scree__ops[data[0] % nops];
  char *text = fuzz_cstr(data + 1, size - 1);
  parsed p;
  memset(&p, 0, sizeof p);
  scree__variant_example(op, &p.var[p.nvar++]);
  char *line = text;
  for (int i = 0; i < MAX_LINES && line; i++) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = 0;
    config_line(op, line, &p);
    variant_line(op, line, &p);
    bucket_line(op, line);
    shape_line(op, line);
    line = nl ? nl + 1 : NULL;
  }
  check_configs(op, &p);
  free(text);
  return 0;
}
