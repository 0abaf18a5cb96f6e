// Chapter 14, *Attention on a GPU*: one invocation counts the iterations of a loop of n, read
// from the buffer so that the compiler cannot know it. On a GPU the count is n; lavapipe (Mesa
// 22.3) ends an invocation's loops after 65535 iterations in all. Anchors: loop_count.

// ANCHOR: loop_count
@group(0) @binding(0) var<storage, read_write> data: array<u32, 2>; // [n, the count]

@compute @workgroup_size(1)
fn loop_count() {
    var count = 0u;
    for (var i = 0u; i < data[0]; i++) {
        count += 1u;
    }
    data[1] = count;
}
// ANCHOR_END: loop_count
