// Chapter 14, *Attention on a GPU*: what both kernels share (crates/gpu/src/lib.rs puts this
// file in front of naive.wgsl or tiled.wgsl). Anchors: bindings, visible, write_row.
//
// Every tensor is a flat array in row-major order, the batch and head axes flattened into one
// index b, and every row cut into vec4s, four numbers each (the host pads d_k and d_v with
// zeros to a multiple of 4, which changes no dot product, and drops the padding of the
// output): Q is (count, L_q, D_K4) vec4s, K (count, L_k, D_K4), V (count, L_k, D_V4), the
// output (count, L_q, D_V4). A boolean mask is one bit per score, 32 keys to a u32 word.

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
const MASK_BITS: u32 = 2u;   // bit j % 32 of word j / 32 of row i of `mask`: 1 = may attend

const B_Q: u32 = 64u;   // invocations per workgroup: one query each
// The widest head, in vec4s: 128 numbers. It sizes each invocation's own arrays (its query
// row and accumulator): WGSL lets only arrays in workgroup memory take an override's size.
const MAX_D4: u32 = 32u;
// The head widths in vec4s, ⌈d_k / 4⌉ and ⌈d_v / 4⌉, fixed when the pipeline is made (Rust's
// `constants`), so the compiler knows the bounds of the loops over a row, and the tiled
// kernel's tiles in workgroup memory take their size from them.
override D_K4: u32;
override D_V4: u32;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> v: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> mask: array<u32>;
@group(0) @binding(5) var<storage, read_write> out: array<vec4<f32>>;
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

// Query i of matrix b, into the invocation's own variables.
// ANCHOR: load_query
fn load_query(b: u32, i: u32, q_row: ptr<function, array<vec4<f32>, MAX_D4>>) {
    for (var c = 0u; c < D_K4; c++) {
        (*q_row)[c] = q[(b * params.l_q + i) * D_K4 + c];
    }
}
// ANCHOR_END: load_query

// Row i of the output: acc / l, or zeros for a query that saw no key (l = 0), as in sdpa.
// ANCHOR: write_row
fn write_row(b: u32, i: u32, acc: ptr<function, array<vec4<f32>, MAX_D4>>, l: f32) {
    for (var c = 0u; c < D_V4; c++) {
        out[(b * params.l_q + i) * D_V4 + c] = select(vec4(0.0), (*acc)[c] / l, l > 0.0);
    }
}
// ANCHOR_END: write_row
