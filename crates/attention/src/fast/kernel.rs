//! Chapter *Attention at scale*: the inner loops of the tiled path, written for the vector unit.
//!
//! [`tiled`](crate::tiled) spends nearly all its time in three loops: the scores of a tile
//! (`Q_blk · K_tileᵀ`), their exponentials, and the weighted values (`P · V_tile`). This module
//! holds those loops, in plain Rust that the compiler turns into vector instructions:
//!
//! - **Packing.** Before the first query block, each head's keys are rewritten once into the
//!   order the scores loop reads them ([`PackedHead`]): per tile, panels of [`NR`] = 16 keys,
//!   and in a panel, dimension after dimension, the 16 keys' entries side by side. The values
//!   are used in place when their rows are 16-aligned, else copied once with their rows padded
//!   to a multiple of 16 columns. A general matrix
//!   product (`matrixmultiply`) would repack both operands for every (query block, key tile)
//!   pair instead.
//! - **Micro-kernels.** [`scores_panel`] computes an `MR × 16` patch of scores, [`pv_panel`]
//!   adds `MR` rows of `P` times a 16-column strip of `V` to the output: `MR · 16` running sums
//!   that live in vector registers for the whole loop.
//! - **Exponentials.** [`exp2_f32`], a polynomial the compiler vectorises, for the forward
//!   pass's `2^x`; [`exp_f32`] for the backward pass's `eˣ`.
//!
//! The same generic code is compiled three times, for AVX-512, for AVX2 with FMA, and for the
//! instructions every processor of the target has ([`Simd`]), and the widest the processor
//! supports is chosen at run time, unless the environment variable [`SIMD_VAR`] names another.
//! Only the AVX-512 and AVX2 builds use fused multiply-add ([`madd`]): elsewhere `mul_add`
//! would be a call into the C library for every product.
//!
//! Anchors (below the doc comments): `simd`, `pack`, `scores_panel`, `pv_panel`, `tile_loops`,
//! `fast_exp`, `exp_dispatch`.

use std::borrow::Cow;
use std::iter::repeat_n;
use std::sync::OnceLock;

use ndarray::ArrayView2;

use crate::error::{AttentionError, Result};
use crate::float::Float;

/// The environment variable that forces one build of the inner loops: `avx512`, `avx2` or
/// `portable`. It is read once, the first time a kernel that follows it runs (the tiled path,
/// the fast forward pass of `gpt::packed`); a name the processor cannot run is an error
/// there, not a silent fallback.
///
/// ```
/// use attention::kernel::{SIMD_VAR, Simd};
///
/// assert_eq!(SIMD_VAR, "ATTENTION_SIMD");
/// assert!(Simd::parse("portable").is_ok()); // what `ATTENTION_SIMD=portable` selects
/// ```
pub const SIMD_VAR: &str = "ATTENTION_SIMD";

/// Keys per panel of a packed tile, and output columns per strip: 16.
///
/// ```
/// use attention::kernel::{NR, PackedHead};
/// use ndarray::Array2;
///
/// let (k, v) = (Array2::<f32>::ones((20, 3)), Array2::ones((20, 1)));
/// let packed = PackedHead::new(k.view(), v.view(), 20);
/// assert_eq!(packed.keys().len(), 2 * NR * 3); // 20 keys → 2 panels of 16, 3 dims each
/// ```
pub const NR: usize = 16;

/// Which build of the inner loops runs: the instruction set they were compiled for.
///
/// ```
/// use attention::kernel::Simd;
///
/// let best = Simd::best();
/// assert!(best.is_supported());
/// assert!(Simd::Portable.is_supported()); // on every processor
/// assert_eq!(Simd::parse("avx2").map(Simd::name).ok(), Simd::Avx2.is_supported().then_some("avx2"));
/// assert!(Simd::parse("sse9").unwrap_err().to_string().contains("avx512, avx2 or portable"));
/// ```
// ANCHOR: simd
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Simd {
    /// AVX-512F (x86-64): 16 `f32` lanes per register, fused multiply-add.
    Avx512,
    /// AVX2 and FMA (x86-64): 8 `f32` lanes per register, fused multiply-add.
    Avx2,
    /// The target's baseline (SSE2 on x86-64): separate multiply and add.
    Portable,
}
// ANCHOR_END: simd

impl Simd {
    /// Every build, widest first.
    ///
    /// ```
    /// use attention::kernel::Simd;
    ///
    /// assert_eq!(Simd::ALL.len(), 3);
    /// ```
    pub const ALL: [Simd; 3] = [Simd::Avx512, Simd::Avx2, Simd::Portable];

    /// The name [`SIMD_VAR`] takes for this build.
    ///
    /// ```
    /// use attention::kernel::Simd;
    ///
    /// assert_eq!(Simd::Avx2.name(), "avx2");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Simd::Avx512 => "avx512",
            Simd::Avx2 => "avx2",
            Simd::Portable => "portable",
        }
    }

    /// Whether this processor can run this build.
    ///
    /// ```
    /// use attention::kernel::Simd;
    ///
    /// assert!(Simd::Portable.is_supported());
    /// ```
    // ANCHOR: simd
    pub fn is_supported(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            Simd::Portable => true,
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
    // ANCHOR_END: simd

    /// Every build this processor can run, widest first: what the tests compare against the
    /// plain path.
    ///
    /// ```
    /// use attention::kernel::Simd;
    ///
    /// assert_eq!(Simd::supported().last(), Some(&Simd::Portable));
    /// ```
    // ANCHOR: simd
    pub fn supported() -> Vec<Simd> {
        Simd::ALL.into_iter().filter(|s| s.is_supported()).collect()
    }
    // ANCHOR_END: simd

    /// The widest build this processor can run.
    ///
    /// ```
    /// use attention::kernel::Simd;
    ///
    /// assert_eq!(Simd::best(), Simd::supported()[0]);
    /// ```
    // ANCHOR: simd
    pub fn best() -> Simd {
        Simd::supported()[0]
    }
    // ANCHOR_END: simd

    /// The build named `name`, if this processor can run it.
    ///
    /// ```
    /// use attention::kernel::Simd;
    ///
    /// assert_eq!(Simd::parse("portable").unwrap(), Simd::Portable);
    /// ```
    pub fn parse(name: &str) -> Result<Simd> {
        let invalid =
            |problem: String| AttentionError::Invalid { what: SIMD_VAR.into(), problem };
        let simd = Simd::ALL.into_iter().find(|s| s.name() == name).ok_or_else(|| {
            invalid(format!("{name:?} is not one of avx512, avx2 or portable"))
        })?;
        simd.require(SIMD_VAR)
    }

    /// `self` if this processor can run it, else an error that starts with `what` (the
    /// variable or the function that asked for it).
    // ANCHOR: simd
    pub(crate) fn require(self, what: &str) -> Result<Simd> {
        if self.is_supported() {
            return Ok(self);
        }
        let (name, best) = (self.name(), Simd::best().name());
        let problem = format!("this processor cannot run {name} (its widest is {best})");
        Err(AttentionError::Invalid { what: what.into(), problem })
    }
    // ANCHOR_END: simd

    /// The build the tiled path and the fast forward pass of `gpt::packed` use: the one
    /// [`SIMD_VAR`] names, else [`Simd::best`]. The variable is read once per process.
    ///
    /// ```
    /// use attention::kernel::{SIMD_VAR, Simd};
    ///
    /// if std::env::var_os(SIMD_VAR).is_none() {
    ///     assert_eq!(Simd::chosen().unwrap(), Simd::best());
    /// }
    /// ```
    pub fn chosen() -> Result<Simd> {
        static CHOSEN: OnceLock<Result<Simd>> = OnceLock::new();
        CHOSEN
            .get_or_init(|| match std::env::var(SIMD_VAR) {
                Ok(name) => Simd::parse(name.trim()),
                Err(_) => Ok(Simd::best()),
            })
            .clone()
    }
}

/// `a · b + c`: one fused multiply-add (one rounding) when `FMA`, a multiply and an add
/// otherwise. Only builds compiled with the `fma` feature pass `FMA = true`; without it,
/// `mul_add` would be a call into the C library.
///
/// ```
/// use attention::kernel::madd;
///
/// assert_eq!(madd::<f32, false>(2.0, 3.0, 1.0), 7.0);
/// let tiny = f32::EPSILON / 2.0; // (1 + ε)(1 − ε/2) − 1 = ε/2 − ε²/2: the ε² is lost unfused
/// let (x, y) = (1.0 + f32::EPSILON, 1.0 - tiny);
/// assert_eq!(madd::<f32, false>(x, y, -1.0), x * y - 1.0);
/// assert_ne!(madd::<f32, true>(x, y, -1.0), x * y - 1.0); // fused: the exact product
/// ```
// ANCHOR: simd
#[inline(always)]
pub fn madd<A: Float, const FMA: bool>(a: A, b: A, c: A) -> A {
    if FMA { a.mul_add(b, c) } else { a * b + c }
}
// ANCHOR_END: simd

/// One head's keys and values, rewritten once into the order the micro-kernels read them.
///
/// Keys: tile after tile (`tile_k` keys each, the last may be shorter), each tile cut into
/// panels of [`NR`] keys (the last panel padded with zero keys), each panel stored
/// dimension-major: `kt[panel][dim][key in panel]`, the transpose `K_tileᵀ` in strips.
/// Values: `L_k` rows of `d_v` entries padded with zeros to a multiple of [`NR`] (borrowed
/// from `v` when its rows are contiguous and already that long).
///
/// ```
/// use attention::kernel::PackedHead;
/// use ndarray::Array2;
///
/// let k = Array2::from_shape_fn((20, 2), |(j, d)| (10 * j + d) as f32);
/// let v = Array2::from_shape_fn((20, 3), |(j, c)| (j + c) as f32);
/// let packed = PackedHead::new(k.view(), v.view(), 18); // tiles of 18 keys: 18 + 2
/// assert_eq!(packed.tile_stride(), 32 * 2); // 18 keys → 2 panels of 16, 2 dims each
/// assert_eq!(&packed.keys()[..3], &[0.0, 10.0, 20.0]); // dim 0 of keys 0, 1, 2
/// assert_eq!(packed.keys()[16], 1.0); // dim 1 of key 0
/// assert_eq!(packed.keys()[64], 180.0); // tile 1 starts with key 18, dim 0
/// assert_eq!(packed.values_stride(), 16);
/// assert_eq!(&packed.values()[16..20], &[1.0, 2.0, 3.0, 0.0]); // row 1, zero padded
/// ```
// ANCHOR: pack
pub struct PackedHead<'a, A: Clone> {
    pub(crate) kt: Vec<A>,
    pub(crate) v: Cow<'a, [A]>,
    pub(crate) l_k: usize,
    pub(crate) d_k: usize,
    pub(crate) tile_stride: usize,
    pub(crate) v_stride: usize,
}

impl<'a, A: Float> PackedHead<'a, A> {
    // ANCHOR_END: pack
    /// Packs `k: (L_k, d_k)` and `v: (L_k, d_v)` for tiles of `tile_k` keys (at least 1).
    ///
    /// # Panics
    ///
    /// If `k` and `v` have different numbers of rows (the tiled path checks shapes first).
    ///
    /// ```
    /// use attention::kernel::PackedHead;
    /// use ndarray::Array2;
    ///
    /// let (k, v) = (Array2::<f64>::ones((5, 4)), Array2::ones((5, 1)));
    /// let packed = PackedHead::new(k.view(), v.view(), 8);
    /// assert_eq!(packed.keys().len(), 16 * 4); // one tile, one panel of 16 keys
    /// ```
    // ANCHOR: pack
    pub fn new(k: ArrayView2<A>, v: ArrayView2<'a, A>, tile_k: usize) -> Self {
        let ((l_k, d_k), d_v) = (k.dim(), v.ncols());
        assert_eq!(
            l_k,
            v.nrows(),
            "PackedHead::new: k has {l_k} rows but v has {}",
            v.nrows()
        );
        let tile_k = tile_k.clamp(1, l_k.max(1));
        let tile_stride = tile_k.next_multiple_of(NR) * d_k; // one tile's panels
        // Written in the order it is stored: tile, panel, dimension, key.
        let mut kt = Vec::with_capacity(l_k.div_ceil(tile_k) * tile_stride);
        for tile in (0..l_k).step_by(tile_k) {
            let end = (tile + tile_k).min(l_k);
            for panel in (tile..tile + tile_stride / d_k.max(1)).step_by(NR) {
                for dim in 0..d_k {
                    let keys = panel..panel + NR;
                    kt.extend(keys.map(|j| if j < end { k[[j, dim]] } else { A::zero() }));
                }
            }
        }
        let v_stride = d_v.next_multiple_of(NR);
        let v = match v.to_slice() {
            Some(rows) if v_stride == d_v => Cow::Borrowed(rows), // already rows of 16s
            _ => Cow::Owned(
                v.rows()
                    .into_iter()
                    .flat_map(|row| {
                        row.into_iter().copied().chain(repeat_n(A::zero(), v_stride - d_v))
                    })
                    .collect(),
            ),
        };
        PackedHead { kt, v, l_k, d_k, tile_stride, v_stride }
    }
    // ANCHOR_END: pack

    /// The packed keys, `tile → panel → dim → key`.
    ///
    /// ```
    /// use attention::kernel::PackedHead;
    /// use ndarray::Array2;
    ///
    /// let (k, v) = (Array2::<f32>::ones((3, 2)), Array2::ones((3, 2)));
    /// let p = PackedHead::new(k.view(), v.view(), 3);
    /// assert_eq!(p.keys().iter().filter(|&&x| x == 1.0).count(), 6);
    /// ```
    pub fn keys(&self) -> &[A] {
        &self.kt
    }

    /// Elements from one tile of packed keys to the next: `d_k` times `tile_k` rounded up to a
    /// multiple of [`NR`].
    ///
    /// ```
    /// use attention::kernel::PackedHead;
    /// use ndarray::Array2;
    ///
    /// let (k, v) = (Array2::<f32>::ones((40, 8)), Array2::ones((40, 1)));
    /// let p = PackedHead::new(k.view(), v.view(), 17);
    /// assert_eq!(p.tile_stride(), 32 * 8);
    /// ```
    pub fn tile_stride(&self) -> usize {
        self.tile_stride
    }

    /// The padded values, `L_k` rows of [`values_stride`](Self::values_stride) entries.
    ///
    /// ```
    /// use attention::kernel::PackedHead;
    /// use ndarray::Array2;
    ///
    /// let (k, v) = (Array2::<f32>::ones((2, 2)), Array2::ones((2, 20)));
    /// let p = PackedHead::new(k.view(), v.view(), 2);
    /// assert_eq!(p.values().len(), 2 * 32);
    /// ```
    pub fn values(&self) -> &[A] {
        &self.v
    }

    /// The row length of [`values`](Self::values): `d_v` rounded up to a multiple of [`NR`].
    ///
    /// ```
    /// use attention::kernel::PackedHead;
    /// use ndarray::Array2;
    ///
    /// let (k, v) = (Array2::<f32>::ones((2, 2)), Array2::ones((2, 64)));
    /// let p = PackedHead::new(k.view(), v.view(), 2);
    /// assert_eq!(p.values_stride(), 64);
    /// ```
    pub fn values_stride(&self) -> usize {
        self.v_stride
    }

    /// `L_k`, the number of keys.
    ///
    /// ```
    /// use attention::kernel::PackedHead;
    /// use ndarray::Array2;
    ///
    /// let (k, v) = (Array2::<f32>::ones((7, 5)), Array2::ones((7, 1)));
    /// let p = PackedHead::new(k.view(), v.view(), 2);
    /// assert_eq!(p.len(), 7);
    /// assert!(!p.is_empty());
    /// ```
    pub fn len(&self) -> usize {
        self.l_k
    }

    /// Whether there are no keys.
    ///
    /// ```
    /// use attention::kernel::PackedHead;
    /// use ndarray::Array2;
    ///
    /// let (k, v) = (Array2::<f32>::ones((0, 5)), Array2::ones((0, 1)));
    /// let p = PackedHead::new(k.view(), v.view(), 2);
    /// assert!(p.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.l_k == 0
    }

    /// `d_k`, the length of a key.
    ///
    /// ```
    /// use attention::kernel::PackedHead;
    /// use ndarray::Array2;
    ///
    /// let (k, v) = (Array2::<f32>::ones((2, 5)), Array2::ones((2, 1)));
    /// let p = PackedHead::new(k.view(), v.view(), 2);
    /// assert_eq!(p.d_k(), 5);
    /// ```
    pub fn d_k(&self) -> usize {
        self.d_k
    }
}

/// How many query rows the tile loops compute for `n_q` queries and `mr` per micro-kernel:
/// groups of `mr`, then the last `n_q mod mr` two at a time (one zero row of padding at most).
///
/// ```
/// use attention::kernel::rows_computed;
///
/// assert_eq!(rows_computed(128, 6), 128); // 21 groups of 6, then 2
/// assert_eq!(rows_computed(127, 6), 128); // 21 groups of 6, then 1 padded to 2
/// assert_eq!(rows_computed(5, 1), 5);
/// ```
// ANCHOR: tile_loops
pub fn rows_computed(n_q: usize, mr: usize) -> usize {
    let mr = mr.max(1);
    let full = n_q / mr * mr;
    full + (n_q - full).next_multiple_of(2)
}
// ANCHOR_END: tile_loops

/// The first row of each group of queries: `(row, true)` for the groups of `mr`, then
/// `(row, false)` for the groups of two after them.
// ANCHOR: tile_loops
fn groups(n_q: usize, mr: usize) -> impl Iterator<Item = (usize, bool)> {
    let full = n_q / mr * mr;
    (0..full).step_by(mr).map(|r| (r, true)).chain((full..n_q).step_by(2).map(|r| (r, false)))
}
// ANCHOR_END: tile_loops

/// `S = Q·K_tileᵀ` for one tile: `n_q` queries (`q`: rows of `d_k`, zero rows up to
/// [`rows_computed`]) against the first `n_k` keys of a packed tile (`keys`, as in
/// [`PackedHead::keys`]), written to `s` (rows `s_stride` apart, [`NR`] columns per panel
/// even past `n_k`), `MR` queries at a time and the last few two at a time
/// ([`scores_panel`]).
///
/// ```
/// use attention::kernel::{PackedHead, scores_tile};
/// use ndarray::Array2;
///
/// let q = Array2::from_shape_fn((3, 2), |(i, d)| (i + d) as f32);
/// let k = Array2::from_shape_fn((5, 2), |(j, d)| (j * d) as f32);
/// let packed = PackedHead::new(k.view(), k.view(), 5);
/// let mut q_rows = q.as_slice().unwrap().to_vec();
/// q_rows.extend([0.0; 2]); // 3 queries: 4 rows computed
/// let mut s = vec![0.0_f32; 4 * 16];
/// scores_tile::<f32, 2, false>((&q_rows, 3, 2), (packed.keys(), 5), (&mut s, 16));
/// assert_eq!(s[2 * 16 + 4], q.row(2).dot(&k.row(4))); // query 2, key 4
/// ```
// ANCHOR: tile_loops
#[inline(always)]
pub fn scores_tile<A: Float, const MR: usize, const FMA: bool>(
    (q, n_q, d_k): (&[A], usize, usize),
    (keys, n_k): (&[A], usize),
    (s, s_stride): (&mut [A], usize),
) {
    assert!(d_k > 0, "scores_tile: d_k must be at least 1");
    let panels = keys.chunks_exact(NR * d_k).take(n_k.div_ceil(NR));
    for (panel, kt) in panels.enumerate() {
        for (r, full) in groups(n_q, MR) {
            let (q_at, s_at) = (&q[r * d_k..], &mut s[r * s_stride + panel * NR..]);
            if full {
                scores_panel::<A, MR, FMA>(q_at, kt, d_k, s_at, s_stride);
            } else {
                scores_panel::<A, 2, FMA>(q_at, kt, d_k, s_at, s_stride);
            }
        }
    }
}
// ANCHOR_END: tile_loops

/// `U += P·V_tile` for one tile: the weights `p` (`n_q` rows `s_stride` apart, zero-padded
/// as in [`scores_tile`]) times `n_k` rows of padded values (`values`, rows `o_stride` apart,
/// as in [`PackedHead::values`]), added to `acc` (rows `o_stride` apart), `MR` rows by [`NR`]
/// columns at a time ([`pv_panel`]).
///
/// ```
/// use attention::kernel::pv_tile;
///
/// let p = [0.5_f64; 2 * 3]; // 2 queries, 3 keys, stride 3
/// let values = [1.0_f64; 3 * 16]; // 3 keys, d_v = 16
/// let mut acc = [0.0_f64; 2 * 16];
/// pv_tile::<f64, 1, false>((&p, 3, 2), (&values, 3), (&mut acc, 16));
/// assert_eq!(acc, [1.5; 32]);
/// ```
// ANCHOR: tile_loops
#[inline(always)]
pub fn pv_tile<A: Float, const MR: usize, const FMA: bool>(
    (p, s_stride, n_q): (&[A], usize, usize),
    (values, n_k): (&[A], usize),
    (acc, o_stride): (&mut [A], usize),
) {
    for (r, full) in groups(n_q, MR) {
        for c in (0..o_stride).step_by(NR) {
            let (p_at, v, o) =
                (&p[r * s_stride..], &values[c..], &mut acc[r * o_stride + c..]);
            if full {
                pv_panel::<A, MR, FMA>(p_at, s_stride, n_k, v, o_stride, o, o_stride);
            } else {
                pv_panel::<A, 2, FMA>(p_at, s_stride, n_k, v, o_stride, o, o_stride);
            }
        }
    }
}
// ANCHOR_END: tile_loops

/// Runs `body` for `r = 0, 1, …, MR − 1` (`MR` at most 8), written out one copy after
/// another instead of as a loop, so that each row's sums are separate values that the
/// compiler keeps in registers (a loop over more than 4 rows of 16 it would not unroll).
// ANCHOR: scores_panel
macro_rules! each_row {
    ($mr:expr, |$r:ident| $body:expr) => {
        const { assert!($mr <= 8, "at most 8 rows per micro-kernel") };
        each_row!(@ $mr, $r, $body, 0 1 2 3 4 5 6 7)
    };
    (@ $mr:expr, $r:ident, $body:expr, $($i:literal)*) => {
        $(if $i < $mr {
            let $r: usize = $i;
            $body;
        })*
    };
}
// ANCHOR_END: scores_panel

/// Scores of `MR` queries against one panel of [`NR`] packed keys:
/// `s[r][c] = Σ_dim q[r][dim] · kt[dim][c]`, written to `s` (rows `s_stride` apart).
///
/// `q` holds `MR` rows of `d_k` entries; `kt` one panel, `d_k × NR`. The `MR × NR` sums stay
/// in registers for the whole loop over `d_k`: per dimension, `NR` key entries are loaded
/// once and used by all `MR` queries.
///
/// ```
/// use attention::kernel::scores_panel;
///
/// let q = [1.0_f32, 2.0, 3.0, 4.0]; // two queries of d_k = 2
/// let mut kt = [0.0_f32; 32];
/// kt[0] = 1.0; // key 0 = (1, 0)
/// kt[16 + 1] = 1.0; // key 1 = (0, 1)
/// let mut s = [0.0_f32; 32];
/// scores_panel::<f32, 2, false>(&q, &kt, 2, &mut s, 16);
/// assert_eq!((s[0], s[1], s[16], s[17]), (1.0, 2.0, 3.0, 4.0));
/// ```
#[inline(always)]
// ANCHOR: scores_panel
pub fn scores_panel<A: Float, const MR: usize, const FMA: bool>(
    q: &[A],
    kt: &[A],
    d_k: usize,
    s: &mut [A],
    s_stride: usize,
) {
    let fits = |len: usize, needed: Option<usize>| needed.is_some_and(|n| n <= len);
    assert!(
        fits(q.len(), MR.checked_mul(d_k)) && fits(kt.len(), d_k.checked_mul(NR)),
        "scores_panel: q needs {MR} rows of d_k = {d_k} and kt {NR} keys of d_k"
    );
    let mut acc = [[A::zero(); NR]; MR];
    for (dim, keys) in kt[..d_k * NR].chunks_exact(NR).enumerate() {
        each_row!(MR, |r| {
            // SAFETY: r < MR and dim < d_k, so r·d_k + dim < MR·d_k ≤ q.len() (asserted).
            let x = unsafe { *q.get_unchecked(r * d_k + dim) }; // used for NR keys
            for (a, &key) in acc[r].iter_mut().zip(keys) {
                *a = madd::<A, FMA>(x, key, *a);
            }
        });
    }
    each_row!(MR, |r| s[r * s_stride..][..NR].copy_from_slice(&acc[r]));
}
// ANCHOR_END: scores_panel

/// Adds `P · V` for `MR` rows of weights and one strip of [`NR`] value columns:
/// `out[r][c] += Σ_j p[r][j] · v[j][c]` over `n_keys` keys.
///
/// `p` holds `MR` rows `p_stride` apart, `v` rows `v_stride` apart (starting at the strip's
/// first column), `out` rows `out_stride` apart: all read and written in place.
///
/// ```
/// use attention::kernel::pv_panel;
///
/// let p = [0.25_f64, 0.75]; // one query's weights for 2 keys
/// let mut v = [0.0_f64; 32];
/// v[0] = 4.0; // value 0, column 0
/// v[16] = 8.0; // value 1, column 0
/// let mut out = [1.0_f64; 16];
/// pv_panel::<f64, 1, false>(&p, 2, 2, &v, 16, &mut out, 16);
/// assert_eq!(out[0], 1.0 + 0.25 * 4.0 + 0.75 * 8.0);
/// assert_eq!(out[1], 1.0);
/// ```
#[inline(always)]
// ANCHOR: pv_panel
pub fn pv_panel<A: Float, const MR: usize, const FMA: bool>(
    p: &[A],
    p_stride: usize,
    n_keys: usize,
    v: &[A],
    v_stride: usize,
    out: &mut [A],
    out_stride: usize,
) {
    if n_keys == 0 {
        return;
    }
    // One past the last index read in p and in v (None if that overflows).
    let p_end = (MR - 1).checked_mul(p_stride).and_then(|n| n.checked_add(n_keys));
    let v_end = (n_keys - 1).checked_mul(v_stride).and_then(|n| n.checked_add(NR));
    let fits = |len: usize, end: Option<usize>| end.is_some_and(|n| n <= len);
    assert!(
        fits(p.len(), p_end) && fits(v.len(), v_end) && v_stride >= NR,
        "pv_panel: p needs {MR} rows of {n_keys} weights and v {n_keys} rows of {NR} values"
    );
    let mut acc = [[A::zero(); NR]; MR];
    each_row!(MR, |r| acc[r].copy_from_slice(&out[r * out_stride..][..NR]));
    for j in 0..n_keys {
        // SAFETY: j < n_keys, so j·v_stride + NR ≤ (n_keys − 1)·v_stride + NR ≤ v.len().
        let values = unsafe { v.get_unchecked(j * v_stride..j * v_stride + NR) };
        each_row!(MR, |r| {
            // SAFETY: r·p_stride + j < (MR − 1)·p_stride + n_keys ≤ p.len() (asserted).
            let x = unsafe { *p.get_unchecked(r * p_stride + j) }; // used for NR columns
            for (a, &value) in acc[r].iter_mut().zip(values) {
                *a = madd::<A, FMA>(x, value, *a);
            }
        });
    }
    each_row!(MR, |r| out[r * out_stride..][..NR].copy_from_slice(&acc[r]));
}
// ANCHOR_END: pv_panel

/// The largest entry of `row`, ignoring NaN (as [`softmax_row`](crate::softmax::softmax_row)
/// does); −∞ for an empty row. Written with 16 independent lanes so that it vectorises.
///
/// ```
/// use attention::kernel::row_max;
///
/// assert_eq!(row_max(&[1.0_f32, f32::NAN, 3.0, f32::NEG_INFINITY]), 3.0);
/// assert_eq!(row_max::<f64>(&[]), f64::NEG_INFINITY);
/// ```
// ANCHOR: fast_exp
#[inline(always)]
pub fn row_max<A: Float>(row: &[A]) -> A {
    let bigger = |m: A, x: A| if x > m { x } else { m };
    let mut lanes = [A::neg_infinity(); NR];
    let mut chunks = row.chunks_exact(NR);
    for chunk in &mut chunks {
        for (m, &x) in lanes.iter_mut().zip(chunk) {
            *m = bigger(*m, x);
        }
    }
    chunks.remainder().iter().chain(&lanes).fold(A::neg_infinity(), |m, &x| bigger(m, x))
}
// ANCHOR_END: fast_exp

/// Replaces every `s` of `row` by `exp(s − max)` (−∞ becomes 0, NaN stays NaN) and returns
/// their sum.
///
/// `f32` gets a fast `exp` that the compiler can vectorise ([`exp_f32`]); `f64` keeps the
/// standard library's, accurate to the last bit, so that it matches the plain path within
/// `1e-12`. `FMA` as in [`madd`].
///
/// ```
/// use attention::kernel::exp_in_place;
///
/// let mut row = [0.0_f32, -1.0, f32::NEG_INFINITY];
/// let sum = exp_in_place::<f32, false>(&mut row, 0.0);
/// assert_eq!(row[2], 0.0);
/// assert!((sum - (1.0 + (-1.0_f32).exp())).abs() < 1e-6);
/// ```
// ANCHOR: fast_exp
#[inline(always)]
pub fn exp_in_place<A: Float, const FMA: bool>(row: &mut [A], max: A) -> A {
    powers_in_place::<A, FMA, false>(row, max)
}
// ANCHOR_END: fast_exp

/// Replaces every `s` of `row` by `2^(s − max)` (−∞ becomes 0, NaN stays NaN) and returns
/// their sum: [`exp_in_place`] for scores already multiplied by `log₂e`, as the tiled
/// forward pass computes them, which saves a multiplication per score. [`exp2_f32`] for
/// `f32`, the standard library's `exp2` for `f64`.
///
/// ```
/// use attention::kernel::exp2_in_place;
///
/// let mut row = [0.0_f32, -1.0, f32::NEG_INFINITY];
/// assert_eq!(exp2_in_place::<f32, true>(&mut row, 1.0), 0.5 + 0.25 + 0.0);
/// assert_eq!(row, [0.5, 0.25, 0.0]);
/// let mut row = [0.0_f64, -1.5];
/// assert_eq!(exp2_in_place::<f64, false>(&mut row, 0.0), 1.0 + (-1.5_f64).exp2());
/// ```
// ANCHOR: fast_exp
#[inline(always)]
pub fn exp2_in_place<A: Float, const FMA: bool>(row: &mut [A], max: A) -> A {
    powers_in_place::<A, FMA, true>(row, max)
}

/// `e^(s − max)`, or `2^(s − max)` with `BASE2`, in place, and their sum.
#[inline(always)]
fn powers_in_place<A: Float, const FMA: bool, const BASE2: bool>(row: &mut [A], max: A) -> A {
    if let Some(row) = as_f32(row) {
        let sum = powers_in_place_f32::<FMA, BASE2>(row, max.to_f32().expect("A is f32"));
        return A::from_f32(sum).expect("A is f32");
    }
    let mut sum = A::zero();
    for s in row.iter_mut() {
        *s = if BASE2 { (*s - max).exp2() } else { (*s - max).exp() };
        sum = sum + *s;
    }
    sum
}

/// The loop for `f32`, written so that it vectorises: 16 independent partial sums.
#[inline(always)]
fn powers_in_place_f32<const FMA: bool, const BASE2: bool>(row: &mut [f32], max: f32) -> f32 {
    let power = |s: f32| {
        let x = s - max; // s − max first: as exact for any max
        if BASE2 { exp2_f32::<FMA>(x) } else { exp_f32::<FMA>(x) }
    };
    let mut partial = [0.0_f32; NR];
    let mut chunks = row.chunks_exact_mut(NR);
    for chunk in &mut chunks {
        for (s, acc) in chunk.iter_mut().zip(partial.iter_mut()) {
            *s = power(*s);
            *acc += *s;
        }
    }
    let mut sum = pairwise_sum(partial);
    for s in chunks.into_remainder() {
        *s = power(*s);
        sum += *s;
    }
    sum
}

/// The sum of 16 lanes as a tree (8 + 8, 4 + 4, ...): four vector additions instead of a
/// chain of fifteen.
#[inline(always)]
fn pairwise_sum(mut lanes: [f32; NR]) -> f32 {
    let mut width = NR;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            lanes[i] += lanes[i + width];
        }
    }
    lanes[0]
}
// ANCHOR_END: fast_exp

/// Whether `A` is `f32` (the builds pick their rows per micro-kernel, and the exponential its
/// loop, by it).
// ANCHOR: fast_exp
#[inline(always)]
pub(crate) fn is_f32<A: 'static>() -> bool {
    std::any::TypeId::of::<A>() == std::any::TypeId::of::<f32>()
}
// ANCHOR_END: fast_exp

/// `2^x` for one `x ≤ 0`: [`exp2_f32`] for `f32`, the standard library's for `f64`.
///
/// ```
/// use attention::kernel::exp2_one;
///
/// assert_eq!(exp2_one::<f64, false>(-1.5), (-1.5_f64).exp2());
/// assert!((exp2_one::<f32, true>(-0.5) - 0.5_f32.sqrt()).abs() < 1e-7);
/// assert_eq!(exp2_one::<f32, false>(f32::NEG_INFINITY), 0.0);
/// ```
// ANCHOR: fast_exp
#[inline(always)]
pub fn exp2_one<A: Float, const FMA: bool>(x: A) -> A {
    let mut one = [x];
    exp2_in_place::<A, FMA>(&mut one, A::zero());
    one[0]
}
// ANCHOR_END: fast_exp

/// [`exp_in_place`] in the build `simd` names, for a caller outside the compiled loops
/// (the tiled backward pass).
///
/// ```
/// use attention::kernel::{Simd, exp_in_place_on};
///
/// let mut row = [0.0_f32; 20];
/// assert_eq!(exp_in_place_on(Simd::best(), &mut row, 0.0), 20.0);
/// ```
// ANCHOR: exp_dispatch
pub fn exp_in_place_on<A: Float>(simd: Simd, row: &mut [A], max: A) -> A {
    match simd {
        // SAFETY: the caller's `simd` comes from `Simd::chosen`, which only picks a build the
        // processor supports; checked again here, as this function is public.
        #[cfg(target_arch = "x86_64")]
        Simd::Avx512 if simd.is_supported() => unsafe { exp_in_place_avx512(row, max) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 if simd.is_supported() => unsafe { exp_in_place_avx2(row, max) },
        _ => exp_in_place::<A, false>(row, max),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn exp_in_place_avx512<A: Float>(row: &mut [A], max: A) -> A {
    exp_in_place::<A, true>(row, max)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn exp_in_place_avx2<A: Float>(row: &mut [A], max: A) -> A {
    exp_in_place::<A, true>(row, max)
}
// ANCHOR_END: exp_dispatch

/// `row` as `f32`s if `A` is `f32`.
// ANCHOR: fast_exp
#[inline(always)]
fn as_f32<A: Float>(row: &mut [A]) -> Option<&mut [f32]> {
    is_f32::<A>()
        // SAFETY: A is f32 (same TypeId), so the slice has f32's layout.
        .then(|| unsafe { &mut *(row as *mut [A] as *mut [f32]) })
}
// ANCHOR_END: fast_exp

/// `exp(x)` for `x ≤ 0` in `f32`: [`exp2_f32`] of `x·log₂e`.
///
/// Within `3e-7 + 1.2e-7·|x|` of the exact value, relatively, for results above `2^-126`
/// (`x > −87.34`); the second term comes from rounding `x·log₂e` to `f32` (`1.5e-6` at
/// `x = −10`, where the result is already below `5e-5`). Below, results are within that much
/// of `2^-126` or 0, and 0 below `2^-127.5` (`x < −88.4`), as is `exp(−∞)`; `exp(NaN)` is NaN.
///
/// ```
/// use attention::kernel::exp_f32;
///
/// assert_eq!(exp_f32::<false>(0.0), 1.0);
/// assert!((exp_f32::<true>(-1.0) - (-1.0_f32).exp()).abs() < 1e-7);
/// assert_eq!(exp_f32::<false>(-100.0), 0.0);
/// assert!(exp_f32::<false>(f32::NAN).is_nan());
/// ```
// ANCHOR: fast_exp
#[inline(always)]
pub fn exp_f32<const FMA: bool>(x: f32) -> f32 {
    exp2_f32::<FMA>(x * std::f32::consts::LOG2_E)
}
// ANCHOR_END: fast_exp

/// `2^t` for `t ≤ 0` in `f32`, branch-free so that loops over it vectorise: `t = n + f` with
/// `n` the integer nearest `t` and `|f| ≤ ½`; `2^n` is built in the exponent bits and `2^f`
/// is a polynomial of degree 5 (relative error about `1.1e-7` at most; with the rounding of
/// its arithmetic, within `2.5e-7` of `2^t` for results above `2^-126`). Results below
/// `2^-127.5`, and `2^−∞`, are 0 (`t` is first raised to −127, where `2^n` has all exponent
/// bits 0); NaN stays NaN.
///
/// ```
/// use attention::kernel::exp2_f32;
///
/// assert_eq!(exp2_f32::<true>(-3.0), 0.125);
/// assert!((exp2_f32::<false>(-0.5) - 0.5_f32.sqrt()).abs() < 1e-7);
/// assert_eq!(exp2_f32::<true>(f32::NEG_INFINITY), 0.0);
/// ```
// ANCHOR: fast_exp
#[inline(always)]
pub fn exp2_f32<const FMA: bool>(t: f32) -> f32 {
    // 1.5·2^23: adding it rounds to an integer in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    // 2^f = exp(f·ln 2) ≈ 1 + c₁f + … + c₅f⁵ for |f| ≤ ½, fitted to keep the relative error
    // small (about 1.1e-7 at most).
    const C: [f32; 6] =
        [1.0, 0.693_146_94, 0.240_222_42, 0.055_507_336, 0.009_671_513, 0.001_326_472_6];
    // Below −127 the result is 0 (2^n with n = −127 has all exponent bits 0), and so is
    // 2^−∞; NaN fails the test and goes on, NaN to the end.
    let t = if t < -127.0 { -127.0 } else { t };
    let rounded = t + ROUND;
    // The integer nearest t (ties to even, as the addition rounds): one instruction where
    // the build has SSE4.1 (every FMA build), the addition undone elsewhere.
    let n = if FMA { t.round_ties_even() } else { rounded - ROUND };
    let f = t - n; // exact, |f| ≤ ½
    // n as a two's complement integer, then 2^n from its exponent bits.
    let n_bits = rounded.to_bits().wrapping_sub(ROUND.to_bits());
    let two_n = f32::from_bits(n_bits.wrapping_add(127) << 23);
    // Estrin: (c₀ + c₁f) + f²·((c₂ + c₃f) + f²·(c₄ + c₅f)), three short chains side by side
    // instead of Horner's one long chain of five multiply-adds.
    let f2 = f * f;
    let [c0, c1, c2, c3, c4, c5] = C;
    let (low, mid, high) = (
        madd::<f32, FMA>(c1, f, c0),
        madd::<f32, FMA>(c3, f, c2),
        madd::<f32, FMA>(c5, f, c4),
    );
    two_n * madd::<f32, FMA>(madd::<f32, FMA>(high, f2, mid), f2, low)
}
// ANCHOR_END: fast_exp

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_f32_is_close_to_the_standard_exp_over_its_whole_range() {
        // 0 down to −104 (past the cut at −126·ln 2 = −87.34, where exp_f32 gives 0), in
        // steps of 2.6e-4, then coarser down to −600.
        let fine = (0..=400_000).map(|i| -(i as f32) * 2.6e-4);
        let xs = fine.chain((0..=4_960).map(|i| -104.0 - i as f32 * 0.1));
        for x in xs {
            let std = x.exp();
            for fast in [exp_f32::<false>(x), exp_f32::<true>(x)] {
                // Within 3e-7 + 1.2e-7·|x| of it, relatively, down to 2^-126 (1.2e-38);
                // below, that much of 2^-126 or 0 (always 0 below 2^-127.5).
                let relative = 3e-7 + 1.2e-7 * x.abs();
                let near = (fast - std).abs() <= relative * std.max(f32::MIN_POSITIVE);
                let flushed = fast == 0.0 && std < f32::MIN_POSITIVE;
                assert!(near || flushed, "exp({x}) = {std}, fast {fast}");
                if x < -88.4 {
                    assert_eq!(fast, 0.0, "exp({x})");
                }
            }
        }
        assert_eq!(exp_f32::<false>(0.0), 1.0);
        assert_eq!(exp_f32::<true>(f32::NEG_INFINITY), 0.0);
        assert!(exp_f32::<true>(f32::NAN).is_nan());
    }

    #[test]
    fn exp2_f32_is_close_to_the_standard_exp2_over_its_whole_range() {
        // Every fraction on a grid of 2^-20 in [−1, 0] (the polynomial's error and the
        // rounding of its arithmetic depend on f alone), then 0 down to −126 (2^-126, the
        // smallest normal number) in steps of 1/64 for the exponent; t is exact in f32.
        let fine = (0..=1 << 20).map(|i| -(i as f32) / (1 << 20) as f32);
        let coarse = (0..=126 * 64).map(|i| -(i as f32) / 64.0);
        let mut worst = 0.0_f64;
        for t in fine.chain(coarse) {
            let exact = f64::from(t).exp2();
            for fast in [exp2_f32::<false>(t), exp2_f32::<true>(t)] {
                worst = worst.max((f64::from(fast) - exact).abs() / exact);
            }
        }
        assert!(worst < 2.5e-7, "worst relative error {worst:e}");
        assert!(worst > 5e-8, "the polynomial's error should show: {worst:e}");
        for t in [-127.5_f32, -128.0, -200.0, -1e30, f32::NEG_INFINITY] {
            assert_eq!(exp2_f32::<true>(t), 0.0, "2^{t}");
        }
        assert!(exp2_f32::<true>(f32::NAN).is_nan());
    }

    #[test]
    fn exp2_in_place_raises_2_to_each_difference() {
        // Scores from 2 down to −108 against a maximum of 2; t = s − 2 is what the loop
        // computes, so only exp2_f32's error is left.
        let row: Vec<f32> = (0..300).map(|i| -(i as f32) * 0.37 + 2.0).collect();
        for fma in [false, true] {
            let mut out = row.clone();
            let sum = if fma {
                exp2_in_place::<f32, true>(&mut out, 2.0)
            } else {
                exp2_in_place::<f32, false>(&mut out, 2.0)
            };
            let mut exact_sum = 0.0;
            for (&p, &s) in out.iter().zip(&row) {
                let exact = f64::from(s - 2.0).exp2();
                exact_sum += exact;
                assert!((f64::from(p) - exact).abs() <= 2.5e-7 * exact, "2^({s} − 2): {p}");
            }
            assert!((f64::from(sum) - exact_sum).abs() <= 1e-6 * exact_sum, "FMA: {fma}");
        }
        let mut row = [0.0_f32, f32::NAN, f32::NEG_INFINITY];
        assert!(exp2_in_place::<f32, true>(&mut row, 0.0).is_nan()); // NaN propagates
        assert_eq!(row[2], 0.0);
        let mut row64 = [1.0_f64, -0.5, f64::NEG_INFINITY];
        assert_eq!(exp2_in_place::<f64, false>(&mut row64, 1.0), 1.0 + (-1.5_f64).exp2());
        assert_eq!(row64, [1.0, (-1.5_f64).exp2(), 0.0]);
    }

    #[test]
    fn exp_in_place_sums_what_it_writes() {
        let mut row = [0.0_f32, -1.0, f32::NEG_INFINITY, f32::NAN];
        let sum = exp_in_place::<f32, true>(&mut row[..3], 0.0);
        assert_eq!(row[2], 0.0);
        assert!((sum - (1.0 + (-1.0_f32).exp())).abs() < 1e-6);
        assert!(exp_in_place::<f32, false>(&mut row, 0.0).is_nan()); // NaN propagates
        let mut row64 = [1.0_f64, f64::NEG_INFINITY];
        assert_eq!(exp_in_place::<f64, false>(&mut row64, 1.0), 1.0);
        assert_eq!(row64, [1.0, 0.0]);
    }

    #[test]
    fn every_build_of_the_exp_loop_agrees() {
        // Scores from 2 down to −108 against a maximum of 2: exponents 0 to −110.
        let row: Vec<f32> = (0..300).map(|i| -(i as f32) * 0.37 + 2.0).collect();
        for simd in Simd::supported() {
            let mut out = row.clone();
            let sum = exp_in_place_on(simd, &mut out, 2.0);
            let mut exact_sum = 0.0;
            for (&p, &s) in out.iter().zip(&row) {
                let x = s - 2.0;
                let exact = f64::from(x).exp();
                exact_sum += exact;
                let bound = (3e-7 + 1.2e-7 * f64::from(x.abs())) * exact.max(1.2e-38);
                assert!((f64::from(p) - exact).abs() <= bound || p == 0.0 && exact < 1.2e-38);
            }
            assert!((f64::from(sum) - exact_sum).abs() <= 1e-6 * exact_sum, "{simd:?}");
        }
    }

    /// With ATTENTION_SIMD set (by `the_variable_picks_the_build`), `Simd::chosen` follows it;
    /// without, it is the widest build.
    #[test]
    fn chosen_follows_the_variable() {
        match std::env::var(SIMD_VAR) {
            Ok(name) => assert_eq!(Simd::chosen(), Simd::parse(&name)),
            Err(_) => assert_eq!(Simd::chosen(), Ok(Simd::best())),
        }
    }

    /// Runs `chosen_follows_the_variable` in a new process for each value of the variable
    /// (it is read once per process), a name no processor runs included.
    #[test]
    fn the_variable_picks_the_build() {
        let exe = std::env::current_exe().expect("the test binary");
        for name in ["portable", "avx2", "neon"] {
            let child = std::process::Command::new(&exe)
                .env(SIMD_VAR, name)
                .args(["--exact", "fast::kernel::tests::chosen_follows_the_variable"])
                .output()
                .expect("the test binary runs");
            let out = String::from_utf8_lossy(&child.stdout);
            assert!(
                child.status.success() && out.contains("1 passed"),
                "ATTENTION_SIMD={name}"
            );
        }
        assert!(Simd::parse("neon").is_err());
    }

    #[test]
    fn a_name_the_processor_cannot_run_is_an_error() {
        for simd in Simd::ALL {
            assert_eq!(Simd::parse(simd.name()).is_ok(), simd.is_supported());
        }
        let err = Simd::parse("neon").unwrap_err().to_string();
        assert_eq!(err, "ATTENTION_SIMD: \"neon\" is not one of avx512, avx2 or portable");
    }
}
