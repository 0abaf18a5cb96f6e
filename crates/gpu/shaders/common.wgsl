// Chapter 14, *Attention on a GPU*: what both kernels share (crates/gpu/src/kernels.rs puts this
// file in front of naive.wgsl or tiled.wgsl). Anchors: bindings, visible.
//
// Every tensor is a flat array of f32 in row-major order, the batch and head axes flattened
// into one index b: Q is (count, L_q, d_k), K (count, L_k, d_k), V (count, L_k, d_v) and the
// output (count, L_q, d_v). A boolean mask is one bit per score, 32 keys to a u32 word.

// ANCHOR: bindings
struct Params {
    l_q: u32,        // queries per matrix
    l_k: u32,        // keys per matrix
    masking: u32,    // MASK_ALL, MASK_CAUSAL or MASK_BITS
    mask_words: u32, // u32 words per row of the mask: ⌈L_k / 32⌉
    scale: f32,      // 1 / √d_k
}

const MASK_ALL: u32 = 0u;    // every query sees every key
const MASK_CAUSAL: u32 = 1u; // query i sees keys 0..=i
const MASK_BITS: u32 = 2u;   // bit j of row i of `mask`: 1 = may attend

// The head widths, fixed when the pipeline is made (Rust's `constants`), so the compiler
// knows every loop bound below; MAX_D sizes the per-invocation arrays.
override D_K: u32;
override D_V: u32;
const MAX_D: u32 = 128u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read> mask: array<u32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
// ANCHOR_END: bindings

// May query i of matrix b see key j?
// ANCHOR: visible
fn visible(b: u32, i: u32, j: u32) -> bool {
    switch params.masking {
        case MASK_CAUSAL: {
            return j <= i;
        }
        case MASK_BITS: {
            let word = mask[(b * params.l_q + i) * params.mask_words + j / 32u];
            return ((word >> (j % 32u)) & 1u) == 1u;
        }
        default: {
            return true;
        }
    }
}
// ANCHOR_END: visible

// Row i of the output: acc / l, or zeros for a query that saw no key (l = 0), as in sdpa.
// ANCHOR: write_row
fn write_row(b: u32, i: u32, acc: ptr<function, array<f32, MAX_D>>, l: f32) {
    let o0 = (b * params.l_q + i) * D_V;
    for (var c = 0u; c < D_V; c++) {
        out[o0 + c] = select(0.0, (*acc)[c] / l, l > 0.0);
    }
}
// ANCHOR_END: write_row
