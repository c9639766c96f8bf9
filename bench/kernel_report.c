/*
 * kernel_report.c - what the compiler made of one config: compiles an op's
 * config for a variant and an arch with NVRTC and `--ptxas-options=-v`,
 * prints ptxas' report (registers, spills, shared memory) and, with
 * --cubin, writes the cubin for `cuobjdump -sass`. Needs NVRTC, not a GPU.
 *
 *   kernel_report <op> <variant> <config> [--arch sm_90] [--cubin FILE]
 *   kernel_report rmsnorm x=fp16,w=fp16,y=fp16 tpr=128,rows=1,vec=8,cache=4
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "ops/registry.h"
#include "store/cache.h"
#include "store/keys.h"
#include "store/safelist.h"
#include "tuner/harness.h"
#include "tuner/tuner.h"

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: kernel_report <op> <variant> <config> [--arch sm_90] [--cubin FILE]\n");
    return 2;
  }
  const char *arch = "sm_90", *out = NULL;
  for (int i = 4; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--arch")) arch = argv[i + 1];
    else if (!strcmp(argv[i], "--cubin")) out = argv[i + 1];
    else {
      fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  const scree__op *op = scree__op_find(argv[1]);
  if (!op) {
    fprintf(stderr, "no op %s\n", argv[1]);
    return 2;
  }
  char why[1024];
  scree__variant var;
  scree__config cfg;
  if (scree__variant_parse(op, argv[2], &var, why, sizeof why) ||
      scree__config_parse(op, argv[3], &cfg, why, sizeof why)) {
    fprintf(stderr, "%s\n", why);
    return 2;
  }
  scree__target t;
  if (scree__target_for_arch(arch, &t)) {
    fprintf(stderr, "unknown arch %s\n", arch);
    return 2;
  }
  if (!scree__config_check(op, &cfg, &var, &t, why, sizeof why)) {
    fprintf(stderr, "the host check rejects it: %s\n", why);
    return 1;
  }
  const scree__nvrtc_api *nv = scree__nvrtc_load(why, sizeof why, NULL);
  if (!nv) {
    fprintf(stderr, "NVRTC: %s\n", why);
    return 3;
  }
  char target[16];
  scree__target_arch(arch, t.sm, &op->impls[cfg.impl], target);
  void *cubin = NULL;
  size_t size = 0;
  char *log = NULL;
  const scree_status st = scree__compile(nv, op, &cfg, &var, target, "--ptxas-options=-v",
                                         &cubin, &size, &log);
  printf("%s %s %s for %s: %s, %zu-byte cubin\n%s\n", op->name, argv[2], argv[3], target,
         scree_status_name(st), size, log ? log : "");
  if (st == SCREE_OK && out) {
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(cubin, 1, size, f) != size) {
      fprintf(stderr, "cannot write %s\n", out);
      return 1;
    }
    fclose(f);
  }
  free(cubin);
  free(log);
  return st == SCREE_OK ? 0 : 1;
}
