//! Matrix products over leading (batch, head) axes (not part of the public API).
//!
//! Anchor (below the doc comment): `matmul`, chapter *Multi-head attention*.

use ndarray::{Array, Array3, ArrayRef, Dimension, IxDyn};

use crate::float::Float;

/// `a · b` (or `a · bᵀ` when `transpose_b`) for every matrix of the stacks
/// `a: (..., m, n)` and `b: (..., n, p)` (or `(..., p, n)`), which share their leading axes.
/// The shapes must have been checked.
// ANCHOR: matmul
pub(crate) fn matmul<A: Float, D: Dimension>(
    a: &ArrayRef<A, D>,
    b: &ArrayRef<A, D>,
    transpose_b: bool,
) -> Array<A, D> {
    let nd = a.ndim();
    let lead = &a.shape()[..nd - 2];
    let count: usize = lead.iter().product();
    let (m, n) = (a.shape()[nd - 2], a.shape()[nd - 1]);
    let (b_rows, b_cols) = (b.shape()[nd - 2], b.shape()[nd - 1]);
    let p = if transpose_b { b_rows } else { b_cols };
    let a3 = a.to_shape((count, m, n)).expect("leading axes collapse into one");
    let b3 = b.to_shape((count, b_rows, b_cols)).expect("leading axes collapse into one");
    let mut out = Array3::<A>::zeros((count, m, p));
    for ((a_i, b_i), mut out_i) in
        a3.outer_iter().zip(b3.outer_iter()).zip(out.outer_iter_mut())
    {
        if transpose_b {
            out_i.assign(&a_i.dot(&b_i.t()));
        } else {
            out_i.assign(&a_i.dot(&b_i));
        }
    }
    let mut shape = lead.to_vec();
    shape.extend([m, p]);
    out.into_shape_with_order(IxDyn(&shape))
        .expect("count·m·p elements")
        .into_dimensionality::<D>()
        .expect("same number of axes as the inputs")
}
// ANCHOR_END: matmul
