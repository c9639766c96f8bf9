"""examples/train_packed.py's parts that need no GPU: the synthetic steps
(exact token counts, length limits, reproducible from the seed), the padded
micro-batches and the packed batch giving the same loss (so the three ways
train on the same objective), the kernel families of the profiler's
kernel names, and the report; then two tiny steps of the sdpa and fp32
ways on CPU through the script's own command line."""
import argparse
import json
import os
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")
HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "train_packed.py")
sys.path.insert(0, os.path.dirname(EXAMPLE))
import train_packed as tp  # noqa: E402

TINY = dict(vocab=512, hidden=128, intermediate=256, layers=2, heads=4, kv_heads=2, max_len=512,
            seed=3, steps=3, tokens=1024, mean_len=128, len_sigma=1.0, padded_tokens=700)


def _args(**over):
    return argparse.Namespace(**dict(TINY, **over))


def test_steps_exact_and_reproducible():
    a = _args()
    steps = tp.make_steps(a)
    assert len(steps) == a.steps
    for seqs in steps:
        assert sum(len(s) for s in seqs) == a.tokens
        assert all(16 <= len(s) <= a.max_len for s in seqs)
        assert all(0 <= t < a.vocab for s in seqs for t in s)
    assert tp.make_steps(a) == steps
    assert tp.make_steps(_args(seed=4)) != steps


def test_padded_batches_respect_the_budget():
    seqs = tp.make_steps(_args())[0]
    batches = tp.padded_batches(seqs, 700, "cpu")
    assert sorted(int(m) for b in batches for m in b["attention_mask"].sum(1)) == \
        sorted(len(s) for s in seqs)
    for b in batches:
        rows, width = b["input_ids"].shape
        assert rows == 1 or rows * width <= 700
        assert bool((b["labels"][b["attention_mask"] == 0] == -100).all())


def test_packed_and_padded_give_one_loss():
    a = _args()
    seqs = tp.make_steps(a)[0]
    model = tp.build("fp32", a, torch.device("cpu"))
    padded = tp.padded_batches(seqs, a.padded_tokens, "cpu")
    count = sum(int((b["labels"][:, 1:] != -100).sum()) for b in padded)
    packed = tp.packed_batch(seqs, "cpu")
    assert int((packed["labels"][0, 1:] != -100).sum()) == count == a.tokens - len(seqs)
    assert packed["cu_seq_lens_q"].tolist()[-1] == a.tokens
    with torch.no_grad():
        lp = sum(float(model(**b, num_items_in_batch=count).loss) for b in padded)
        lk = float(model(**packed).loss)  # sdpa sees position_ids restart on CPU
    assert lp == pytest.approx(lk, rel=1e-5)


@pytest.mark.parametrize("name,fam", [
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>(Flash_fwd_params)",
     "attention fwd"),
    ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<x>(Flash_bwd_params)",
     "attention bwd"),
    ("scree_attention_hopper", "attention fwd"), ("scree_attention_bwd_dq", "attention bwd"),
    ("fmha_cutlassB_bf16_aligned_64x64_k128_sm80", "attention bwd"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "attention fwd"),
    ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", "matmul"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "matmul"),
    ("scree_rmsnorm", "row-wise"), ("scree_norm_backward_dw", "row-wise"),
    ("_rms_norm_backward_kernel", "row-wise"), ("_triton_rope", "row-wise"),
    ("_swiglu_forward_kernel", "row-wise"), ("scree_cross_entropy", "loss"),
    ("liger_cross_entropy_kernel", "loss"), ("element_mul_kernel", "loss"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>",
     "optimizer"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
     "other"),
])
def test_kernel_families(name, fam):
    assert tp.family(name) == fam


def test_report_checks():
    prof = {"ms": dict.fromkeys(tp.FAMILIES, 1.0), "top": []}
    res = {w: {"way": w, "losses": [2.0] * 12, "grad_norm_step1": 1.0, "step_ms_median": 10.0,
               "tokens_per_s": 1000.0, "peak_mem_gib": 1.0, "profile": prof, "device": "d",
               "torch": "t"} for w in tp.WAYS + ("fp32",)}
    res["scree"] = dict(res["scree"], tokens_per_s=1600.0, losses=[2.02] * 12)
    text = tp.report(res, _args())
    assert "final loss scree / fa2_liger - 1: +0.0100" in text
    assert "tokens/s scree / sdpa: 1.600" in text
    assert "| scree | 2.0200 |" in text


def test_cpu_run_of_two_ways(tmp_path):
    cmd = [sys.executable, EXAMPLE, "--device", "cpu", "--ways", "sdpa,fp32", "--steps", "2",
           "--tokens", "512", "--mean-len", "128", "--max-len", "256", "--layers", "1",
           "--hidden", "64", "--heads", "2", "--kv-heads", "1", "--intermediate", "128",
           "--vocab", "256", "--warmup", "0", "--profile-steps", "0", "--out", str(tmp_path)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    sdpa = json.loads((tmp_path / "sdpa.json").read_text())
    fp32 = json.loads((tmp_path / "fp32.json").read_text())
    assert len(sdpa["losses"]) == 2 and len(fp32["losses"]) == 1
    assert sdpa["losses"][0] == pytest.approx(fp32["losses"][0], rel=2e-2)
    assert "step-1 grad norm sdpa / fp32" in (tmp_path / "report.md").read_text()
