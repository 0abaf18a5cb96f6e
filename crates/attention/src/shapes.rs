//! Shape checks shared by the attention functions (not part of the public API).
//!
//! Every check runs before any ndarray operation, so that a mismatch becomes an
//! [`AttentionError`] naming the shapes instead of a panic inside `dot`.
//!
//! Anchor (below the doc comments): `shape_checks`, chapter *Queries, keys and values*.

use crate::error::{AttentionError, Result};

/// The names of the axes of an operand of shape `(..., rows, cols)`.
// ANCHOR: shape_checks
pub(crate) struct Operand<'a> {
    pub name: &'a str,
    pub shape: &'a [usize],
    pub rows: &'static str,
    pub cols: &'static str,
}

impl<'a> Operand<'a> {
    // ANCHOR_END: shape_checks
    /// Splits the shape into its leading axes and `(rows, cols)`, checking there are at least
    /// two axes and that no axis is empty.
    // ANCHOR: shape_checks
    pub fn split(&self) -> Result<(&'a [usize], usize, usize)> {
        let n = self.shape.len();
        if n < 2 {
            return Err(AttentionError::shape(
                self.name,
                self.shape,
                &format!("a shape (..., {}, {}) was expected", self.rows, self.cols),
            ));
        }
        let (lead, last) = self.shape.split_at(n - 2);
        if lead.contains(&0) {
            return Err(AttentionError::Empty { what: self.name.into(), dim: "batch" });
        }
        if last[0] == 0 {
            return Err(AttentionError::Empty { what: self.name.into(), dim: self.rows });
        }
        if last[1] == 0 {
            return Err(AttentionError::Empty { what: self.name.into(), dim: self.cols });
        }
        Ok((lead, last[0], last[1]))
    }
}

// ANCHOR_END: shape_checks
/// Checks `q: (..., L_q, d_k)`, `k: (..., L_k, d_k)` and `v: (..., L_k, d_v)`: same leading
/// axes, matching `d_k` and `L_k`, nothing empty. Returns `(L_q, L_k, d_k, d_v)`.
// ANCHOR: shape_checks
pub(crate) fn check_qkv(
    q: &[usize],
    k: &[usize],
    v: &[usize],
) -> Result<(usize, usize, usize, usize)> {
    let (q_lead, l_q, d_k) =
        Operand { name: "q", shape: q, rows: "L_q", cols: "d_k" }.split()?;
    let (k_lead, l_k, k_d_k) =
        Operand { name: "k", shape: k, rows: "L_k", cols: "d_k" }.split()?;
    let (v_lead, v_l_k, d_v) =
        Operand { name: "v", shape: v, rows: "L_k", cols: "d_v" }.split()?;
    same_lead("q", q_lead, "k", k_lead)?;
    same_lead("k", k_lead, "v", v_lead)?;
    if d_k != k_d_k {
        return Err(AttentionError::mismatch("q", d_k, "k", k_d_k, "d_k"));
    }
    if l_k != v_l_k {
        return Err(AttentionError::mismatch("k", l_k, "v", v_l_k, "L_k"));
    }
    Ok((l_q, l_k, d_k, d_v))
}

// ANCHOR_END: shape_checks
/// Checks that two operands have the same leading (batch, head) axes.
// ANCHOR: shape_checks
pub(crate) fn same_lead(
    left: &str,
    left_lead: &[usize],
    right: &str,
    right_lead: &[usize],
) -> Result<()> {
    if left_lead != right_lead {
        return Err(AttentionError::Batch {
            left: left.into(),
            left_shape: left_lead.to_vec(),
            right: right.into(),
            right_shape: right_lead.to_vec(),
        });
    }
    Ok(())
}
// ANCHOR_END: shape_checks
