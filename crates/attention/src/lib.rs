//! Self-attention from first principles (work in progress).
