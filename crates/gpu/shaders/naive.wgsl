// Chapter 14, *Attention on a GPU*: the naive kernel, one invocation per query row and no
// workgroup memory: every invocation reads all of K and V from global memory by itself.
// Anchors: naive.

// ANCHOR: naive
@compute @workgroup_size(B_Q)
fn naive(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x; // the query row
    let b = id.y; // the matrix: batch item × head
    if i >= params.l_q {
        return; // the last workgroup's spare invocations
    }
    var q_row: array<vec4<f32>, MAX_D4>;
    load_query(b, i, &q_row);
    var m = 0.0; // the running maximum (meaningless while l = 0)
    var l = 0.0; // the running sum of exp(s − m)
    var acc: array<vec4<f32>, MAX_D4>; // Σ exp(s − m)·v, zero to start with
    for (var j = 0u; j < params.l_k; j++) {
        if !visible(b, i, j) {
            continue;
        }
        var s = 0.0;
        for (var c = 0u; c < D_K4; c++) {
            s += dot(q_row[c], k[(b * params.l_k + j) * D_K4 + c]);
        }
        s *= params.scale;
        if l == 0.0 {
            m = s; // the first key this query sees starts the running maximum
        }
        let m_new = max(m, s);
        let rescale = exp(m - m_new); // 1 if the maximum held
        let p = exp(s - m_new);
        l = l * rescale + p;
        for (var c = 0u; c < D_V4; c++) {
            acc[c] = acc[c] * rescale + p * v[(b * params.l_k + j) * D_V4 + c];
        }
        m = m_new;
    }
    write_row(b, i, &acc, l);
}
// ANCHOR_END: naive
