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
      causal.npy                   present (a 0-d bool True) when is_causal=True was used
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
      heads.npy                    0-d int64
      mask.npy                     bool, True = may attend: (L_q, L_k) or (batch, L_q, L_k)
                                   (PyTorch's MHA takes the opposite convention, True =
                                   blocked, so the script passes ~mask)
      out.npy                      like x_q
      weights.npy                  (heads, L_q, L_k) or (batch, heads, L_q, L_k)
                                   (average_attn_weights=False)

A row whose every key is masked: SDPA's result for it is recorded in
tests/fixtures/sdpa/README.txt (torch 2.15 returns zeros, the crate's policy as well).
nn.MultiheadAttention returns NaN for such rows, so the MHA cases have none.
"""

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


if __name__ == "__main__":
    main()
