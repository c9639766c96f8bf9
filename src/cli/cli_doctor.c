/* cli_doctor.c - scree-tune doctor: one report of what a bug report
 * needs, with or without a GPU: versions and kernel source hashes, the
 * driver, NVRTC (the file it loaded from), GPUs, the compile threads, the
 * cache files (size, permissions, rows, trust verdicts), the shipped tuned
 * configs, the environment, and what was not found. docs/cli.md. */
#include <dlfcn.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

extern char **environ;

const char *const usage_doctor =
    "usage: scree-tune doctor [--cache PATH] [--json]\n\n"
    "Reports what a bug report needs: scree's version and kernel source\n"
    "hashes, the CUDA driver, NVRTC (which library, loaded from where), the\n"
    "GPUs and their architectures, the compile threads, the user cache and\n"
    "the shipped caches (size, permissions, rows, and whether scree would\n"
    "trust them), the shipped tuned configs (files, stale entries), the\n"
    "environment variables scree and CUDA read, and what it could not find.\n"
    "It needs no GPU and changes nothing. Exit code 0, 2 for bad options.\n";

/* The CUDA and loader variables that change what scree finds, besides
 * every SCREE_* one. */
static const char *const cuda_vars[] = {
    "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
    "CUDA_MODULE_LOADING", "CUDA_CACHE_PATH", "CUDA_CACHE_DISABLE", "CUDA_LAUNCH_BLOCKING",
    "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "XDG_CACHE_HOME", "HOME",
    "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_STEP",
    "SLURM_ARRAY_TASK_COUNT", "JOB_COMPLETION_INDEX"};

/* What was not found, for the last section. */
typedef struct missing {
  char text[4096];
  int n;
} missing;

/* Adds a line (printf's fmt and arguments) to what was not found. */
static void note_missing(missing *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_missing(missing *m, const char *fmt, ...) {
  size_t used = strlen(m->text);
  if (m->n++) used += (size_t)snprintf(m->text + used, sizeof m->text - used, "\n");
  va_list ap;
  va_start(ap, fmt);
  if (used < sizeof m->text) vsnprintf(m->text + used, sizeof m->text - used, fmt, ap);
  va_end(ap);
}

/* One cache file: stat, rows, trust. */
typedef struct file_facts {
  const char *path;
  int exists;
  struct stat sb;
  char owner[64];
  scree__admin_cache_facts f;
} file_facts;

static void gather(const char *path, file_facts *ff) {
  memset(ff, 0, sizeof *ff);
  ff->path = path;
  ff->exists = stat(path, &ff->sb) == 0;
  if (ff->exists) {
    const struct passwd *pw = getpwuid(ff->sb.st_uid);
    if (pw)
      snprintf(ff->owner, sizeof ff->owner, "%s", pw->pw_name);
    else
      snprintf(ff->owner, sizeof ff->owner, "uid %u", (unsigned)ff->sb.st_uid);
  }
  scree__admin_cache_facts_of(path, &ff->f);
}

static void print_file_json(const file_facts *ff) {
  printf("{\"path\": ");
  cli_json_str(stdout, ff->path);
  printf(", \"exists\": %s", ff->exists ? "true" : "false");
  if (ff->exists) {
    printf(", \"size\": %lld, \"mode\": \"%04o\", \"owner\": ", (long long)ff->sb.st_size,
           (unsigned)(ff->sb.st_mode & 07777));
    cli_json_str(stdout, ff->owner);
    printf(", \"yours\": %s", ff->sb.st_uid == geteuid() ? "true" : "false");
  }
  printf(", \"opened\": %s", ff->f.opened ? "true" : "false");
  if (ff->f.opened)
    printf(", \"winners\": %d, \"stale\": %d, \"misses\": %d, \"bad\": %d, \"skipped\": %d",
           ff->f.winners, ff->f.stale, ff->f.misses, ff->f.bad, ff->f.refused);
  else {
    printf(", \"error\": ");
    cli_json_str(stdout, ff->f.why);
  }
  /* A file that is not there is neither trusted nor refused. */
  if (ff->exists) {
    printf(", \"trusted\": %s, \"trust\": ", ff->f.trusted ? "true" : "false");
    cli_json_str(stdout, ff->f.trusted ? "" : ff->f.trust_why);
  } else {
    printf(", \"trusted\": null, \"trust\": \"\"");
  }
  printf("}");
}

static void print_file_text(const file_facts *ff, int shipped) {
  printf("  %s\n", ff->path);
  if (!ff->exists) {
    printf("    not there%s\n", shipped ? " (skipped)" : " (nothing cached yet)");
    return;
  }
  printf("    %lld bytes, mode %04o, owner %s%s\n", (long long)ff->sb.st_size,
         (unsigned)(ff->sb.st_mode & 07777), cli_esc(ff->owner),
         ff->sb.st_uid == geteuid() ? " (you)" : "");
  if (ff->f.opened)
    printf("    %d winner(s), %d of them stale (another kernel source), %d miss(es), %d bad "
           "config(s)%s\n", ff->f.winners, ff->f.stale, ff->f.misses, ff->f.bad,
           ff->f.refused ? ", and rows that fail their checks" : "");
  else
    printf("    cannot be read: %s\n", cli_esc(ff->f.why));
  /* The user cache is the operator's own and not checked; a shipped cache
   * that fails is skipped. */
  if (ff->f.trusted)
    printf("    trusted: only you or root can change it\n");
  else
    printf("    %s: %s\n", shipped ? "NOT TRUSTED, skipped" : "would not pass the shipped-cache "
                                                             "check",
           cli_esc(ff->f.trust_why));
}

int cmd_doctor(int argc, char **argv) {
  static const struct option opts[] = {CLI_OPT_CACHE, CLI_OPT_JSON, CLI_OPT_END};
  cli_common c = {0};
  int ch, npos;
  const char *v;
  cli_args a;
  cli_args_init(&a, "doctor", argc, argv, opts, "");
  while ((ch = cli_next(&a, &v)) != -1) {
    if (ch == CLI_BAD_OPTION) return CLI_USAGE;
    cli_common_opt(&c, ch, v);
  }
  char **pos = cli_positional(&a, &npos);
  if (npos) return cli_unexpected("doctor", pos[0]);
  const int json = c.json;
  missing miss = {{0}, 0};

  /* scree itself: the version, the library's file, the kernel sources. */
  /* Which libscree answers: the shared library, or the program it is
   * linked into. */
  Dl_info di;
  char lib[4096] = "";
  if (dladdr((const void *)scree_version, &di) && di.dli_fname &&
      !realpath(di.dli_fname, lib))
    snprintf(lib, sizeof lib, "%s", di.dli_fname);
  if (json) {
    cli_json_begin();
    printf(", \"library\": ");
    cli_json_str(stdout, lib);
    printf(", \"source_hashes\": {");
    for (int i = 0; scree__admin_op_name(i); i++) {
      printf("%s\"%s\": ", i ? ", " : "", scree__admin_op_name(i));
      cli_json_str(stdout, scree__admin_source_hash(scree__admin_op_name(i)));
    }
    printf("}");
  } else {
    printf("scree %s, %s\n", scree_version(), lib);
    printf("kernel sources (sha256; cache rows are keyed by them):\n");
    for (int i = 0; scree__admin_op_name(i); i++)
      printf("  %-16s %s\n", scree__admin_op_name(i),
             scree__admin_source_hash(scree__admin_op_name(i)));
  }

  /* The driver, NVRTC and the GPUs. */
  scree_runtime_info ri;
  scree_get_runtime_info(&ri);
  scree__admin_nvrtc nv;
  scree__admin_nvrtc_info(&nv);
  if (!ri.driver_loaded)
    note_missing(&miss, "the CUDA driver, and so any GPU (%s)", ri.driver_error);
  if (!nv.loaded) note_missing(&miss, "NVRTC (%s)", nv.why);
  if (ri.driver_loaded && !ri.device_count)
    note_missing(&miss, "a GPU (%s)", ri.driver_error[0] ? ri.driver_error : "no device");
  cli_report_driver(&ri, json);
  if (json) {
    printf(", \"nvrtc\": {\"loaded\": %s, \"version\": ", nv.loaded ? "true" : "false");
    cli_json_version(stdout, nv.loaded ? nv.major * 1000 + nv.minor * 10 : 0);
    printf(", \"name\": ");
    cli_json_str(stdout, nv.name);
    printf(", \"file\": ");
    cli_json_str(stdout, nv.file);
    printf(", \"error\": ");
    cli_json_str(stdout, nv.why);
    printf("}, \"gpus\": [");
  } else {
    if (nv.loaded)
      printf("NVRTC: %d.%d, %s%s%s%s\n", nv.major, nv.minor, nv.file[0] ? nv.file : nv.name,
             nv.file[0] && strcmp(nv.file, nv.name) ? " (loaded as " : "",
             nv.file[0] && strcmp(nv.file, nv.name) ? nv.name : "",
             nv.file[0] && strcmp(nv.file, nv.name) ? ")" : "");
    else
      printf("NVRTC: not available (%s)\n", nv.why);
    cli_report_gpu_count(&ri);
  }
  for (int d = 0; d < ri.device_count; d++) {
    scree_device_info dev;
    if (scree_get_device_info(d, &dev) != SCREE_OK) continue;
    if (json) {
      printf("%s{\"ordinal\": %d, \"name\": ", d ? ", " : "", d);
      cli_json_str(stdout, dev.name);
      printf(", \"arch\": \"%s\", \"sm_count\": %d, \"memory_bytes\": %zu}", dev.arch,
             dev.sm_count, dev.total_memory);
    } else {
      printf("  [%d] %s  %s  %d SMs  %.1f GiB\n", d, dev.name, dev.arch, dev.sm_count,
             (double)dev.total_memory / (1024.0 * 1024 * 1024));
    }
  }

  /* Compile threads. */
  char how[256];
  const int jobs = scree__admin_jobs(how, sizeof how);
  if (json) {
    printf("], \"gpus_error\": ");
    cli_json_str(stdout, ri.device_count ? "" : ri.driver_error);
    printf(", \"compile_threads\": {\"count\": %d, \"how\": ", jobs);
    cli_json_str(stdout, how);
    printf("}");
  } else {
    printf("compile threads: %s\n", how);
  }

  /* The user cache, then the shipped caches. */
  char path[4096];
  file_facts ff;
  int have_user = 1;
  if (c.cache) {
    snprintf(path, sizeof path, "%s", c.cache);
  } else if (scree__admin_default_path(path, sizeof path) != SCREE_OK) {
    have_user = 0;
    note_missing(&miss, "a user cache path (set SCREE_CACHE_DIR or HOME, or pass --cache)");
  }
  if (have_user) {
    gather(path, &ff);
    if (!ff.exists) note_missing(&miss, "the user cache %s (nothing cached yet)", path);
    if (json) {
      printf(", \"user_cache\": ");
      print_file_json(&ff);
    } else {
      printf("user cache%s:\n", c.cache ? " (--cache)" : "");
      print_file_text(&ff, 0);
    }
  } else if (json) {
    printf(", \"user_cache\": null");
  } else {
    printf("user cache: no path (set SCREE_CACHE_DIR or HOME, or pass --cache)\n");
  }
  const char *search = getenv("SCREE_CACHE_PATH");
  if (json)
    printf(", \"shipped_caches\": [");
  else
    printf("shipped caches (SCREE_CACHE_PATH):%s\n", search && *search ? "" : " none");
  int nship = 0;
  if (search && *search) {
    char *copy = strdup(search), *save = NULL;
    for (char *p = copy ? strtok_r(copy, ":", &save) : NULL; p; p = strtok_r(NULL, ":", &save)) {
      gather(p, &ff);
      if (!ff.exists) note_missing(&miss, "the shipped cache %s", p);
      if (json) {
        if (nship) printf(", ");
        print_file_json(&ff);
      } else {
        print_file_text(&ff, 1);
      }
      nship++;
    }
    free(copy);
  }
  if (json) printf("]");

  /* A pinned cache replaces all of those in every context (docs/cache.md). */
  const char *pin = getenv("SCREE_PIN");
  if (pin && *pin) {
    gather(pin, &ff);
    if (!ff.exists) note_missing(&miss, "the pinned cache %s (SCREE_PIN): contexts fail to create", pin);
    if (json) {
      printf(", \"pinned_cache\": ");
      print_file_json(&ff);
    } else {
      printf("pinned cache (SCREE_PIN; the only source of tuned configs, the caches above "
             "are not used):\n");
      print_file_text(&ff, 0);
    }
  } else if (json) {
    printf(", \"pinned_cache\": null");
  }

  /* The shipped tuned configs (text). */
  scree__admin_shipped_summary s;
  if (scree__admin_shipped(NULL, NULL, NULL, &s) == SCREE_OK) {
    if (json) {
      printf(", \"shipped_configs\": {\"files\": %d, \"file_names\": ", s.files);
      cli_json_str(stdout, s.names);
      printf(", \"count\": %d, \"stale\": %d, \"warning\": ", s.entries, s.stale);
      cli_json_str(stdout, s.warn);
      printf("}");
    } else {
      printf("shipped tuned configs: %d in %d file(s)%s%s%s, %d stale (another kernel source: "
             "ignored)\n", s.entries, s.files, s.files ? " (" : "", s.names, s.files ? ")" : "",
             s.stale);
      if (s.warn[0]) printf("  did not load: %s\n", s.warn);
    }
  }

  /* The environment: every SCREE_* variable, and the others that matter. */
  if (json)
    printf(", \"environment\": {");
  else
    printf("environment:\n");
  int nenv = 0;
  for (char **e = environ; *e; e++)
    if (!strncmp(*e, "SCREE_", 6)) {
      const char *eq = strchr(*e, '=');
      if (!eq) continue;
      if (json) {
        printf("%s\"%.*s\": ", nenv ? ", " : "", (int)(eq - *e), *e);
        cli_json_str(stdout, eq + 1);
      } else {
        printf("  %.*s=%s\n", (int)(eq - *e), *e, cli_esc(eq + 1));
      }
      nenv++;
    }
  for (size_t i = 0; i < sizeof cuda_vars / sizeof cuda_vars[0]; i++) {
    const char *val = getenv(cuda_vars[i]);
    if (!val) continue;
    if (json) {
      printf("%s\"%s\": ", nenv ? ", " : "", cuda_vars[i]);
      cli_json_str(stdout, val);
    } else {
      printf("  %s=%s\n", cuda_vars[i], cli_esc(val));
    }
    nenv++;
  }
  if (!json && !nenv) printf("  none of the variables scree or CUDA read is set\n");

  if (json) {
    printf("}, \"not_found\": [");
    for (const char *p = miss.text; miss.n && *p;) {
      const size_t len = strcspn(p, "\n");
      char item[4200];
      snprintf(item, sizeof item, "%.*s", (int)len, p);
      printf("%s", p == miss.text ? "" : ", ");
      cli_json_str(stdout, item);
      p += len + (p[len] == '\n');
    }
    printf("]}\n");
  } else if (miss.n) {
    printf("not found:\n");
    for (const char *p = miss.text; *p;) {
      const size_t len = strcspn(p, "\n");
      printf("  %.*s\n", (int)len, p);
      p += len + (p[len] == '\n');
    }
  } else {
    printf("not found: nothing\n");
  }
  return CLI_OK;
}
