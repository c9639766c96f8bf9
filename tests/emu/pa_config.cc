/* pa_config.cc - kernels/paged_attention.cu for one config, on the CPU
 * (emu.h): compiled once per config by tests/CMakeLists.txt from the copy
 * emu_source.cmake makes of it, with the config's -D options, its place in
 * the list (SCREE_EMU_UNIT) and the kernels renamed, so that the units link
 * into one test. Registers a runner that launches as the host code does
 * (ops/paged_attention.c's launch). */
#include "emu.h"

#include "paged_attention_emu.cu"

#include "pa.h"

namespace {

const char *run(const pa_call &c) {
  typedef scree_paged::elem el;
  if (!c.self_plan) {
    emu::Launch pl{{1, 1, 1}, {1024, 1, 1}, 1, 0, 1, c.seed, [&] {
                     scree_paged_plan(c.cu_q, c.seqlens_k, c.batch, c.group, c.heads_kv, c.target,
                                      c.causal, c.wl, c.wr, c.plan);
                   }};
    const char *e = emu::launch(pl);
    if (*e) return e;
  }
  emu::Launch k{{c.grid, 1, 1},
                {(unsigned)scree_paged::THREADS, 1, 1},
                1,
                (size_t)scree_paged::SMEM_BYTES,
                c.resident,
                c.seed,
                [&] {
                  scree_paged_attention(
                      static_cast<const el *>(c.q), static_cast<const el *>(c.k_cache),
                      static_cast<const el *>(c.v_cache), static_cast<el *>(c.out), c.lse,
                      c.block_table, c.seqlens_k, c.cu_q, c.q_ts, c.q_hs, c.o_ts, c.o_hs, c.c_ps,
                      c.c_ts, c.c_hs, c.bt_stride, c.total_q, c.batch, c.heads_kv, c.group, c.logp,
                      c.sl2, c.cap_in, c.cap_out, c.causal, c.wl, c.wr, c.plan, c.part, c.plse,
                      c.target, c.self_plan, c.zeroed);
                }};
  return emu::launch(k);
}

const pa_registrar reg(SCREE_EMU_UNIT,
                       pa_cfg{SCREE_DTYPE, SCREE_HEAD_DIM, SCREE_BM, SCREE_BN, SCREE_WARPS,
                              SCREE_STAGES, SCREE_SPLIT, (size_t)scree_paged::SMEM_BYTES,
                              scree_paged::THREADS},
                       run);

} // namespace
