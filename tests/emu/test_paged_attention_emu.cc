/* test_paged_attention_emu.cc - paged attention's split kernel
 * (kernels/paged_attention.cu: scree_paged_plan and scree_paged_attention)
 * run on the CPU through emu.h, against the op's CPU reference: the
 * kernel's index arithmetic, its ldmatrix and mma fragments, swizzles,
 * cp.async pipeline, masks, online softmax, the merge of its key warps and
 * the split-KV merge protocol, where there is no GPU (label cpu). What the
 * GPU adds (timing, the memory model, the instructions themselves) is
 * test_paged_attention_gpu's.
 *
 * The configs tests/CMakeLists.txt builds (one translation unit each,
 * pa_config.cc) are checked against the host's check and shared-memory
 * size; then each config named on the command line by its place in that
 * list (every one without arguments) runs on small batches laid out as
 * ops/paged_attention.c's launch lays them out (its grid, workspace, plan
 * and self-plan paths; 5 SM slots): pages of 16 tokens shuffled through a
 * pool with spare pages, a first page shared by two sequences, last pages
 * partly filled, query lengths 1, 3 and 9 (two row tiles at BM 16), key
 * lengths 0 and 2 (rows with no visible key), GQA 4:2, causal and not, a
 * window, softcap, pages of 2 tokens (a page per row of a tile), padded
 * strides of q, out and the caches. Random inputs, fresh each run (the
 * seed is printed); out, lse and the workspace poisoned before the run;
 * the padding of out must keep its bytes and the merge counters must be
 * left zero. Tolerances those of the GPU test: out 4e-3 + 4e-3 |ref| in
 * fp16, 2e-2 + 2e-2 |ref| in bf16; lse 2e-3 + 1e-4 |ref|, -inf exactly. */
#include <check.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "pa.h"
#include "scree.h"

extern "C" {
double scree__load_elem(const void *p, int dtype, size_t i);
void scree__store_elem(void *p, int dtype, size_t i, double v);
size_t scree__compare(const void *got, const void *ref, int dtype, size_t n, double rtol,
                      double atol, size_t *worst);
}

std::vector<pa_entry> &pa_registry() {
  static std::vector<pa_entry> r;
  return r;
}

static uint64_t g_seed;

static uint64_t next_rand() {
  g_seed ^= g_seed << 13;
  g_seed ^= g_seed >> 7;
  g_seed ^= g_seed << 17;
  return g_seed;
}

/* Uniform in [-1, 1]. */
static double unit() { return ((double)(next_rand() % 2000001) - 1000000.0) / 1000000.0; }

static std::string cfg_str(const pa_cfg &c) {
  char b[160];
  std::snprintf(b, sizeof b, "%s d=%d bm=%d bn=%d warps=%d stages=%d split=%d",
                c.dtype == 1 ? "fp16" : "bf16", c.d, c.bm, c.bn, c.warps, c.stages, c.split);
  return b;
}

/* One batch: (query tokens, keys) per sequence, and the call's options. */
struct pa_case {
  const char *name;
  std::vector<std::pair<int, int>> seqs;
  int page;               /* tokens a page */
  int share;              /* sequence whose first page is sequence 0's (-1: none) */
  int causal;
  long long wl, wr;
  float softcap, scale;
  int self_plan;          /* else the plan kernel */
};

static const int kHeadsQ = 4, kHeadsKv = 2, kSlots = 5, kResident = 3;

static int log2i(long long v) {
  int l = 0;
  while ((1ll << l) < v) l++;
  return l;
}

static long long cdiv(long long a, long long b) { return (a + b - 1) / b; }

/* Runs one case; "" or what failed. */
static std::string run_case(const pa_entry &en, const pa_case &pc) {
  const pa_cfg &c = en.cfg;
  const int d = c.d, dt = c.dtype, P = pc.page, batch = (int)pc.seqs.size();
  const int group = kHeadsQ / kHeadsKv;
  /* the batch */
  std::vector<int> cu(1, 0), sk;
  int maxq = 0, maxk = 0, maxpages = 1;
  for (const auto &s : pc.seqs) {
    cu.push_back(cu.back() + s.first);
    sk.push_back(s.second);
    maxq = s.first > maxq ? s.first : maxq;
    maxk = s.second > maxk ? s.second : maxk;
    maxpages = (int)cdiv(s.second, P) > maxpages ? (int)cdiv(s.second, P) : maxpages;
  }
  const int total_q = cu.back();
  /* pages: shuffled through a pool with three spare, the first page of
   * sequence `share` that of sequence 0 */
  const long long bts = maxpages + 1;
  int npages = 3;
  for (int b = 0; b < batch; b++) npages += (int)cdiv(sk[(size_t)b], P);
  std::vector<int> pool((size_t)npages);
  for (int i = 0; i < npages; i++) pool[(size_t)i] = i;
  for (int i = npages - 1; i > 0; i--)
    std::swap(pool[(size_t)i], pool[next_rand() % (size_t)(i + 1)]);
  std::vector<int> bt((size_t)(batch * bts), 0x3fffffff);
  int next = 0;
  for (int b = 0; b < batch; b++)
    for (int p = 0; p < cdiv(sk[(size_t)b], P); p++)
      bt[(size_t)(b * bts + p)] = (b == pc.share && p == 0) ? bt[0] : pool[(size_t)next++];
  /* padded strides (elements, multiples of 8) */
  const long long qh = d + 8, qt = kHeadsQ * qh, ch = d, ct = kHeadsKv * d + 8, cp = P * ct + 16;
  const size_t nq = (size_t)(total_q * qt) + 8, nc = (size_t)(npages * cp);
  std::vector<unsigned short> q(nq), kc(nc), vc(nc), out(nq, 0xffff), ref(nq, 0xffff);
  for (size_t i = 0; i < nq; i++) scree__store_elem(q.data(), dt, i, unit());
  for (size_t i = 0; i < nc; i++) {
    scree__store_elem(kc.data(), dt, i, unit());
    scree__store_elem(vc.data(), dt, i, unit());
  }
  const size_t nl = (size_t)(kHeadsQ * total_q) + 1;
  std::vector<float> lse(nl, NAN), rlse(nl, NAN);

  scree_paged_attention_args a;
  std::memset(&a, 0, sizeof a);
  a.batch = batch;
  a.total_q = total_q;
  a.max_seqlen_q = maxq;
  a.max_seqlen_k = maxk;
  a.num_pages = npages;
  a.page_size = P;
  a.block_table_stride = bts;
  a.heads_q = kHeadsQ;
  a.heads_kv = kHeadsKv;
  a.head_dim = d;
  a.q_token_stride = a.out_token_stride = qt;
  a.q_head_stride = a.out_head_stride = qh;
  a.cache_page_stride = cp;
  a.cache_token_stride = ct;
  a.cache_head_stride = ch;
  a.dtype = (scree_dtype)dt;
  a.causal = pc.causal;
  a.scale = pc.scale;
  a.window_left = pc.wl;
  a.window_right = pc.wr;
  a.softcap = pc.softcap;
  void *const host[] = {q.data(), ref.data(), rlse.data(), kc.data(), vc.data(),
                        bt.data(), sk.data(),  cu.data()};
  emu_pa_reference(&a, host);

  /* the launch, as ops/paged_attention.c's */
  const long long by_len = batch * cdiv((long long)maxq * group, c.bm);
  const long long by_rows = cdiv((long long)total_q * group, c.bm) + batch;
  const long long groups = (by_len < by_rows ? by_len : by_rows) * kHeadsKv;
  const long long target = c.split ? (long long)c.split * kSlots : 0;
  const long long bound = groups + target;
  std::vector<int> plan((size_t)(6 + 4 * batch + groups), -7), zeroed((size_t)groups + 1, 0);
  std::vector<float> part((size_t)(bound * c.bm * d), NAN), plse((size_t)(bound * c.bm), NAN);
  const double scale = pc.scale != 0.f ? pc.scale : 1.0 / std::sqrt((double)d);
  pa_call k;
  k.q = q.data();
  k.k_cache = kc.data();
  k.v_cache = vc.data();
  k.out = out.data();
  k.lse = lse.data();
  k.block_table = bt.data();
  k.seqlens_k = sk.data();
  k.cu_q = cu.data();
  k.q_ts = k.o_ts = qt;
  k.q_hs = k.o_hs = qh;
  k.c_ps = cp;
  k.c_ts = ct;
  k.c_hs = ch;
  k.bt_stride = bts;
  k.total_q = total_q;
  k.batch = batch;
  k.heads_kv = kHeadsKv;
  k.group = group;
  k.logp = log2i(P);
  k.sl2 = (float)(scale * 1.4426950408889634);
  k.cap_in = pc.softcap > 0.f ? (float)(scale / (double)pc.softcap) : 0.f;
  k.cap_out = pc.softcap > 0.f ? (float)((double)pc.softcap / scale) : 0.f;
  k.causal = pc.causal;
  k.wl = (int)pc.wl;
  k.wr = (int)pc.wr;
  k.plan = plan.data();
  k.part = part.data();
  k.plse = plse.data();
  k.target = target;
  k.self_plan = pc.self_plan && batch <= c.threads;
  k.zeroed = zeroed.data();
  k.grid = (unsigned)(bound > 0 ? bound : 1);
  k.resident = kResident;
  k.seed = next_rand();
  char where[240];
  std::snprintf(where, sizeof where, "%s, case %s (%s, grid %u): ", cfg_str(c).c_str(), pc.name,
                k.self_plan ? "self-planned" : "plan kernel", k.grid);
  const char *e = en.run(k);
  if (*e) return std::string(where) + e;

  /* the merge counters are left zero (the plan kernel's: those of its
   * groups, plan[1], at most the host's bound) */
  const int *counters = k.self_plan ? zeroed.data() : plan.data() + 6 + 4 * batch;
  const long long used = k.self_plan ? groups : plan[1];
  if (used < 0 || used > groups)
    return std::string(where) + "the plan has " + std::to_string(used) + " groups, the host " +
           std::to_string(groups);
  for (long long i = 0; i < used; i++)
    if (counters[i])
      return std::string(where) + "merge counter " + std::to_string(i) + " left at " +
             std::to_string(counters[i]);
  const double tol = dt == 1 ? 4e-3 : 2e-2;
  for (int t = 0; t < total_q; t++)
    for (int h = 0; h < kHeadsQ; h++) {
      const size_t at = (size_t)(t * qt + h * qh);
      size_t worst = 0;
      const size_t bad = scree__compare(out.data() + at, ref.data() + at, dt, (size_t)d, tol, tol,
                                        &worst);
      char m[200];
      if (bad) {
        std::snprintf(m, sizeof m, "out token %d head %d: %zu bad, e.g. col %zu got %.6g want %.6g",
                      t, h, bad, worst, scree__load_elem(out.data() + at, dt, worst),
                      scree__load_elem(ref.data() + at, dt, worst));
        return std::string(where) + m;
      }
      for (long long i = d; i < qh; i++)
        if (out[at + (size_t)i] != 0xffff)
          return std::string(where) + "the padding of out written at token " + std::to_string(t);
      const float g = lse[(size_t)(h * total_q + t)], r = rlse[(size_t)(h * total_q + t)];
      const bool ok =
          std::isinf(r) ? g == r : std::fabs((double)g - r) <= 2e-3 + 1e-4 * std::fabs(r);
      if (!ok) {
        std::snprintf(m, sizeof m, "lse token %d head %d: got %.8g want %.8g", t, h, (double)g,
                      (double)r);
        return std::string(where) + m;
      }
    }
  return "";
}

static const pa_case kCases[] = {
    {"decode-and-spec", {{1, 37}, {3, 70}, {1, 20}, {3, 2}}, 16, 2, 1, -1, -1, 0.f, 0.5f, 1},
    {"window", {{3, 50}, {9, 40}, {1, 33}}, 16, 2, 0, 23, 5, 0.f, 0.5f, 1},
    {"softcap-plan-kernel", {{1, 64}, {3, 0}, {3, 45}, {1, 17}}, 16, 3, 1, -1, -1, 2.f, 0.5f, 0},
    {"pages-of-2", {{3, 30}, {1, 9}}, 2, -1, 1, -1, -1, 0.f, 0.f, 1},
};

/* The slow sweep's batches: random lengths (query 1 to 12, keys 0 to
 * 300), page sizes 1 to 256, causal or not, windows, softcap, self-planned
 * or not; the last of them 260 sequences, past a CTA's threads (the plan
 * kernel's, as the host launches it). */
static pa_case random_case(int round, int rounds) {
  static const int pages[] = {1, 4, 16, 64, 256};
  pa_case pc;
  pc.name = "random";
  const int n = round == rounds - 1 ? 260 : 1 + (int)(next_rand() % 8);
  for (int b = 0; b < n; b++) {
    const int lq = n > 8 ? 1 : 1 + (int)(next_rand() % 12);
    const int lk = n > 8 ? (int)(next_rand() % 24) : (int)(next_rand() % 301);
    pc.seqs.push_back({lq, lk});
  }
  pc.page = pages[next_rand() % 5];
  pc.share = n > 1 ? 1 : -1;
  pc.causal = (int)(next_rand() % 2);
  pc.wl = next_rand() % 3 ? -1 : (long long)(next_rand() % 41);
  pc.wr = next_rand() % 3 ? -1 : (long long)(next_rand() % 11);
  pc.softcap = next_rand() % 3 ? 0.f : 1.f + (float)(next_rand() % 40) / 8.f;
  pc.scale = next_rand() % 2 ? 0.f : 0.25f + (float)(next_rand() % 8) / 8.f;
  pc.self_plan = (int)(next_rand() % 2);
  return pc;
}

static bool g_sweep;

static void setup(void) {
  const char *s = std::getenv("SCREE_TEST_SEED");
  g_seed = s ? std::strtoull(s, nullptr, 0) : (uint64_t)std::time(nullptr) * 2654435761u + 1;
  std::printf("seed %llu (SCREE_TEST_SEED)\n", (unsigned long long)g_seed);
}

static void fields_of(const pa_cfg &c, int *f) {
  const int v[] = {c.bm, c.bn, c.warps, c.stages, c.split};
  std::memcpy(f, v, sizeof v);
}

/* The units were built from configs the host accepts, with the layout the
 * host sizes the shared memory for. */
START_TEST(configs_match_the_host) {
  ck_assert_uint_gt(pa_registry().size(), 0);
  for (const pa_entry &en : pa_registry()) {
    int f[5];
    fields_of(en.cfg, f);
    char why[512] = "";
    ck_assert_msg(emu_pa_check(en.cfg.dtype, en.cfg.d, f, why, sizeof why), "%s: %s",
                  cfg_str(en.cfg).c_str(), why);
    ck_assert_msg(emu_pa_smem(en.cfg.dtype, en.cfg.d, f) == en.cfg.smem,
                  "%s: the host sizes %zu bytes of shared memory, the kernel lays out %zu",
                  cfg_str(en.cfg).c_str(), emu_pa_smem(en.cfg.dtype, en.cfg.d, f), en.cfg.smem);
  }
}
END_TEST

/* The registry entries the command line selects. */
static std::vector<const pa_entry *> g_selected;

START_TEST(every_config_on_small_batches) {
  const pa_entry &en = *g_selected[(size_t)_i];
  std::string e;
  int runs = 0;
  if (g_sweep) {
    const int rounds = 12;
    for (int r = 0; r < rounds && e.empty(); r++, runs++) e = run_case(en, random_case(r, rounds));
  } else {
    for (const pa_case &pc : kCases)
      if (e.empty()) e = run_case(en, pc), runs++;
  }
  ck_assert_msg(e.empty(), "%s", e.c_str());
  std::printf("%s: %d cases\n", cfg_str(en.cfg).c_str(), runs);
}
END_TEST

int main(int argc, char **argv) {
  int a0 = 1;
  if (argc > 1 && !std::strcmp(argv[1], "--sweep")) g_sweep = true, a0 = 2;
  for (int a = a0; a < argc; a++) {
    const pa_entry *found = nullptr;
    for (const pa_entry &en : pa_registry())
      if (std::to_string(en.unit) == argv[a]) found = &en;
    if (!found) {
      std::fprintf(stderr, "usage: %s [--sweep] [CONFIG...]: no config %s (0 to %zu)\n", argv[0],
                   argv[a],
                   pa_registry().size() - 1);
      return 2;
    }
    g_selected.push_back(found);
  }
  if (argc == a0)
    for (const pa_entry &en : pa_registry()) g_selected.push_back(&en);
  setup();
  Suite *s = suite_create("paged_attention_emu");
  TCase *tc = tcase_create("emu");
  tcase_set_timeout(tc, 1800);
  tcase_add_test(tc, configs_match_the_host);
  tcase_add_loop_test(tc, every_config_on_small_batches, 0, (int)g_selected.size());
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  /* In this process, as test_ragged_softmax_emu (its main says why). */
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
