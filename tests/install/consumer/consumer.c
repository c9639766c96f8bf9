/* A program that links the installed scree and uses its API. On a machine
 * without a GPU, scree_create must fail cleanly, not crash. */
#include <scree.h>
#include <stdio.h>

int main(void) {
  printf("scree %s\n", scree_version());
  scree_context *ctx = NULL;
  char why[256];
  scree_status st = scree_create(NULL, &ctx, why, sizeof why);
  printf("scree_create: %s%s%s\n", scree_status_name(st), st ? ": " : "", why);
  scree_destroy(ctx);
  return st == SCREE_OK || st == SCREE_ERROR_NO_DEVICE || st == SCREE_ERROR_NO_NVRTC ? 0 : 1;
}
