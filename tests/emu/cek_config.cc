/* cek_config.cc - kernels/cross_entropy_keep.cu for one config, on the CPU
 * (emu.h, rowwise_emu.h): compiled once per config by tests/CMakeLists.txt
 * with the config's -D options, its place in the list (SCREE_EMU_UNIT) and
 * the kernels renamed, so that the units link into one test. Registers a
 * runner that launches the count kernel (the mean) and then the row kernel
 * in clusters of CSIZE CTAs, as ops/cross_entropy.c does. */
#include "emu.h"
#include "rowwise_emu.h"

#include "cross_entropy_keep.cu"

#include "cek.h"

namespace {

const char *run(const cek_call &c) {
  const unsigned long long *count = nullptr;
  if (c.mean) {
    emu::Launch cl{{1, 1, 1}, {256, 1, 1}, 1, 0, 1, c.seed, [&] {
                     scree_ce_count(c.targets, c.rows, c.ignore_index, c.count);
                   }};
    const char *e = emu::launch(cl);
    if (*e) return e;
    count = c.count;
  }
  emu::Launch k{{(unsigned)(c.clusters * SCREE_CSIZE), 1, 1},
                {SCREE_THREADS, 1, 1},
                SCREE_CSIZE,
                sizeof(scree_ce_smem),
                c.resident,
                c.seed,
                [&] {
                  scree_ce_keep(static_cast<const lt *>(c.logits), c.targets, c.loss, c.lse,
                                c.rows, c.vocab, c.stride, c.ignore_index,
                                static_cast<lt *>(c.dlogits), c.dstride, c.eps, c.z,
                                c.grad_scale, count);
                }};
  return emu::launch(k);
}

const cek_registrar reg(SCREE_EMU_UNIT,
                        cek_cfg{SCREE_DTYPE, SCREE_TPR, SCREE_ROWS, SCREE_VEC, SCREE_CACHE,
                                SCREE_CSIZE},
                        run);

} // namespace
