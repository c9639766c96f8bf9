/* scree_tune.c - the scree-tune command line tool. See docs/cli.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Exit codes (docs/cli.md). */
enum { EXIT_OK_ = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_NO_GPU = 3 };

static int cmd_info(int argc, char **argv);

typedef struct command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
  const char *usage;
} command;

static const command commands[] = {
    {"info", cmd_info, "show scree, driver, NVRTC and GPU versions",
     "usage: scree-tune info [--help]\n\n"
     "Prints scree's version, the CUDA driver and NVRTC versions, and each\n"
     "GPU's name, architecture, SM count and memory. On a machine without a\n"
     "GPU it says so and why; the exit code is then 3.\n"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
  fprintf(f,
          "usage: scree-tune <command> [options]\n\n"
          "scree %s: autotuning GPU kernel runtime for packed varlen batches.\n\n"
          "commands:\n",
          scree_version());
  for (size_t i = 0; i < NCOMMANDS; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(f,
          "\n`scree-tune <command> --help` describes a command.\n"
          "exit codes: 0 success, 1 failure, 2 usage error, 3 no GPU\n");
}

static int wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
  return 0;
}

static int cmd_info(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    fprintf(stderr, "scree-tune info: unknown option %s\n", argv[i]);
    return EXIT_USAGE;
  }
  scree_runtime_info ri;
  scree_get_runtime_info(&ri);
  printf("scree %s\n", scree_version());
  if (ri.driver_version)
    printf("CUDA driver: %d.%d\n", ri.driver_version / 1000,
           (ri.driver_version % 1000) / 10);
  else
    printf("CUDA driver: not available (%s)\n", ri.driver_error);
  if (ri.nvrtc_loaded)
    printf("NVRTC: %d.%d (%s)\n", ri.nvrtc_major, ri.nvrtc_minor, ri.nvrtc_path);
  else
    printf("NVRTC: not available (%s)\n", ri.nvrtc_error);
  if (ri.device_count == 0) {
    printf("GPUs: none (%s)\n", ri.driver_error[0] ? ri.driver_error : "no device");
    return EXIT_NO_GPU;
  }
  printf("GPUs: %d\n", ri.device_count);
  for (int d = 0; d < ri.device_count; d++) {
    scree_device_info di;
    if (scree_get_device_info(d, &di) != SCREE_OK) continue;
    printf("  [%d] %s  %s  %d SMs  %.1f GiB  L2 %d MiB\n", d, di.name, di.arch,
           di.sm_count, (double)di.total_memory / (1024.0 * 1024 * 1024),
           di.l2_bytes >> 20);
  }
  return EXIT_OK_;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return EXIT_USAGE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
      !strcmp(argv[1], "help")) {
    usage(stdout);
    return EXIT_OK_;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("scree-tune %s\n", scree_version());
    return EXIT_OK_;
  }
  for (size_t i = 0; i < NCOMMANDS; i++) {
    if (strcmp(argv[1], commands[i].name)) continue;
    if (wants_help(argc - 1, argv + 1)) {
      fputs(commands[i].usage, stdout);
      return EXIT_OK_;
    }
    return commands[i].run(argc - 1, argv + 1);
  }
  fprintf(stderr, "scree-tune: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return EXIT_USAGE;
}
