/* test_ce_keep_emu.cc - cross-entropy's impl=keep kernel
 * (kernels/cross_entropy_keep.cu) run on the CPU through emu.h, against
 * the CPU reference (scree__cross_entropy_ref): which thread holds which
 * vector and the tail, the owner of the target, the reductions over the
 * group and across the cluster (st.async into every CTA, mbarriers by
 * iteration parity), in place, where there is no GPU (label cpu). What the
 * GPU adds (timing, the memory model, ex2.approx) is
 * test_cross_entropy_gpu's.
 *
 * Each config tests/CMakeLists.txt builds (one translation unit each,
 * cek_config.cc) is checked against the host's check, then runs: rows
 * filling it but for one element, filled with a vec - 1 tail (in place), 1
 * and 5 elements, half of a row with every 5th logit -inf, every row
 * ignored under the mean, and a grid of two clusters looping over many
 * rows (the exchange slots and mbarriers reused, both parities, several
 * times); targets ignored, first, last, in the tail, random and outside
 * [0, vocab) (NaN rows); every reduction, smoothing and z-loss. Random
 * logits, fresh each run (the seed is printed); loss, lse and dlogits
 * poisoned before the run, dlogits' row padding must keep its bytes.
 * Tolerances: the GPU test's. */
#include <check.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "cek.h"
#include "scree.h"

extern "C" {
double scree__load_elem(const void *p, int dtype, size_t i);
void scree__store_elem(void *p, int dtype, size_t i, double v);
void scree__cross_entropy_ref(const void *logits, int64_t ls, const int64_t *targets,
                              float *loss, float *lse, void *dlogits, int64_t ds, int64_t rows,
                              int64_t vocab, scree_dtype dtype, int64_t ignore_index, float eps,
                              float z, int reduction, float grad_scale);
int emu_cek_host_check(int dtype, const int *fields, char *why, size_t n);
}

std::vector<cek_entry> &cek_registry() {
  static std::vector<cek_entry> r;
  return r;
}

static uint64_t g_seed;
static uint64_t next_rand() {
  g_seed ^= g_seed << 13;
  g_seed ^= g_seed >> 7;
  g_seed ^= g_seed << 17;
  return g_seed;
}
static double next_normal() { /* a sum of uniforms: roughly normal(0, 1) */
  double s = 0;
  for (int i = 0; i < 4; i++) s += (double)(next_rand() >> 11) / 9007199254740992.0;
  return (s - 2.0) * 1.7320508;
}

static size_t esize(int dt) { return dt == SCREE_DTYPE_FP32 ? 4 : 2; }
static const char *dname(int dt) {
  return dt == SCREE_DTYPE_FP32 ? "fp32" : dt == SCREE_DTYPE_FP16 ? "fp16" : "bf16";
}
static std::string cfg_str(const cek_cfg &c) {
  char b[160];
  std::snprintf(b, sizeof b, "%s impl=keep,tpr=%d,rows=%d,vec=%d,cache=%d,csize=%d",
                dname(c.dtype), c.tpr, c.rows, c.vec, c.cache, c.csize);
  return b;
}

struct tcase {
  int64_t rows, vocab, ls, ds; /* ds < 0: in place (ds = ls) */
  int64_t ignore;
  float eps, z;
  int reduction;
  float grad_scale;
  int all_ignored, masked, oob;
  int clusters; /* 0: one per CTA's rows, as the host launches */
};

static std::vector<const cek_entry *> g_selected;

/* One run of case t on config en; "" or what went wrong. */
static std::string run_case(const cek_entry &en, const tcase &t) {
  const cek_cfg &c = en.cfg;
  const int dt = c.dtype;
  const bool inplace = t.ds < 0;
  const int64_t rows = t.rows, vocab = t.vocab, ls = t.ls, ds = inplace ? t.ls : t.ds;
  const size_t e = esize(dt);
  std::vector<unsigned char> logits((size_t)(rows * ls) * e + 64),
      dl((size_t)(rows * ds) * e + 64, 0xff), want_d((size_t)(rows * ds) * e + 64, 0xff);
  std::vector<long long> tg((size_t)rows + 1);
  std::vector<int64_t> tg64((size_t)rows + 1);
  std::vector<float> loss((size_t)rows + 4), lse((size_t)rows + 4), want_loss((size_t)rows + 1),
      want_lse((size_t)rows + 1);
  std::memset(loss.data(), 0xff, loss.size() * 4);
  std::memset(lse.data(), 0xff, lse.size() * 4);
  for (int64_t r = 0; r < rows; r++) {
    const double sc = std::ldexp(1.0, (int)(r % 7) - 3);
    for (int64_t v = 0; v < ls; v++)
      scree__store_elem(logits.data(), dt, (size_t)(r * ls + v),
                        v < vocab ? next_normal() * sc : -7.0);
  }
  const int64_t whole = vocab / c.vec * c.vec;
  for (int64_t r = 0; r < rows; r++) {
    int64_t v;
    switch (r % 9) {
      case 0: v = t.ignore; break;
      case 1: v = vocab - 1; break;
      case 2: v = 0; break;
      case 3: v = whole < vocab ? whole : vocab / 2; break;
      case 4: v = t.oob ? vocab : vocab / 3; break;
      case 5: v = t.oob ? (t.ignore == -1 ? -2 : -1) : vocab / 5; break;
      case 6: v = whole > 0 ? whole - 1 : 0; break;
      default: v = (int64_t)(next_rand() % (uint64_t)vocab); break;
    }
    if (t.all_ignored) v = t.ignore;
    tg[(size_t)r] = v;
    tg64[(size_t)r] = v;
    if (t.masked)
      for (int64_t k = 0; k < vocab; k += 5)
        if (k != v) scree__store_elem(logits.data(), dt, (size_t)(r * ls + k), -INFINITY);
  }
  if (inplace) want_d.assign(logits.begin(), logits.end());
  scree__cross_entropy_ref(logits.data(), ls, tg64.data(), want_loss.data(), want_lse.data(),
                           want_d.data(), ds, rows, vocab, (scree_dtype)dt, t.ignore, t.eps, t.z,
                           t.reduction, t.grad_scale);
  void *dlp = dl.data();
  if (inplace) dlp = logits.data();
  unsigned long long count = 0;
  const int64_t per = c.rows;
  cek_call call{logits.data(), tg.data(), loss.data(), lse.data(), rows, (int)vocab, ls,
                t.ignore, dlp, ds, t.eps, t.z, t.grad_scale != 0.f ? t.grad_scale : 1.f,
                t.reduction == SCREE_REDUCTION_MEAN, &count,
                t.clusters ? t.clusters : (int)((rows + per - 1) / per), 2, next_rand()};
  if (call.clusters < 1) call.clusters = 1;
  const char *err = en.run(call);
  char what[400];
  std::snprintf(what, sizeof what,
                "%s: rows=%lld vocab=%lld ls=%lld ds=%lld%s ignore=%lld eps=%g z=%g red=%d "
                "gs=%g all_ignored=%d masked=%d oob=%d clusters=%d",
                cfg_str(c).c_str(), (long long)rows, (long long)vocab, (long long)ls,
                (long long)ds, inplace ? " (in place)" : "", (long long)t.ignore, t.eps, t.z,
                t.reduction, t.grad_scale, t.all_ignored, t.masked, t.oob, call.clusters);
  if (*err) return std::string(what) + ": " + err;
  int64_t kept = 0;
  for (int64_t r = 0; r < rows; r++) kept += tg64[(size_t)r] != t.ignore;
  double scale = std::fabs(t.grad_scale != 0.f ? t.grad_scale : 1.f);
  if (t.reduction == SCREE_REDUCTION_MEAN) scale /= (double)(kept ? kept : 1);
  const double rtol = dt == SCREE_DTYPE_BF16 ? 1.0 / 128 : dt == SCREE_DTYPE_FP16 ? 1.0 / 1024 : 5e-5;
  const double atol = 1e-4 * scale + (dt == SCREE_DTYPE_FP16 ? 1.0 / 16777216 : 0);
  char m[600];
  for (int64_t r = 0; r < rows; r++) {
    const float gl = loss[(size_t)r], wl = want_loss[(size_t)r];
    const bool lok = std::isnan(wl) ? std::isnan(gl)
                                    : std::fabs((double)gl - wl) <= 1e-4 + 1e-5 * std::fabs(wl);
    const float gs = lse[(size_t)r], ws = want_lse[(size_t)r];
    const bool sok = std::isnan(ws) ? std::isnan(gs)
                     : std::isinf(ws) ? gs == ws
                                      : std::fabs((double)gs - ws) <= 5e-5 + 1e-5 * std::fabs(ws);
    if (!lok || !sok) {
      std::snprintf(m, sizeof m, "%s: row %lld (target %lld): loss %.8g want %.8g, lse %.8g want %.8g",
                    what, (long long)r, (long long)tg64[(size_t)r], gl, wl, gs, ws);
      return m;
    }
    for (int64_t v = 0; v < ds; v++) {
      const size_t i = (size_t)(r * ds + v);
      if (v >= vocab) { /* padding: its bytes as they were */
        if (std::memcmp((const unsigned char *)dlp + i * e, want_d.data() + i * e, e)) {
          std::snprintf(m, sizeof m, "%s: row %lld: padding element %lld written", what,
                        (long long)r, (long long)v);
          return m;
        }
        continue;
      }
      const double g = scree__load_elem(dlp, dt, i), w = scree__load_elem(want_d.data(), dt, i);
      const bool ok = std::isnan(w) ? std::isnan(g) : std::fabs(g - w) <= atol + rtol * std::fabs(w);
      if (!ok) {
        std::snprintf(m, sizeof m, "%s: row %lld (target %lld) dlogits[%lld] %.8g want %.8g", what,
                      (long long)r, (long long)tg64[(size_t)r], (long long)v, g, w);
        return m;
      }
    }
  }
  if (std::isnan(loss[(size_t)rows]) == 0 || std::isnan(lse[(size_t)rows]) == 0)
    return std::string(what) + ": written past loss or lse";
  if (!inplace && std::memcmp(dl.data() + (size_t)(rows * ds) * e,
                              want_d.data() + (size_t)(rows * ds) * e, 64))
    return std::string(what) + ": written past dlogits";
  return "";
}

/* Every unit's config passes the host's check (ops/cross_entropy.c). */
START_TEST(configs_match_the_host) {
  for (const cek_entry &en : cek_registry()) {
    const cek_cfg &c = en.cfg;
    const int f[5] = {c.tpr, c.rows, c.vec, c.cache, c.csize};
    char why[256] = "";
    ck_assert_msg(emu_cek_host_check(c.dtype, f, why, sizeof why), "%s: %s",
                  cfg_str(c).c_str(), why);
  }
}
END_TEST

static int64_t round8(int64_t v) { return (v + 7) / 8 * 8; }

START_TEST(every_config_on_edge_rows) {
  const cek_entry &en = *g_selected[(size_t)_i];
  const cek_cfg &c = en.cfg;
  const int64_t full = (int64_t)c.csize * c.tpr * c.cache * c.vec;
  const int64_t R = c.rows * 3 + 1;
  const int64_t a = full > 1 ? full - 1 : 1, b = full + c.vec - 1, h = full / 2 + 3;
  const tcase cases[] = {
      {R, a, round8(a) + 8, round8(a) + 16, -100, 0.1f, 1e-4f, SCREE_REDUCTION_MEAN, 0, 0, 0, 1, 0},
      {5, b, round8(b), -1, 0, 0.1f, 0, SCREE_REDUCTION_SUM, 0, 0, 0, 0, 0},
      {R, 1, 8, 8, -100, 0, 1e-3f, SCREE_REDUCTION_MEAN, 0, 0, 0, 0, 0},
      {R, 5, 8, -1, 2, 0.3f, 1e-4f, SCREE_REDUCTION_NONE, 3.f, 0, 0, 1, 0},
      {R, h, round8(h), round8(h), -100, 0, 1e-4f, SCREE_REDUCTION_MEAN, 0, 0, 1, 0, 0},
      {R, b, round8(b), round8(b), -1, 0.1f, 1e-4f, SCREE_REDUCTION_MEAN, 0, 1, 0, 0, 0},
      {c.rows * 9 + 2, a, round8(a), -1, -100, 0.1f, 1e-4f, SCREE_REDUCTION_MEAN, -0.5f, 0, 0, 1, 2},
  };
  std::string err;
  int runs = 0;
  for (const tcase &t : cases) {
    err = run_case(en, t);
    runs++;
    if (!err.empty()) break;
  }
  ck_assert_msg(err.empty(), "%s", err.c_str());
  std::printf("%s: %d runs\n", cfg_str(c).c_str(), runs);
}
END_TEST

int main(int argc, char **argv) {
  for (int a = 1; a < argc; a++) {
    const cek_entry *found = nullptr;
    for (const cek_entry &en : cek_registry())
      if (std::to_string(en.unit) == argv[a]) found = &en;
    if (!found) {
      std::fprintf(stderr, "usage: %s [CONFIG...]: no config %s (0 to %zu)\n", argv[0], argv[a],
                   cek_registry().size() - 1);
      return 2;
    }
    g_selected.push_back(found);
  }
  if (argc == 1)
    for (const cek_entry &en : cek_registry()) g_selected.push_back(&en);
  const char *s = std::getenv("SCREE_TEST_SEED");
  g_seed = s ? std::strtoull(s, nullptr, 0) : (uint64_t)std::time(nullptr) * 2654435761u;
  if (!g_seed) g_seed = 1;
  std::printf("seed %llu (SCREE_TEST_SEED)\n", (unsigned long long)g_seed);
  Suite *su = suite_create("ce_keep_emu");
  TCase *tc = tcase_create("emu");
  tcase_set_timeout(tc, 1800);
  tcase_add_test(tc, configs_match_the_host);
  tcase_add_loop_test(tc, every_config_on_edge_rows, 0, (int)g_selected.size());
  suite_add_tcase(su, tc);
  SRunner *sr = srunner_create(su);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
