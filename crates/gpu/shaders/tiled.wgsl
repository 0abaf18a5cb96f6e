// Chapter 14, *Attention on a GPU*: chapter 8's tiled attention. One workgroup per query block
// of B_Q rows, one invocation per row; the workgroup stages each tile of B_K keys and values
// in workgroup memory, where all B_Q invocations read it. Anchors: tiles, tiled.

// ANCHOR: tiles
const B_Q: u32 = 64u; // queries per workgroup, one invocation each
const B_K: u32 = 32u; // keys per tile: one bit each in a u32
// The tiles of keys and values: 2 · 32 · 128 · 4 bytes = 32 KiB of workgroup memory.
var<workgroup> k_tile: array<f32, B_K * MAX_D>;
var<workgroup> v_tile: array<f32, B_K * MAX_D>;
// ANCHOR_END: tiles

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
    var q_row: array<f32, MAX_D>;
    if has_row {
        for (var c = 0u; c < D_K; c++) {
            q_row[c] = q[(b * params.l_q + i) * D_K + c];
        }
    }
    var m = 0.0; // the running maximum (meaningless while l = 0)
    var l = 0.0; // the running sum of exp(s − m)
    var acc: array<f32, MAX_D>; // Σ exp(s − m)·v
    var end = params.l_k;
    if params.masking == MASK_CAUSAL {
        end = min(params.l_k, i0 + B_Q); // later tiles lie in every row's future: skipped
    }
    for (var j0 = 0u; j0 < end; j0 += B_K) {
        let n_k = min(B_K, end - j0); // the last tile may be short
        // Stage the tile: the invocations copy it together, each taking every B_Q-th number.
        for (var x = t; x < n_k * D_K; x += B_Q) {
            k_tile[x] = k[(b * params.l_k + j0) * D_K + x];
        }
        for (var x = t; x < n_k * D_V; x += B_Q) {
            v_tile[x] = v[(b * params.l_k + j0) * D_V + x];
        }
        workgroupBarrier(); // the whole tile is in place before anyone reads it
        if has_row {
            // S = q·K_tileᵀ/√d_k for the visible keys; `seen` has bit jj set for each.
            var s: array<f32, B_K>;
            var seen = 0u;
            var tile_max = 0.0;
            for (var jj = 0u; jj < n_k; jj++) {
                if visible(b, i, j0 + jj) {
                    var dot = 0.0;
                    for (var c = 0u; c < D_K; c++) {
                        dot += q_row[c] * k_tile[jj * D_K + c];
                    }
                    s[jj] = dot * params.scale;
                    tile_max = select(s[jj], max(tile_max, s[jj]), seen != 0u);
                    seen |= 1u << jj;
                }
            }
            if seen != 0u {
                if l == 0.0 {
                    m = tile_max; // the first tile with a visible key starts the maximum
                }
                let m_new = max(m, tile_max);
                let rescale = exp(m - m_new); // 1 if the maximum held
                // P = exp(S − m'), 0 for the keys this query may not see.
                var tile_sum = 0.0;
                for (var jj = 0u; jj < n_k; jj++) {
                    s[jj] = select(0.0, exp(s[jj] - m_new), (seen & (1u << jj)) != 0u);
                    tile_sum += s[jj];
                }
                l = l * rescale + tile_sum;
                // acc = acc·rescale + P·V_tile
                for (var c = 0u; c < D_V; c++) {
                    var o = acc[c] * rescale;
                    for (var jj = 0u; jj < n_k; jj++) {
                        o += s[jj] * v_tile[jj * D_V + c];
                    }
                    acc[c] = o;
                }
                m = m_new;
            }
        }
        workgroupBarrier(); // everyone is done with the tile before it is overwritten
    }
    if has_row {
        write_row(b, i, &acc, l);
    }
}
// ANCHOR_END: tiled
