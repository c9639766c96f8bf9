/* test_ragged_softmax_emu.cc - the ragged softmax's cluster kernel
 * (kernels/ragged_softmax_cluster.cu) run on the CPU through emu.h,
 * against the CPU reference: the kernel's index arithmetic, its item ring,
 * its exchanges between the CTAs of a cluster and its barriers, where
 * there is no GPU (label cpu). What the GPU adds (timing, the memory
 * model, the instructions themselves) is test_ragged_softmax_gpu's.
 *
 * The configs tests/CMakeLists.txt builds (one translation unit each,
 * rsc_config.cc) are checked against the host's check and shared-memory
 * layout; then each config named on the command line by its place in
 * that list (every one without arguments: ctest runs one quick config as
 * test_ragged_softmax_emu and each config as test_ragged_softmax_emu_<n>,
 * label slow) runs on batches built around its stage: lengths 0, 1, just
 * off the stage and its multiples, the longest the cluster stages, one
 * past it (streamed), many short sequences; a tail column block; padded
 * rows; in place; negative and fractional scales; a batch past the
 * shared-memory plan (the plan kernel's path). Random inputs, fresh
 * each run (the seed is printed), shaped by the op's shape_inputs; y
 * poisoned before the run, and the row padding and a guard past y must
 * keep their bytes. The grid has more clusters than run at once, so that
 * some start after others finish. Tolerances: those of the GPU test. */
#include <check.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "rsc.h"
#include "scree.h"

extern "C" {
double scree__load_elem(const void *p, int dtype, size_t i);
void scree__store_elem(void *p, int dtype, size_t i, double v);
size_t scree__compare(const void *got, const void *ref, int dtype, size_t n, double rtol,
                      double atol, size_t *worst);
void scree__tolerance(scree_dtype dtype, double *rtol, double *atol);
}

std::vector<rsc_entry> &rsc_registry() {
  static std::vector<rsc_entry> r;
  return r;
}

static uint64_t g_seed;

static uint64_t next_rand() {
  g_seed ^= g_seed << 13;
  g_seed ^= g_seed >> 7;
  g_seed ^= g_seed << 17;
  return g_seed;
}

static size_t esize(int dt) { return dt == SCREE_DTYPE_FP32 ? 4 : 2; }

static const char *dname(int dt) {
  return dt == SCREE_DTYPE_FP32 ? "fp32" : dt == SCREE_DTYPE_FP16 ? "fp16" : "bf16";
}

static std::string cfg_str(const rsc_cfg &c) {
  char b[160];
  std::snprintf(b, sizeof b, "x=%s,y=%s tpr=%d,vec=%d,warps=%d,stok=%d,stages=%d,csize=%d,e1=%d",
                dname(c.x), dname(c.y), c.tpr, c.vec, c.warps, c.stok, c.stages, c.csize, c.e1);
  return b;
}

/* One call on a batch of lens; returns "" or what failed. */
static std::string run_case(const rsc_entry &en, const std::vector<int> &lens, int cols,
                            int64_t xs, int64_t ys, int in_place, float scale, int clusters,
                            int resident) {
  const rsc_cfg &c = en.cfg;
  const int n = (int)lens.size();
  std::vector<int> cu((size_t)n + 1, 0);
  int maxlen = 0;
  for (int i = 0; i < n; i++) {
    cu[(size_t)i + 1] = cu[(size_t)i] + lens[(size_t)i];
    if (lens[(size_t)i] > maxlen) maxlen = lens[(size_t)i];
  }
  const int total = cu[(size_t)n];
  if (in_place) ys = xs;
  const size_t ex = esize(c.x), ey = esize(c.y), guard = 256;
  const size_t nx = (size_t)total * (size_t)xs, ny = (size_t)total * (size_t)ys;
  std::vector<unsigned char> hx(nx * ex + guard), hy(ny * ey + guard, 0xff), ref(ny * ey + 16);
  for (size_t i = 0; i < nx; i++)
    scree__store_elem(hx.data(), c.x, i, ((double)(next_rand() % 60001) - 30000.0) / 10000.0);
  scree_ragged_softmax_args a;
  std::memset(&a, 0, sizeof a);
  a.batch = n;
  a.total = total;
  a.max_seqlen = maxlen;
  a.cols = cols;
  a.x_stride = xs;
  a.y_stride = ys;
  a.x_dtype = (scree_dtype)c.x;
  a.y_dtype = (scree_dtype)c.y;
  a.scale = scale;
  emu_shape_inputs(&a, hx.data(), cu.data());
  if (in_place)
    std::memcpy(ref.data(), hx.data(), ny * ey);
  else
    std::memset(ref.data(), 0xff, ny * ey);
  emu_reference(&a, hx.data(), cu.data(), ref.data());
  void *y = in_place ? (void *)hx.data() : (void *)hy.data();
  if (in_place) std::memset(hx.data() + nx * ex, 0xff, guard);
  std::vector<int> plan((size_t)n + 1, -7);
  int counters[2] = {0, 0};
  rsc_call call;
  call.x = hx.data();
  call.y = y;
  call.cu_seqlens = cu.data();
  call.cols = cols;
  call.batch = n;
  call.nstrips = (cols + c.tpr * c.vec - 1) / (c.tpr * c.vec);
  call.x_stride = xs;
  call.y_stride = ys;
  call.scale_log2 = (float)((scale != 0.f ? (double)scale : 1.0) * 1.4426950408889634);
  call.counters = counters;
  call.plan = plan.data();
  call.clusters = clusters;
  call.resident = resident;
  call.seed = next_rand();
  char where[200];
  std::snprintf(where, sizeof where, "%s: %d sequences (longest %d), cols=%d xs=%lld ys=%lld "
                "inplace=%d scale=%g clusters=%d/%d: ", cfg_str(c).c_str(), n, maxlen, cols,
                (long long)xs, (long long)ys, in_place, (double)scale, resident, clusters);
  if (n > 0 && total > 0) {
    const char *e = en.run(call);
    if (*e) return std::string(where) + e;
  }
  if (counters[0] || counters[1])
    return std::string(where) + "the counters were left at " + std::to_string(counters[0]) + ", " +
           std::to_string(counters[1]);
  const unsigned char *got = static_cast<const unsigned char *>(y);
  for (size_t i = 0; i < guard; i++)
    if (got[ny * ey + i] != 0xff) return std::string(where) + "a byte past y was written";
  double rtol, atol;
  scree__tolerance((scree_dtype)c.y, &rtol, &atol);
  if (c.y == SCREE_DTYPE_FP32) rtol = 1e-4, atol = 1e-6;
  for (int t = 0; t < total; t++) {
    size_t worst = 0;
    const unsigned char *g = got + (size_t)t * (size_t)ys * ey;
    const unsigned char *r = ref.data() + (size_t)t * (size_t)ys * ey;
    const size_t bad = scree__compare(g, r, c.y, (size_t)cols, rtol, atol, &worst);
    if (bad) {
      char m[200];
      std::snprintf(m, sizeof m, "token %d: %zu bad, e.g. col %zu got %.8g want %.8g", t, bad,
                    worst, scree__load_elem(g, c.y, worst), scree__load_elem(r, c.y, worst));
      return std::string(where) + m;
    }
    if (ys > cols && std::memcmp(g + (size_t)cols * ey, r + (size_t)cols * ey,
                                 (size_t)(ys - cols) * ey))
      return std::string(where) + "row padding written at token " + std::to_string(t);
  }
  return "";
}

static void setup(void) {
  const char *s = std::getenv("SCREE_TEST_SEED");
  g_seed = s ? std::strtoull(s, nullptr, 0) : (uint64_t)std::time(nullptr) * 2654435761u + 1;
  std::printf("seed %llu (SCREE_TEST_SEED)\n", (unsigned long long)g_seed);
}

static int fields_of(const rsc_cfg &c, int *f) {
  const int v[] = {c.tpr, c.vec, c.warps, c.stok, c.stages, c.csize, c.e1};
  std::memcpy(f, v, sizeof v);
  return 7;
}

/* The units were built from configs the host accepts, with the layout the
 * host sizes the shared memory for. */
START_TEST(configs_match_the_host) {
  ck_assert_uint_gt(rsc_registry().size(), 0);
  for (const rsc_entry &en : rsc_registry()) {
    int f[8];
    fields_of(en.cfg, f);
    char why[512] = "";
    ck_assert_msg(emu_host_cluster_check(en.cfg.x, en.cfg.y, f, why, sizeof why), "%s: %s",
                  cfg_str(en.cfg).c_str(), why);
    ck_assert_msg(emu_host_cluster_smem(en.cfg.x, en.cfg.y, f) == en.cfg.smem,
                  "%s: the host sizes %zu bytes of shared memory, the kernel lays out %zu",
                  cfg_str(en.cfg).c_str(), emu_host_cluster_smem(en.cfg.x, en.cfg.y, f),
                  en.cfg.smem);
  }
}
END_TEST

/* The registry entries the command line selects. */
static std::vector<const rsc_entry *> g_selected;

START_TEST(every_config_on_edge_batches) {
  const rsc_entry &en = *g_selected[(size_t)_i];
  const rsc_cfg &c = en.cfg;
  const int s = c.stok, cs = c.csize, span = c.tpr * c.vec;
  const int cols = 2 * span + 3;
  const int64_t xs = (cols + c.vec - 1) / c.vec * c.vec, ys = xs + c.vec;
  std::vector<std::vector<int>> batches = {
      {0, 1, 2, s - 1, s, s + 1, 3, 0, 2 * s + 1, cs * s, 7},
      {cs * s + s / 2 + 3, 5, 0},      /* past what the cluster stages: a streamed part */
      {1},
  };
  std::vector<int> many;
  for (int i = 0; i < 60; i++) many.push_back((int)(next_rand() % 7));
  batches.push_back(many);
  /* Past the shared-memory plan: the plan kernel's (mostly empty
   * sequences, to keep the emulation short). */
  std::vector<int> lots(700, 0);
  for (int i = 0; i < 24; i++) lots[next_rand() % 700] = (int)(next_rand() % 5) + 1;
  lots[350] = s + 3;
  std::string e;
  int runs = 0;
  for (size_t b = 0; b < batches.size() && e.empty(); b++) {
    e = run_case(en, batches[b], cols, xs, ys, 0, 0.f, 3, 2);
    runs++;
  }
  if (e.empty()) e = run_case(en, batches[0], span, span, span, 0, -1.3f, 1, 1), runs++;
  if (e.empty() && esize(c.x) == esize(c.y))
    e = run_case(en, batches[0], cols, xs, xs, 1, 0.7f, 2, 2), runs++;
  if (e.empty()) e = run_case(en, lots, c.vec, c.vec, c.vec, 0, 0.f, 3, 2), runs++;
  /* Fewer columns than a strip: the lanes past them idle. */
  if (e.empty()) e = run_case(en, many, c.vec, c.vec, c.vec, 0, 0.f, 4, 3), runs++;
  ck_assert_msg(e.empty(), "%s", e.c_str());
  std::printf("%s: %d runs\n", cfg_str(c).c_str(), runs);
}
END_TEST

int main(int argc, char **argv) {
  for (int a = 1; a < argc; a++) {
    const rsc_entry *found = nullptr;
    for (const rsc_entry &en : rsc_registry())
      if (std::to_string(en.unit) == argv[a]) found = &en;
    if (!found) {
      std::fprintf(stderr, "usage: %s [CONFIG...]: no config %s (0 to %zu)\n", argv[0], argv[a],
                   rsc_registry().size() - 1);
      return 2;
    }
    g_selected.push_back(found);
  }
  if (argc == 1)
    for (const rsc_entry &en : rsc_registry()) g_selected.push_back(&en);
  setup();
  Suite *s = suite_create("ragged_softmax_emu");
  TCase *tc = tcase_create("emu");
  tcase_set_timeout(tc, 1800);
  tcase_add_test(tc, configs_match_the_host);
  tcase_add_loop_test(tc, every_config_on_edge_batches, 0, (int)g_selected.size());
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  /* In this process: a forked child's exit would leave Check's own
   * allocations to LeakSanitizer, and nothing here needs isolating (the
   * emulator reports a kernel's faults as results). */
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
