/* rsc_config.cc - kernels/ragged_softmax_cluster.cu for one config, on the
 * CPU (emu.h): compiled once per config by tests/CMakeLists.txt with the
 * config's -D options, its place in the list (SCREE_EMU_UNIT) and the
 * kernels renamed, so that the units link into one test. Registers a
 * runner that launches the plan kernel and then the main kernel as the
 * host code does (ops/ragged_softmax.c). */
#include "emu.h"

#include "ragged_softmax_cluster.cu"

#include "rsc.h"

namespace {

const size_t kSmem = SCREE_STAGE_BYTES + 2 * SCREE_RED_FLOATS * 4 + 2 * SCREE_XBUF_FLOATS * 4 +
                     (SCREE_SLOTS + 2) * 8 + SCREE_SLOTS * 4 +
                     SCREE_STAGES * sizeof(scree_rsc_item) + 2 * (SCREE_PLAN + 1) * 4;

/* As the host: the plan kernel first for a batch of SCREE_PLAN sequences or
 * more, else the plan is the kernel's own. */
const char *run(const rsc_call &c) {
  const int *plan = nullptr;
  if (c.batch >= SCREE_PLAN) {
    emu::Launch pl{{1, 1, 1}, {1024, 1, 1}, 1, 0, 1, c.seed, [&] {
                     scree_ragged_softmax_cluster_plan(c.cu_seqlens, c.batch, c.nstrips, c.plan);
                   }};
    const char *e = emu::launch(pl);
    if (*e) return e;
    plan = c.plan;
  }
  emu::Launch k{{(unsigned)(c.clusters * SCREE_CSIZE), 1, 1},
                {SCREE_THREADS, 1, 1},
                SCREE_CSIZE,
                kSmem,
                c.resident,
                c.seed,
                [&] {
                  scree_ragged_softmax_cluster(static_cast<const xt *>(c.x), static_cast<yt *>(c.y),
                                               c.cu_seqlens, c.cols, c.x_stride, c.y_stride,
                                               c.scale_log2, c.batch, c.counters, plan);
                }};
  return emu::launch(k);
}

const rsc_registrar reg(SCREE_EMU_UNIT,
                        rsc_cfg{SCREE_X_DTYPE, SCREE_Y_DTYPE, SCREE_TPR, SCREE_VEC, SCREE_WARPS,
                                SCREE_STOK, SCREE_STAGES, SCREE_CSIZE, SCREE_E1, kSmem},
                        run);

} // namespace
