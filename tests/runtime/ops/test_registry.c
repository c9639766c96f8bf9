/* test_registry.c - every registered op is complete: the registry check
 * finds each required hook and table, a descriptor missing one is reported,
 * names are unique, every implementation's kernel source is there, and the
 * public entry scree_<name> exists. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "test_util.h"

START_TEST(every_op_is_complete) {
  int n = 0;
  for (int i = 0; scree__ops[i]; i++, n++) {
    const scree__op *op = scree__ops[i];
    ck_assert_msg(!strcmp(scree__op_missing(op), ""), "%s is missing %s", op->name,
                  scree__op_missing(op));
    ck_assert_ptr_eq(scree__op_find(op->name), op);
    for (int j = 0; j < i; j++) ck_assert_str_ne(scree__ops[j]->name, op->name);
    for (int k = 0; k < op->nimpls; k++)
      ck_assert_msg(scree__kernel_source(op->impls[k].source), "%s: kernel %s not found",
                    op->name, op->impls[k].source);
    ck_assert_msg(strlen(scree__source_hash(op)) == 64, "%s: no source hash", op->name);
  }
  ck_assert_int_ge(n, 2);
  ck_assert_ptr_null(scree__op_find("no-such-op"));
}
END_TEST

/* A descriptor with one hook or table taken away is reported, naming it. */
START_TEST(missing_hooks_are_reported) {
  const scree__op *base = scree__op_find("attention");
  scree__op o;
  o = *base, o.bucket = NULL;
  ck_assert(strstr(scree__op_missing(&o), "bucket"));
  o = *base, o.problem = NULL;
  ck_assert(strstr(scree__op_missing(&o), "problem"));
  o = *base, o.reference = NULL;
  ck_assert(strstr(scree__op_missing(&o), "reference"));
  o = *base, o.representative = NULL;
  ck_assert(strstr(scree__op_missing(&o), "representative"));
  o = *base, o.default_config = NULL;
  ck_assert(strstr(scree__op_missing(&o), "default_config"));
  o = *base, o.ndims = 0;
  ck_assert(strstr(scree__op_missing(&o), "dims"));
  o = *base, o.nargs = 0;
  ck_assert(strstr(scree__op_missing(&o), "args"));
  o = *base, o.bench = NULL;
  ck_assert(strstr(scree__op_missing(&o), "bench"));
  o = *base, o.args_size = SCREE__ARGS_MAX + 1;
  ck_assert(strstr(scree__op_missing(&o), "args_size"));
  scree__impl im = base->impls[0];
  o = *base, o.impls = &im;
  im.launch = NULL;
  ck_assert(strstr(scree__op_missing(&o), "launch"));
  im = base->impls[0], im.check = NULL;
  ck_assert(strstr(scree__op_missing(&o), "check"));
  im = base->impls[0], im.entries[0] = NULL;
  ck_assert(strstr(scree__op_missing(&o), "entries"));
  scree__vfield vf[SCREE__MAX_VARIANT];
  memcpy(vf, base->vfields, (size_t)base->nvfields * sizeof *vf);
  o = *base, o.vfields = vf;
  vf[1].example = 7; /* not one of its values */
  ck_assert(strstr(scree__op_missing(&o), "example"));
}
END_TEST

/* A schema that does not describe its args struct is reported: a field
 * left out, a link to the wrong kind of field, a dtype no variant field
 * reads. */
START_TEST(inconsistent_schemas_are_reported) {
  const scree__op *base = scree__op_find("rmsnorm");
  scree__op o = *base;
  scree__arg sa[64];
  memcpy(sa, base->args, (size_t)base->nargs * sizeof *sa);
  o.args = sa;
  ck_assert_str_eq(scree__op_missing(&o), "");
  memmove(&sa[1], &sa[2], (size_t)(base->nargs - 2) * sizeof *sa); /* w left out */
  o.nargs = base->nargs - 1;
  ck_assert(strstr(scree__op_missing(&o), "every field"));
  memcpy(sa, base->args, (size_t)base->nargs * sizeof *sa);
  o.nargs = base->nargs;
  sa[0].dtype = sa[0].dims[0]; /* x's dtype linked to rows */
  ck_assert(strstr(scree__op_missing(&o), "dtype"));
  sa[0] = base->args[0], sa[0].dims[0] = sa[0].strides[0]; /* a dim linked to a stride */
  ck_assert(strstr(scree__op_missing(&o), "dims"));
  sa[0] = base->args[0], sa[0].role = 0;
  ck_assert(strstr(scree__op_missing(&o), "role"));
  sa[0] = base->args[0];
  scree__vfield vf[SCREE__MAX_VARIANT];
  memcpy(vf, base->vfields, (size_t)base->nvfields * sizeof *vf);
  o.vfields = vf;
  vf[1].arg = 0; /* w_dtype checked and read by nothing */
  ck_assert(strstr(scree__op_missing(&o), "variant field"));
}
END_TEST

/* The registry line generates the public entry: libscree exports
 * scree_<name>. */
START_TEST(public_entries_exist) {
  void *self = dlopen(SCREE_SHARED_LIB, RTLD_NOW | RTLD_LOCAL);
  ck_assert_msg(self, "%s", dlerror());
  for (int i = 0; scree__ops[i]; i++) {
    char sym[96];
    snprintf(sym, sizeof sym, "scree_%s", scree__ops[i]->name);
    ck_assert_msg(dlsym(self, sym), "%s is not defined", sym);
  }
  dlclose(self);
}
END_TEST

/* Buckets read from a file are parsed, then turned into a shape by the
 * op's representative: a zero where a call has at least 1 (cols=0), and
 * every dim at the largest value the parser takes, must build args without
 * a division by zero or an overflow (UBSan and SIGFPE would show them), and
 * a dim past the parser's bound is refused. */
START_TEST(representatives_survive_extreme_buckets) {
  for (int i = 0; scree__ops[i]; i++) {
    const scree__op *op = scree__ops[i];
    scree__variant var;
    scree__variant_example(op, &var);
    for (int hi = 0; hi < 2; hi++) {
      char text[512] = "", why[256];
      for (int d = 0; d < op->ndims; d++) {
        const long long v = op->dims[d].pow2 ? (hi ? 1LL << 40 : 1) : (hi ? 1LL << 24 : 0);
        snprintf(text + strlen(text), sizeof text - strlen(text), "%s%s%s%lld", d ? "," : "",
                 op->dims[d].name, op->dims[d].pow2 ? "<=" : "=", v);
      }
      scree__bucket b;
      ck_assert_msg(scree__bucket_parse(op, text, &b, why, sizeof why) == 0, "%s: %s", text,
                    why);
      for (int check = 0; check < 2; check++) {
        _Alignas(16) unsigned char args[SCREE__ARGS_MAX];
        op->representative(&b, &var, check, args);
      }
    }
    char text[512] = "", why[256];
    for (int d = 0; d < op->ndims; d++)
      snprintf(text + strlen(text), sizeof text - strlen(text), "%s%s%s%lld", d ? "," : "",
               op->dims[d].name, op->dims[d].pow2 ? "<=" : "=",
               op->dims[d].pow2 ? 1LL << 41 : (1LL << 24) + 1);
    scree__bucket b;
    ck_assert_int_eq(scree__bucket_parse(op, text, &b, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "is past 2^"), "%s", why);
  }
}
END_TEST

SCREE_TEST_MAIN(.name = "registry",
                .tests = SCREE_TESTS(every_op_is_complete, missing_hooks_are_reported,
                                     inconsistent_schemas_are_reported, public_entries_exist,
                                     representatives_survive_extreme_buckets))
