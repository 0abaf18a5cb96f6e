//! Your attempts at the exercises of chapter 14, *Attention on a GPU*. Check them with
//! `cargo test -p exercises attempts::ch14 -- --ignored`.

// ANCHOR: pack_mask_row
pub fn pack_mask_row(allowed: &[bool]) -> Vec<u32> {
    todo!("key j is bit j % 32 of word j / 32, in ⌈L / 32⌉ words; the spare bits stay 0")
}
// ANCHOR_END: pack_mask_row

// ANCHOR: workgroups
pub fn workgroups(l_q: usize, block_q: usize) -> usize {
    todo!("one workgroup per block of block_q queries, the last block possibly short")
}
// ANCHOR_END: workgroups

// ANCHOR: online_row
pub fn online_row(scores: &[f32], visible: &[bool], values: &[f32]) -> f32 {
    todo!("the online softmax over the visible keys, m started by the first one (l == 0)")
}
// ANCHOR_END: online_row

// ANCHOR: tiled_reads
pub fn tiled_reads(l: usize, d: usize, block_q: usize) -> u64 {
    todo!("every workgroup reads all l rows of K and of V, d numbers each")
}
// ANCHOR_END: tiled_reads

#[cfg(test)]
mod tests {
    use crate::{ch14, verdict};

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch14 -- --ignored"]
    fn pack_mask_row() {
        verdict(ch14::check_pack_mask_row(super::pack_mask_row));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch14 -- --ignored"]
    fn workgroups() {
        verdict(ch14::check_workgroups(super::workgroups));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch14 -- --ignored"]
    fn online_row() {
        verdict(ch14::check_online_row(super::online_row));
    }

    #[test]
    #[ignore = "your attempt: cargo test -p exercises attempts::ch14 -- --ignored"]
    fn tiled_reads() {
        verdict(ch14::check_tiled_reads(super::tiled_reads));
    }
}
