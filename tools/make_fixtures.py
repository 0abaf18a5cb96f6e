#!/usr/bin/env python3
"""Regenerates tests/fixtures/: inputs and PyTorch's outputs for the attention crate to match.

Run from the repository root:

    pip install -r tools/requirements.txt
    python3 tools/make_fixtures.py

The tests only read the committed .npy files; Python is needed only to regenerate them.

Layout (every file is a NumPy .npy written by numpy.save):

  tests/fixtures/sdpa/<case>/      torch.nn.functional.scaled_dot_product_attention
      q.npy k.npy v.npy            (..., L_q, d_k), (..., L_k, d_k), (..., L_k, d_v)
      mask.npy                     bool, True = may attend (absent: no mask)
      causal.npy                   present (a bool True of shape (1,)) when is_causal=True was used
      out.npy                      (..., L_q, d_v)
      weights.npy                  (..., L_q, L_k): softmax(QK^T/sqrt(d_k) + mask), computed
                                   in float64 from the same inputs, then cast (SDPA itself
                                   does not return its weights)

  tests/fixtures/mha/<case>/       torch.nn.MultiheadAttention(d_model, heads, bias=False,
                                   batch_first=True)
      x_q.npy x_kv.npy             (L_q, d_model), (L_k, d_model) or with a batch axis
      w_q.npy w_k.npy w_v.npy w_o.npy
                                   (d_model, d_model) in the book's X . W convention:
                                   in_proj_weight is (3 d_model, d_model), the rows
                                   [W_q; W_k; W_v] each in nn.Linear's (out, in) layout, so
                                   W_Q = in_proj_weight[:d].T, W_K = in_proj_weight[d:2d].T,
                                   W_V = in_proj_weight[2d:].T and W_O = out_proj.weight.T
      heads.npy                    int64, shape (1,)
      mask.npy                     bool, True = may attend: (L_q, L_k) or (batch, L_q, L_k)
                                   (PyTorch's MHA takes the opposite convention, True =
                                   blocked, so the script passes ~mask)
      out.npy                      like x_q
      weights.npy                  (heads, L_q, L_k) or (batch, heads, L_q, L_k)
                                   (average_attn_weights=False)

  tests/fixtures/rope/<case>/      rotary position embeddings, written out below (rope())
      x.npy                        (..., L, d_head), row r at position start + r
      base.npy start.npy           float64 and int64, shape (1,)
      thetas.npy                   (d_head/2,) float64: base^(-2i/d_head)
      rotate_half.npy              x rotated with pairs (i, i + d_head/2) (Llama, GPT-NeoX)
      interleaved.npy              x rotated with pairs (2i, 2i+1) (RoFormer, GPT-J), checked
                                   here against complex multiplication (Meta's Llama code)
                                   The angles are computed in float64 and only cos and sin are
                                   cast to the case's dtype, as the crate does.

  tests/fixtures/alibi/<case>/     ALiBi (Press et al. 2022) under a causal mask
      slopes.npy                   (heads,) float64, the values written out in ALIBI_SLOPES
      bias.npy                     (heads, L, L): -m_h (i - j)
      q.npy k.npy v.npy            (..., heads, L, d_k), (..., heads, L, d_k), (..., heads, L, d_v)
      attn_mask.npy                (heads, L, L) float: bias, -inf above the diagonal; passed
                                   to SDPA as its float attn_mask (added to the scores)
      out.npy                      (..., heads, L, d_v)
      weights.npy                  (..., heads, L, L), in float64 from the same inputs

  tests/fixtures/window/<case>/    sliding-window attention: SDPA with a bool attn_mask
      q.npy k.npy v.npy            (..., L, d_k), (..., L, d_k), (..., L, d_v)
      window.npy                   int64 W, shape (1,)
      mask.npy                     (L, L) bool: query i sees key j iff 0 <= i - j < W
      out.npy weights.npy          as for sdpa

  tests/fixtures/sdpa_gqa/<case>/  grouped-query SDPA: H query heads, G key/value heads
      q.npy k.npy v.npy            (H, L_q, d_k), (G, L_k, d_k), (G, L_k, d_v)
      mask.npy                     (L_q, L_k) bool (absent: no mask)
      causal.npy                   bool True, shape (1,), when mask.npy is the causal mask
      window.npy                   int64 W, shape (1,) when mask.npy is a sliding window
      out.npy                      SDPA with enable_gqa=True
      out_repeat.npy               plain SDPA on k, v repeat_interleave'd to H heads (kv head
                                   j serves query heads j*H/G ... (j+1)*H/G - 1)
      weights.npy                  (H, L_q, L_k), in float64 from the same inputs

  tests/fixtures/gqa/<case>/       a grouped-query attention layer (the multihead tool's
                                   --kv-heads, --rope, --rope-base, --mask)
      x.npy                        (L, d_model) or (batch, L, d_model)
      w_q.npy w_o.npy              (d_model, d_model), X . W convention
      w_k.npy w_v.npy              (d_model, G d_head)
      heads.npy kv_heads.npy       int64 H and G, shape (1,)
      rope_base.npy                float64, shape (1,) (absent: no RoPE); RoPE rotate-half is applied
                                   to each head's q and k after the projection, positions
                                   0 ... L-1 (each batch item from 0)
      causal.npy                   bool True, shape (1,), for a causal mask
      window.npy                   int64 W, shape (1,) for a causal sliding window (0 <= i - j < W)
      mask.npy                     (L, L) bool, the mask that was used (absent: no mask)
      out.npy                      like x: the heads' outputs side by side, times W_O
      weights.npy                  (heads, L, L) or (batch, heads, L, L), in float64 from the
                                   same (rotated) q and k
                                   The layer is computed twice (enable_gqa=True and
                                   repeat_interleave) and the script checks they agree.

  tests/fixtures/grad/<case>/      the backward pass of SDPA: autograd through
                                   torch.nn.functional.scaled_dot_product_attention
      q.npy k.npy v.npy            (..., L_q, d_k), (..., L_k, d_k), (..., L_k, d_v)
      mask.npy causal.npy          as for sdpa_gqa (case_mask); a bool mask.npy alone for the
                                   cases with a query that sees no key (absent: no mask)
      do.npy                       (..., L_q, d_v): the gradient of the loss sum(out * do)
                                   with respect to out
      out.npy                      (..., L_q, d_v)
      dq.npy dk.npy dv.npy         the gradients of sum(out * do) with respect to q, k, v
                                   (out.backward(do)); a query that sees no key has a zero
                                   row in out and dq (the script asserts it)

  tests/fixtures/grad_mha/<case>/  the backward pass of a multi-head layer, written out in
                                   torch (mha_layer()) in the book's X . W convention and
                                   checked against nn.MultiheadAttention(bias=False) given
                                   in_proj_weight = [W_Q^T; W_K^T; W_V^T], out_proj.weight =
                                   W_O^T (outputs and all five gradients)
      x.npy                        (batch, L, d_model)
      w_q.npy w_k.npy w_v.npy w_o.npy
                                   (d_model, d_model), X . W convention
      heads.npy                    int64, shape (1,)
      mask.npy causal.npy          as for grad; mask.npy is (batch, L, L) for a padding mask
      dy.npy                       (batch, L, d_model): the gradient of the loss with respect
                                   to the output
      out.npy                      (batch, L, d_model)
      dx.npy dw_q.npy dw_k.npy dw_v.npy dw_o.npy
                                   the gradients of sum(out * dy) with respect to x and the
                                   four weights, each the shape of its input

A row whose every key is masked: SDPA's result for it is recorded in
tests/fixtures/sdpa/README.txt (torch 2.15 returns zeros, the crate's policy as well).
nn.MultiheadAttention returns NaN for such rows, so the MHA cases have none.
"""

import math
import shutil
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
DTYPES = {"f32": torch.float32, "f64": torch.float64}


def save(case_dir: Path, **arrays):
    case_dir.mkdir(parents=True, exist_ok=True)
    for name, value in arrays.items():
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
        # np.ascontiguousarray returns at least one axis: a scalar is saved with shape (1,).
        np.save(case_dir / f"{name}.npy", np.ascontiguousarray(value))


def reference_weights(q, k, mask, causal):
    """softmax(QK^T / sqrt(d_k)) with -inf for blocked keys and zeros for fully blocked rows, in float64."""
    q64, k64 = q.double(), k.double()
    scores = q64 @ k64.transpose(-2, -1) / np.sqrt(q.shape[-1])
    allowed = torch.ones(scores.shape[-2:], dtype=torch.bool)
    if causal:
        allowed = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
    if mask is not None:
        allowed = allowed & mask
    allowed = allowed.expand(scores.shape)
    scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.nan_to_num(weights, nan=0.0)  # fully masked rows: 0/0 -> 0


def sdpa_case(name, dtype, lead, l_q, l_k, d_k, d_v, mask_kind=None, scale=1.0, gen=None):
    dt = DTYPES[dtype]
    q = (torch.randn(*lead, l_q, d_k, generator=gen, dtype=torch.float64) * scale).to(dt)
    k = (torch.randn(*lead, l_k, d_k, generator=gen, dtype=torch.float64) * scale).to(dt)
    v = torch.randn(*lead, l_k, d_v, generator=gen, dtype=torch.float64).to(dt)
    mask, causal = None, False
    if mask_kind == "causal":
        causal = True
    elif mask_kind is not None:
        shape = (l_q, l_k) if mask_kind == "broadcast" else (*lead, l_q, l_k)
        mask = torch.rand(*shape, generator=gen) < 0.6
        if mask_kind == "fully_masked_rows":
            mask[..., 0, :] = False  # the first query sees nothing
            if l_q > 2:
                mask[..., l_q // 2, :] = False
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    weights = reference_weights(q, k, mask, causal).to(dt)
    arrays = dict(q=q, k=k, v=v, out=out, weights=weights)
    if mask is not None:
        arrays["mask"] = mask
    if causal:
        arrays["causal"] = np.array(True)
    save(ROOT / "sdpa" / f"{dtype}_{name}", **arrays)
    return out, mask


def mha_case(name, dtype, d_model, heads, l_q, l_k, batch=None, mask_kind=None, cross=False, gen=None):
    dt = DTYPES[dtype]
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
    mha = torch.nn.MultiheadAttention(d_model, heads, bias=False, batch_first=True, dtype=dt)
    mha.eval()
    lead = () if batch is None else (batch,)
    x_q = torch.randn(*lead, l_q, d_model, generator=gen, dtype=torch.float64).to(dt)
    x_kv = torch.randn(*lead, l_k, d_model, generator=gen, dtype=torch.float64).to(dt) if cross else x_q
    mask = None
    kwargs = {}
    if mask_kind == "causal":
        mask = torch.ones(l_q, l_k, dtype=torch.bool).tril()
        kwargs["attn_mask"] = ~mask  # MHA: True = blocked
    elif mask_kind == "padding":
        valid = [l_k - 2 * b for b in range(batch)]
        key_ok = torch.stack([torch.arange(l_k) < n for n in valid])  # (batch, L_k)
        kwargs["key_padding_mask"] = ~key_ok  # MHA: True = padding
        mask = key_ok[:, None, :].expand(batch, l_q, l_k)
    with torch.no_grad():
        out, weights = mha(x_q, x_kv, x_kv, need_weights=True, average_attn_weights=False, **kwargs)
    # ANCHOR: mha_weights
    w = mha.in_proj_weight.detach()
    d = d_model
    w_q = w[:d].T
    w_k = w[d : 2 * d].T
    w_v = w[2 * d :].T
    w_o = mha.out_proj.weight.detach().T
    # ANCHOR_END: mha_weights
    arrays = dict(
        x_q=x_q,
        x_kv=x_kv,
        w_q=w_q,
        w_k=w_k,
        w_v=w_v,
        w_o=w_o,
        heads=np.array(heads, dtype=np.int64),
        out=out,
        weights=weights,
    )
    if mask is not None:
        arrays["mask"] = mask
    save(ROOT / "mha" / f"{dtype}_{name}", **arrays)


# --- Part II: position (RoPE, ALiBi) and generation (sliding window, grouped-query attention) ---


def rope_thetas(d_head, base):
    """theta_i = base^(-2i/d_head) for i < d_head/2, in float64."""
    return base ** (-2.0 * np.arange(d_head // 2) / d_head)


def rope(x, base, start, layout):
    """Rotates each row of x: (..., L, d_head); row r is the token at position start + r.

    Pair i turns by the angle (start + r) * theta_i. The angles are float64; only their cosine
    and sine are cast to x's dtype."""
    d_head, length = x.shape[-1], x.shape[-2]
    positions = np.arange(start, start + length, dtype=np.float64)
    angles = torch.from_numpy(np.outer(positions, rope_thetas(d_head, base)))  # (L, d_head/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if layout == "rotate_half":  # pairs (i, i + d_head/2)
        a, b = x[..., : d_head // 2], x[..., d_head // 2 :]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    if layout == "interleaved":  # pairs (2i, 2i + 1)
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    raise ValueError(layout)


def rope_as_complex(x, base, start):
    """The interleaved layout another way: each pair (2i, 2i+1) is a complex number a + ib,
    multiplied by e^(i angle), as Meta's Llama code does (float64 only)."""
    d_head, length = x.shape[-1], x.shape[-2]
    positions = np.arange(start, start + length, dtype=np.float64)
    turn = torch.polar(torch.ones(length, d_head // 2, dtype=torch.float64),
                       torch.from_numpy(np.outer(positions, rope_thetas(d_head, base))))
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d_head // 2, 2).contiguous())
    return torch.view_as_real(pairs * turn).flatten(-2)


def rope_case(name, dtype, shape, base, start, gen):
    x = torch.randn(*shape, generator=gen, dtype=torch.float64).to(DTYPES[dtype])
    half, inter = rope(x, base, start, "rotate_half"), rope(x, base, start, "interleaved")
    d_head = shape[-1]
    # Three checks of the formulas above: position 0 is the identity; the interleaved layout
    # is complex multiplication; and rotate-half on the columns [0, 2, 4, ..., 1, 3, 5, ...]
    # is the interleaved rotation with its columns in that order.
    assert torch.equal(rope(x, base, 0, "rotate_half")[..., 0, :], x[..., 0, :])
    if dtype == "f64":
        assert torch.allclose(inter, rope_as_complex(x, base, start), rtol=0, atol=1e-14)
    perm = list(range(0, d_head, 2)) + list(range(1, d_head, 2))
    assert torch.equal(rope(x[..., perm], base, start, "rotate_half"), inter[..., perm])
    save(
        ROOT / "rope" / f"{dtype}_{name}",
        x=x,
        base=np.array(base, dtype=np.float64),
        start=np.array(start, dtype=np.int64),
        thetas=rope_thetas(d_head, base),
        rotate_half=half,
        interleaved=inter,
    )


# The ALiBi slopes, written out. For a power of two n the paper's geometric sequence
# 2^(-8/n), 2^(-16/n), ..., 2^(-8); for other n the rule of the authors' reference code
# (get_slopes in github.com/ofirpress/attention_with_linear_biases): the slopes of the largest
# power of two p < n, then every other slope of 2p heads (the 1st, 3rd, ...) up to n in all.
ALIBI_SLOPES = {
    # 2^-1 ... 2^-8
    8: [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625],
    # 4 heads: 2^-2, 2^-4, 2^-6, 2^-8; then 8 heads' 1st and 3rd: 2^-1, 2^-3
    6: [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125],
    # 8 heads: 2^-1 ... 2^-8; then 16 heads' 1st, 3rd, 5th, 7th: 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5
    12: [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625,
         0.7071067811865476, 0.3535533905932738, 0.1767766952966369, 0.08838834764831845],
}


def alibi_rule(n):
    """The reference rule in a few lines, to check the numbers above. The reference code
    multiplies 2^(-8/p) by itself repeatedly, which drifts by a few units in the last place
    (it gives 0.35355339059327384 for 2^-1.5); the values above are the exact powers of 2
    rounded once."""
    p = 2 ** int(math.floor(math.log2(n)))
    first = [2.0 ** (-8.0 * h / p) for h in range(1, p + 1)]
    doubled = [2.0 ** (-8.0 * h / (2 * p)) for h in range(1, 2 * p + 1)]
    return first + doubled[0::2][: n - p]


def alibi_case(name, dtype, heads, lead, length, d_k, d_v, gen):
    dt = DTYPES[dtype]
    slopes = np.array(ALIBI_SLOPES[heads], dtype=np.float64)
    assert slopes.shape == (heads,)
    assert np.allclose(slopes, alibi_rule(heads), rtol=1e-15, atol=0)
    i = np.arange(length)[:, None]
    j = np.arange(length)[None, :]
    bias = torch.from_numpy(slopes[:, None, None] * (j - i))  # -m (i - j): (heads, L, L)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    attn_mask = bias.masked_fill(~causal, float("-inf"))
    q = torch.randn(*lead, heads, length, d_k, generator=gen, dtype=torch.float64).to(dt)
    k = torch.randn(*lead, heads, length, d_k, generator=gen, dtype=torch.float64).to(dt)
    v = torch.randn(*lead, heads, length, d_v, generator=gen, dtype=torch.float64).to(dt)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask.to(dt))
    scores = q.double() @ k.double().transpose(-2, -1) / np.sqrt(d_k) + attn_mask
    weights = torch.softmax(scores, dim=-1)
    save(
        ROOT / "alibi" / f"{dtype}_{name}",
        slopes=slopes,
        bias=bias.to(dt),
        q=q,
        k=k,
        v=v,
        attn_mask=attn_mask.to(dt),
        out=out,
        weights=weights.to(dt),
    )


def sliding_window(length, window):
    """Query i sees key j iff 0 <= i - j < W: itself and the W - 1 keys before it."""
    diff = torch.arange(length)[:, None] - torch.arange(length)[None, :]
    return (diff >= 0) & (diff < window)


def window_case(name, dtype, lead, length, d_k, d_v, window, gen):
    dt = DTYPES[dtype]
    q = torch.randn(*lead, length, d_k, generator=gen, dtype=torch.float64).to(dt)
    k = torch.randn(*lead, length, d_k, generator=gen, dtype=torch.float64).to(dt)
    v = torch.randn(*lead, length, d_v, generator=gen, dtype=torch.float64).to(dt)
    mask = sliding_window(length, window)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    weights = reference_weights(q, k, mask, causal=False).to(dt)
    save(
        ROOT / "window" / f"{dtype}_{name}",
        q=q,
        k=k,
        v=v,
        window=np.array(window, dtype=np.int64),
        mask=mask,
        out=out,
        weights=weights,
    )


def case_mask(mask_kind, l_q, l_k):
    """The bool mask of a case's kind (None, "causal" or ("window", W)) and the files that
    record it: mask.npy, plus causal.npy or window.npy."""
    if mask_kind is None:
        return None, {}
    if mask_kind == "causal":
        mask = torch.ones(l_q, l_k, dtype=torch.bool).tril()
        return mask, dict(mask=mask, causal=np.array(True))
    mask = sliding_window(l_q, mask_kind[1])  # ("window", W)
    return mask, dict(mask=mask, window=np.array(mask_kind[1], dtype=np.int64))


def sdpa_gqa_case(name, dtype, heads, kv_heads, l_q, l_k, d_k, d_v, mask_kind, gen):
    dt = DTYPES[dtype]
    q = torch.randn(heads, l_q, d_k, generator=gen, dtype=torch.float64).to(dt)
    k = torch.randn(kv_heads, l_k, d_k, generator=gen, dtype=torch.float64).to(dt)
    v = torch.randn(kv_heads, l_k, d_v, generator=gen, dtype=torch.float64).to(dt)
    mask, arrays = case_mask(mask_kind, l_q, l_k)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    group = heads // kv_heads
    k_rep, v_rep = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    out_repeat = F.scaled_dot_product_attention(q, k_rep, v_rep, attn_mask=mask)
    assert torch.allclose(out, out_repeat, rtol=0, atol=1e-6 if dtype == "f32" else 1e-14)
    weights = reference_weights(q, k_rep, mask, causal=False).to(dt)
    save(
        ROOT / "sdpa_gqa" / f"{dtype}_{name}",
        q=q,
        k=k,
        v=v,
        out=out,
        out_repeat=out_repeat,
        weights=weights,
        **arrays,
    )


def gqa_layer(x, w_q, w_k, w_v, w_o, heads, kv_heads, rope_base, mask, enable_gqa):
    """x: (..., L, d_model). Returns the output and the rotated q, k with k repeated to H heads."""
    d_head = w_q.shape[1] // heads

    def split(y, n):  # (..., L, n d_head) -> (..., n, L, d_head)
        return y.unflatten(-1, (n, d_head)).transpose(-3, -2)

    q, k, v = split(x @ w_q, heads), split(x @ w_k, kv_heads), split(x @ w_v, kv_heads)
    if rope_base is not None:
        q, k = rope(q, rope_base, 0, "rotate_half"), rope(k, rope_base, 0, "rotate_half")
    group = heads // kv_heads
    k_rep, v_rep = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    if enable_gqa:
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    else:
        att = F.scaled_dot_product_attention(q, k_rep, v_rep, attn_mask=mask)
    merged = att.transpose(-3, -2).flatten(-2)  # (..., L, H d_head)
    return merged @ w_o, q, k_rep


def gqa_case(name, dtype, d_model, heads, kv_heads, length, batch, rope_base, mask_kind, gen):
    dt = DTYPES[dtype]
    d_head = d_model // heads
    lead = () if batch is None else (batch,)
    bound = 1.0 / math.sqrt(d_model)  # nn.Linear's default range

    def weight(cols):
        w = torch.rand(d_model, cols, generator=gen, dtype=torch.float64) * 2 - 1
        return (w * bound).to(dt)

    w_q, w_k, w_v, w_o = (weight(d_model), weight(kv_heads * d_head),
                          weight(kv_heads * d_head), weight(d_model))
    x = torch.randn(*lead, length, d_model, generator=gen, dtype=torch.float64).to(dt)
    mask, arrays = case_mask(mask_kind, length, length)
    arrays.update(heads=np.array(heads, dtype=np.int64),
                  kv_heads=np.array(kv_heads, dtype=np.int64))
    if rope_base is not None:
        arrays["rope_base"] = np.array(rope_base, dtype=np.float64)
    args = (x, w_q, w_k, w_v, w_o, heads, kv_heads, rope_base, mask)
    out, q, k_rep = gqa_layer(*args, enable_gqa=True)
    out_repeat, _, _ = gqa_layer(*args, enable_gqa=False)
    assert torch.allclose(out, out_repeat, rtol=0, atol=1e-6 if dtype == "f32" else 1e-14)
    weights = reference_weights(q, k_rep, mask, causal=False).to(dt)
    save(ROOT / "gqa" / f"{dtype}_{name}", x=x, w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o,
         out=out, weights=weights, **arrays)


def part_two():
    """The Part II fixtures, each kind from its own generator (the Part I files above do not
    change when these are added)."""
    for sub in ("rope", "alibi", "window", "sdpa_gqa", "gqa"):
        shutil.rmtree(ROOT / sub, ignore_errors=True)
    for dtype in DTYPES:
        gen = torch.Generator().manual_seed(2021_04_20)
        # (name, shape (..., L, d_head), base, start)
        for name, shape, base, start in [
            ("d8_base10000_L6", (6, 8), 10000.0, 0),
            ("d8_base100_L5_start7", (5, 8), 100.0, 7),
            ("d2_base100_L4", (4, 2), 100.0, 0),
            ("d16_base10000_heads3_L4_start1000", (3, 4, 16), 10000.0, 1000),
            ("d6_base100_batch2_heads2_L3_start3", (2, 2, 3, 6), 100.0, 3),
        ]:
            rope_case(name, dtype, shape, base, start, gen)
        gen = torch.Generator().manual_seed(2022_04_22)
        # (name, heads, lead, L, d_k, d_v)
        for name, heads, lead, length, d_k, d_v in [
            ("h8_L6_dk4", 8, (), 6, 4, 4),
            ("h6_batch2_L5_dk8", 6, (2,), 5, 8, 3),
            ("h12_L7_dk4", 12, (), 7, 4, 2),
        ]:
            alibi_case(name, dtype, heads, lead, length, d_k, d_v, gen)
        gen = torch.Generator().manual_seed(2023_10_10)
        # (name, lead, L, d_k, d_v, W)
        for name, lead, length, d_k, d_v, window in [
            ("L8_W3_dk4", (), 8, 4, 4, 3),
            ("L6_W1_dk4", (), 6, 4, 3, 1),
            ("L5_W9_dk4", (), 5, 4, 4, 9),
            ("heads2_L7_W2_dk8", (2,), 7, 8, 4, 2),
        ]:
            window_case(name, dtype, lead, length, d_k, d_v, window, gen)
        gen = torch.Generator().manual_seed(2023_05_22)
        # (name, H, G, L_q, L_k, d_k, d_v, mask)
        for name, heads, kv_heads, l_q, l_k, d_k, d_v, kind in [
            ("h4_g2_L5_dk4", 4, 2, 5, 5, 4, 4, None),
            ("h6_g3_L6_causal", 6, 3, 6, 6, 4, 3, "causal"),
            ("h4_g1_L5_causal", 4, 1, 5, 5, 8, 4, "causal"),
            ("h3_g3_L4", 3, 3, 4, 4, 4, 4, None),
            ("h4_g2_Lq3_Lk6", 4, 2, 3, 6, 4, 2, None),
            ("h8_g2_L7_window3", 8, 2, 7, 7, 4, 4, ("window", 3)),
        ]:
            sdpa_gqa_case(name, dtype, heads, kv_heads, l_q, l_k, d_k, d_v, kind, gen)
        gen = torch.Generator().manual_seed(2019_11_06)
        # (name, d_model, H, G, L, batch, RoPE base, mask)
        for name, d_model, heads, kv_heads, length, batch, base, kind in [
            ("d16_h4_g4_L6_causal", 16, 4, 4, 6, None, None, "causal"),
            ("d16_h4_g1_L6_causal_rope", 16, 4, 1, 6, None, 10000.0, "causal"),
            ("d24_h6_g2_L7_causal_rope", 24, 6, 2, 7, None, 10000.0, "causal"),
            ("d16_h4_g2_L8_window3_rope100", 16, 4, 2, 8, None, 100.0, ("window", 3)),
            ("d16_h4_g2_L5_window2", 16, 4, 2, 5, None, None, ("window", 2)),
            ("d16_h4_g2_batch2_L5_causal_rope", 16, 4, 2, 5, 2, 10000.0, "causal"),
            ("d32_h8_g2_L5_rope", 32, 8, 2, 5, None, 10000.0, None),
        ]:
            gqa_case(name, dtype, d_model, heads, kv_heads, length, batch, base, kind, gen)


# --- Part III: gradients ---


def grad_case(name, dtype, lead, l_q, l_k, d_k, d_v, mask_kind, gen):
    dt = DTYPES[dtype]

    def leaf(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dt).requires_grad_()

    q, k, v = leaf(*lead, l_q, d_k), leaf(*lead, l_k, d_k), leaf(*lead, l_k, d_v)
    d_o = torch.randn(*lead, l_q, d_v, generator=gen, dtype=torch.float64).to(dt)
    if mask_kind == "blind_rows":  # a random bool mask; query 1 (of every matrix) sees no key
        mask = torch.rand(*lead, l_q, l_k, generator=gen) < 0.6
        mask[..., 1, :] = False
        arrays = dict(mask=mask)
    else:
        mask, arrays = case_mask(mask_kind, l_q, l_k)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out.backward(d_o)
    if mask_kind == "blind_rows":
        # PyTorch >= 2.5: a query with no visible key gets a zero output and zero gradients
        # (a hand-written softmax would give NaN).
        assert torch.all(out[..., 1, :] == 0) and torch.all(q.grad[..., 1, :] == 0)
    for t in (out, q.grad, k.grad, v.grad):
        assert torch.isfinite(t).all()
    save(ROOT / "grad" / f"{dtype}_{name}", q=q, k=k, v=v, do=d_o, out=out, dq=q.grad,
         dk=k.grad, dv=v.grad, **arrays)


def mha_layer(x, w_q, w_k, w_v, w_o, heads, mask):
    """x: (batch, L, d_model), weights in the X . W convention, mask broadcasting to
    (batch, heads, L, L). Each head attends with its d_head columns, scaled by sqrt(d_head)."""
    d_head = w_q.shape[1] // heads

    def split(y):  # (batch, L, d_model) -> (batch, heads, L, d_head)
        return y.unflatten(-1, (heads, d_head)).transpose(-3, -2)

    att = F.scaled_dot_product_attention(split(x @ w_q), split(x @ w_k), split(x @ w_v),
                                         attn_mask=mask)
    return att.transpose(-3, -2).flatten(-2) @ w_o  # heads side by side, times W_O


def grad_mha_case(name, dtype, d_model, heads, batch, length, mask_kind, gen):
    dt = DTYPES[dtype]
    bound = 1.0 / math.sqrt(d_model)  # nn.Linear's default range

    def leaf(*shape, scale=1.0):
        t = torch.rand(*shape, generator=gen, dtype=torch.float64) * 2 - 1
        return (t * scale).to(dt).requires_grad_()

    w_q, w_k, w_v, w_o = (leaf(d_model, d_model, scale=bound) for _ in range(4))
    x = torch.randn(batch, length, d_model, generator=gen, dtype=torch.float64).to(dt)
    x.requires_grad_()
    d_y = torch.randn(batch, length, d_model, generator=gen, dtype=torch.float64).to(dt)
    kwargs = {}
    if mask_kind == "padding":
        valid = [length - 2 * b for b in range(batch)]
        key_ok = torch.stack([torch.arange(length) < n for n in valid])  # (batch, L)
        mask = key_ok[:, None, :].expand(batch, length, length)
        arrays = dict(mask=mask)
        sdpa_mask = mask[:, None]  # (batch, 1, L, L): every head of the item
        kwargs["key_padding_mask"] = ~key_ok  # MHA: True = padding
    else:
        mask, arrays = case_mask(mask_kind, length, length)
        sdpa_mask = mask
        if mask is not None:
            kwargs["attn_mask"] = ~mask  # MHA: True = blocked
    out = mha_layer(x, w_q, w_k, w_v, w_o, heads, sdpa_mask)
    out.backward(d_y)
    grads = dict(dx=x.grad, dw_q=w_q.grad, dw_k=w_k.grad, dw_v=w_v.grad, dw_o=w_o.grad)

    # The same layer as nn.MultiheadAttention(bias=False), which stores nn.Linear's (out, in)
    # layout: in_proj_weight = [W_Q^T; W_K^T; W_V^T], out_proj.weight = W_O^T.
    mha = torch.nn.MultiheadAttention(d_model, heads, bias=False, batch_first=True, dtype=dt)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([w_q.T, w_k.T, w_v.T]))
        mha.out_proj.weight.copy_(w_o.T)
    x2 = x.detach().clone().requires_grad_()
    out2, _ = mha(x2, x2, x2, need_weights=False, **kwargs)
    out2.backward(d_y)
    d = d_model
    theirs = dict(dx=x2.grad, dw_q=mha.in_proj_weight.grad[:d].T,
                  dw_k=mha.in_proj_weight.grad[d : 2 * d].T,
                  dw_v=mha.in_proj_weight.grad[2 * d :].T, dw_o=mha.out_proj.weight.grad.T)
    tol = 1e-5 if dtype == "f32" else 1e-12
    assert torch.allclose(out, out2, rtol=tol, atol=tol)
    for key, grad in grads.items():
        assert torch.allclose(grad, theirs[key], rtol=tol, atol=tol), key
    save(ROOT / "grad_mha" / f"{dtype}_{name}", x=x, w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o,
         heads=np.array(heads, dtype=np.int64), dy=d_y, out=out, **grads, **arrays)


def part_three():
    """The Part III fixtures (gradients), from their own generators."""
    for sub in ("grad", "grad_mha"):
        shutil.rmtree(ROOT / sub, ignore_errors=True)
    for dtype in DTYPES:
        gen = torch.Generator().manual_seed(2026_05_11)
        # (name, lead, L_q, L_k, d_k, d_v, mask)
        for args in [
            ("L5_dk4", (), 5, 5, 4, 4, None),
            ("causal_L6_dk8_dv5", (), 6, 6, 8, 5, "causal"),
            ("Lq3_Lk7_dk4_dv2", (), 3, 7, 4, 2, None),
            ("causal_Lq4_Lk6_dk4", (), 4, 6, 4, 3, "causal"),
            ("bool_blind_row_Lq5_Lk6", (), 5, 6, 4, 3, "blind_rows"),
            ("batch2_heads3_L5_dk4", (2, 3), 5, 5, 4, 4, None),
            ("batch2_heads2_causal_L6", (2, 2), 6, 6, 8, 4, "causal"),
            ("batch2_heads2_bool_blind_row_Lq4_Lk5", (2, 2), 4, 5, 4, 2, "blind_rows"),
        ]:
            name, lead, l_q, l_k, d_k, d_v, kind = args
            grad_case(name, dtype, lead, l_q, l_k, d_k, d_v, kind, gen)
        gen = torch.Generator().manual_seed(2026_05_12)
        for name, d_model, heads, batch, length, kind in [
            ("d8_h2_batch2_L5_causal", 8, 2, 2, 5, "causal"),
            ("d12_h3_batch3_L6_padding", 12, 3, 3, 6, "padding"),
        ]:
            grad_mha_case(name, dtype, d_model, heads, batch, length, kind, gen)


def main():
    for sub in ("sdpa", "mha"):
        shutil.rmtree(ROOT / sub, ignore_errors=True)
    gen = torch.Generator().manual_seed(20260521)
    fully_masked_note = None
    for dtype in DTYPES:
        # (name, lead, L_q, L_k, d_k, d_v, mask kind, input scale)
        for args in [
            ("L1_dk1", (), 1, 1, 1, 1, None, 1.0),
            ("L1_dk64", (), 1, 1, 64, 3, None, 1.0),
            ("Lq3_Lk5_dk4_dv2", (), 3, 5, 4, 2, None, 1.0),
            ("L8_dk8", (), 8, 8, 8, 8, None, 1.0),
            ("Lq7_Lk1_dk3", (), 7, 1, 3, 5, None, 1.0),
            ("Lq1_Lk9_dk16", (), 1, 9, 16, 4, None, 1.0),
            ("L64_dk64", (), 64, 64, 64, 64, None, 1.0),
            ("L64_dk1", (), 64, 64, 1, 8, None, 1.0),
            ("large_scores", (), 6, 6, 16, 4, None, 12.0),
            ("causal_L1", (), 1, 1, 4, 4, "causal", 1.0),
            ("causal_L6_dk8", (), 6, 6, 8, 5, "causal", 1.0),
            ("causal_L33_dk32", (), 33, 33, 32, 16, "causal", 1.0),
            ("causal_Lq3_Lk5", (), 3, 5, 4, 4, "causal", 1.0),
            ("bool_L10_dk6", (), 10, 10, 6, 6, "full", 1.0),
            ("bool_Lq4_Lk12", (), 4, 12, 8, 3, "full", 1.0),
            ("fully_masked_rows_L5", (), 5, 5, 4, 4, "fully_masked_rows", 1.0),
            ("batch2_L5_dk4", (2,), 5, 5, 4, 3, None, 1.0),
            ("batch2_causal_L7", (2,), 7, 7, 8, 8, "causal", 1.0),
            ("batch3_bool_L6", (3,), 6, 6, 4, 4, "full", 1.0),
            ("batch2_broadcast_mask_L6", (2,), 6, 6, 4, 2, "broadcast", 1.0),
            ("batch2_heads3_L5_dk4", (2, 3), 5, 5, 4, 4, None, 1.0),
            ("batch2_heads2_bool_L4", (2, 2), 4, 6, 8, 4, "fully_masked_rows", 1.0),
        ]:
            name, lead, l_q, l_k, d_k, d_v, kind, scale = args
            out, mask = sdpa_case(name, dtype, lead, l_q, l_k, d_k, d_v, kind, scale, gen)
            if kind == "fully_masked_rows" and not lead:
                fully_masked_note = out[0]
        for args in [
            ("d8_h2_L5", 8, 2, 5, 5, None, None, False),
            ("d4_h1_L3", 4, 1, 3, 3, None, None, False),
            ("d12_h3_L6_causal", 12, 3, 6, 6, None, "causal", False),
            ("d16_h4_cross_Lq3_Lk7", 16, 4, 3, 7, None, None, True),
            ("d8_h2_batch3_L6_padding", 8, 2, 6, 6, 3, "padding", False),
            ("d6_h3_batch2_L4", 6, 3, 4, 4, 2, None, False),
        ]:
            name, d_model, heads, l_q, l_k, batch, kind, cross = args
            mha_case(name, dtype, d_model, heads, l_q, l_k, batch, kind, cross, gen)
    note = (
        f"Generated by tools/make_fixtures.py with torch {torch.__version__} and numpy {np.__version__}.\n"
        f"For a query row whose every key is masked, torch.nn.functional.scaled_dot_product_attention\n"
        f"returned {fully_masked_note.tolist()} (all zeros: the crate's policy too).\n"
    )
    (ROOT / "sdpa" / "README.txt").write_text(note)
    print(note)
    part_two()
    part_three()


if __name__ == "__main__":
    main()
