//! The backward passes of chapter *Gradients* against central finite differences, in `f64`.
//!
//! For a loss `ℓ(x)`, the central difference `(ℓ(x + h) − ℓ(x − h)) / 2h` differs from the
//! derivative by about `h²·ℓ'''/6` (truncation, about `1e-13` here) plus the rounding error
//! of `ℓ` divided by `2h` (a few units of `1e-16·Σ|terms of ℓ|`, divided by `2·10⁻⁶`). With
//! `h = 1e-6·max(1, |x|)`, inputs of size about 1 and these small shapes, the largest
//! `|backward − finite difference|` measured over 3000 proptest cases each was `1.0e-9`
//! (softmax), `2.4e-9` (SDPA) and `4.2e-9` (the layer, whose loss goes through more
//! products); `cargo test --release -p attention --test gradients -- --nocapture` prints
//! each case's. Each gradient entry `a` is compared with its finite difference `b` as
//! `|a − b| ≤ atol + rtol·|b|` with `rtol = 1e-6` and `atol` = [`ATOL`] `= 1e-8`
//! ([`ATOL_LAYER`] `= 2e-8` for the layer), about 4 times the worst noise measured. Entries
//! that are exactly 0 (masked keys, queries that see nothing) are held to the absolute part
//! alone, and the tests also check that they are exactly 0.

use attention::exact;
use attention::grad::{LayerGrads, SdpaGrads, sdpa_backward, softmax_backward};
use attention::mask::Mask;
use attention::multihead::MultiHeadAttention;
use ndarray::{Array2, Array3, Array4, ArrayD, ArrayRef4, Axis, IxDyn, Zip, s};
use proptest::prelude::*;
use rand::{Rng, SeedableRng, rngs::StdRng};

/// The relative tolerance of the issue.
const RTOL: f64 = 1e-6;
/// The absolute tolerance for softmax and SDPA: about 4 times the finite difference's own
/// rounding noise (see the module doc).
const ATOL: f64 = 1e-8;
/// The absolute tolerance for the layer, whose finite differences are about twice as noisy.
const ATOL_LAYER: f64 = 2e-8;

/// The central difference of `loss` with respect to every finite entry of `x` (entries that
/// are ±∞, masked scores, are left at 0: they are constants, not inputs).
fn finite_differences(x: &ArrayD<f64>, loss: impl Fn(&ArrayD<f64>) -> f64) -> ArrayD<f64> {
    let mut grad = ArrayD::zeros(x.raw_dim());
    let mut moved = x.clone();
    for (index, &value) in x.indexed_iter() {
        if !value.is_finite() {
            continue;
        }
        let h = 1e-6 * value.abs().max(1.0);
        let (up, down) = (value + h, value - h);
        moved[&index] = up;
        let l_up = loss(&moved);
        moved[&index] = down;
        let l_down = loss(&moved);
        moved[&index] = value;
        grad[&index] = (l_up - l_down) / (up - down); // the step actually taken
    }
    grad
}

/// The first entry where `|a − b| > atol + RTOL·|b|`, if any, as a message; also the largest
/// `|a − b|` seen.
fn compare(
    name: &str,
    analytic: &ArrayD<f64>,
    reference: &ArrayD<f64>,
    atol: f64,
) -> (Option<String>, f64) {
    assert_eq!(analytic.shape(), reference.shape(), "{name}");
    let mut worst = 0.0_f64;
    let mut failure = None;
    for ((index, &a), &b) in analytic.indexed_iter().zip(reference.iter()) {
        let diff = (a - b).abs();
        worst = worst.max(diff);
        if failure.is_none() && (diff.is_nan() || diff > atol + RTOL * b.abs()) {
            failure =
                Some(format!("{name}{:?}: backward {a:e}, finite difference {b:e}", index));
        }
    }
    (failure, worst)
}

fn random(shape: &[usize], rng: &mut StdRng) -> ArrayD<f64> {
    ArrayD::from_shape_simple_fn(IxDyn(shape), || rng.random_range(-1.5..1.5))
}

/// `Σ a ∘ b`, left to right: the loss whose gradient with respect to `a` is `b`.
fn dot(a: &ArrayD<f64>, b: &ArrayD<f64>) -> f64 {
    a.iter().zip(b.iter()).fold(0.0, |acc, (x, y)| acc + x * y)
}

/// The masks the tests draw from.
#[derive(Debug, Clone, Copy)]
enum MaskKind {
    None,
    /// `Mask::causal_rect(L_q, L_k)`.
    Causal,
    /// Key `j` of batch item `b` visible iff `j < valid[b]` (a valid length of 0 leaves its
    /// queries nothing).
    Padding,
    /// Independent coin flips over the full `(..., L_q, L_k)` shape, with one query row left
    /// with no visible key.
    Random,
}

fn mask_kind() -> impl Strategy<Value = MaskKind> {
    prop_oneof![
        Just(MaskKind::None),
        Just(MaskKind::Causal),
        Just(MaskKind::Padding),
        Just(MaskKind::Random),
    ]
}

/// A mask of the given kind for scores of shape `lead + (L_q, L_k)`.
fn make_mask(
    kind: MaskKind,
    lead: &[usize],
    l_q: usize,
    l_k: usize,
    rng: &mut StdRng,
) -> Option<Mask> {
    match kind {
        MaskKind::None => None,
        MaskKind::Causal => Some(Mask::causal_rect(l_q, l_k)),
        MaskKind::Padding => {
            let items = lead.first().copied().unwrap_or(1);
            let valid: Vec<usize> = (0..items).map(|_| rng.random_range(0..=l_k)).collect();
            let padding = Mask::padding(&valid, l_q, l_k).unwrap(); // (batch, L_q, L_k)
            Some(match lead.len() {
                0 => Mask::from_array(padding.as_array().index_axis(Axis(0), 0).to_owned())
                    .unwrap(),
                1 => padding,
                _ => padding.for_heads(), // (batch, 1, L_q, L_k): every head of the item
            })
        }
        MaskKind::Random => {
            let shape = [lead, &[l_q, l_k]].concat();
            let mut allowed =
                ArrayD::from_shape_simple_fn(IxDyn(&shape), || rng.random_bool(0.6));
            let row = rng.random_range(0..l_q);
            // This query sees nothing.
            allowed.index_axis_mut(Axis(lead.len()), row).fill(false);
            Some(Mask::from_array(allowed).unwrap())
        }
    }
}

/// The rows of `weights` (the last axis) that are all zero: queries that see no key.
fn blind_rows(weights: &ArrayD<f64>) -> Vec<Vec<usize>> {
    let last = Axis(weights.ndim() - 1);
    let n = weights.ndim() - 1;
    let mut rows = Vec::new();
    let shape = &weights.shape()[..n];
    for (flat, row) in weights.lanes(last).into_iter().enumerate() {
        if row.iter().all(|&w| w == 0.0) {
            let mut index = vec![0; n];
            let mut rest = flat;
            for axis in (0..n).rev() {
                index[axis] = rest % shape[axis];
                rest /= shape[axis];
            }
            rows.push(index);
        }
    }
    rows
}

/// Checks `sdpa_backward` against finite differences of `ℓ = Σ O ∘ dO`; returns the first
/// failure and the largest difference.
fn check_sdpa(
    q: &ArrayD<f64>,
    k: &ArrayD<f64>,
    v: &ArrayD<f64>,
    mask: Option<&Mask>,
    grad_o: &ArrayD<f64>,
) -> (Option<String>, f64) {
    let att = exact::sdpa(q, k, v, mask).unwrap();
    let SdpaGrads { grad_q, grad_k, grad_v } =
        sdpa_backward(q, k, v, &att.weights, grad_o).unwrap();
    let loss = |q: &ArrayD<f64>, k: &ArrayD<f64>, v: &ArrayD<f64>| {
        dot(&exact::sdpa(q, k, v, mask).unwrap().output, grad_o)
    };
    let fd_q = finite_differences(q, |q| loss(q, k, v));
    let fd_k = finite_differences(k, |k| loss(q, k, v));
    let fd_v = finite_differences(v, |v| loss(q, k, v));
    let mut worst = 0.0_f64;
    for (name, a, b) in
        [("grad_q", &grad_q, &fd_q), ("grad_k", &grad_k, &fd_k), ("grad_v", &grad_v, &fd_v)]
    {
        let (failure, w) = compare(name, a, b, ATOL);
        worst = worst.max(w);
        if failure.is_some() {
            return (failure, worst);
        }
    }
    // A query that sees no key: zero output and exactly zero gradient.
    let last = Axis(q.ndim() - 1);
    let rows = att
        .weights
        .lanes(last)
        .into_iter()
        .zip(att.output.lanes(last))
        .zip(grad_q.lanes(last));
    for ((p, o), dq) in rows {
        if p.iter().all(|&w| w == 0.0) && o.iter().chain(dq.iter()).any(|&x| x != 0.0) {
            return (
                Some("a query that sees nothing has a nonzero output or dq".into()),
                worst,
            );
        }
    }
    (None, worst)
}

/// The largest |backward − finite difference| over all the proptest cases of a test, printed
/// at the end (with `--nocapture`) to back the choice of `ATOL`.
fn report(name: &str, worst: f64) {
    println!("{name}: largest |backward − finite difference| = {worst:.2e}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn softmax_backward_matches_finite_differences(
        lead in prop::collection::vec(1..3usize, 0..3),
        l_q in 1..5usize,
        l_k in 1..6usize,
        kind in mask_kind(),
        seed in any::<u64>(),
    ) {
        let mut rng = StdRng::seed_from_u64(seed);
        let shape = [&lead[..], &[l_q, l_k]].concat();
        let mut scores = random(&shape, &mut rng) * 3.0;
        if let Some(mask) = make_mask(kind, &lead, l_q, l_k, &mut rng) {
            mask.apply(&mut scores).unwrap();
        }
        let g = random(&shape, &mut rng); // dℓ/dP: ℓ = Σ P ∘ g
        let p = exact::softmax(&scores);
        let grad_s = softmax_backward(&p, &g).unwrap();
        let fd = finite_differences(&scores, |s| dot(&exact::softmax(s), &g));
        let (failure, worst) = compare("grad_scores", &grad_s, &fd, ATOL);
        prop_assert!(failure.is_none(), "{}", failure.unwrap());
        // A masked score is a constant: exactly zero gradient.
        Zip::from(&scores).and(&grad_s).for_each(|&s, &d| assert!(s.is_finite() || d == 0.0));
        report("softmax_backward", worst);
    }

    #[test]
    fn sdpa_backward_matches_finite_differences(
        lead in prop::collection::vec(1..3usize, 0..3),
        l_q in 1..5usize,
        l_k in 1..6usize,
        d_k in 1..5usize,
        d_v in 1..4usize,
        kind in mask_kind(),
        seed in any::<u64>(),
    ) {
        let mut rng = StdRng::seed_from_u64(seed);
        let shape = |rows, cols| [&lead[..], &[rows, cols]].concat();
        let q = random(&shape(l_q, d_k), &mut rng);
        let k = random(&shape(l_k, d_k), &mut rng);
        let v = random(&shape(l_k, d_v), &mut rng);
        let grad_o = random(&shape(l_q, d_v), &mut rng);
        let mask = make_mask(kind, &lead, l_q, l_k, &mut rng);
        let (failure, worst) = check_sdpa(&q, &k, &v, mask.as_ref(), &grad_o);
        prop_assert!(failure.is_none(), "{}", failure.unwrap());
        report("sdpa_backward", worst);
    }
}

#[test]
fn the_classic_wrong_softmax_backward_is_rejected() {
    // dS = P ∘ dP forgets that raising one score lowers every other weight of its row.
    let mut rng = StdRng::seed_from_u64(3);
    let scores = random(&[3, 5], &mut rng);
    let g = random(&[3, 5], &mut rng);
    let p = exact::softmax(&scores);
    let fd = finite_differences(&scores, |s| dot(&exact::softmax(s), &g));
    let wrong = &p * &g;
    assert!(compare("wrong", &wrong, &fd, ATOL).0.is_some());
    assert!(compare("right", &softmax_backward(&p, &g).unwrap(), &fd, ATOL).0.is_none());
}

#[test]
fn a_fully_masked_query_row_has_zero_output_and_zero_gradients() {
    let mut rng = StdRng::seed_from_u64(8);
    let (q, k, v) = (
        random(&[2, 4, 3], &mut rng),
        random(&[2, 6, 3], &mut rng),
        random(&[2, 6, 2], &mut rng),
    );
    let mut allowed = ArrayD::from_elem(IxDyn(&[2, 4, 6]), true);
    allowed.slice_mut(s![0, 1, ..]).fill(false);
    let mask = Mask::from_array(allowed).unwrap();
    let grad_o = random(&[2, 4, 2], &mut rng);
    let (failure, _) = check_sdpa(&q, &k, &v, Some(&mask), &grad_o);
    assert!(failure.is_none(), "{}", failure.unwrap());
    let att = exact::sdpa(&q, &k, &v, Some(&mask)).unwrap();
    assert_eq!(blind_rows(&att.weights), [vec![0, 1]]);
    // Its dO does not matter: changing it changes no gradient.
    let mut other = grad_o.clone();
    other.slice_mut(s![0, 1, ..]).fill(100.0);
    let a = sdpa_backward(&q, &k, &v, &att.weights, &grad_o).unwrap();
    let b = sdpa_backward(&q, &k, &v, &att.weights, &other).unwrap();
    assert_eq!(a, b);
}

/// Checks the layer's five gradients against finite differences of `ℓ = Σ Y ∘ dY`, with the
/// mask and the dropout scales held fixed; returns the first failure and the largest
/// difference.
fn check_layer(
    weights: &[Array2<f64>; 4],
    heads: usize,
    x: &Array3<f64>,
    mask: Option<&Mask>,
    drop: Option<&ArrayRef4<f64>>,
    grad_y: &Array3<f64>,
) -> (Option<String>, f64) {
    let layer = |w: &[Array2<f64>; 4]| {
        let [w_q, w_k, w_v, w_o] = w.clone();
        MultiHeadAttention::new(w_q, w_k, w_v, w_o, heads).unwrap()
    };
    let loss = |w: &[Array2<f64>; 4], x: &Array3<f64>| {
        let (y, _) = layer(w).forward_train(x, mask, drop).unwrap();
        dot(&y.into_dyn(), &grad_y.clone().into_dyn())
    };
    let mha = layer(weights);
    let (y, tape) = mha.forward_train(x, mask, drop).unwrap();
    let grads = mha.backward(&tape, grad_y).unwrap();
    let LayerGrads { grad_x, grad_w_q, grad_w_k, grad_w_v, grad_w_o } = grads;
    let grad_x_copy = grad_x.clone();
    let fd_x = finite_differences(&x.clone().into_dyn(), |x| {
        loss(weights, &x.clone().into_dimensionality().unwrap())
    });
    let mut worst = 0.0_f64;
    let (failure, w) = compare("grad_x", &grad_x.into_dyn(), &fd_x, ATOL_LAYER);
    worst = worst.max(w);
    if failure.is_some() {
        return (failure, worst);
    }
    let names = ["grad_w_q", "grad_w_k", "grad_w_v", "grad_w_o"];
    for (i, analytic) in [grad_w_q, grad_w_k, grad_w_v, grad_w_o].into_iter().enumerate() {
        let fd = finite_differences(&weights[i].clone().into_dyn(), |w| {
            let mut moved = weights.clone();
            moved[i] = w.clone().into_dimensionality().unwrap();
            loss(&moved, x)
        });
        let (failure, w) = compare(names[i], &analytic.into_dyn(), &fd, ATOL_LAYER);
        worst = worst.max(w);
        if failure.is_some() {
            return (failure, worst);
        }
    }
    // A query that sees nothing in any head has a zero output row; an item whose queries
    // all see nothing (a valid length of 0) has a zero output and a zero grad_x.
    for (b, p) in tape.weights().outer_iter().enumerate() {
        for i in 0..p.shape()[1] {
            let blind = p.index_axis(Axis(1), i).iter().all(|&w| w == 0.0);
            if blind && y.slice(s![b, i, ..]).iter().any(|&o| o != 0.0) {
                return (
                    Some(format!("query ({b}, {i}) sees nothing but has an output")),
                    worst,
                );
            }
        }
        let nothing_seen = p.iter().all(|&w| w == 0.0);
        if nothing_seen && grad_x_copy.slice(s![b, .., ..]).iter().any(|&d| d != 0.0) {
            return (Some(format!("item {b} sees nothing but has a nonzero grad_x")), worst);
        }
    }
    (None, worst)
}

/// A dropout scale array: each entry 0 with probability `p`, else `1/(1 − p)`.
fn scales(shape: (usize, usize, usize, usize), p: f64, rng: &mut StdRng) -> Array4<f64> {
    Array4::from_shape_simple_fn(
        shape,
        || if rng.random_bool(p) { 0.0 } else { 1.0 / (1.0 - p) },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn the_layer_backward_matches_finite_differences(
        batch in 1..3usize,
        l in 1..5usize,
        heads in 1..3usize,
        d_head in 1..4usize,
        kind in mask_kind(),
        dropout in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let mut rng = StdRng::seed_from_u64(seed);
        let d_model = heads * d_head;
        let scale = 1.0 / (d_model as f64).sqrt();
        let weights = [(); 4].map(|_| {
            random(&[d_model, d_model], &mut rng).into_dimensionality().unwrap() * scale
        });
        let x: Array3<f64> =
            random(&[batch, l, d_model], &mut rng).into_dimensionality().unwrap();
        let grad_y: Array3<f64> =
            random(&[batch, l, d_model], &mut rng).into_dimensionality().unwrap();
        let mask = match kind {
            // The layer's own mask shapes: (L, L), (batch, L, L), (batch, heads, L, L).
            MaskKind::Random => make_mask(kind, &[batch, heads], l, l, &mut rng),
            _ => make_mask(kind, &[batch], l, l, &mut rng),
        };
        let drop = dropout.then(|| scales((batch, heads, l, l), 0.3, &mut rng));
        let drop = drop.as_deref();
        let (failure, worst) = check_layer(&weights, heads, &x, mask.as_ref(), drop, &grad_y);
        prop_assert!(failure.is_none(), "{}", failure.unwrap());
        report("layer backward", worst);
    }
}

#[test]
fn the_layer_gives_an_item_that_sees_nothing_zero_output_and_zero_gradient() {
    let mut rng = StdRng::seed_from_u64(21);
    let (heads, d_model, l) = (2, 6, 3);
    let weights = [(); 4].map(|_| {
        random(&[d_model, d_model], &mut rng).into_dimensionality::<ndarray::Ix2>().unwrap()
    });
    let x: Array3<f64> = random(&[2, l, d_model], &mut rng).into_dimensionality().unwrap();
    let grad_y: Array3<f64> =
        random(&[2, l, d_model], &mut rng).into_dimensionality().unwrap();
    let padding = Mask::padding(&[3, 0], l, l).unwrap(); // item 1 has no real token
    for drop in [None, Some(scales((2, heads, l, l), 0.5, &mut rng))] {
        let drop = drop.as_deref();
        let (failure, _) = check_layer(&weights, heads, &x, Some(&padding), drop, &grad_y);
        assert!(failure.is_none(), "{}", failure.unwrap());
        let [w_q, w_k, w_v, w_o] = weights.clone();
        let mha = MultiHeadAttention::new(w_q, w_k, w_v, w_o, heads).unwrap();
        let (y, tape) = mha.forward_train(&x, Some(&padding), drop).unwrap();
        let grads = mha.backward(&tape, &grad_y).unwrap();
        assert!(y.slice(s![1, .., ..]).iter().all(|&o| o == 0.0));
        assert!(grads.grad_x.slice(s![1, .., ..]).iter().all(|&d| d == 0.0));
        assert!(grads.grad_x.slice(s![0, .., ..]).iter().all(|&d| d != 0.0));
    }
}

/// Any shapes at all, including empty and mismatched ones: `Ok` or `Err`, never a panic.
fn any_shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..4usize, 0..5)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_shapes_never_panic(
        shapes in prop::collection::vec(any_shape(), 5),
        layer_x in prop::collection::vec(0..4usize, 3),
        drop in prop::option::of(prop::collection::vec(0..4usize, 4)),
    ) {
        let array = |s: &Vec<usize>| ArrayD::<f64>::from_elem(IxDyn(s), 0.5);
        let [q, k, v, p, grad_o] = [0, 1, 2, 3, 4].map(|i| array(&shapes[i]));
        let _ = exact::matmul(&q, &k);
        let _ = exact::softmax(&q);
        let _ = exact::sdpa(&q, &k, &v, None);
        let _ = softmax_backward(&q, &k);
        let _ = sdpa_backward(&q, &k, &v, &p, &grad_o);
        let mha =
            MultiHeadAttention::<f64>::random(4, 2, &mut StdRng::seed_from_u64(0)).unwrap();
        let x = Array3::from_elem((layer_x[0], layer_x[1], layer_x[2]), 0.5);
        let drop = drop.map(|s| Array4::from_elem((s[0], s[1], s[2], s[3]), 1.0));
        if let Ok((y, tape)) = mha.forward_train(&x, None, drop.as_deref()) {
            prop_assert!(mha.backward(&tape, &y).is_ok());
            let other = Array3::zeros((1, 1, 4));
            prop_assert!(mha.backward(&tape, &other).is_err() || y.dim() == (1, 1, 4));
        }
    }
}
