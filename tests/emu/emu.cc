/* emu.cc - the runtime of emu.h: fibers, CTAs, clusters, barriers,
 * mbarriers, asynchronous copies and stores. One host thread; a fiber runs
 * until it must wait for another, then the scheduler picks the next (in
 * order), delivering some pending asynchronous stores in between. */
#include "emu.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace emu {
namespace {

constexpr size_t kStack = 128 * 1024;

struct Cluster;

struct Copy {
  unsigned char *dst;
  const unsigned char *src;
  int bytes, src_bytes;
};

struct Thread {
  ThreadView v;
  Cta *cta = nullptr;
  int linear = 0, lane = 0, warp = 0;
  ucontext_t ctx;
  void *stack = nullptr;
  bool done = false;
  std::deque<std::vector<Copy>> groups; /* committed cp.async groups, oldest first */
  std::vector<Copy> open;                /* issued, not yet committed */
  bool arrived = false;                  /* at the cluster barrier, not yet waited */
  unsigned arrived_gen = 0;
};

struct MBar {
  unsigned expected = 0, pending = 0, phase = 0;
  long tx = 0;
};

struct Warp {
  uint64_t slot[32];
  unsigned count[2] = {0, 0}, gen[2] = {0, 0}, live = 0;
};

} // namespace

struct Cta {
  Cluster *cl = nullptr;
  unsigned rank = 0;
  std::vector<unsigned char> smem;
  std::vector<std::unique_ptr<Thread>> threads;
  std::vector<Warp> warps;
  unsigned live = 0, bar_count = 0, bar_gen = 0;
  std::map<unsigned, MBar> mbars; /* by shared-memory offset */
  bool exited = false;
};

namespace {

struct Cluster {
  std::vector<std::unique_ptr<Cta>> ctas;
  unsigned live = 0, bar_count = 0, bar_gen = 0;
};

/* An asynchronous store or remote arrival on its way. */
struct Pending {
  bool store;
  Cta *to;
  unsigned off, value;  /* the store */
  Cta *bar_cta;
  unsigned bar_off, bytes;
};

struct State {
  const Launch *l = nullptr;
  ucontext_t sched;
  Thread *cur = nullptr;
  std::vector<std::unique_ptr<Cluster>> clusters; /* alive */
  std::vector<Pending> pending;
  std::mt19937_64 rng;
  std::string error;
  bool failing = false;
  unsigned long progress = 0;
#ifdef EMU_ASAN
  const void *main_bottom = nullptr;
  size_t main_size = 0;
#endif
};

State *g = nullptr;

/* Shared-window addresses: bits 0..23 the offset, 24..27 the cluster rank
 * plus one, so that 0 is never a valid address. */
constexpr unsigned kOffMask = 0xffffffu;

Cta *cta_of(unsigned addr, unsigned *off) {
  const unsigned r = (addr >> 24) - 1;
  Cluster *cl = g->cur->cta->cl;
  if ((addr >> 24) == 0 || r >= cl->ctas.size()) fail("a shared address that names no CTA");
  *off = addr & kOffMask;
  Cta *c = cl->ctas[r].get();
  if (*off >= c->smem.size() + 1) fail("a shared address past the CTA's shared memory");
  return c;
}

void switch_to_sched() {
  Thread *t = g->cur;
#ifdef EMU_ASAN
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, g->main_bottom, g->main_size);
#endif
  swapcontext(&t->ctx, &g->sched);
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  if (g->failing) {
    /* The launch is being abandoned: never return into the kernel. */
    switch_to_sched();
  }
}

void note_progress() { g->progress++; }

void yield() { switch_to_sched(); }

MBar &mbar_at(unsigned bar, Cta **owner) {
  unsigned off;
  Cta *c = cta_of(bar, &off);
  if (off % 8) fail("an mbarrier not 8-byte aligned");
  auto it = c->mbars.find(off);
  if (it == c->mbars.end()) fail("an mbarrier used before mbarrier.init");
  if (owner) *owner = c;
  return it->second;
}

void mbar_check(MBar &m) {
  if (m.pending == 0 && m.tx <= 0) {
    if (m.tx < 0) fail("an mbarrier phase completed with more transaction bytes than expected");
    m.phase++;
    m.pending = m.expected;
    m.tx = 0;
    note_progress();
  }
}

void deliver(const Pending &p) {
  if (p.store) {
    if (p.to->exited) fail("st.async into a CTA that has exited");
    std::memcpy(p.to->smem.data() + p.off, &p.value, 4);
  }
  if (p.bar_cta->exited) fail("a remote mbarrier arrival at a CTA that has exited");
  auto it = p.bar_cta->mbars.find(p.bar_off);
  if (it == p.bar_cta->mbars.end()) fail("a remote arrival at an mbarrier never initialised");
  MBar &m = it->second;
  if (p.store) {
    m.tx -= (long)p.bytes;
  } else {
    if (m.pending == 0) fail("more arrivals at an mbarrier than its count");
    m.pending--;
    m.tx += (long)p.bytes;
  }
  mbar_check(m);
}

/* Some of the pending operations, in a random order (relaxed: any order). */
void deliver_some(bool all) {
  if (g->pending.empty()) return;
  std::shuffle(g->pending.begin(), g->pending.end(), g->rng);
  size_t keep = all ? 0 : (size_t)(g->rng() % (g->pending.size() + 1));
  std::vector<Pending> now(g->pending.begin() + (long)keep, g->pending.end());
  g->pending.resize(keep);
  for (const Pending &p : now) deliver(p);
  if (!now.empty()) note_progress();
}

void perform(const Copy &c) {
  std::memcpy(c.dst, c.src, (size_t)c.src_bytes);
  std::memset(c.dst + c.src_bytes, 0, (size_t)(c.bytes - c.src_bytes));
}

void thread_exit(Thread *t) {
  t->done = true;
  Cta *c = t->cta;
  Cluster *cl = c->cl;
  c->live--;
  c->warps[(size_t)t->warp].live--;
  cl->live--;
  /* An exited thread no longer holds a barrier back. */
  if (c->live && c->bar_count == c->live) c->bar_count = 0, c->bar_gen++;
  if (t->arrived) cl->bar_count--;
  if (cl->live && cl->bar_count == cl->live) cl->bar_count = 0, cl->bar_gen++;
  if (c->live == 0) c->exited = true;
  note_progress();
}

void trampoline() {
#ifdef EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g->main_bottom, &g->main_size);
#endif
  g->l->body();
  Thread *t = g->cur;
  thread_exit(t);
#ifdef EMU_ASAN
  __sanitizer_start_switch_fiber(nullptr, g->main_bottom, g->main_size);
#endif
  setcontext(&g->sched);
}

/* Apart from start_cluster: getcontext returns twice, which would let the
 * compiler clobber the caller's loop variables. */
__attribute__((noinline)) void make_fiber(Thread *t) {
  getcontext(&t->ctx);
  t->ctx.uc_stack.ss_sp = t->stack;
  t->ctx.uc_stack.ss_size = kStack;
  t->ctx.uc_link = nullptr;
  makecontext(&t->ctx, trampoline, 0);
}

void start_cluster(unsigned index) {
  const Launch &l = *g->l;
  auto cl = std::make_unique<Cluster>();
  const unsigned nthreads = l.block.x * l.block.y * l.block.z;
  for (unsigned r = 0; r < l.cluster; r++) {
    auto c = std::make_unique<Cta>();
    c->cl = cl.get();
    c->rank = r;
    c->smem.assign(l.smem + 16, 0xa5); /* garbage, as a GPU's shared memory */
    c->warps.resize((nthreads + 31) / 32);
    const unsigned b = index * l.cluster + r;
    for (unsigned i = 0; i < nthreads; i++) {
      auto t = std::make_unique<Thread>();
      t->v.tid = {i % l.block.x, i / l.block.x % l.block.y, i / (l.block.x * l.block.y)};
      t->v.bid = {b % l.grid.x, b / l.grid.x % l.grid.y, b / (l.grid.x * l.grid.y)};
      t->v.bdim = l.block;
      t->v.gdim = l.grid;
      t->cta = c.get();
      t->linear = (int)i;
      t->lane = (int)(i % 32);
      t->warp = (int)(i / 32);
      c->warps[i / 32].live++;
      t->stack = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (t->stack == MAP_FAILED) {
        std::fprintf(stderr, "emu: mmap of a fiber stack failed\n");
        std::abort();
      }
      make_fiber(t.get());
      c->threads.push_back(std::move(t));
    }
    c->live = nthreads;
    cl->live += nthreads;
    cl->ctas.push_back(std::move(c));
  }
  g->clusters.push_back(std::move(cl));
}

void free_cluster(Cluster *cl) {
  for (auto &c : cl->ctas)
    for (auto &t : c->threads) munmap(t->stack, kStack);
}

Thread *me() {
  if (!g || !g->cur) {
    std::fprintf(stderr, "emu: a CUDA function called outside a launch\n");
    std::abort();
  }
  return g->cur;
}

} // namespace

/* ---- the API ------------------------------------------------------------ */

ThreadView *view() { return &me()->v; }
unsigned char *smem() { return me()->cta->smem.data(); }

void fail(const char *what) {
  if (!g->failing) {
    g->failing = true;
    char where[96];
    Thread *t = g->cur;
    std::snprintf(where, sizeof where, " (thread %d of CTA %u, rank %u)", t->linear, t->v.bid.x,
                  t->cta->rank);
    g->error = std::string(what) + where;
  }
  switch_to_sched();
  std::abort(); /* not reached */
}

void syncthreads() {
  Thread *t = me();
  Cta *c = t->cta;
  const unsigned gen = c->bar_gen;
  note_progress();
  if (++c->bar_count == c->live) {
    c->bar_count = 0;
    c->bar_gen++;
    note_progress();
  } else {
    while (c->bar_gen == gen) yield();
  }
}

uint64_t warp_exchange(uint64_t mine, int src) {
  Thread *t = me();
  Warp &w = t->cta->warps[(size_t)t->warp];
  if (w.live != 32) fail("a warp shuffle in a warp with exited lanes");
  auto step = [&](int k) {
    const unsigned gen = w.gen[k];
    note_progress();
    if (++w.count[k] == w.live) {
      w.count[k] = 0;
      w.gen[k]++;
      note_progress();
    } else {
      while (w.gen[k] == gen) yield();
    }
  };
  w.slot[t->lane] = mine;
  step(0);
  const uint64_t r = w.slot[src];
  step(1);
  return r;
}

unsigned smem_addr(const void *p) {
  Cta *c = me()->cta;
  const unsigned char *b = c->smem.data();
  const unsigned char *q = static_cast<const unsigned char *>(p);
  if (q < b || q > b + c->smem.size())
    fail("a shared-window address of memory outside shared memory");
  return (c->rank + 1) << 24 | (unsigned)(q - b);
}

unsigned map_rank(unsigned addr, unsigned rank) {
  if (rank >= me()->cta->cl->ctas.size()) fail("mapa to a rank past the cluster");
  return (rank + 1) << 24 | (addr & kOffMask);
}

void *resolve(unsigned addr) {
  unsigned off;
  Cta *c = cta_of(addr, &off);
  if (c->exited) fail("an access to the shared memory of a CTA that has exited");
  return c->smem.data() + off;
}

unsigned cluster_rank() { return me()->cta->rank; }

void cluster_arrive(bool) {
  Thread *t = me();
  Cluster *cl = t->cta->cl;
  if (t->arrived) fail("barrier.cluster.arrive twice without a wait");
  t->arrived = true;
  t->arrived_gen = cl->bar_gen;
  note_progress();
  if (++cl->bar_count == cl->live) {
    cl->bar_count = 0;
    cl->bar_gen++;
    note_progress();
  }
}

void cluster_wait() {
  Thread *t = me();
  Cluster *cl = t->cta->cl;
  if (!t->arrived) fail("barrier.cluster.wait without an arrival");
  while (cl->bar_gen == t->arrived_gen) yield();
  t->arrived = false;
}

void mbar_init(unsigned bar, unsigned count) {
  unsigned off;
  Cta *c = cta_of(bar, &off);
  if (c != me()->cta) fail("mbarrier.init of another CTA's mbarrier");
  if (off % 8) fail("an mbarrier not 8-byte aligned");
  MBar m;
  m.expected = m.pending = count;
  c->mbars[off] = m;
}

void mbar_arrive_expect(unsigned bar, unsigned bytes) {
  Cta *owner;
  MBar &m = mbar_at(bar, &owner);
  if (owner != me()->cta) fail("a local mbarrier arrival at another CTA's mbarrier");
  if (m.pending == 0) fail("more arrivals at an mbarrier than its count");
  m.pending--;
  m.tx += (long)bytes;
  note_progress();
  mbar_check(m);
}

void mbar_arrive_expect_remote(unsigned bar, unsigned bytes) {
  unsigned off;
  Cta *c = cta_of(bar, &off);
  g->pending.push_back(Pending{false, nullptr, 0, 0, c, off, bytes});
}

void mbar_wait(unsigned bar, unsigned parity) {
  Cta *owner;
  MBar *m = &mbar_at(bar, &owner);
  if (owner != me()->cta) fail("a wait on another CTA's mbarrier");
  while ((m->phase & 1u) == (parity & 1u)) {
    yield();
    m = &mbar_at(bar, nullptr);
  }
}

void st_async_u32(unsigned addr, unsigned v, unsigned bar) {
  unsigned off, boff;
  Cta *to = cta_of(addr, &off);
  Cta *bc = cta_of(bar, &boff);
  if (to != bc) fail("st.async whose mbarrier is in another CTA than its data");
  if (off + 4 > to->smem.size()) fail("st.async past the CTA's shared memory");
  g->pending.push_back(Pending{true, to, off, v, bc, boff, 4});
}

void cp_async(unsigned dst, const void *src, int bytes, int src_bytes) {
  unsigned off;
  Cta *c = cta_of(dst, &off);
  if (c != me()->cta) fail("cp.async into another CTA's shared memory");
  if (off % (unsigned)bytes) fail("cp.async to a misaligned shared address");
  if (off + (unsigned)bytes > c->smem.size()) fail("cp.async past the CTA's shared memory");
  if (src_bytes < 0 || src_bytes > bytes) fail("cp.async with a source size past its size");
  if (src_bytes > 0 && reinterpret_cast<uintptr_t>(src) % (uintptr_t)bytes)
    fail("cp.async from a global address not aligned to its size");
  me()->open.push_back(
      Copy{c->smem.data() + off, static_cast<const unsigned char *>(src), bytes, src_bytes});
}

void cp_commit() {
  Thread *t = me();
  t->groups.push_back(std::move(t->open));
  t->open.clear();
}

void cp_wait(int n) {
  Thread *t = me();
  while ((int)t->groups.size() > n) {
    for (const Copy &c : t->groups.front()) perform(c);
    t->groups.pop_front();
  }
}

const char *launch(const Launch &l) {
  static std::string result;
  State st;
  st.l = &l;
  st.rng.seed(l.seed);
  g = &st;
  const unsigned nclusters = l.grid.x * l.grid.y * l.grid.z / l.cluster;
  if (l.cluster == 0 || l.grid.x % l.cluster) {
    g = nullptr;
    return "the grid is not a whole number of clusters along x";
  }
  unsigned started = 0;
  unsigned long idle_rounds = 0;
  while (!st.failing) {
    while (started < nclusters && st.clusters.size() < (size_t)(l.resident > 0 ? l.resident : 1))
      start_cluster(started++);
    if (st.clusters.empty()) break;
    const unsigned long before = st.progress;
    bool ran = false;
    for (size_t ci = 0; ci < st.clusters.size() && !st.failing; ci++) {
      Cluster *cl = st.clusters[ci].get();
      for (auto &c : cl->ctas)
        for (auto &t : c->threads) {
          if (t->done || st.failing) continue;
          deliver_some(false);
          if (st.failing) break;
          st.cur = t.get();
#ifdef EMU_ASAN
          void *fake = nullptr;
          __sanitizer_start_switch_fiber(&fake, t->stack, kStack);
#endif
          swapcontext(&st.sched, &t->ctx);
#ifdef EMU_ASAN
          __sanitizer_finish_switch_fiber(fake, &st.main_bottom, &st.main_size);
#endif
          st.cur = nullptr;
          ran = true;
        }
    }
    if (st.failing) break;
    /* Finished clusters make room for the next. */
    for (size_t ci = 0; ci < st.clusters.size();) {
      if (st.clusters[ci]->live == 0) {
        free_cluster(st.clusters[ci].get());
        st.clusters.erase(st.clusters.begin() + (long)ci);
        note_progress();
      } else {
        ci++;
      }
    }
    if (st.progress == before && ran) {
      if (!st.pending.empty()) {
        deliver_some(true);
        continue;
      }
      if (++idle_rounds >= 2) {
        st.error = "deadlock: every live thread waits and nothing is on its way";
        st.failing = true;
      }
    } else {
      idle_rounds = 0;
    }
  }
  if (!st.failing && !st.pending.empty()) {
    st.error = "asynchronous stores left undelivered at the end of the launch";
    st.failing = true;
  }
  for (auto &cl : st.clusters) free_cluster(cl.get());
  result = st.failing ? st.error : "";
  g = nullptr;
  return result.c_str();
}

} // namespace emu

/* ---- 16-bit conversions ------------------------------------------------- */

float emu_half_to_float(unsigned short h) {
  const unsigned s = (unsigned)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  unsigned bits;
  if (e == 0) {
    if (m == 0) {
      bits = s;
    } else { /* subnormal: m * 2^-24 */
      const float f = std::ldexp((float)m, -24);
      return s ? -f : f;
    }
  } else if (e == 31) {
    bits = s | 0x7f800000u | (m << 13);
  } else {
    bits = s | ((e + 112) << 23) | (m << 13);
  }
  return __uint_as_float(bits);
}

unsigned short emu_float_to_half(float f) {
  const unsigned x = __float_as_uint(f), s = (x >> 16) & 0x8000;
  const unsigned a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(s | 0x7e00);  /* NaN */
  if (a >= 0x477ff000u) return (unsigned short)(s | 0x7c00); /* rounds past 65504: inf */
  if (a < 0x38800000u) {                                     /* below 2^-14: subnormal */
    const float v = std::fabs(f) * 16777216.0f;                /* in units of 2^-24 */
    return (unsigned short)(s | (unsigned)std::nearbyint(v));  /* ties to even (default) */
  }
  const unsigned e = (a >> 23) - 112, m = a & 0x7fffff;
  unsigned h = (e << 10) | (m >> 13);
  const unsigned rest = m & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
  return (unsigned short)(s | h);
}

unsigned short emu_float_to_bf16(float f) {
  const unsigned x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40);
  const unsigned r = x + 0x7fff + ((x >> 16) & 1);
  return (unsigned short)(r >> 16);
}

float emu_pk16_elem(int dt, unsigned short h) {
  return dt == 2 ? __uint_as_float((unsigned)h << 16) : emu_half_to_float(h);
}
