//! The crate against PyTorch: `scaled_dot_product_attention` and `nn.MultiheadAttention`;
//! for Part II, RoPE in both layouts and ALiBi (written out in the script), sliding windows,
//! grouped-query SDPA and a grouped-query layer; for Part III, the gradients of SDPA and of
//! the multi-head layer against PyTorch's autograd.
//!
//! The fixtures under `tests/fixtures/` were written by `tools/make_fixtures.py` (its
//! docstring describes every file; `tests/fixtures/sdpa/README.txt` records the torch
//! version). Tolerances: `1e-5` for `f32`, `1e-12` for `f64`, absolute, on every entry.
//! The tiled path (`attention::tiled`) is held to the same tolerances, against PyTorch and
//! against the plain path. The gradients are held to `|ours − PyTorch| ≤ tol + tol·|PyTorch|`
//! with the same `tol` (`atol + rtol·|b|` with `atol = rtol`); the largest
//! `|ours − PyTorch| / (1 + |PyTorch|)` measured was `3.4e-7` (`f32`) and `8.2e-16` (`f64`),
//! printed by `cargo test --test pytorch_fixtures grad -- --nocapture`; the tiled backward
//! (`attention::tiled_grad`) is held to the same form on the same fixtures, and measured
//! `3.3e-7` and `8.4e-16`.

use std::fmt::Debug;
use std::path::{Path, PathBuf};

use attention::Float;
use attention::alibi::{alibi_bias, alibi_slopes};
use attention::exact;
use attention::gqa::{GroupedQueryAttention, sdpa_gqa};
use attention::grad::sdpa_backward;
use attention::kernel::Simd;
use attention::mask::Mask;
use attention::multihead::MultiHeadAttention;
use attention::rope::{Rope, RopeLayout};
use attention::scores::scaled_scores_batched;
use attention::sdpa::{sdpa, sdpa_batched};
use attention::softmax::softmax;
use attention::tiled::{
    Masking, Tiles, tiled_sdpa, tiled_sdpa_batched, tiled_sdpa_batched_on,
};
use attention::tiled_grad::{tiled_sdpa_backward, tiled_sdpa_with_lse};
use ndarray::{ArrayD, Axis, Ix2, Ix3, IxDyn};
use ndarray_npy::{ReadableElement, read_npy};

const F32_TOLERANCE: f64 = 1e-5;
const F64_TOLERANCE: f64 = 1e-12;

fn fixture_dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("fixtures").join(kind)
}

/// The case directories of one kind whose names start with the dtype, sorted.
fn cases(kind: &str, dtype: &str) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixture_dir(kind))
        .unwrap_or_else(|e| panic!("cannot list the {kind} fixtures: {e}"))
        .map(|entry| entry.unwrap().path())
        .filter(|p| {
            p.is_dir()
                && p.file_name().unwrap().to_string_lossy().starts_with(&format!("{dtype}_"))
        })
        .collect();
    dirs.sort();
    dirs
}

fn load<A: ReadableElement>(dir: &Path, name: &str) -> ArrayD<A> {
    let path = dir.join(format!("{name}.npy"));
    read_npy(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn load_mask(dir: &Path, l_q: usize, l_k: usize) -> Option<Mask> {
    if dir.join("mask.npy").exists() {
        Some(Mask::from_array(load::<bool>(dir, "mask")).unwrap())
    } else if dir.join("causal.npy").exists() {
        Some(Mask::causal_rect(l_q, l_k))
    } else {
        None
    }
}

/// The largest absolute difference, failing on a shape mismatch or a NaN anywhere.
fn max_diff<A: Float>(case: &Path, what: &str, got: &ArrayD<A>, expected: &ArrayD<A>) -> f64 {
    assert_eq!(got.shape(), expected.shape(), "{}: {what} shape", case.display());
    got.iter()
        .zip(expected)
        .map(|(&g, &e)| {
            assert!(!g.is_nan() && !e.is_nan(), "{}: {what} has NaN", case.display());
            (g - e).abs().to_f64().unwrap()
        })
        .fold(0.0, f64::max)
}

fn assert_close<A: Float>(
    case: &Path,
    what: &str,
    got: &ArrayD<A>,
    expected: &ArrayD<A>,
    tolerance: f64,
) {
    let diff = max_diff(case, what, got, expected);
    assert!(
        diff <= tolerance,
        "{}: {what} differs from PyTorch by {diff:e} > {tolerance:e}",
        case.display()
    );
}

fn two_d<A: Clone>(a: &ArrayD<A>) -> ndarray::ArrayView2<'_, A> {
    a.view().into_dimensionality::<Ix2>().unwrap()
}

fn check_sdpa_cases<A: Float + ReadableElement + Debug>(dtype: &str, tolerance: f64) -> usize {
    let dirs = cases("sdpa", dtype);
    for dir in &dirs {
        let (q, k, v) = (load::<A>(dir, "q"), load::<A>(dir, "k"), load::<A>(dir, "v"));
        let n = q.ndim();
        let mask = load_mask(dir, q.shape()[n - 2], k.shape()[n - 2]);
        let att = sdpa_batched(&q, &k, &v, mask.as_ref()).unwrap();
        assert_close(dir, "output", &att.output, &load(dir, "out"), tolerance);
        assert_close(dir, "weights", &att.weights, &load(dir, "weights"), tolerance);
        if n == 2 {
            // The plain 2-D function, the one the chapters show, must give the same.
            let plain = sdpa(&two_d(&q), &two_d(&k), &two_d(&v), mask.as_ref()).unwrap();
            assert_close(
                dir,
                "sdpa vs sdpa_batched",
                &plain.output.into_dyn(),
                &att.output,
                tolerance,
            );
        }
        check_tiled_case(dir, (&q, &k, &v), mask.as_ref(), &att.output, tolerance);
    }
    dirs.len()
}

/// The tiled path on one fixture: against PyTorch's output and the plain path's, with the
/// mask as a boolean array and (for the causal cases) as `Masking::Causal`, for the default
/// tiles and for tiles that divide no length (3 queries × 5 keys) or are a single entry.
fn check_tiled_case<A: Float + ReadableElement>(
    dir: &Path,
    (q, k, v): (&ArrayD<A>, &ArrayD<A>, &ArrayD<A>),
    mask: Option<&Mask>,
    plain: &ArrayD<A>,
    tolerance: f64,
) {
    let torch = load::<A>(dir, "out");
    let mut maskings = vec![mask.map_or(Masking::All, Masking::Mask)];
    if dir.join("causal.npy").exists() {
        maskings.push(Masking::Causal);
    }
    for masking in maskings {
        for tiles in [
            Tiles::default(),
            Tiles { block_q: 3, tile_k: 5 },
            Tiles { block_q: 1, tile_k: 1 },
        ] {
            let tiled = tiled_sdpa_batched(q, k, v, masking, tiles).unwrap();
            let what = format!("tiled output ({masking:?}, {tiles:?})");
            assert_close(dir, &format!("{what} vs PyTorch"), &tiled, &torch, tolerance);
            assert_close(dir, &format!("{what} vs the plain path"), &tiled, plain, tolerance);
            for simd in Simd::supported() {
                let on = tiled_sdpa_batched_on(q, k, v, masking, tiles, simd).unwrap();
                assert_close(
                    dir,
                    &format!("{what} in {simd:?} vs PyTorch"),
                    &on,
                    &torch,
                    tolerance,
                );
            }
            if q.ndim() == 2 {
                let two = tiled_sdpa(&two_d(q), &two_d(k), &two_d(v), masking, tiles)
                    .unwrap()
                    .into_dyn();
                assert_close(dir, &format!("{what}, 2-D"), &two, &tiled, 0.0);
            }
        }
    }
}

#[test]
fn sdpa_matches_pytorch_f64() {
    assert_eq!(
        check_sdpa_cases::<f64>("f64", F64_TOLERANCE),
        22,
        "expected 22 f64 SDPA cases"
    );
}

#[test]
fn sdpa_matches_pytorch_f32() {
    assert_eq!(
        check_sdpa_cases::<f32>("f32", F32_TOLERANCE),
        22,
        "expected 22 f32 SDPA cases"
    );
}

#[test]
fn fully_masked_rows_are_zero_in_pytorch_and_here() {
    // The script blocked every key of queries 0 and 2 (L = 5): PyTorch returned zero rows.
    let dir = fixture_dir("sdpa").join("f64_fully_masked_rows_L5");
    let (q, k, v) = (load::<f64>(&dir, "q"), load::<f64>(&dir, "k"), load::<f64>(&dir, "v"));
    let mask = load_mask(&dir, 5, 5).unwrap();
    let torch_out = load::<f64>(&dir, "out");
    let ours = sdpa_batched(&q, &k, &v, Some(&mask)).unwrap();
    for row in [0, 2] {
        let torch_row = torch_out.index_axis(Axis(0), row);
        assert!(torch_row.iter().all(|&x| x == 0.0), "torch row {row}: {torch_row}");
        assert!(ours.output.index_axis(Axis(0), row).iter().all(|&x| x == 0.0));
        assert!(ours.weights.index_axis(Axis(0), row).iter().all(|&x| x == 0.0));
        let tiled = tiled_sdpa_batched(
            &q,
            &k,
            &v,
            Masking::Mask(&mask),
            Tiles { block_q: 2, tile_k: 2 },
        )
        .unwrap();
        assert!(tiled.index_axis(Axis(0), row).iter().all(|&x| x == 0.0));
    }
}

fn check_mha_cases<A: Float + ReadableElement + Debug>(dtype: &str, tolerance: f64) -> usize {
    let dirs = cases("mha", dtype);
    for dir in &dirs {
        let w = |name| load::<A>(dir, name).into_dimensionality::<Ix2>().unwrap();
        let heads = load::<i64>(dir, "heads").into_iter().next().unwrap() as usize;
        let mha =
            MultiHeadAttention::new(w("w_q"), w("w_k"), w("w_v"), w("w_o"), heads).unwrap();
        let (x_q, x_kv) = (load::<A>(dir, "x_q"), load::<A>(dir, "x_kv"));
        let mask = dir
            .join("mask.npy")
            .exists()
            .then(|| Mask::from_array(load::<bool>(dir, "mask")).unwrap());
        let (output, weights) = if x_q.ndim() == 2 {
            let (x_q, x_kv) = (
                x_q.into_dimensionality::<Ix2>().unwrap(),
                x_kv.into_dimensionality::<Ix2>().unwrap(),
            );
            let out = mha.cross(&x_q, &x_kv, mask.as_ref()).unwrap();
            if x_q == x_kv {
                let looped = mha.forward_per_head(&x_q, mask.as_ref()).unwrap();
                let diff = max_diff(
                    dir,
                    "loop vs reshape",
                    &looped.output.into_dyn(),
                    &out.output.clone().into_dyn(),
                );
                assert!(
                    diff <= tolerance,
                    "{}: per-head loop differs by {diff:e}",
                    dir.display()
                );
            }
            (out.output.into_dyn(), out.weights.into_dyn())
        } else {
            let (x_q, x_kv) = (
                x_q.into_dimensionality::<Ix3>().unwrap(),
                x_kv.into_dimensionality::<Ix3>().unwrap(),
            );
            let out = mha.cross_batched(&x_q, &x_kv, mask.as_ref()).unwrap();
            (out.output.into_dyn(), out.weights.into_dyn())
        };
        assert_close(dir, "output", &output, &load(dir, "out"), tolerance);
        assert_close(dir, "weights", &weights, &load(dir, "weights"), tolerance);
    }
    dirs.len()
}

#[test]
fn multihead_matches_pytorch_f64() {
    assert_eq!(check_mha_cases::<f64>("f64", F64_TOLERANCE), 6, "expected 6 f64 MHA cases");
}

#[test]
fn multihead_matches_pytorch_f32() {
    assert_eq!(check_mha_cases::<f32>("f32", F32_TOLERANCE), 6, "expected 6 f32 MHA cases");
}

/// A 0-d `.npy` scalar.
fn scalar<A: ReadableElement + Copy>(dir: &Path, name: &str) -> A {
    *load::<A>(dir, name).first().unwrap()
}

fn check_rope_cases<A: Float + ReadableElement>(dtype: &str, tolerance: f64) -> usize {
    let dirs = cases("rope", dtype);
    for dir in &dirs {
        let x = load::<A>(dir, "x");
        let (base, start) = (scalar::<f64>(dir, "base"), scalar::<i64>(dir, "start") as usize);
        let d_head = x.shape()[x.ndim() - 1];
        for (layout, file) in
            [(RopeLayout::RotateHalf, "rotate_half"), (RopeLayout::Interleaved, "interleaved")]
        {
            let rope = Rope::new(d_head, base, layout).unwrap();
            let thetas = ndarray::Array1::from(rope.thetas()).into_dyn();
            assert_close(dir, "thetas", &thetas, &load::<f64>(dir, "thetas"), 1e-15);
            let rotated = rope.apply(&x, start).unwrap();
            assert_close(dir, file, &rotated, &load(dir, file), tolerance);
        }
    }
    dirs.len()
}

#[test]
fn rope_matches_the_fixture_script_f64() {
    assert_eq!(check_rope_cases::<f64>("f64", F64_TOLERANCE), 5, "expected 5 f64 RoPE cases");
}

#[test]
fn rope_matches_the_fixture_script_f32() {
    assert_eq!(check_rope_cases::<f32>("f32", F32_TOLERANCE), 5, "expected 5 f32 RoPE cases");
}

/// `weights · v` matrix by matrix: `(..., L_q, L_k)` times `(..., L_k, d_v)`.
fn weights_times_values<A: Float>(weights: &ArrayD<A>, v: &ArrayD<A>) -> ArrayD<A> {
    let n = v.ndim();
    let (l_q, l_k, d_v) = (weights.shape()[n - 2], v.shape()[n - 2], v.shape()[n - 1]);
    let matrices = v.len() / (l_k * d_v);
    let w3 = weights.to_shape((matrices, l_q, l_k)).unwrap();
    let v3 = v.to_shape((matrices, l_k, d_v)).unwrap();
    let products: Vec<_> =
        w3.outer_iter().zip(v3.outer_iter()).map(|(w, v)| w.dot(&v)).collect();
    let views: Vec<_> = products.iter().map(|p| p.view()).collect();
    let mut shape = v.shape().to_vec();
    shape[n - 2] = l_q;
    ndarray::stack(Axis(0), &views).unwrap().to_shape(IxDyn(&shape)).unwrap().into_owned()
}

/// ALiBi: the slopes against the values written out in the script (for 8, 6 and 12 heads),
/// the bias, and attention with the bias under a causal mask against SDPA with the same
/// float `attn_mask`.
fn check_alibi_cases<A: Float + ReadableElement>(dtype: &str, tolerance: f64) -> usize {
    let dirs = cases("alibi", dtype);
    for dir in &dirs {
        let expected_slopes = load::<f64>(dir, "slopes");
        let heads = expected_slopes.len();
        let slopes = alibi_slopes(heads).unwrap();
        for (h, (&m, &e)) in slopes.iter().zip(&expected_slopes).enumerate() {
            assert!(
                (m - e).abs() <= 1e-15 * e,
                "{}: slope {h} is {m}, not {e}",
                dir.display()
            );
        }
        let (q, k, v) = (load::<A>(dir, "q"), load::<A>(dir, "k"), load::<A>(dir, "v"));
        let n = q.ndim();
        let len = q.shape()[n - 2];
        let bias = alibi_bias::<A>(&slopes, len, len).into_dyn();
        assert_close(dir, "bias", &bias, &load(dir, "bias"), 0.0);
        // The float mask the script gave SDPA: the bias, with −∞ above the diagonal.
        let attn_mask = &bias + &Mask::causal(len).to_additive::<A>();
        assert_eq!(attn_mask, load::<A>(dir, "attn_mask"), "{}: attn_mask", dir.display());

        let mut scores = scaled_scores_batched(&q, &k).unwrap() + &bias;
        Mask::causal(len).apply(&mut scores).unwrap();
        let weights = softmax(&scores);
        assert_close(dir, "weights", &weights, &load(dir, "weights"), tolerance);
        let output = weights_times_values(&weights, &v);
        assert_close(dir, "output", &output, &load(dir, "out"), tolerance);
    }
    dirs.len()
}

#[test]
fn alibi_matches_pytorch_f64() {
    assert_eq!(
        check_alibi_cases::<f64>("f64", F64_TOLERANCE),
        3,
        "expected 3 f64 ALiBi cases"
    );
}

#[test]
fn alibi_matches_pytorch_f32() {
    assert_eq!(
        check_alibi_cases::<f32>("f32", F32_TOLERANCE),
        3,
        "expected 3 f32 ALiBi cases"
    );
}

/// Sliding windows: `Mask::sliding_window` against the script's mask (`0 ≤ i − j < W`), then
/// SDPA with it, plain and tiled.
fn check_window_cases<A: Float + ReadableElement>(dtype: &str, tolerance: f64) -> usize {
    let dirs = cases("window", dtype);
    for dir in &dirs {
        let (q, k, v) = (load::<A>(dir, "q"), load::<A>(dir, "k"), load::<A>(dir, "v"));
        let len = q.shape()[q.ndim() - 2];
        let window = scalar::<i64>(dir, "window") as usize;
        let mask = Mask::sliding_window(len, window).unwrap();
        assert_eq!(mask.as_array(), load::<bool>(dir, "mask").view(), "{}", dir.display());
        let att = sdpa_batched(&q, &k, &v, Some(&mask)).unwrap();
        assert_close(dir, "output", &att.output, &load(dir, "out"), tolerance);
        assert_close(dir, "weights", &att.weights, &load(dir, "weights"), tolerance);
        check_tiled_case(dir, (&q, &k, &v), Some(&mask), &att.output, tolerance);
    }
    dirs.len()
}

#[test]
fn sliding_window_matches_pytorch_f64() {
    assert_eq!(check_window_cases::<f64>("f64", F64_TOLERANCE), 4, "expected 4 f64 cases");
}

#[test]
fn sliding_window_matches_pytorch_f32() {
    assert_eq!(check_window_cases::<f32>("f32", F32_TOLERANCE), 4, "expected 4 f32 cases");
}

/// The sliding window `W` of a case, from its `window.npy`; `None` without one.
fn case_window(dir: &Path) -> Option<usize> {
    dir.join("window.npy").exists().then(|| scalar::<i64>(dir, "window") as usize)
}

/// The mask a case used, built by the crate: `Mask::causal` or `Mask::sliding_window` as the
/// case's `causal.npy` / `window.npy` say, checked against its `mask.npy`; `None` without one.
fn case_mask(dir: &Path, len: usize) -> Option<Mask> {
    let mask = if let Some(window) = case_window(dir) {
        Mask::sliding_window(len, window).unwrap()
    } else if dir.join("causal.npy").exists() || dir.join("mask.npy").exists() {
        Mask::causal(len)
    } else {
        return None;
    };
    assert_eq!(mask.as_array(), load::<bool>(dir, "mask").view(), "{}", dir.display());
    Some(mask)
}

/// Grouped-query SDPA against PyTorch's `enable_gqa=True` and against plain SDPA on keys and
/// values repeated with `repeat_interleave`.
fn check_sdpa_gqa_cases<A: Float + ReadableElement>(dtype: &str, tolerance: f64) -> usize {
    let dirs = cases("sdpa_gqa", dtype);
    for dir in &dirs {
        let three = |name| load::<A>(dir, name).into_dimensionality::<Ix3>().unwrap();
        let (q, k, v) = (three("q"), three("k"), three("v"));
        let mask = case_mask(dir, q.dim().1);
        let att = sdpa_gqa(&q, &k, &v, mask.as_ref()).unwrap();
        let (output, weights) = (att.output.into_dyn(), att.weights.into_dyn());
        assert_close(dir, "output (enable_gqa)", &output, &load(dir, "out"), tolerance);
        assert_close(
            dir,
            "output (repeat_interleave)",
            &output,
            &load(dir, "out_repeat"),
            tolerance,
        );
        assert_close(dir, "weights", &weights, &load(dir, "weights"), tolerance);
    }
    dirs.len()
}

#[test]
fn sdpa_gqa_matches_pytorch_f64() {
    assert_eq!(check_sdpa_gqa_cases::<f64>("f64", F64_TOLERANCE), 6, "expected 6 f64 cases");
}

#[test]
fn sdpa_gqa_matches_pytorch_f32() {
    assert_eq!(check_sdpa_gqa_cases::<f32>("f32", F32_TOLERANCE), 6, "expected 6 f32 cases");
}

/// The grouped-query layer (projections, RoPE rotate-half on each head's q and k at positions
/// 0 … L−1, grouped SDPA, `W_O`) against the script's PyTorch layer; the unbatched causal and
/// window cases also token by token through the KV cache.
fn check_gqa_layer_cases<A: Float + ReadableElement>(dtype: &str, tolerance: f64) -> usize {
    let dirs = cases("gqa", dtype);
    for dir in &dirs {
        let w = |name| load::<A>(dir, name).into_dimensionality::<Ix2>().unwrap();
        let heads = scalar::<i64>(dir, "heads") as usize;
        let kv_heads = scalar::<i64>(dir, "kv_heads") as usize;
        let (w_q, w_k, w_v, w_o) = (w("w_q"), w("w_k"), w("w_v"), w("w_o"));
        let mut layer =
            GroupedQueryAttention::new(w_q, w_k, w_v, w_o, heads, kv_heads).unwrap();
        if dir.join("rope_base.npy").exists() {
            let base = scalar::<f64>(dir, "rope_base");
            let rope = Rope::new(layer.d_head(), base, RopeLayout::RotateHalf).unwrap();
            layer = layer.with_rope(rope).unwrap();
        }
        let x = load::<A>(dir, "x");
        let mask = case_mask(dir, x.shape()[x.ndim() - 2]);
        let mut results = vec![];
        if x.ndim() == 2 {
            let x = x.into_dimensionality::<Ix2>().unwrap();
            let out = layer.forward(&x, mask.as_ref()).unwrap();
            results.push(("", out.output.into_dyn(), out.weights.into_dyn()));
            if mask.is_some() {
                let decoded = layer.decode(&x, case_window(dir)).unwrap();
                results.push((
                    "decoded ",
                    decoded.output.into_dyn(),
                    decoded.weights.into_dyn(),
                ));
            }
        } else {
            let x = x.into_dimensionality::<Ix3>().unwrap();
            let out = layer.forward_batched(&x, mask.as_ref()).unwrap();
            results.push(("", out.output.into_dyn(), out.weights.into_dyn()));
        }
        for (how, output, weights) in results {
            assert_close(dir, &format!("{how}output"), &output, &load(dir, "out"), tolerance);
            let expected = load(dir, "weights");
            assert_close(dir, &format!("{how}weights"), &weights, &expected, tolerance);
        }
    }
    dirs.len()
}

#[test]
fn grouped_query_layer_matches_pytorch_f64() {
    assert_eq!(check_gqa_layer_cases::<f64>("f64", F64_TOLERANCE), 7, "expected 7 f64 cases");
}

#[test]
fn grouped_query_layer_matches_pytorch_f32() {
    assert_eq!(check_gqa_layer_cases::<f32>("f32", F32_TOLERANCE), 7, "expected 7 f32 cases");
}

/// Every entry within `|got − expected| ≤ tolerance + tolerance·|expected|` (the issue's
/// `atol + rtol·|b|` form with `atol = rtol`), failing on a shape mismatch or a NaN. Returns
/// the largest `|got − expected| / (1 + |expected|)`, the tolerance this entry would need.
fn assert_close_rel<A: Float>(
    case: &Path,
    what: &str,
    got: &ArrayD<A>,
    expected: &ArrayD<A>,
    tolerance: f64,
) -> f64 {
    assert_eq!(got.shape(), expected.shape(), "{}: {what} shape", case.display());
    let mut worst = 0.0_f64;
    for ((index, &g), &e) in got.indexed_iter().zip(expected) {
        let (g, e) = (g.to_f64().unwrap(), e.to_f64().unwrap());
        assert!(!g.is_nan() && !e.is_nan(), "{}: {what} has NaN", case.display());
        let diff = (g - e).abs();
        assert!(
            diff <= tolerance + tolerance * e.abs(),
            "{}: {what}{:?} is {g:e}, PyTorch's {e:e}",
            case.display(),
            ndarray::Dimension::slice(&index),
        );
        worst = worst.max(diff / (1.0 + e.abs()));
    }
    worst
}

/// The backward pass of SDPA (`grad::sdpa_backward`, after `exact::sdpa`) against PyTorch's
/// autograd through `scaled_dot_product_attention`; a query that sees no key must have a
/// zero output row and a zero `dq` row, in PyTorch and here. Returns the number of cases and
/// the largest relative difference.
fn check_grad_cases<A: Float + ReadableElement>(dtype: &str, tolerance: f64) -> (usize, f64) {
    let dirs = cases("grad", dtype);
    let mut worst = 0.0_f64;
    for dir in &dirs {
        let (q, k, v) = (load::<A>(dir, "q"), load::<A>(dir, "k"), load::<A>(dir, "v"));
        let n = q.ndim();
        let mask = load_mask(dir, q.shape()[n - 2], k.shape()[n - 2]);
        let att = exact::sdpa(&q, &k, &v, mask.as_ref()).unwrap();
        let g = sdpa_backward(&q, &k, &v, &att.weights, &load(dir, "do")).unwrap();
        let (torch_out, torch_dq) = (load::<A>(dir, "out"), load::<A>(dir, "dq"));
        for (what, got, expected) in [
            ("output", &att.output, &torch_out),
            ("dq", &g.grad_q, &torch_dq),
            ("dk", &g.grad_k, &load(dir, "dk")),
            ("dv", &g.grad_v, &load(dir, "dv")),
        ] {
            worst = worst.max(assert_close_rel(dir, what, got, expected, tolerance));
        }
        let last = Axis(n - 1);
        let mut blind = 0;
        for (i, p) in att.weights.lanes(last).into_iter().enumerate() {
            if p.iter().all(|&w| w == A::zero()) {
                blind += 1;
                let rows = [&att.output, &torch_out, &g.grad_q, &torch_dq];
                for row in rows.map(|a| a.lanes(last).into_iter().nth(i).unwrap()) {
                    assert!(row.iter().all(|&x| x == A::zero()), "{}: row {i}", dir.display());
                }
            }
        }
        let named_blind = dir.to_string_lossy().contains("blind_row");
        assert_eq!(blind > 0, named_blind, "{}: {blind} blind rows", dir.display());
    }
    (dirs.len(), worst)
}

#[test]
fn sdpa_backward_matches_pytorch_autograd_f64() {
    let (count, worst) = check_grad_cases::<f64>("f64", F64_TOLERANCE);
    assert_eq!(count, 8, "expected 8 f64 gradient cases");
    println!("f64 SDPA gradients: largest |ours − PyTorch| / (1 + |PyTorch|) = {worst:.1e}");
    assert!(worst < 1e-15, "chapter Gradients quotes below 1e-15, got {worst:e}");
}

#[test]
fn sdpa_backward_matches_pytorch_autograd_f32() {
    let (count, worst) = check_grad_cases::<f32>("f32", F32_TOLERANCE);
    assert_eq!(count, 8, "expected 8 f32 gradient cases");
    println!("f32 SDPA gradients: largest |ours − PyTorch| / (1 + |PyTorch|) = {worst:.1e}");
    assert!(worst < 1e-6, "chapter Gradients quotes below 1e-6, got {worst:e}");
}

/// The tiled backward (`tiled_grad::tiled_sdpa_backward`, after `tiled_sdpa_with_lse`)
/// against the same autograd fixtures, with the fixture's mask and, for the causal cases,
/// `Masking::Causal`, in tiles that divide nothing and in the default tiles; returns the
/// number of cases and the largest relative difference.
fn check_tiled_grad_cases<A: Float + ReadableElement>(
    dtype: &str,
    tolerance: f64,
) -> (usize, f64) {
    let dirs = cases("grad", dtype);
    let mut worst = 0.0_f64;
    for dir in &dirs {
        let (q, k, v) = (load::<A>(dir, "q"), load::<A>(dir, "k"), load::<A>(dir, "v"));
        let n = q.ndim();
        let mask = load_mask(dir, q.shape()[n - 2], k.shape()[n - 2]);
        let mut maskings = vec![mask.as_ref().map_or(Masking::All, Masking::Mask)];
        if dir.join("causal.npy").exists() {
            maskings.push(Masking::Causal);
        }
        for masking in maskings {
            for tiles in [Tiles::default(), Tiles { block_q: 3, tile_k: 2 }] {
                let (out, lse) = tiled_sdpa_with_lse(&q, &k, &v, masking, tiles).unwrap();
                let grad_o = load::<A>(dir, "do");
                let g = tiled_sdpa_backward(&q, &k, &v, masking, &out, &lse, &grad_o, tiles)
                    .unwrap();
                for (what, got, name) in
                    [("dq", &g.grad_q, "dq"), ("dk", &g.grad_k, "dk"), ("dv", &g.grad_v, "dv")]
                {
                    let what = format!("tiled {what} ({masking:?}, {tiles:?})");
                    let expected = load::<A>(dir, name);
                    worst = worst.max(assert_close_rel(dir, &what, got, &expected, tolerance));
                }
            }
        }
    }
    (dirs.len(), worst)
}

#[test]
fn tiled_backward_matches_pytorch_autograd_f64() {
    let (count, worst) = check_tiled_grad_cases::<f64>("f64", F64_TOLERANCE);
    assert_eq!(count, 8, "expected 8 f64 gradient cases");
    println!(
        "f64 tiled SDPA gradients: largest |ours − PyTorch| / (1 + |PyTorch|) = {worst:.1e}"
    );
}

#[test]
fn tiled_backward_matches_pytorch_autograd_f32() {
    let (count, worst) = check_tiled_grad_cases::<f32>("f32", F32_TOLERANCE);
    assert_eq!(count, 8, "expected 8 f32 gradient cases");
    println!(
        "f32 tiled SDPA gradients: largest |ours − PyTorch| / (1 + |PyTorch|) = {worst:.1e}"
    );
}

/// The multi-head layer's backward pass (`MultiHeadAttention::forward_train` and `backward`)
/// against PyTorch's autograd through the same layer; returns the number of cases and the
/// largest relative difference.
fn check_grad_mha_cases<A: Float + ReadableElement>(
    dtype: &str,
    tolerance: f64,
) -> (usize, f64) {
    let dirs = cases("grad_mha", dtype);
    let mut worst = 0.0_f64;
    for dir in &dirs {
        let w = |name| load::<A>(dir, name).into_dimensionality::<Ix2>().unwrap();
        let heads = scalar::<i64>(dir, "heads") as usize;
        let mha =
            MultiHeadAttention::new(w("w_q"), w("w_k"), w("w_v"), w("w_o"), heads).unwrap();
        let three = |name| load::<A>(dir, name).into_dimensionality::<Ix3>().unwrap();
        let (x, grad_y) = (three("x"), three("dy"));
        let mask = dir.join("mask.npy").exists().then(|| {
            Mask::from_array(load::<bool>(dir, "mask")).unwrap() // (L, L) or (batch, L, L)
        });
        let (y, tape) = mha.forward_train(&x, mask.as_ref(), None).unwrap();
        let grads = mha.backward(&tape, &grad_y).unwrap();
        for (what, got, expected) in [
            ("output", y.into_dyn(), "out"),
            ("dx", grads.grad_x.into_dyn(), "dx"),
            ("dw_q", grads.grad_w_q.into_dyn(), "dw_q"),
            ("dw_k", grads.grad_w_k.into_dyn(), "dw_k"),
            ("dw_v", grads.grad_w_v.into_dyn(), "dw_v"),
            ("dw_o", grads.grad_w_o.into_dyn(), "dw_o"),
        ] {
            let expected = load(dir, expected);
            worst = worst.max(assert_close_rel(dir, what, &got, &expected, tolerance));
        }
    }
    (dirs.len(), worst)
}

#[test]
fn layer_backward_matches_pytorch_autograd_f64() {
    let (count, worst) = check_grad_mha_cases::<f64>("f64", F64_TOLERANCE);
    assert_eq!(count, 2, "expected 2 f64 layer gradient cases");
    println!("f64 layer gradients: largest |ours − PyTorch| / (1 + |PyTorch|) = {worst:.1e}");
    assert!(worst < 1e-15, "chapter Gradients quotes below 1e-15, got {worst:e}");
}

#[test]
fn layer_backward_matches_pytorch_autograd_f32() {
    let (count, worst) = check_grad_mha_cases::<f32>("f32", F32_TOLERANCE);
    assert_eq!(count, 2, "expected 2 f32 layer gradient cases");
    println!("f32 layer gradients: largest |ours − PyTorch| / (1 + |PyTorch|) = {worst:.1e}");
    assert!(worst < 1e-6, "chapter Gradients quotes below 1e-6, got {worst:e}");
}
