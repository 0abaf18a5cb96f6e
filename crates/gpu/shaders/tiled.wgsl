// Chapter 14, *Attention on a GPU*: chapter 8's tiled attention. One workgroup per query block
// of B_Q rows, one invocation per row; the workgroup stages each tile of B_K keys and values
// in workgroup memory, where all B_Q invocations read it. Anchors: tiles, tile_bits, tiled.

// ANCHOR: tiles
const B_K: u32 = 32u; // keys per tile: one bit each in a u32, one word of the mask
// The tiles of keys and values, sized by the head widths the host sets (D_K4, D_V4):
// 32 · (16 + 16) vec4s · 16 bytes = 16 KiB at d = 64, 32 KiB at d = 128.
var<workgroup> k_tile: array<vec4<f32>, B_K * D_K4>;
var<workgroup> v_tile: array<vec4<f32>, B_K * D_V4>;
// ANCHOR_END: tiles

// Which of the n_k keys of the tile starting at key j0 query i of matrix b may see: bit jj
// for key j0 + jj. A tile starts at a multiple of 32, so with a mask it is one word.
// ANCHOR: tile_bits
fn tile_bits(b: u32, i: u32, j0: u32, n_k: u32) -> u32 {
    let all = select(0xffffffffu, (1u << n_k) - 1u, n_k < 32u);
    switch params.masking {
        case MASK_CAUSAL: {
            if i < j0 {
                return 0u; // the whole tile lies in this query's future
            }
            let n = min(n_k, i - j0 + 1u); // keys j0..=i
            return select(0xffffffffu, (1u << n) - 1u, n < 32u);
        }
        case MASK_BITS: {
            return mask[(b * params.l_q + i) * params.mask_words + j0 / 32u] & all;
        }
        default: {
            return all;
        }
    }
}
// ANCHOR_END: tile_bits

// ANCHOR: tiled
@compute @workgroup_size(B_Q)
fn tiled(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let b = group.y;         // the matrix: batch item × head
    let i0 = group.x * B_Q;  // the block's first query
    let i = i0 + t;          // this invocation's query
    let has_row = i < params.l_q; // the last block may be short; its spares still load tiles
    var q_row: array<vec4<f32>, MAX_D4>;
    if has_row {
        load_query(b, i, &q_row);
    }
    var m = 0.0; // the running maximum (meaningless while l = 0)
    var l = 0.0; // the running sum of exp(s − m)
    var acc: array<vec4<f32>, MAX_D4>; // Σ exp(s − m)·v
    var end = params.l_k;
    if params.masking == MASK_CAUSAL {
        // Chapter 8's causal_end: tiles past the block's last query are in every row's future.
        end = min(params.l_k, min(params.l_q, i0 + B_Q));
    }
    for (var j0 = 0u; j0 < end; j0 += B_K) {
        let n_k = min(B_K, end - j0); // the last tile may be short
        // Stage the tile: the invocations copy it together, each taking every B_Q-th vec4.
        for (var x = t; x < n_k * D_K4; x += B_Q) {
            k_tile[x] = k[(b * params.l_k + j0) * D_K4 + x];
        }
        for (var x = t; x < n_k * D_V4; x += B_Q) {
            v_tile[x] = v[(b * params.l_k + j0) * D_V4 + x];
        }
        workgroupBarrier(); // the whole tile is in place before anyone reads it
        var seen = 0u;
        if has_row {
            seen = tile_bits(b, i, j0, n_k);
        }
        if seen != 0u {
            // S = q·K_tileᵀ/√d_k for the visible keys, and their maximum.
            var s: array<f32, B_K>;
            // f32's lowest finite value: no score is below it, so tile_max ends as one.
            var tile_max = -3.4028234e38;
            for (var jj = 0u; jj < n_k; jj++) {
                if ((seen >> jj) & 1u) == 1u {
                    var dot_qk = 0.0;
                    for (var c = 0u; c < D_K4; c++) {
                        dot_qk += dot(q_row[c], k_tile[jj * D_K4 + c]);
                    }
                    s[jj] = dot_qk * params.scale;
                    tile_max = max(tile_max, s[jj]);
                }
            }
            if l == 0.0 {
                m = tile_max; // the first tile with a visible key starts the maximum
            }
            let m_new = max(m, tile_max);
            let rescale = exp(m - m_new); // 1 if the maximum held
            for (var c = 0u; c < D_V4; c++) {
                acc[c] *= rescale; // earlier tiles were summed against the old maximum
            }
            // P = exp(S − m'), and acc += P·V_tile, over the visible keys only.
            var tile_sum = 0.0;
            for (var jj = 0u; jj < n_k; jj++) {
                if ((seen >> jj) & 1u) == 1u {
                    let p = exp(s[jj] - m_new);
                    tile_sum += p;
                    for (var c = 0u; c < D_V4; c++) {
                        acc[c] += p * v_tile[jj * D_V4 + c];
                    }
                }
            }
            l = l * rescale + tile_sum;
            m = m_new;
        }
        workgroupBarrier(); // everyone is done with the tile before it is overwritten
    }
    if has_row {
        write_row(b, i, &acc, l);
    }
}
// ANCHOR_END: tiled
