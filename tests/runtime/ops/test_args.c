/* test_args.c - the argument checks of every registered op, with no device:
 * a bad argument gets the right status and a message naming it and its
 * value, a good call gets as far as the launch (the offline context then
 * reports SCREE_ERROR_NO_DEVICE), and an empty call returns SCREE_OK.
 *
 * Three parts, all data:
 * - valid[]: at least one valid call of every op (test_every_op_has_a_call
 *   fails without one), with buffers far apart;
 * - the generic cases, derived from each op's schema (ops/op.h) and applied
 *   to each valid call: NULL, misaligned and wrapping pointers, overlaps,
 *   in place, inputs that share memory, short and overlapping strides,
 *   dtypes, the ranges of sizes and scalars, empty calls. Those that do not
 *   depend on the pointers' values go through scree_check_args too, which
 *   must agree with the call;
 * - cases[]: what the schema does not say: each op's limits (which the
 *   generic cases take from the table, so they are pinned here), its own
 *   rules, and the layouts it accepts.
 *
 * A call or an edit is text: "field=value,..." in the args struct's
 * names; a value is a number, a dtype name, or for a pointer another
 * pointer field plus or minus bytes ("y=x+64"), applied left to right. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* ---- the valid calls ------------------------------------------------------------ */

typedef struct call {
  const char *op, *text;
} call;

static const call valid[] = {
    /* 4 rows of 64 fp16: x and y 512 bytes, w 128. */
    {"rmsnorm",
     "x=0x10000,w=0x20000,y=0x30000,rows=4,cols=64,x_dtype=fp16,w_dtype=fp16,y_dtype=fp16,"
     "eps=1e-6,rstd=0x4000000"},
    {"layernorm",
     "x=0x10000,w=0x20000,b=0x28000,y=0x30000,mean=0x40000,rstd=0x50000,rows=4,cols=64,"
     "x_dtype=fp16,w_dtype=fp16,y_dtype=fp16,eps=1e-5"},
    {"add_rmsnorm",
     "x=0x10000,residual=0x20000,w=0x30000,h=0x40000,y=0x50000,rows=4,cols=64,x_dtype=fp16,"
     "w_dtype=fp16,y_dtype=fp16,eps=1e-6,rstd=0x4000000"},
    {"softmax", "x=0x100000,y=0x300000,rows=4,cols=64,x_dtype=fp16,y_dtype=fp16"},
    {"softmax_backward",
     "y=0x1000000,dy=0x2000000,dx=0x3000000,rows=4,cols=64,y_dtype=fp16,dy_dtype=fp16"},
    /* 3 sequences, 300 tokens of 64 columns; buffers 256 MiB apart. */
    {"ragged_softmax",
     "x=0x10000000,y=0x20000000,cu_seqlens=0x30000000,batch=3,total=300,max_seqlen=200,cols=64,"
     "x_dtype=fp16,y_dtype=fp16"},
    /* Its backward: the same batch; y, dy, dx and cu_seqlens 256 MiB apart. */
    {"ragged_softmax_backward",
     "y=0x10000000,dy=0x20000000,dx=0x30000000,cu_seqlens=0x40000000,batch=3,total=300,"
     "max_seqlen=200,cols=64,y_dtype=fp16,dy_dtype=fp16"},
    /* 8 tokens in 2 sequences, 4 q and 2 k heads of 64; then positions
     * (int64) and a cos/sin table instead of cu_seqlens. */
    {"rope",
     "q=0x100000,k=0x200000,cu_seqlens=0x300000,total=8,batch=2,heads_q=4,heads_kv=2,"
     "head_dim=64,dtype=fp16,layout=0"},
    {"rope",
     "q=0x100000,k=0x200000,positions=0x400000,positions_int64=1,cos_sin=0x500000,"
     "max_position=8192,total=8,heads_q=4,heads_kv=2,head_dim=64,rotary_dim=32,dtype=bf16,"
     "layout=1,theta=500000"},
    /* Out of place: q_out and k_out 1 MiB apart from the rest, k_out with
     * padded rows. */
    {"rope",
     "q=0x100000,k=0x200000,cu_seqlens=0x300000,total=8,batch=2,heads_q=4,heads_kv=2,"
     "head_dim=64,dtype=fp16,layout=0,q_out=0x600000,k_out=0x700000,k_out_head_stride=72,"
     "k_out_token_stride=160"},
    /* The backward's arguments are RoPE's: dq and dk in q and k. */
    {"rope_backward",
     "q=0x100000,k=0x200000,cu_seqlens=0x300000,total=8,batch=2,heads_q=4,heads_kv=2,"
     "head_dim=64,dtype=fp16,layout=0"},
    {"rope_backward",
     "q=0x100000,k=0x200000,positions=0x400000,positions_int64=1,cos_sin=0x500000,"
     "max_position=8192,total=8,heads_q=4,heads_kv=2,head_dim=64,rotary_dim=32,dtype=bf16,"
     "layout=1,theta=500000"},
    {"rope_backward",
     "q=0x100000,k=0x200000,positions=0x400000,total=8,heads_q=4,heads_kv=2,head_dim=64,"
     "rotary_dim=32,dtype=bf16,layout=1,q_out=0x600000,k_out=0x700000"},
    /* gate, up, y of 4 x 64 fp16; then gate and up in one [4, 128] tensor. */
    {"swiglu", "gate=0x10000,up=0x20000,y=0x30000,rows=4,cols=64,dtype=fp16,y_dtype=fp16"},
    {"swiglu", "gate=0x10000,y=0x30000,rows=4,cols=64,dtype=fp16,y_dtype=fp16"},
    /* gate, up, dy, dgate, dup of 4 x 64 fp16; then the fused forms. */
    {"swiglu_backward",
     "gate=0x10000,up=0x20000,dy=0x30000,dgate=0x40000,dup=0x50000,rows=4,cols=64,dtype=fp16,"
     "dy_dtype=fp16"},
    {"swiglu_backward",
     "gate=0x10000,dy=0x30000,dgate=0x40000,rows=4,cols=64,dtype=fp16,dy_dtype=bf16"},
    /* 4 rows of 1000 bf16 logits. */
    {"cross_entropy",
     "logits=0x100000,targets=0x200000,loss=0x300000,lse=0x400000,rows=4,vocab=1000,"
     "ignore_index=-100,dtype=bf16"},
    /* The same with the gradient, smoothing and z-loss, the mean; then with
     * padded strides (in place is a case below). */
    {"cross_entropy",
     "logits=0x100000,targets=0x200000,loss=0x300000,lse=0x400000,rows=4,vocab=1000,"
     "ignore_index=-100,dtype=bf16,dlogits=0x500000,label_smoothing=0.1,z_loss=1e-4,"
     "reduction=2,grad_scale=0.5"},
    {"cross_entropy",
     "logits=0x100000,targets=0x200000,loss=0x300000,rows=4,vocab=1000,logits_stride=1024,"
     "ignore_index=-100,dtype=fp16,dlogits=0x500000,dlogits_stride=1024,reduction=1"},
    /* The mean with the count of the rows not ignored written out. */
    {"cross_entropy",
     "logits=0x100000,targets=0x200000,loss=0x300000,lse=0x400000,rows=4,vocab=1000,"
     "ignore_index=-100,dtype=bf16,dlogits=0x500000,reduction=2,count=0x600000"},
    /* 3 sequences, 300 tokens, 8 query heads over 2 KV heads of 128. */
    {"attention",
     "q=0x1000000,k=0x2000000,v=0x3000000,out=0x4000000,lse=0x5000000,"
     "cu_seqlens_q=0x6000000,cu_seqlens_k=0x7000000,batch=3,total_q=300,total_k=300,"
     "max_seqlen_q=200,max_seqlen_k=200,heads_q=8,heads_kv=2,head_dim=128,dtype=bf16,causal=1,"
     "window_left=-1,window_right=-1"},
    /* 4 sequences, 6 query tokens, 8 query heads over 2 KV heads of 128, in
     * pages of 16 tokens (10 pages, 4 a sequence at most). */
    {"paged_attention",
     "q=0x1000000,out=0x2000000,lse=0x3000000,k_cache=0x4000000,v_cache=0x5000000,"
     "block_table=0x6000000,seqlens_k=0x7000000,cu_seqlens_q=0x8000000,batch=4,total_q=6,"
     "max_seqlen_q=3,max_seqlen_k=64,num_pages=10,page_size=16,block_table_stride=4,heads_q=8,"
     "heads_kv=2,head_dim=128,dtype=bf16,causal=1,window_left=-1,window_right=-1"},
    /* The backward of the attention call above: its forward arguments, dout
     * and the three gradients, each 600 KiB, 16 MiB apart. */
    {"attention_backward",
     "fwd.q=0x1000000,fwd.k=0x2000000,fwd.v=0x3000000,fwd.out=0x4000000,fwd.lse=0x5000000,"
     "fwd.cu_seqlens_q=0x6000000,fwd.cu_seqlens_k=0x7000000,fwd.batch=3,fwd.total_q=300,"
     "fwd.total_k=300,fwd.max_seqlen_q=200,fwd.max_seqlen_k=200,fwd.heads_q=8,fwd.heads_kv=2,"
     "fwd.head_dim=128,fwd.dtype=bf16,fwd.causal=1,fwd.window_left=-1,fwd.window_right=-1,"
     "dout=0x8000000,dq=0x9000000,dk=0xa000000,dv=0xb000000"},
    /* 8 new tokens of 2 kv heads of 64 fp16 (k and v 2 KiB), into caches of
     * 4 pages of 16 slots (16 KiB each). */
    {"kv_append",
     "k=0x100000,v=0x200000,k_cache=0x1000000,v_cache=0x2000000,slot_mapping=0x300000,"
     "total_new=8,num_pages=4,page_size=16,heads_kv=2,head_dim=64,dtype=fp16"},
    /* The norm backwards of 4 rows of 64 fp16, with their saved statistics
     * and dh_next; buffers 64 KiB apart. */
    {"rmsnorm_backward",
     "x=0x10000,w=0x20000,dy=0x30000,rstd=0x40000,dx=0x50000,dw=0x60000,rows=4,cols=64,"
     "x_dtype=fp16,w_dtype=fp16,y_dtype=fp16,eps=1e-6"},
    {"add_rmsnorm_backward",
     "h=0x10000,w=0x20000,dy=0x30000,dh_next=0x40000,rstd=0x50000,dh=0x60000,dw=0x70000,"
     "rows=4,cols=64,x_dtype=fp16,w_dtype=fp16,y_dtype=fp16,eps=1e-6"},
    {"layernorm_backward",
     "x=0x10000,w=0x20000,dy=0x30000,mean=0x40000,rstd=0x50000,dx=0x60000,dw=0x70000,"
     "db=0x80000,rows=4,cols=64,x_dtype=fp16,w_dtype=fp16,y_dtype=fp16,eps=1e-5"},
};

/* ---- the op cases ---------------------------------------------------------------- */

typedef struct expect {
  const char *op, *edit; /* on the op's first valid call */
  scree_status status;
  const char *needle; /* in the message; NULL: passes (SCREE_ERROR_NO_DEVICE) */
} expect;

#define INVALID SCREE_ERROR_INVALID_ARGUMENT
#define UNSUPPORTED SCREE_ERROR_UNSUPPORTED
#define MISALIGNED SCREE_ERROR_MISALIGNED
#define PASSES SCREE_ERROR_NO_DEVICE, NULL

static const expect cases[] = {
    /* Limits (a schema's ranges, pinned). */
    {"rmsnorm", "cols=65537", UNSUPPORTED, "cols=65537 exceeds the supported maximum 65536"},
    {"rmsnorm", "cols=65536,w=0x1000000,y=0x2000000", PASSES},
    {"layernorm", "cols=65537", UNSUPPORTED, "cols=65537"},
    {"add_rmsnorm", "cols=65537", UNSUPPORTED, "cols=65537"},
    {"softmax", "cols=262145", UNSUPPORTED, "cols=262145"},
    {"softmax", "cols=262144", PASSES},
    {"ragged_softmax", "cols=65537", UNSUPPORTED, "cols=65537"},
    {"ragged_softmax", "total=2147483648", INVALID, "total=2147483648 must be in [0, 2^31)"},
    {"ragged_softmax",
     "total=2147483647,max_seqlen=2147483647,batch=2147483647,cols=1,y=0x10000000000", PASSES},
    {"rope", "head_dim=2048", UNSUPPORTED, "head_dim=2048"},
    {"rope", "heads_q=70000", UNSUPPORTED, "heads_q=70000"},
    {"rope", "heads_kv=70000", UNSUPPORTED, "heads_kv=70000"},
    {"rope_backward", "head_dim=2048", UNSUPPORTED, "head_dim=2048"},
    {"rope_backward", "rotary_dim=3", INVALID, "rotary_dim=3"},
    {"rope_backward", "k=q+64", INVALID, "overlap"},
    {"rope_backward", "layout=2", INVALID, "layout=2"},
    {"swiglu", "cols=1073741825", UNSUPPORTED, "cols=1073741825"},
    {"softmax_backward", "cols=262145", UNSUPPORTED, "cols=262145"},
    {"softmax_backward", "cols=262144", PASSES},
    {"swiglu_backward", "cols=1073741825", UNSUPPORTED, "cols=1073741825"},
    {"cross_entropy", "vocab=16777217", UNSUPPORTED, "vocab=16777217"},
    {"cross_entropy", "vocab=16777216,targets=0x20000000,loss=0x30000000,lse=0x40000000", PASSES},
    {"attention", "head_dim=80", UNSUPPORTED, "head_dim=80 is not supported (32, 64, 96, 128 or 256)"},
    {"attention", "dtype=fp32", UNSUPPORTED, "dtype=0 (fp32) is not fp16 or bf16"},
    {"attention", "heads_q=65536", INVALID, "heads_q=65536"},
    {"attention", "total_k=2147483648", INVALID, "total_k="},
    {"attention", "window_left=-2", INVALID, "window_left=-2"},
    /* Sizes whose bytes pass the end of the address space, from a small
     * pointer (128-bit arithmetic). */
    {"rmsnorm", "rows=4611686018427387904", INVALID, "x=0x10000 extends past the address space"},
    {"layernorm", "x_stride=4611686018427387904", INVALID, "past the address space"},
    {"add_rmsnorm", "residual_stride=4611686018427387904", INVALID, "past the address space"},
    {"ragged_softmax", "total=2147483647,x_stride=1099511627776", INVALID, "past the address space"},
    {"ragged_softmax", "cu_seqlens=0xfffffffffffffff0,batch=100", INVALID, "cu_seqlens="},

    /* In place: same pointer, element size and strides. */
    {"rmsnorm", "y=x,y_dtype=fp32", INVALID, "y == x (in place)"},
    {"layernorm", "y=x,y_stride=72", INVALID, "in place"},
    {"softmax", "y=x,y_dtype=bf16", PASSES}, /* one element size */
    {"softmax", "y=x,x_stride=100,y_stride=100", PASSES},
    {"ragged_softmax", "y=x,x_stride=72,y_stride=72", PASSES},
    {"add_rmsnorm", "h=x,h_stride=72", INVALID, "h == x (in place)"},
    {"add_rmsnorm", "h=residual,residual_stride=72", INVALID, "h == residual (in place)"},
    {"add_rmsnorm", "x_stride=80,h_stride=80,h=x", PASSES},
    /* h on x while residual overlaps x: h would overwrite residual. */
    {"add_rmsnorm", "h=x,residual=x+128", INVALID, "partially overlaps residual"},
    /* x and residual are only read: they may overlap, even be one buffer. */
    {"add_rmsnorm", "residual=x+64", PASSES},
    {"add_rmsnorm", "residual=x,h=x", PASSES},
    {"add_rmsnorm", "y_dtype=fp32,y=h-1020", INVALID, "overlaps h"},
    /* Absent optional buffers overlap nothing (their pointers are 0). */
    {"layernorm", "mean=0,b=0,rstd=12", PASSES},
    /* The norm backwards: limits, in place, optional inputs, rows 0 (not
     * an empty call: dw is still written, so it must be given). */
    {"rmsnorm_backward", "cols=65537", UNSUPPORTED, "cols=65537"},
    {"rmsnorm_backward", "dx=dy", PASSES},
    {"rmsnorm_backward", "dx=dy,dx_stride=72", INVALID, "in place"},
    {"rmsnorm_backward", "dx=x", INVALID, "overlaps x"},
    {"rmsnorm_backward", "rstd=0", PASSES},
    {"rmsnorm_backward", "rows=0,x=0,dy=0,dx=0,rstd=0", PASSES},
    {"rmsnorm_backward", "rows=0,dw=0", INVALID, "dw is NULL"},
    {"add_rmsnorm_backward", "cols=65537", UNSUPPORTED, "cols=65537"},
    {"add_rmsnorm_backward", "dh=dy", PASSES},
    {"add_rmsnorm_backward", "dh=dh_next", PASSES},
    {"add_rmsnorm_backward", "dh_next=0,rstd=0", PASSES},
    {"add_rmsnorm_backward", "dh=h", INVALID, "overlaps h"},
    {"add_rmsnorm_backward", "dw=w", INVALID, "overlaps w"},
    {"layernorm_backward", "cols=65537", UNSUPPORTED, "cols=65537"},
    {"layernorm_backward", "dx=dy", PASSES},
    {"layernorm_backward", "mean=0,rstd=0,db=0", PASSES},
    {"layernorm_backward", "mean=0", INVALID, "give both saved statistics or neither"},
    {"layernorm_backward", "rstd=0", INVALID, "give both saved statistics or neither"},
    {"layernorm_backward", "db=dw", INVALID, "overlaps"},
    {"layernorm", "x_stride=80,y_stride=72,mean=y+576", PASSES},
    /* Vector widths narrow to what the call allows. */
    {"softmax", "x=0x100002,x_stride=67", PASSES},
    {"cross_entropy", "logits_stride=1003", PASSES},
    {"cross_entropy", "logits=0x100002", PASSES},
    {"cross_entropy", "ignore_index=0", PASSES},
    {"cross_entropy", "ignore_index=-9223372036854775808", PASSES},
    {"cross_entropy", "dlogits=0x500000", PASSES},
    {"cross_entropy", "dlogits=logits", PASSES},
    {"cross_entropy", "dlogits=logits,logits_stride=1008,dlogits_stride=1008", PASSES},
    {"cross_entropy", "dlogits=logits,dlogits_stride=1008", INVALID, "in place"},
    {"cross_entropy", "dlogits=logits+2", INVALID, "overlaps logits"},
    {"cross_entropy", "dlogits=loss", INVALID, "overlaps"},
    {"cross_entropy", "dlogits=0x500000,dlogits_stride=999", INVALID, "dlogits_stride=999"},
    {"cross_entropy", "dlogits=0x500001", MISALIGNED, "dlogits"},
    {"cross_entropy", "label_smoothing=1", PASSES},
    {"cross_entropy", "label_smoothing=1.5", INVALID, "label_smoothing=1.5 is outside [0, 1]"},
    {"cross_entropy", "label_smoothing=-0.25", INVALID, "label_smoothing"},
    {"cross_entropy", "z_loss=-1", INVALID, "z_loss"},
    {"cross_entropy", "z_loss=1e-4,dlogits=0x500000,reduction=2,grad_scale=-2", PASSES},
    {"cross_entropy", "reduction=3", INVALID, "reduction=3"},
    {"cross_entropy", "reduction=-1", INVALID, "reduction=-1"},

    /* Own rules. */
    {"softmax", "scale=3e38", INVALID, "scale=3e+38: scale * log2(e) is not finite in fp32"},
    {"softmax", "scale=-0.5", PASSES},
    {"ragged_softmax", "max_seqlen=0", INVALID, "max_seqlen is 0"},
    {"ragged_softmax", "batch=0", INVALID, "batch is 0"},
    /* max_seqlen is not checked against the lengths without validation. */
    {"ragged_softmax", "max_seqlen=1", PASSES},
    {"ragged_softmax", "total=0,x=0,y=0,cu_seqlens=0,cols=0", INVALID, "cols=0"},
    {"attention", "heads_q=7", INVALID, "heads_q=7 is not a multiple of heads_kv=2"},
    {"attention", "max_seqlen_q=0", INVALID, "max_seqlen_q is 0"},
    {"attention", "max_seqlen_k=0", INVALID, "max_seqlen_k is 0"},
    {"attention", "batch=0", INVALID, "batch is 0"},
    /* The backward: lse required; the gradients apart from every input
     * (dq on q, dk on dout), each with strides of its own that do not
     * overlap, and apart from each other unless interleaved slot by slot as
     * in a fused [T, 3, H, d] buffer; deterministic 0 or 1. */
    {"attention_backward", "fwd.lse=0", INVALID, "fwd.lse is NULL"},
    {"attention_backward", "dq=fwd.q", INVALID, "dq=0x1000000 overlaps fwd.q=0x1000000"},
    {"attention_backward", "dk=dout+0x1000", INVALID, "dk=0x8001000 overlaps dout=0x8000000"},
    {"attention_backward", "dv=fwd.lse", INVALID, "dv=0x5000000 overlaps fwd.lse"},
    {"attention_backward", "dq_head_stride=64", INVALID, "dq strides (token 1024, head 64) overlap"},
    {"attention_backward", "dk_token_stride=260", MISALIGNED, "dk strides"},
    {"attention_backward", "dq=0x9000000,dk=0x9000000", INVALID, "dk=0x9000000 overlaps dq=0x9000000"},
    {"attention_backward", "fwd.heads_kv=8,dq_token_stride=3072,dk_token_stride=3072,"
     "dv_token_stride=3072,dq=0x9000000,dk=0x9000800,dv=0x9001000", PASSES},
    {"attention_backward", "fwd.heads_kv=8,dq_token_stride=3072,dk_token_stride=3072,"
     "dv_token_stride=3072,dq=0x9000000,dk=0x9000100,dv=0x9001000", INVALID,
     "dk=0x9000100 overlaps dq=0x9000000 (gradients may share a buffer only interleaved"},
    {"attention_backward", "fwd.heads_kv=8,dq_token_stride=3072,dk_token_stride=2048,"
     "dv_token_stride=3072,dq=0x9000000,dk=0x9000800,dv=0x9001000", INVALID,
     "dk=0x9000800 overlaps dq=0x9000000"},
    {"attention_backward", "deterministic=2", INVALID, "deterministic=2"},
    {"attention_backward", "deterministic=1", PASSES},
    {"attention_backward", "fwd.heads_q=7", INVALID, "fwd.heads_q=7 is not a multiple of fwd.heads_kv=2"},
    {"attention_backward", "fwd.head_dim=80", UNSUPPORTED, "fwd.head_dim=80"},
    {"attention_backward", "fwd.max_seqlen_k=0", INVALID, "fwd.max_seqlen_k is 0"},
    {"attention_backward", "fwd.softcap=30,fwd.window_left=64", PASSES},
    /* No query token: dk and dv are still written (zeros). */
    {"attention_backward", "fwd.total_q=0,fwd.max_seqlen_q=0,fwd.q=0,fwd.out=0,dout=0,dq=0", PASSES},
    {"attention_backward", "fwd.total_k=0,fwd.max_seqlen_k=0,fwd.k=0,fwd.v=0,dk=0,dv=0", PASSES},
    {"paged_attention", "page_size=12", UNSUPPORTED, "page_size=12 is not supported"},
    {"paged_attention", "page_size=512", UNSUPPORTED, "page_size=512"},
    {"paged_attention", "head_dim=80", UNSUPPORTED, "head_dim=80"},
    {"paged_attention", "block_table_stride=3", INVALID,
     "block_table_stride=3 holds fewer pages than max_seqlen_k=64"},
    {"paged_attention", "num_pages=0", INVALID, "num_pages=0"},
    {"paged_attention", "total_q=1000000000,heads_q=8,heads_kv=2", UNSUPPORTED,
     "total_q=1000000000 x 4 query heads a KV head is 2^31 rows or more"},
    {"paged_attention", "heads_q=7", INVALID, "heads_q=7 is not a multiple of heads_kv=2"},
    {"paged_attention", "max_seqlen_q=0", INVALID, "max_seqlen_q is 0"},
    {"paged_attention", "softcap=-1", INVALID, "softcap"},
    {"paged_attention", "cache_head_stride=100", MISALIGNED, "k_cache strides"},
    {"paged_attention", "cache_token_stride=128", INVALID, "k_cache strides (page 2048, token 128, head 128) overlap"},
    {"paged_attention", "out=0x4000040", INVALID, "out overlaps k_cache"},
    {"paged_attention", "v_cache=0x4000000", PASSES}, /* one buffer for both */
    /* vLLM's interleaved pages: K then V in each page of one buffer. */
    {"paged_attention", "cache_page_stride=8192,v_cache=0x4002000", PASSES},
    {"paged_attention", "window_left=0,window_right=0,causal=0,softcap=30", PASSES},
    /* cross_entropy's count: one int64, 8-byte aligned, apart from the
     * rest; with or without the gradient. */
    {"cross_entropy", "count=0x600000", PASSES},
    {"cross_entropy", "count=0x600004", MISALIGNED, "count=0x600004 is not aligned to 8 bytes"},
    {"cross_entropy", "count=0x300008", INVALID, "count=0x300008 overlaps loss=0x300000"},
    {"cross_entropy", "count=0x101f38", INVALID, "count=0x101f38 overlaps logits=0x100000"},
    {"cross_entropy", "count=0x101f40", PASSES},
    {"cross_entropy", "count=0x200018", INVALID, "count=0x200018 overlaps targets"},
    {"cross_entropy", "count=0x200020", PASSES},
    {"rope", "head_dim=63", INVALID, "head_dim=63 must be even"},
    {"rope", "rotary_dim=3", INVALID, "rotary_dim=3"},
    {"rope", "rotary_dim=66", INVALID, "rotary_dim=66"},
    {"rope", "rotary_dim=-2", INVALID, "rotary_dim=-2"},
    {"rope", "heads_kv=0", INVALID, "heads_kv=0 must be at least 1 (k is given)"},
    {"rope", "batch=-1", INVALID, "batch=-1"},
    {"rope", "batch=0", INVALID, "batch is 0"},
    {"rope", "cos_sin=0x500000", INVALID, "max_position=0"},
    {"rope", "cos_sin=0x500000,max_position=1125899906842624", INVALID, "max_position="},
    {"rope", "cu_seqlens=0", INVALID, "positions and cu_seqlens are both NULL"},
    {"rope", "cu_seqlens=0x300002", MISALIGNED, "cu_seqlens=0x300002"},
    {"rope", "positions=0x400004,positions_int64=1", MISALIGNED,
     "positions=0x400004 is not aligned to 8 bytes"},
    {"rope", "positions=0x400002", MISALIGNED, "positions=0x400002 is not aligned to 4 bytes"},
    /* Read while q and k are written: apart from them. */
    {"rope", "positions=q+16", INVALID, "positions=0x100010 overlaps"},
    {"rope", "cu_seqlens=k+512", INVALID, "cu_seqlens=0x200200 overlaps"},
    {"rope", "cos_sin=k-64,max_position=4", INVALID, "cos_sin=0x1fffc0 overlaps"},
    /* With positions given, cu_seqlens and batch are not used. */
    {"rope", "positions=0x400000,cu_seqlens=0,batch=-5", PASSES},
    {"rope", "positions=0x400000,positions_int64=1", PASSES},
    {"rope", "cos_sin=0x500000,max_position=8192", PASSES},
    /* q and k: head rows sharing elements within one; k in q. */
    {"rope", "q_head_stride=32", INVALID, "q strides"},
    {"rope", "q_token_stride=128", INVALID, "q strides"},
    {"rope", "k_head_stride=64,k_token_stride=64", INVALID, "k strides"},
    {"rope", "q_token_stride=4611686018427387904", INVALID, "past the address space"},
    {"rope", "k=q+64", INVALID, "overlap"},
    /* Packed [T, 4 + 2 + 2, 64] with k one half-head too early: its first
     * head's rotary half meets q's last head. */
    {"rope", "q_token_stride=512,k_token_stride=512,k=q+448", INVALID, "overlap"},
    /* Interleaved with different head strides: not proven disjoint. */
    {"rope",
     "heads_kv=4,q_token_stride=1024,k_token_stride=1024,k_head_stride=128,q_head_stride=256,"
     "k=q+128",
     INVALID, "overlap"},
    /* Packed layouts: [T, Hq + 2 Hkv, d]; [T, 3, H, d] and [T, H, 3, d]; k
     * before q; partial rotary with k in q's untouched half; head-major. */
    {"rope", "q_token_stride=512,k_token_stride=512,k=q+512", PASSES},
    {"rope", "heads_kv=4,q_token_stride=768,k_token_stride=768,k=q+512", PASSES},
    {"rope",
     "heads_kv=4,q_token_stride=768,k_token_stride=768,q_head_stride=192,k_head_stride=192,"
     "k=q+128",
     PASSES},
    {"rope", "q_token_stride=512,k_token_stride=512,q=k+256", PASSES},
    {"rope", "rotary_dim=32,heads_kv=4,q_token_stride=256,k_token_stride=256,k=q+64", PASSES},
    {"rope", "q_token_stride=64,k_token_stride=64,q_head_stride=512,k_head_stride=512", PASSES},
    /* q only: k and heads_kv are not used. */
    {"rope", "k=0,heads_kv=0", PASSES},
    {"rope", "k=0,heads_kv=-3,k_token_stride=1", PASSES},
    {"rope", "total=1,batch=1,heads_q=1,heads_kv=1,k=q+128", PASSES},
    /* Out of place (q_out, k_out): given together (k_out exactly when k
     * is); an output is its input exactly (in place, that tensor alone) or
     * apart from q, k and what the kernel reads; q_out and k_out may
     * interleave as a packed output; their strides as q's and k's. */
    {"rope", "q_out=0x600000", INVALID, "k_out is missing (0) while q_out and k are given"},
    {"rope", "k_out=0x700000", INVALID, "k_out=0x700000 is given without q_out"},
    {"rope", "k=0,heads_kv=0,q_out=0x600000,k_out=0x700000", INVALID,
     "k_out=0x700000 is given but k is NULL"},
    {"rope", "k=0,heads_kv=0,q_out=0x600000", PASSES},
    {"rope", "q_out=0x600001,k_out=0x700000", MISALIGNED, "q_out=0x600001 is not aligned to 2"},
    {"rope", "q_out=0x600000,k_out=0x700000", PASSES},
    {"rope", "q_out=q,k_out=k", PASSES},
    {"rope", "q_out=q,k_out=0x700000", PASSES},
    {"rope", "q_out=0x600000,k_out=k", PASSES},
    {"rope", "q_out=q,q_out_head_stride=128,q_out_token_stride=512,k_out=k", INVALID,
     "q_out=0x100000 is q's address with other strides"},
    {"rope", "q_out=q+64,k_out=0x700000", INVALID, "q_out=0x100040 overlaps q=0x100000"},
    {"rope", "q_out=0x600000,k_out=q+128", INVALID, "k_out=0x100080 overlaps q=0x100000"},
    {"rope", "q_out=k+512,k_out=0x700000", INVALID, "q_out=0x200200 overlaps k=0x200000"},
    /* Out of place, q and k are read whole: k in q's untouched half
     * (partial rotary) is fine in place and when both are read, not when
     * one of them is written in place. */
    {"rope",
     "rotary_dim=32,heads_kv=4,q_token_stride=256,k_token_stride=256,k=q+64,q_out=0x600000,"
     "k_out=0x700000",
     PASSES},
    {"rope",
     "rotary_dim=32,heads_kv=4,q_token_stride=256,k_token_stride=256,k=q+64,q_out=q,"
     "k_out=0x700000",
     INVALID, "overlap while q is rotated in place and k out of place"},
    /* Whole rows written: k_out half a head into q_out overlaps (in place,
     * with rotary_dim 32, that layout of q and k passes), a packed output
     * [T, 4 + 2 + 2, 64] passes. */
    {"rope",
     "rotary_dim=32,heads_kv=4,q_out=0x600000,k_out=0x600040,q_out_token_stride=256,"
     "k_out_token_stride=256",
     INVALID, "q_out=0x600000 and k_out=0x600040 overlap"},
    {"rope",
     "q_out=0x600000,k_out=0x600200,q_out_token_stride=512,k_out_token_stride=512", PASSES},
    {"rope", "q_out_head_stride=32,q_out=0x600000,k_out=0x700000", INVALID, "q_out strides"},
    {"rope", "k_out_token_stride=64,k_out_head_stride=64,q_out=0x600000,k_out=0x700000", INVALID,
     "k_out strides"},
    {"rope", "q_out_token_stride=-1,q_out=0x600000,k_out=0x700000", INVALID,
     "q_out_token_stride=-1"},
    /* What the kernel reads must not be written: an output on it. */
    {"rope", "q_out=0x300000,k_out=0x700000", INVALID, "cu_seqlens=0x300000 overlaps q_out"},
    {"rope", "positions=0x400000,cu_seqlens=0,q_out=0x600000,k_out=0x400010", INVALID,
     "positions=0x400000 overlaps k_out"},
    {"rope_backward", "q_out=0x600000", INVALID, "k_out is missing"},
    {"rope_backward", "q_out=k,k_out=0x700000", INVALID, "q_out=0x200000 overlaps k=0x200000"},
    /* SwiGLU's layouts: strides, then how y may share gate's and up's
     * memory; "up=0" first is the one-tensor form. */
    {"swiglu", "gate_stride=10", INVALID, "gate_stride=10"},
    {"swiglu", "gate_stride=-64", INVALID, "gate_stride=-64"},
    {"swiglu", "up_stride=63", INVALID, "up_stride=63"},
    {"swiglu", "y_stride=63", INVALID, "y_stride=63"},
    {"swiglu", "rows=4611686018427387904", INVALID, "gate=0x10000 extends past the address space"},
    {"swiglu", "up=0,gate_stride=100", INVALID, "gate_stride=100"},
    {"swiglu", "up=0,up_stride=64", INVALID, "up_stride=64"},
    {"swiglu", "y=gate+64", INVALID, "partially overlaps gate"},
    {"swiglu", "y=up+2", INVALID, "partially overlaps up"},
    {"swiglu", "y=gate,y_dtype=fp32", INVALID, "in place"},
    {"swiglu", "y=up,y_stride=72", INVALID, "in place"},
    /* One tensor: y over up's half but with its own stride overlaps gate's
     * rows; y shifted by one element overlaps both halves; the same pitch
     * shifted covers the end of gate's half and the start of up's; one row
     * shifted past gate's half overlaps up only. */
    {"swiglu", "up=0,y=gate+128", INVALID, "partially overlaps"},
    {"swiglu", "up=0,y=gate+2,y_stride=128", INVALID, "partially overlaps gate"},
    {"swiglu", "up=0,y=gate+64,y_stride=128", INVALID, "partially overlaps gate"},
    {"swiglu", "up=0,rows=1,y=gate+130,y_stride=128", INVALID, "partially overlaps up"},
    {"swiglu", "y=gate", PASSES},
    {"swiglu", "y=up", PASSES},
    {"swiglu", "up=0,y=gate,y_stride=128", PASSES},
    {"swiglu", "up=0,y=gate+128,y_stride=128", PASSES},
    {"swiglu", "up=0,up_stride=128", PASSES},
    {"swiglu", "up=0,gate_stride=192,y=gate+256,y_stride=192", PASSES}, /* [rows, 3 cols] */
    {"swiglu", "up=gate", PASSES}, /* both only read */
    /* Softmax backward: dx over dy exactly, not over y, not partially. */
    {"softmax_backward", "dx=dy", PASSES},
    {"softmax_backward", "dx=dy,dy_stride=72,dx_stride=72", PASSES},
    {"softmax_backward", "dx=dy,dx_stride=72", INVALID, "dx"},
    {"softmax_backward", "dx=y", INVALID, "dx"},
    {"softmax_backward", "dx=dy+2", INVALID, "dx"},
    {"softmax_backward", "dy_stride=63", INVALID, "dy_stride=63"},
    {"softmax_backward", "scale=inf", INVALID, "scale"},
    {"softmax_backward", "y=0x1000002,y_stride=67", PASSES},
    /* Ragged softmax backward: the forward's limits and counts; dx over dy
     * exactly, not over y, not partially; a length-1 max_seqlen passes
     * without validation. */
    {"ragged_softmax_backward", "cols=65537", UNSUPPORTED, "cols=65537"},
    {"ragged_softmax_backward", "cols=65536,dy=0x50000000,dx=0x90000000", PASSES},
    {"ragged_softmax_backward", "total=2147483648", INVALID, "total=2147483648 must be in [0, 2^31)"},
    {"ragged_softmax_backward", "total=2147483647,y_stride=1099511627776", INVALID,
     "past the address space"},
    {"ragged_softmax_backward", "cu_seqlens=0xfffffffffffffff0,batch=100", INVALID, "cu_seqlens="},
    {"ragged_softmax_backward", "max_seqlen=0", INVALID, "max_seqlen is 0"},
    {"ragged_softmax_backward", "batch=0", INVALID, "batch is 0"},
    {"ragged_softmax_backward", "max_seqlen=1", PASSES},
    {"ragged_softmax_backward", "total=0,y=0,dy=0,dx=0,cu_seqlens=0,cols=0", INVALID, "cols=0"},
    {"ragged_softmax_backward", "total=0", SCREE_OK, ""}, /* no token: nothing to do */
    {"ragged_softmax_backward", "dx=dy", PASSES},
    {"ragged_softmax_backward", "dx=dy,dy_stride=72,dx_stride=72", PASSES},
    {"ragged_softmax_backward", "dx=dy,dx_stride=72", INVALID, "dx"},
    {"ragged_softmax_backward", "dx=dy,dy_dtype=fp32", PASSES}, /* dx is of dy's dtype */
    {"ragged_softmax_backward", "dx=y", INVALID, "dx"},
    {"ragged_softmax_backward", "dx=dy+2", INVALID, "dx"},
    {"ragged_softmax_backward", "dy_stride=63", INVALID, "dy_stride=63"},
    {"ragged_softmax_backward", "scale=inf", INVALID, "scale"},
    {"ragged_softmax_backward", "y_dtype=fp32,scale=-0.5", PASSES},
    /* SwiGLU backward: strides of either form, in place exactly over gate
     * and up, the fused output over a fused input, no other overlap. */
    {"swiglu_backward", "gate_stride=10", INVALID, "gate_stride=10"},
    {"swiglu_backward", "up_stride=63", INVALID, "up_stride=63"},
    {"swiglu_backward", "dgate_stride=63", INVALID, "dgate_stride=63"},
    {"swiglu_backward", "dup_stride=63", INVALID, "dup_stride=63"},
    {"swiglu_backward", "dy_stride=63", INVALID, "dy_stride=63"},
    {"swiglu_backward", "up=0,gate_stride=100", INVALID, "gate_stride=100"},
    {"swiglu_backward", "dup=0,dgate_stride=100", INVALID, "dgate_stride=100 is less than 2 * cols"},
    {"swiglu_backward", "dup=0,dup_stride=64", INVALID, "dup_stride=64 differs"},
    {"swiglu_backward", "rows=4611686018427387904", INVALID, "extends past the address space"},
    {"swiglu_backward", "dgate=gate,dup=up", PASSES},
    {"swiglu_backward", "dgate=gate,dgate_stride=72,gate_stride=72", PASSES},
    {"swiglu_backward", "dgate=gate,dgate_stride=72", INVALID, "dgate == gate (in place)"},
    {"swiglu_backward", "dgate=up", INVALID, "dgate=0x20000 overlaps up"},
    {"swiglu_backward", "dup=gate", INVALID, "dup=0x10000 overlaps gate"},
    {"swiglu_backward", "dgate=dy", INVALID, "dgate=0x30000 overlaps dy"},
    {"swiglu_backward", "dup=dgate+64", INVALID, "dgate=0x40000 overlaps dup=0x40040"},
    {"swiglu_backward", "dgate=gate+2", INVALID, "overlaps gate"},
    {"swiglu_backward", "up=0,dup=0,dgate=gate", PASSES},
    {"swiglu_backward", "up=0,dgate=gate,dgate_stride=128,dup=gate+128,dup_stride=128", PASSES},
    {"swiglu_backward", "up=0,dup=0,dgate=gate+128", INVALID, "overlaps"},
    {"swiglu_backward", "dup=0,dgate=0x60000", PASSES},
    {"swiglu_backward", "up=0,dup=0,dgate=gate,dgate_stride=192,gate_stride=192", PASSES},
    {"swiglu_backward", "up=0,gate_stride=192,dy=gate+256,dy_stride=192", PASSES},
    /* Attention's strides: multiples of 8 elements, positive, apart. */
    {"attention", "q_token_stride=1028", MISALIGNED, "q strides (token 1028, head 128)"},
    {"attention", "k_head_stride=132", MISALIGNED, "k strides"},
    {"attention", "v_token_stride=-256", MISALIGNED, "v strides"},
    {"attention", "q_head_stride=64", INVALID, "q strides (token 1024, head 64) overlap"},
    {"attention", "out_token_stride=512", INVALID, "out strides (token 512, head 128) overlap"},
    {"attention", "k_token_stride=128,k_head_stride=128", INVALID, "k strides"},
    {"attention", "cu_seqlens_k=0x7000002", MISALIGNED, "cu_seqlens_k=0x7000002"},
    /* Attention's layouts. */
    {"attention", "causal=0", PASSES},
    {"attention", "window_left=128,window_right=0", PASSES},
    {"attention", "softcap=-1", INVALID, "softcap=-1"},
    {"attention", "softcap=nan", INVALID, "softcap=nan"},
    {"attention", "softcap=inf", INVALID, "softcap=inf"},
    {"attention", "softcap=30", PASSES}, /* Gemma 2 */
    {"attention", "softcap=50,window_left=4095,window_right=0,causal=0", PASSES},
    {"attention", "heads_kv=1", PASSES}, /* MQA */
    {"attention", "heads_kv=8", PASSES}, /* MHA */
    {"attention", "dtype=fp16,head_dim=32", PASSES},
    {"attention", "head_dim=256", PASSES},
    {"attention", "head_dim=96", PASSES},
    {"attention", "total_k=0,k=0,v=0", PASSES}, /* no keys: zeros out, -inf lse */
    /* One [T, 3, H, d] buffer (MHA), interleaved by token; [T, H, 3, d],
     * interleaved by head. */
    {"attention",
     "heads_kv=8,q=0x10000000,k=q+2048,v=k+2048,q_token_stride=3072,k_token_stride=3072,"
     "v_token_stride=3072",
     PASSES},
    {"attention",
     "heads_kv=8,q=0x10000000,k=q+256,v=k+256,q_token_stride=3072,k_token_stride=3072,"
     "v_token_stride=3072,q_head_stride=384,k_head_stride=384,v_head_stride=384",
     PASSES},
    {"attention", "out_token_stride=2048", PASSES}, /* every other token row */
    /* Nothing to write: no pointer is looked at. */
    {"attention",
     "batch=0,total_q=0,total_k=0,max_seqlen_q=0,max_seqlen_k=0,q=0,k=0,v=0,out=0,"
     "cu_seqlens_q=0,cu_seqlens_k=0",
     SCREE_OK, ""},
    {"attention", "total_q=0,max_seqlen_q=0,q=0,out=0", SCREE_OK, ""},
    /* kv_append: the page sizes of paged attention, the limits, the rows the
     * kernel counts in int. */
    {"kv_append", "page_size=3", UNSUPPORTED, "page_size=3 is not supported"},
    {"kv_append", "page_size=4", UNSUPPORTED, "page_size=4 is not supported"},
    {"kv_append", "page_size=257", UNSUPPORTED, "page_size=257 exceeds"},
    {"kv_append", "page_size=0", INVALID, "page_size=0"},
    {"kv_append", "page_size=1", PASSES},
    {"kv_append", "page_size=256", PASSES},
    {"kv_append", "head_dim=1025", UNSUPPORTED, "head_dim=1025"},
    {"kv_append", "heads_kv=65536", UNSUPPORTED, "heads_kv=65536"},
    {"kv_append", "num_pages=0", INVALID, "num_pages=0"},
    {"kv_append", "total_new=2147483647", UNSUPPORTED, "total_new=2147483647 times heads_kv=2"},
    {"kv_append", "dtype=fp32", PASSES},
    {"kv_append", "dtype=bf16", PASSES},
    {"kv_append", "head_dim=96", PASSES},
    {"kv_append", "head_dim=100", PASSES}, /* narrower vectors */
    {"kv_append", "head_dim=1", PASSES},
    /* The caches' strides: no two elements at one address, in any order
     * (HND passes), none negative. */
    {"kv_append", "cache_token_stride=64", INVALID, "cache strides (page 1024, token 64, head 64)"},
    {"kv_append", "cache_head_stride=32", INVALID, "cache strides (page 2048, token 128, head 32)"},
    {"kv_append", "cache_page_stride=1024", INVALID, "share an address"},
    {"kv_append", "cache_page_stride=-1", INVALID, "cache_page_stride=-1"},
    {"kv_append", "cache_token_stride=64,cache_head_stride=1024,cache_page_stride=2048", PASSES},
    {"kv_append", "cache_token_stride=256,cache_page_stride=8192", PASSES}, /* padded */
    {"kv_append", "cache_page_stride=4611686018427387904", INVALID,
     "k_cache=0x1000000 extends past the address space"},
    /* The caches apart from what is read and from each other, except
     * interleaved page by page ([pages, 2, 16, 2, 64]). */
    {"kv_append", "k_cache=k", INVALID, "k_cache=0x100000 overlaps k=0x100000"},
    {"kv_append", "k_cache=v+2046", INVALID, "k_cache=0x2007fe overlaps v=0x200000"},
    {"kv_append", "v_cache=slot_mapping+8", INVALID, "v_cache=0x300008 overlaps slot_mapping"},
    {"kv_append", "k_cache=slot_mapping-16382", INVALID, "overlaps slot_mapping"},
    {"kv_append", "k_cache=slot_mapping-16382,slot_mapping=0x400000", PASSES},
    {"kv_append", "v_cache=k_cache+16", INVALID,
     "k_cache=0x1000000 and v_cache=0x1000010 overlap"},
    {"kv_append", "v_cache=k_cache+16384", PASSES}, /* right after */
    {"kv_append", "cache_page_stride=4096,v_cache=k_cache+4096", PASSES},
    {"kv_append", "cache_page_stride=4096,v_cache=k_cache-4096", PASSES},
    {"kv_append", "cache_page_stride=4096,v_cache=k_cache+4098", INVALID, "overlap"},
    {"kv_append", "cache_page_stride=4096,v_cache=k_cache+4094", INVALID, "overlap"},
    {"kv_append", "cache_page_stride=4096,v_cache=k_cache", INVALID, "overlap"},
    {"kv_append", "num_pages=1,v_cache=k_cache+2", INVALID, "overlap"},
    /* k and v as views of one fused [T, 3, H, d] buffer, read where they
     * lie; k and v may be one tensor. */
    {"kv_append", "k=0x10000000,v=k+256,k_token_stride=384,v_token_stride=384", PASSES},
    {"kv_append", "v=k", PASSES},
    {"kv_append", "k_token_stride=64,k_head_stride=512", PASSES}, /* head-major */
    {"kv_append", "slot_mapping=0x300004", MISALIGNED, "slot_mapping=0x300004"},
    /* Nothing to append: no pointer is looked at. */
    {"kv_append", "total_new=0,k=0,v=0,k_cache=0,v_cache=0,slot_mapping=0", SCREE_OK, ""},
};

/* ---- calls as text -------------------------------------------------------------- */

/* The public entry of every op, by name (through its declared type). */
#define ENTRY_(name, type)                                                  \
  static scree_status call_##name(scree_context *c, const void *a) {        \
    return scree_##name(c, (const type *)a, NULL);                          \
  }
SCREE__OP_LIST(ENTRY_)
#undef ENTRY_
static const struct {
  const char *name;
  scree_status (*fn)(scree_context *, const void *);
} entries[] = {
#define ENTRY_(name, type) {#name, call_##name},
    SCREE__OP_LIST(ENTRY_)
#undef ENTRY_
};

static scree_context *ctx;

static void setup(void) { ctx = scree__context_offline(); }
static void teardown(void) { scree_destroy(ctx); }

static scree_status entry(const scree__op *op, const void *a) {
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
    if (!strcmp(entries[i].name, op->name)) return entries[i].fn(ctx, a);
  ck_abort_msg("%s: no public entry", op->name);
  return SCREE_OK;
}

static const scree__arg *field(const scree__op *op, const char *name, size_t len) {
  for (int i = 0; i < op->nargs; i++)
    if (strlen(op->args[i].name) == len && !strncmp(op->args[i].name, name, len))
      return &op->args[i];
  return NULL;
}

static uint64_t get_u64(const void *a, const scree__arg *f) {
  uint64_t v;
  memcpy(&v, (const char *)a + f->offset, sizeof v);
  return v;
}

static void put(void *a, const scree__arg *f, int64_t v) {
  if (f->ctype == SCREE__C_I32) {
    const int32_t w = (int32_t)v;
    memcpy((char *)a + f->offset, &w, sizeof w);
  } else {
    memcpy((char *)a + f->offset, &v, sizeof v);
  }
}

/* Applies "field=value,..." to args a of op. */
static void apply(const scree__op *op, void *a, const char *text) {
  const char *p = text;
  while (*p) {
    const char *eq = strchr(p, '='), *end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    ck_assert_msg(eq && eq < end, "%s: \"%s\": expected field=value", op->name, text);
    const scree__arg *f = field(op, p, (size_t)(eq - p));
    ck_assert_msg(f, "%s: \"%s\": no field \"%.*s\"", op->name, text, (int)(eq - p), p);
    char v[64];
    snprintf(v, sizeof v, "%.*s", (int)(end - eq - 1), eq + 1);
    if (f->ctype == SCREE__C_F32) {
      const float x = strtof(v, NULL);
      memcpy((char *)a + f->offset, &x, sizeof x);
    } else if (f->role == SCREE__ROLE_DTYPE && (v[0] == 'f' || v[0] == 'b')) {
      put(a, f, !strcmp(v, "fp32") ? SCREE_DTYPE_FP32 : !strcmp(v, "fp16") ? SCREE_DTYPE_FP16
                                                                           : SCREE_DTYPE_BF16);
    } else if (f->ctype == SCREE__C_PTR && v[0] >= 'a' && v[0] <= 'z') {
      size_t n = strcspn(v, "+-");
      const scree__arg *g = field(op, v, n);
      ck_assert_msg(g && g->ctype == SCREE__C_PTR, "%s: \"%s\": no pointer %.*s", op->name, text,
                    (int)n, v);
      const uint64_t base = get_u64(a, g);
      const int64_t off = v[n] ? strtoll(v + n, NULL, 0) : 0;
      put(a, f, (int64_t)(base + (uint64_t)off));
    } else {
      put(a, f, v[0] == '-' ? strtoll(v, NULL, 0) : (int64_t)strtoull(v, NULL, 0));
    }
    p = *end ? end + 1 : end;
  }
}

typedef struct args {
  _Alignas(16) unsigned char b[SCREE__ARGS_MAX];
} args;

static args parse(const scree__op *op, const char *text) {
  args a;
  memset(&a, 0, sizeof a);
  apply(op, a.b, text);
  return a;
}

/* The call gives status and a message holding needle (NULL: it passes, up
 * to the launch). what says which case it is. */
static void expect_call(const scree__op *op, const args *a, scree_status want,
                        const char *needle, const char *what) {
  const scree_status st = entry(op, a->b);
  const char *msg = scree_last_error(ctx);
  if (!needle) {
    want = SCREE_ERROR_NO_DEVICE;
    needle = "no device";
  }
  ck_assert_msg(st == want, "%s: %s: got %s, want %s (\"%s\")", op->name, what,
                scree_status_name(st), scree_status_name(want), msg);
  ck_assert_msg(strstr(msg, needle), "%s: %s: message \"%s\" lacks \"%s\"", op->name, what, msg,
                needle);
}

/* The same through scree_check_args: what does not depend on the
 * pointers' values gives the call's status and message. */
static void expect_both(const scree__op *op, const args *a, scree_status want, const char *needle,
                        const char *what) {
  expect_call(op, a, want, needle, what);
  char why[512];
  const scree_status st = scree_check_args(op->name, a->b, why, sizeof why);
  const scree_status w = needle ? want : SCREE_OK;
  ck_assert_msg(st == w, "%s: scree_check_args: %s: got %s, want %s (\"%s\")", op->name, what,
                scree_status_name(st), scree_status_name(w), why);
  ck_assert_msg(needle ? strstr(why, needle) != NULL : !*why,
                "%s: scree_check_args: %s: \"%s\" (want \"%s\")", op->name, what, why,
                needle ? needle : "");
}

static const scree__op *op_of(const char *name) {
  const scree__op *op = scree__op_find(name);
  ck_assert_msg(op, "no op %s", name);
  return op;
}

static int is_tensor(const scree__arg *f) {
  return f->role == SCREE__ROLE_IN || f->role == SCREE__ROLE_OUT || f->role == SCREE__ROLE_INOUT;
}

/* Bytes from a tensor's first element to past its last, in a. */
static uint64_t span(const args *a, const scree__arg *t) {
  scree__geom g;
  if (!scree__tensor_geom(a->b, t, &g)) return 0;
  uint64_t last = (uint64_t)g.ext[g.rank - 1];
  for (int k = 0; k + 1 < g.rank; k++) last += (uint64_t)(g.ext[k] - 1) * (uint64_t)g.stride[k];
  return last * scree__elem_size(scree__tensor_elem(a->b, t));
}

static size_t align_of(const args *a, const scree__arg *t) {
  return t->align ? t->align : scree__elem_size(scree__tensor_elem(a->b, t));
}

/* ---- the generic cases -------------------------------------------------------- */

static char what[256];

#define CASE(...) snprintf(what, sizeof what, __VA_ARGS__)

static void pointer_cases(const scree__op *op, const args *base, const scree__arg *t) {
  args a;
  char needle[160];
  const uint64_t p = get_u64(base->b, t);
  const size_t align = align_of(base, t);
  if (!(t->flags & SCREE__OWN_POINTER)) {
    a = *base, put(a.b, t, 0);
    CASE("%s=0", t->name);
    if (t->flags & SCREE__OPTIONAL) {
      snprintf(needle, sizeof needle, "%s is NULL", t->name);
      entry(op, a.b);
      ck_assert_msg(strcmp(scree_last_error(ctx), needle), "%s: %s (optional): %s", op->name,
                    what, scree_last_error(ctx));
    } else {
      snprintf(needle, sizeof needle, "%s is NULL", t->name);
      expect_both(op, &a, SCREE_ERROR_INVALID_ARGUMENT, needle, what);
    }
    if (align > 1) {
      a = *base, put(a.b, t, (int64_t)(p + align / 2));
      CASE("%s misaligned", t->name);
      snprintf(needle, sizeof needle, "%s=0x%llx is not aligned to %zu bytes", t->name,
               (unsigned long long)(p + align / 2), align);
      expect_call(op, &a, SCREE_ERROR_MISALIGNED, needle, what);
    }
  }
  if (t->flags & (SCREE__OWN_RANGE | SCREE__OWN_POINTER)) return;
  /* Its last byte past the end of the address space. */
  const uint64_t bytes = span(base, t);
  if (bytes > align) {
    const uint64_t top = (0 - bytes + align) & ~(uint64_t)(align - 1);
    a = *base, put(a.b, t, (int64_t)top);
    CASE("%s at 0x%llx", t->name, (unsigned long long)top);
    snprintf(needle, sizeof needle, "%s=0x%llx extends past the address space", t->name,
             (unsigned long long)top);
    expect_call(op, &a, SCREE_ERROR_INVALID_ARGUMENT, needle, what);
  }
  /* Against every other tensor of the call. */
  for (int j = 0; j < op->nargs; j++) {
    const scree__arg *u = &op->args[j];
    if (u == t || !is_tensor(u) || (u->flags & (SCREE__OWN_RANGE | SCREE__OWN_POINTER)) ||
        !get_u64(base->b, u) || !span(base, u))
      continue;
    const uint64_t q = get_u64(base->b, u), ubytes = span(base, u);
    const int alias = (t->alias[0] == u->offset + 1u || t->alias[1] == u->offset + 1u ||
                       u->alias[0] == t->offset + 1u || u->alias[1] == t->offset + 1u);
    if (t->role == SCREE__ROLE_IN && u->role == SCREE__ROLE_IN) {
      /* Only read, both: they may share memory. */
      a = *base, put(a.b, t, (int64_t)q);
      CASE("%s=%s (both read)", t->name, u->name);
      expect_both(op, &a, SCREE_ERROR_NO_DEVICE, NULL, what);
      continue;
    }
    if (t->role == SCREE__ROLE_IN) continue; /* the written one is moved, below */
    /* t is written: on u, into u, right after u. */
    a = *base, put(a.b, t, (int64_t)q);
    CASE("%s=%s", t->name, u->name);
    if (alias) {
      scree__geom gt, gu;
      scree__tensor_geom(a.b, t, &gt);
      scree__tensor_geom(a.b, u, &gu);
      int same = align_of(&a, t) == align_of(&a, u) && scree__elem_size(scree__tensor_elem(a.b, t)) ==
                                                        scree__elem_size(scree__tensor_elem(a.b, u));
      for (int k = 0; k + 1 < gt.rank; k++) same &= gt.stride[k] == gu.stride[k];
      snprintf(needle, sizeof needle, "%s (in place)", t->name);
      expect_call(op, &a, same ? SCREE_ERROR_NO_DEVICE : SCREE_ERROR_INVALID_ARGUMENT,
                  same ? NULL : needle, what);
      const uint64_t in = align_of(&a, t);
      if (in < ubytes) {
        a = *base, put(a.b, t, (int64_t)(q + in));
        CASE("%s=%s+%llu", t->name, u->name, (unsigned long long)in);
        expect_call(op, &a, SCREE_ERROR_INVALID_ARGUMENT, "partially overlaps", what);
        ck_assert_msg(strstr(scree_last_error(ctx), t->name) &&
                          strstr(scree_last_error(ctx), u->name),
                      "%s: %s: %s", op->name, what, scree_last_error(ctx));
      }
    } else {
      expect_call(op, &a, SCREE_ERROR_INVALID_ARGUMENT, "overlaps", what);
      char tn[64], un[64];
      snprintf(tn, sizeof tn, "%s=0x", t->name);
      snprintf(un, sizeof un, "%s=0x", u->name);
      ck_assert_msg(strstr(scree_last_error(ctx), tn) && strstr(scree_last_error(ctx), un),
                    "%s: %s: %s", op->name, what, scree_last_error(ctx));
    }
    const size_t at = align_of(base, t);
    a = *base, put(a.b, t, (int64_t)((q + ubytes + at - 1) / at * at));
    CASE("%s right after %s", t->name, u->name);
    expect_call(op, &a, SCREE_ERROR_NO_DEVICE, NULL, what);
  }
}

static void stride_cases(const scree__op *op, const args *base, const scree__arg *t) {
  if (t->flags & (SCREE__OWN_RANGE | SCREE__OWN_POINTER) || !t->strides[0] ||
      !get_u64(base->b, t))
    return;
  scree__geom g;
  if (!scree__tensor_geom(base->b, t, &g)) return;
  args a;
  char needle[160];
  const scree__arg *s0 = scree__arg_at(op, t->strides[0]);
  if (!(t->flags & SCREE__ANY_ORDER)) {
    /* Each stride covers the dimensions inside it. */
    for (int k = 0; k + 1 < g.rank; k++) {
      const scree__arg *s = scree__arg_at(op, t->strides[k]);
      const int64_t inner = g.ext[k + 1] * g.stride[k + 1];
      const int64_t bad[2] = {inner - 1, -inner};
      for (int b = 0; b < 2; b++) {
        if (!bad[b]) continue; /* 0 means dense */
        a = *base, put(a.b, s, bad[b]);
        CASE("%s=%lld", s->name, (long long)bad[b]);
        snprintf(needle, sizeof needle, "%s=%lld is less than", s->name, (long long)bad[b]);
        expect_both(op, &a, SCREE_ERROR_INVALID_ARGUMENT, needle, what);
      }
    }
    return;
  }
  /* Any order: positive (multiples), and no two elements at one address. */
  snprintf(needle, sizeof needle, "%s strides (", t->name);
  const int m = t->stride_multiple ? t->stride_multiple : 1;
  a = *base, put(a.b, s0, g.stride[0] + (m > 1 ? m / 2 : 0));
  if (m > 1) {
    CASE("%s=%lld", s0->name, (long long)(g.stride[0] + m / 2));
    expect_both(op, &a, SCREE_ERROR_MISALIGNED, needle, what);
  }
  a = *base, put(a.b, s0, -g.stride[0]);
  CASE("%s=%lld", s0->name, (long long)-g.stride[0]);
  expect_both(op, &a, m > 1 ? SCREE_ERROR_MISALIGNED : SCREE_ERROR_INVALID_ARGUMENT, needle, what);
  if (g.rank == 3 && t->strides[1] && g.ext[1] > 1 && g.ext[2] >= 2 * m) {
    const scree__arg *s1 = scree__arg_at(op, t->strides[1]);
    a = *base, put(a.b, s0, g.stride[0]), put(a.b, s1, g.ext[2] / 2 / m * m);
    CASE("%s=%lld", s1->name, (long long)(g.ext[2] / 2 / m * m));
    snprintf(needle, sizeof needle, "%s strides (", t->name);
    expect_both(op, &a, SCREE_ERROR_INVALID_ARGUMENT, needle, what);
    ck_assert_msg(strstr(scree_last_error(ctx), "overlap"), "%s: %s: %s", op->name, what,
                  scree_last_error(ctx));
  }
}

static void scalar_cases(const scree__op *op, const args *base, const scree__arg *f) {
  args a;
  char needle[160];
  if (f->role == SCREE__ROLE_DTYPE) {
    const scree__vfield *vf = NULL;
    for (int i = 0; i < op->nvfields; i++)
      if (op->vfields[i].arg == f->offset + 1u) vf = &op->vfields[i];
    ck_assert_msg(vf, "%s: %s gives no variant field", op->name, f->name);
    for (int d = -1; d <= 7; d++) {
      int known = 0;
      for (int k = 0; k < vf->nvalues; k++) known |= vf->values[k] == d;
      if (known || (d > 2 && d < 7)) continue;
      a = *base, put(a.b, f, d);
      CASE("%s=%d", f->name, d);
      if (d >= 0 && d <= 2)
        snprintf(needle, sizeof needle, "%s=%d (%s) is not", f->name, d,
                 scree_dtype_name((scree_dtype)d));
      else
        snprintf(needle, sizeof needle, "%s=%d is not", f->name, d);
      expect_both(op, &a, SCREE_ERROR_UNSUPPORTED, needle, what);
    }
    return;
  }
  if (f->role == SCREE__ROLE_FLOAT) {
    static const char *const bad[] = {"inf", "-inf", "nan", "-1"};
    for (int b = 0; b < 4; b++) {
      if (b < 3 ? !(f->flags & SCREE__FINITE) : !(f->flags & SCREE__NONNEG)) continue;
      char edit[64];
      snprintf(edit, sizeof edit, "%s=%s", f->name, bad[b]);
      a = *base, apply(op, a.b, edit);
      CASE("%s", edit);
      snprintf(needle, sizeof needle, "%s=", f->name);
      expect_both(op, &a, SCREE_ERROR_INVALID_ARGUMENT, needle, what);
    }
    return;
  }
  if (is_tensor(f) || (!f->min && !f->max)) return;
  if (f->min > (f->ctype == SCREE__C_I32 ? INT32_MIN : INT64_MIN)) {
    const int64_t lo = f->min - 1;
    a = *base, put(a.b, f, lo);
    CASE("%s=%lld", f->name, (long long)lo);
    snprintf(needle, sizeof needle, "%s=%lld", f->name, (long long)lo);
    expect_both(op, &a, SCREE_ERROR_INVALID_ARGUMENT, needle, what);
  }
  if (f->max < (f->ctype == SCREE__C_I32 ? INT32_MAX : INT64_MAX)) {
    const int64_t hi = f->max + 1;
    a = *base, put(a.b, f, hi);
    CASE("%s=%lld", f->name, (long long)hi);
    snprintf(needle, sizeof needle, "%s=%lld", f->name, (long long)hi);
    expect_both(op, &a,
                (f->flags & SCREE__LIMIT) ? SCREE_ERROR_UNSUPPORTED : SCREE_ERROR_INVALID_ARGUMENT,
                needle, what);
  }
}

/* A size that empties the call, with every pointer NULL: SCREE_OK and no
 * message, unless a rule of the op about that size refuses it. */
static void empty_case(const scree__op *op, const args *base, const scree__arg *f) {
  args a = *base;
  put(a.b, f, 0);
  for (int i = 0; i < op->nargs; i++)
    if (is_tensor(&op->args[i])) put(a.b, &op->args[i], 0);
  CASE("%s=0, no buffers", f->name);
  const scree_status st = entry(op, a.b);
  if (st == SCREE_OK) {
    ck_assert_msg(!*scree_last_error(ctx), "%s: %s: \"%s\"", op->name, what,
                  scree_last_error(ctx));
    char why[256];
    ck_assert_int_eq(scree_check_args(op->name, a.b, why, sizeof why), SCREE_OK);
  } else {
    char needle[96];
    snprintf(needle, sizeof needle, "%s is 0", f->name);
    ck_assert_msg(st == SCREE_ERROR_INVALID_ARGUMENT && strstr(scree_last_error(ctx), needle),
                  "%s: %s: %s (%s)", op->name, what, scree_status_name(st),
                  scree_last_error(ctx));
  }
}

static void generic_cases(const scree__op *op, const char *text) {
  const args base = parse(op, text);
  expect_both(op, &base, SCREE_ERROR_NO_DEVICE, NULL, "the valid call");
  for (int i = 0; i < op->nargs; i++) {
    const scree__arg *f = &op->args[i];
    if (is_tensor(f) && get_u64(base.b, f)) {
      pointer_cases(op, &base, f);
      stride_cases(op, &base, f);
    }
    scalar_cases(op, &base, f);
    if (f->flags & SCREE__EMPTY) empty_case(op, &base, f);
  }
}

/* ---- the tests ------------------------------------------------------------------ */

START_TEST(every_op_has_a_call) {
  for (int i = 0; scree__ops[i]; i++) {
    int n = 0;
    for (size_t k = 0; k < sizeof valid / sizeof valid[0]; k++) n += !strcmp(valid[k].op, scree__ops[i]->name);
    ck_assert_msg(n > 0, "%s has no valid call in tests/runtime/ops/test_args.c", scree__ops[i]->name);
  }
}
END_TEST

START_TEST(generic) {
  const call *c = &valid[_i];
  generic_cases(op_of(c->op), c->text);
}
END_TEST

START_TEST(op_cases) {
  const expect *e = &cases[_i];
  const scree__op *op = op_of(e->op);
  const call *base = NULL;
  for (size_t k = 0; k < sizeof valid / sizeof valid[0] && !base; k++)
    if (!strcmp(valid[k].op, e->op)) base = &valid[k];
  ck_assert_msg(base, "%s has no valid call", e->op);
  args a = parse(op, base->text);
  apply(op, a.b, e->edit);
  expect_call(op, &a, e->status, e->needle, e->edit);
}
END_TEST

/* Every tensor of every op's schema, optional ones and those whose range
 * the op checks itself included, at the highest address its alignment
 * allows: its bytes pass the end of the address space, and the refusal
 * names it and its value. Each is set on a valid call that gives it, so a
 * new op's tensors (or a new tensor) are covered once it has valid calls
 * that use them. */
START_TEST(every_tensor_wraps) {
  for (int i = 0; scree__ops[i]; i++) {
    const scree__op *op = scree__ops[i];
    for (int j = 0; j < op->nargs; j++) {
      const scree__arg *t = &op->args[j];
      if (!is_tensor(t)) continue;
      const call *c = NULL;
      for (size_t k = 0; k < sizeof valid / sizeof valid[0] && !c; k++)
        if (!strcmp(valid[k].op, op->name) && get_u64(parse(op, valid[k].text).b, t))
          c = &valid[k];
      ck_assert_msg(c, "%s: no valid call gives %s (tests/runtime/ops/test_args.c)", op->name,
                    t->name);
      args a = parse(op, c->text);
      const size_t align = align_of(&a, t);
      ck_assert_msg(span(&a, t) > align, "%s: %s in \"%s\" has %llu bytes, too few to wrap",
                    op->name, t->name, c->text, (unsigned long long)span(&a, t));
      const uint64_t top = 0 - (uint64_t)align;
      put(a.b, t, (int64_t)top);
      char needle[160];
      CASE("%s=0x%llx", t->name, (unsigned long long)top);
      snprintf(needle, sizeof needle, "%s=0x%llx extends past the address space", t->name,
               (unsigned long long)top);
      expect_call(op, &a, SCREE_ERROR_INVALID_ARGUMENT, needle, what);
    }
  }
}
END_TEST

/* NULL context or args; an error cleared by the next call that succeeds. */
START_TEST(null_and_cleared) {
  for (int i = 0; scree__ops[i]; i++) {
    const scree__op *op = scree__ops[i];
    for (size_t k = 0; k < sizeof entries / sizeof entries[0]; k++) {
      if (strcmp(entries[k].name, op->name)) continue;
      ck_assert_int_eq(entries[k].fn(NULL, NULL), SCREE_ERROR_INVALID_ARGUMENT);
      ck_assert_int_eq(entries[k].fn(ctx, NULL), SCREE_ERROR_INVALID_ARGUMENT);
      ck_assert(strstr(scree_last_error(ctx), "args is NULL"));
    }
    char why[64];
    ck_assert_int_eq(scree_check_args(op->name, NULL, why, sizeof why),
                     SCREE_ERROR_INVALID_ARGUMENT);
    /* A refused call, then an empty one: its message is gone. */
    for (size_t k = 0; k < sizeof valid / sizeof valid[0]; k++) {
      if (strcmp(valid[k].op, op->name)) continue;
      args a = parse(op, valid[k].text);
      const scree__arg *first = &op->args[0];
      put(a.b, first, 0);
      ck_assert_int_ne(entry(op, a.b), SCREE_OK);
      ck_assert_str_ne(scree_last_error(ctx), "");
      int empty = 0;
      for (int f = op->nargs - 1; f >= 0; f--)
        if (op->args[f].flags & SCREE__EMPTY) {
          put(a.b, &op->args[f], 0);
          empty = 1;
          break;
        }
      /* An op without an empty call (the norm backwards write dw even for
       * 0 rows) has no call that succeeds offline. */
      if (!empty) break;
      ck_assert_int_eq(entry(op, a.b), SCREE_OK);
      ck_assert_str_eq(scree_last_error(ctx), "");
      break;
    }
  }
  char why[64];
  ck_assert_int_eq(scree_check_args("no-such-op", "", why, sizeof why),
                   SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert_str_eq(why, "unknown op \"no-such-op\"");
}
END_TEST

/* scree_check_args stands a distinct buffer for each distinct pointer:
 * one given twice is one buffer (in place passes, as in the call), and it
 * never looks at where they are. */
START_TEST(check_args_stand_ins) {
  const scree__op *op = op_of("rmsnorm");
  args a = parse(op, valid[0].text);
  char why[256];
  apply(op, a.b, "y=x");
  ck_assert_int_eq(scree_check_args("rmsnorm", a.b, why, sizeof why), SCREE_OK);
  apply(op, a.b, "y_dtype=fp32");
  ck_assert_int_eq(scree_check_args("rmsnorm", a.b, why, sizeof why), SCREE_ERROR_INVALID_ARGUMENT);
  ck_assert(strstr(why, "y == x (in place)"));
  apply(op, a.b, "y_dtype=fp16,y=x+2,x=0xfffffffffffffff0"); /* misplaced: not looked at */
  ck_assert_int_eq(scree_check_args("rmsnorm", a.b, why, sizeof why), SCREE_OK);
  ck_assert_str_eq(why, "");
  apply(op, a.b, "cols=0");
  ck_assert_int_eq(scree_check_args("rmsnorm", a.b, NULL, 0), SCREE_ERROR_INVALID_ARGUMENT);
}
END_TEST

int main(void) {
  Suite *s = suite_create("args");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, every_op_has_a_call);
  tcase_add_loop_test(tc, generic, 0, (int)(sizeof valid / sizeof valid[0]));
  tcase_add_loop_test(tc, op_cases, 0, (int)(sizeof cases / sizeof cases[0]));
  tcase_add_test(tc, every_tensor_wraps);
  tcase_add_test(tc, null_and_cleared);
  tcase_add_test(tc, check_args_stand_ins);
  suite_add_tcase(s, tc);
  return scree_test_run(s, 0);
}
