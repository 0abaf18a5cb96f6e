//! Chapter *Writing, token by token*: which positions a GPT is given, settled by experiment.
//!
//! Chapter 9 builds four ways of telling attention where each token is; chapter 15's model
//! uses GPT-2's, a trained vector per position. [`Positions`] lets the same model train
//! with any of them, or with none:
//!
//! - [`Positions::Learned`]: `wpe`, trained, added to the token's vector (GPT-2).
//! - [`Positions::None`] (NoPE): nothing; the causal mask alone breaks the symmetry.
//! - [`Positions::Sinusoidal`]: chapter 9's sinusoids in `wpe`, fixed, not trained.
//! - [`Positions::Rope`]: chapter 9's rotations of every head's queries and keys (the
//!   rotate-half layout), with an optional [`RopeScaling`] for reading past the training
//!   length without training again.
//! - [`Positions::Alibi`]: chapter 9's bias `−m_h·(i − j)` on head `h`'s scores.
//!
//! Without learned positions `wpe` is still there (zeros, or the sinusoids), so that every
//! model has the same tensors; it is simply not trained.
//!
//! Anchors (below the doc comments): `positions`, `rope_scaling`, `scaled_thetas`,
//! `rotate_qk`.

use ndarray::{Array2, s};

use super::config::GptConfig;
use super::weights::Gpt;
use crate::error::{AttentionError, Result};
use crate::float::Float;
use crate::position::{SinusoidLayout, sinusoidal};

/// How a GPT knows where each token is.
///
/// ```
/// use attention::gpt::positions::Positions;
///
/// assert_eq!(Positions::default(), Positions::Learned);
/// assert_eq!(Positions::rope().name(), "rope");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
// ANCHOR: positions
pub enum Positions {
    /// GPT-2's: a trained vector per position, added to the token's.
    #[default]
    Learned,
    /// No positions at all (NoPE).
    None,
    /// Chapter 9's sinusoids, added to the token's vector, not trained.
    Sinusoidal,
    /// Chapter 9's rotary embeddings on queries and keys, `θ_i = base^(−2i/d_head)`.
    Rope {
        /// 10 000 in RoFormer and Llama 2.
        base: f64,
        /// How the angles are stretched to read past the training length.
        scaling: RopeScaling,
    },
    /// Chapter 9's linear biases on the scores, one slope per head.
    Alibi,
}
// ANCHOR_END: positions

/// The sinusoids' amplitude in the position table: `0.02·√2`, so that their root mean square
/// (`amplitude/√2`) is `0.02`, the standard deviation the token table and learned positions
/// start with. At amplitude 1 (chapter 9's table as it is) positions would outweigh the
/// tokens 35 to 1 in every vector; Vaswani et al. keep the two alike by multiplying the
/// token vectors by `√d_model` instead.
///
/// ```
/// assert!((attention::gpt::positions::SINUSOID_SCALE - 0.028284271247461905).abs() < 1e-15);
/// ```
pub const SINUSOID_SCALE: f64 = 0.02 * std::f64::consts::SQRT_2;

/// How RoPE's angles are changed to read `factor` times past the training length `T`,
/// without training again (position interpolation and Llama 3's are made to be followed by
/// a little fine-tuning; chapter 16 measures them without it).
///
/// ```
/// use attention::gpt::positions::{scaled_thetas, RopeScaling};
///
/// let plain = scaled_thetas(8, 10_000.0, RopeScaling::None);
/// let linear = scaled_thetas(8, 10_000.0, RopeScaling::Linear { factor: 4.0 });
/// assert!(plain.iter().zip(&linear).all(|(p, l)| (l - p / 4.0).abs() < 1e-15));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
// ANCHOR: rope_scaling
pub enum RopeScaling {
    /// The angles as trained.
    #[default]
    None,
    /// Position interpolation (Chen et al. 2023; Hugging Face's `rope_type: "linear"`):
    /// every angle divided by `factor`, so that position `factor·T` turns as far as `T` did.
    Linear {
        /// How many times the training length to read.
        factor: f64,
    },
    /// NTK-aware scaling (bloc97, 2023): plain RoPE with the base multiplied by
    /// `factor^(d/(d−2))`, which divides the slowest angle by `factor` and leaves the
    /// fastest as it was. (Hugging Face's `rope_type: "dynamic"` grows the base with the
    /// text's length by another formula.)
    NtkAware {
        /// How many times the training length to read.
        factor: f64,
    },
    /// Llama 3's (Hugging Face's `rope_type: "llama3"`): the angles of pairs whose
    /// wavelength is longer than `T / low_freq_factor` divided by `factor`, those of pairs
    /// shorter than `T / high_freq_factor` kept, and a linear blend between (Llama 3.1: 8,
    /// 1, 4, `T` = 8192).
    Llama3 {
        /// How many times the training length to read.
        factor: f64,
        /// Pairs whose wavelength is above `T / low_freq_factor` turn `factor` times slower.
        low_freq_factor: f64,
        /// Pairs whose wavelength is below `T / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// `T`, the length the model was trained on.
        original: usize,
    },
}
// ANCHOR_END: rope_scaling

impl Positions {
    /// RoPE with base 10 000 and no scaling.
    ///
    /// ```
    /// use attention::gpt::positions::{Positions, RopeScaling};
    ///
    /// assert_eq!(Positions::rope(), Positions::Rope { base: 10_000.0, scaling: RopeScaling::None });
    /// ```
    pub fn rope() -> Self {
        Positions::Rope { base: 10_000.0, scaling: RopeScaling::None }
    }

    /// The five, in the order chapter 16 reports them.
    ///
    /// ```
    /// use attention::gpt::positions::Positions;
    ///
    /// let names: Vec<&str> = Positions::all().iter().map(|p| p.name()).collect();
    /// assert_eq!(names, ["none", "learned", "sinusoidal", "rope", "alibi"]);
    /// ```
    pub fn all() -> [Positions; 5] {
        [
            Positions::None,
            Positions::Learned,
            Positions::Sinusoidal,
            Positions::rope(),
            Positions::Alibi,
        ]
    }

    /// The name `config.json` and the tools use: `learned`, `none`, `sinusoidal`, `rope`,
    /// `alibi`.
    ///
    /// ```
    /// use attention::gpt::positions::Positions;
    ///
    /// assert_eq!(Positions::from_name("alibi").unwrap().name(), "alibi");
    /// assert!(Positions::from_name("xpos").is_err());
    /// ```
    pub fn name(&self) -> &'static str {
        match self {
            Positions::Learned => "learned",
            Positions::None => "none",
            Positions::Sinusoidal => "sinusoidal",
            Positions::Rope { .. } => "rope",
            Positions::Alibi => "alibi",
        }
    }

    /// The positions called `name` (RoPE with base 10 000, unscaled), or an error listing
    /// the names there are.
    ///
    /// ```
    /// use attention::gpt::positions::Positions;
    ///
    /// assert_eq!(Positions::from_name("rope").unwrap(), Positions::rope());
    /// ```
    pub fn from_name(name: &str) -> Result<Self> {
        Positions::all().into_iter().find(|p| p.name() == name).ok_or_else(|| {
            AttentionError::Invalid {
                what: "positions".into(),
                problem: format!(
                    "{name:?} is not one of learned, none, sinusoidal, rope, alibi"
                ),
            }
        })
    }

    /// Whether `wpe` is trained.
    ///
    /// ```
    /// use attention::gpt::positions::Positions;
    ///
    /// assert!(Positions::Learned.learned() && !Positions::Sinusoidal.learned());
    /// ```
    // ANCHOR: learned
    pub fn learned(&self) -> bool {
        matches!(self, Positions::Learned)
    }
    // ANCHOR_END: learned

    /// What `wpe` holds for `len` positions when it is not trained: chapter 9's sinusoids
    /// times [`SINUSOID_SCALE`], or zeros. `None` for learned positions, whose vectors only
    /// training gives.
    ///
    /// ```
    /// use attention::gpt::positions::Positions;
    ///
    /// use attention::gpt::positions::SINUSOID_SCALE;
    ///
    /// let table = Positions::Sinusoidal.fixed_table::<f64>(3, 4).unwrap().unwrap();
    /// let s = SINUSOID_SCALE;
    /// assert_eq!(table.row(0).to_vec(), [0.0, s, 0.0, s]); // sin 0, cos 0, …
    /// assert!(Positions::Learned.fixed_table::<f64>(3, 4).unwrap().is_none());
    /// ```
    // ANCHOR: fixed_table
    pub fn fixed_table<A: Float>(&self, len: usize, d: usize) -> Result<Option<Array2<A>>> {
        Ok(match self {
            Positions::Learned => None,
            Positions::Sinusoidal => {
                let table: Array2<f64> = sinusoidal(0, len, d, SinusoidLayout::Interleaved)?;
                Some(table.mapv(|v| A::from_f64_lossy(v * SINUSOID_SCALE)))
            }
            _ => Some(Array2::zeros((len, d))),
        })
    }
    // ANCHOR_END: fixed_table
}

/// RoPE's angle per pair of columns, `θ_i = base^(−2i/d_head)` for `i < d_head/2` (chapter
/// 9's), changed by `scaling`.
///
/// ```
/// use attention::gpt::positions::{scaled_thetas, RopeScaling};
///
/// let plain = scaled_thetas(32, 10_000.0, RopeScaling::None);
/// let ntk = scaled_thetas(32, 10_000.0, RopeScaling::NtkAware { factor: 4.0 });
/// assert_eq!(ntk[0], plain[0]); // the fastest pair is kept
/// assert!((ntk[15] - plain[15] / 4.0).abs() < 1e-15); // the slowest is divided by 4
/// let llama =
///     RopeScaling::Llama3 { factor: 4.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original: 64 };
/// let l3 = scaled_thetas(32, 10_000.0, llama);
/// assert_eq!(l3[0], plain[0]); // wavelength 2π < 64/4: kept
/// assert!((l3[15] - plain[15] / 4.0).abs() < 1e-15); // wavelength > 64: divided
/// ```
// ANCHOR: scaled_thetas
pub fn scaled_thetas(d_head: usize, base: f64, scaling: RopeScaling) -> Vec<f64> {
    let d = d_head as f64;
    let base = match scaling {
        RopeScaling::NtkAware { factor } => base * libm::pow(factor, d / (d - 2.0)),
        _ => base,
    };
    let thetas = (0..d_head / 2).map(|i| libm::pow(base, -2.0 * i as f64 / d));
    match scaling {
        RopeScaling::None | RopeScaling::NtkAware { .. } => thetas.collect(),
        RopeScaling::Linear { factor } => thetas.map(|t| t / factor).collect(),
        RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original } => thetas
            .map(|t| {
                let wavelength = 2.0 * std::f64::consts::PI / t;
                let trained = original as f64;
                if wavelength < trained / high_freq_factor {
                    t // fast: turns many times within the trained length; kept
                } else if wavelength > trained / low_freq_factor {
                    t / factor // slow: interpolated
                } else {
                    let smooth = (trained / wavelength - low_freq_factor)
                        / (high_freq_factor - low_freq_factor);
                    (1.0 - smooth) * t / factor + smooth * t
                }
            })
            .collect(),
    }
}
// ANCHOR_END: scaled_thetas

impl GptConfig {
    /// RoPE's angles for this model, or `None` without RoPE.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, positions::Positions};
    ///
    /// let c = GptConfig { positions: Positions::rope(), ..GptConfig::shakespeare(71) };
    /// assert_eq!(c.rope_thetas().unwrap().len(), 16); // d_head = 32: 16 pairs
    /// assert!(GptConfig::shakespeare(71).rope_thetas().is_none());
    /// ```
    // ANCHOR: rope_thetas
    pub fn rope_thetas(&self) -> Option<Vec<f64>> {
        match self.positions {
            Positions::Rope { base, scaling } => {
                Some(scaled_thetas(self.d_head(), base, scaling))
            }
            _ => None,
        }
    }
    // ANCHOR_END: rope_thetas

    /// ALiBi's slope per head (chapter 9's), or `None` without ALiBi.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, positions::Positions};
    ///
    /// let c = GptConfig { positions: Positions::Alibi, ..GptConfig::shakespeare(71) };
    /// assert_eq!(c.alibi_slopes().unwrap(), [0.25, 0.0625, 0.015625, 0.00390625]);
    /// ```
    // ANCHOR: alibi_slopes
    pub fn alibi_slopes(&self) -> Option<Vec<f64>> {
        match self.positions {
            Positions::Alibi => {
                Some(crate::alibi::alibi_slopes(self.n_head).expect("n_head ≥ 1 (validated)"))
            }
            _ => None,
        }
    }
    // ANCHOR_END: alibi_slopes
}

/// Rotates, in place, the queries and keys in `qkv: (B·T, 3d)` (row `b·T + i` the token at
/// position `start + i`), head by head, pair `(c, c + d_head/2)` of each head by the angle
/// `position · θ_c`; with `inverse`, by minus that angle, which undoes it (a rotation's
/// inverse is its transpose, so this also carries a gradient back through it). Values, the
/// last `d` columns, are not rotated (in the model's own calls; libm's `cos` and `sin`, so
/// the same bits on every machine). Panics unless `qkv` has `B·t` rows and `3·d` columns
/// with `d = 2·heads·thetas.len()`.
///
/// ```
/// use attention::gpt::positions::rotate_qk;
/// use ndarray::Array2;
///
/// let qkv = Array2::from_shape_fn((3, 12), |(i, j)| (i * 12 + j) as f64 / 10.0);
/// let mut turned = qkv.clone();
/// rotate_qk(&mut turned, 3, 0, 2, &[1.0], false); // d = 4, 2 heads of 2
/// assert_eq!(turned.row(0), qkv.row(0)); // position 0 is not rotated
/// assert_eq!(turned.slice(ndarray::s![.., 8..]), qkv.slice(ndarray::s![.., 8..])); // values
/// rotate_qk(&mut turned, 3, 0, 2, &[1.0], true);
/// assert!((turned - qkv).iter().all(|d| d.abs() < 1e-12));
/// ```
// ANCHOR: rotate_qk
pub fn rotate_qk<A: Float>(
    qkv: &mut Array2<A>,
    t: usize,
    start: usize,
    heads: usize,
    thetas: &[f64],
    inverse: bool,
) {
    let d = qkv.ncols() / 3;
    let half = thetas.len(); // d_head / 2
    assert!(
        t > 0 && qkv.nrows() % t == 0 && qkv.ncols() == 3 * d && 2 * heads * half == d,
        "rotate_qk: qkv {:?} is not (B·{t}, 3·{heads} heads·{} columns)",
        qkv.dim(),
        2 * half
    );
    let sign = if inverse { -1.0 } else { 1.0 };
    for (r, mut row) in qkv.rows_mut().into_iter().enumerate() {
        let position = (start + r % t) as f64;
        let angles = thetas.iter().map(|&theta| sign * position * theta);
        let (cos, sin): (Vec<A>, Vec<A>) = angles
            .map(|a| (A::from_f64_lossy(libm::cos(a)), A::from_f64_lossy(libm::sin(a))))
            .unzip();
        for head in 0..2 * heads {
            // heads 0 … heads−1 are queries, then the keys
            let mut x = row.slice_mut(s![head * 2 * half..(head + 1) * 2 * half]);
            for c in 0..half {
                let (a, b) = (x[c], x[c + half]);
                x[c] = a * cos[c] - b * sin[c];
                x[c + half] = a * sin[c] + b * cos[c];
            }
        }
    }
}
// ANCHOR_END: rotate_qk

impl<A: Float> Gpt<A> {
    /// The same model with room for `n` positions, to read texts longer (or shorter) than it
    /// was trained on: the fixed tables are computed for `n` positions (sinusoids, or zeros);
    /// RoPE and ALiBi need nothing more (RoPE's scaling, if any, is set in
    /// `config.positions`). Learned positions can only shrink: the model has no vector for a
    /// position it never saw, and the error says so.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, positions::Positions, weights::Gpt};
    ///
    /// let alibi = Gpt::<f32>::zeros(GptConfig { positions: Positions::Alibi, ..GptConfig::shakespeare(71) });
    /// assert_eq!(alibi.with_context(256).unwrap().wpe.dim(), (256, 128));
    /// let learned = Gpt::<f32>::zeros(GptConfig::shakespeare(71));
    /// assert_eq!(
    ///     learned.with_context(128).unwrap_err().to_string(),
    ///     "positions: learned positions stop at 64; there is no vector for position 64 onwards"
    /// );
    /// ```
    // ANCHOR: with_context
    pub fn with_context(&self, n: usize) -> Result<Gpt<A>> {
        let c = self.config;
        let config = GptConfig { block_size: n, ..c };
        config.validate()?;
        let wpe = match c.positions.fixed_table(n, c.n_embd)? {
            Some(table) => table,
            None if n <= c.block_size => self.wpe.slice(s![..n, ..]).to_owned(),
            None => {
                return Err(AttentionError::Invalid {
                    what: "positions".into(),
                    problem: format!(
                        "learned positions stop at {0}; there is no vector for position {0} \
                         onwards",
                        c.block_size
                    ),
                });
            }
        };
        Ok(Gpt { config, wpe, ..self.clone() })
    }
    // ANCHOR_END: with_context
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alibi::alibi_bias;
    use crate::gpt::kernels::{Exact, Fast, Kernels};
    use crate::rope::{Rope, RopeLayout};
    use ndarray::{Array3, Axis, array};
    use rand::{Rng, SeedableRng, rngs::StdRng};

    fn random(rows: usize, cols: usize, seed: u64) -> Array2<f64> {
        let mut rng = StdRng::seed_from_u64(seed);
        Array2::from_shape_simple_fn((rows, cols), || rng.random_range(-1.0..1.0))
    }

    fn small(positions: Positions) -> GptConfig {
        GptConfig {
            n_layer: 2,
            n_embd: 16,
            n_head: 2,
            block_size: 6,
            positions,
            ..GptConfig::shakespeare(7)
        }
    }

    #[test]
    fn rotate_qk_turns_each_head_as_chapter_9s_rope_does() {
        // B = 2 texts of t = 5 tokens, 2 heads of 4 columns: d = 8, qkv 24 columns
        let (t, heads, d_head, start) = (5, 2, 4, 3);
        let qkv = random(2 * t, 3 * heads * d_head, 1);
        let rope = Rope::new(d_head, 100.0, RopeLayout::RotateHalf).unwrap();
        let mut turned = qkv.clone();
        rotate_qk(&mut turned, t, start, heads, &rope.thetas(), false);
        for b in 0..2 {
            let rows = b * t..(b + 1) * t;
            for part in 0..2 * heads {
                // query heads, then key heads: chapter 9 turns row r as position start + r
                let cols = part * d_head..(part + 1) * d_head;
                let x = qkv.slice(s![rows.clone(), cols.clone()]);
                let expected = rope.apply(&x, start).unwrap();
                let got = turned.slice(s![rows.clone(), cols]);
                assert!((&got - &expected).iter().all(|d| d.abs() < 1e-12), "{b} {part}");
            }
        }
        let values = s![.., 2 * heads * d_head..];
        assert_eq!(turned.slice(values), qkv.slice(values)); // values are not turned
    }

    #[test]
    fn rotated_scores_depend_only_on_the_distance() {
        // the same query and key on every row: after the turns, row i · row j depends on i − j
        let (t, heads, d_head) = (6, 1, 4);
        let one = random(1, 3 * d_head, 2);
        let mut qkv = Array2::from_shape_fn((t, 3 * d_head), |(_, c)| one[[0, c]]);
        rotate_qk(
            &mut qkv,
            t,
            0,
            heads,
            &scaled_thetas(d_head, 10.0, RopeScaling::None),
            false,
        );
        let (q, k) = (qkv.slice(s![.., ..d_head]), qkv.slice(s![.., d_head..2 * d_head]));
        let scores = q.dot(&k.t());
        for i in 1..t {
            for j in 1..t {
                assert!((scores[[i, j]] - scores[[i - 1, j - 1]]).abs() < 1e-12, "{i} {j}");
            }
        }
        assert!((scores[[0, 0]] - scores[[0, 1]]).abs() > 1e-3); // but it does depend on it
    }

    #[test]
    fn alibi_attention_is_softmax_with_chapter_9s_bias() {
        let (t, heads, d_head) = (5, 4, 3);
        let qkv = random(t, 3 * heads * d_head, 3);
        let slopes = crate::alibi::alibi_slopes(heads).unwrap();
        let bias: Array3<f64> = alibi_bias(&slopes, t, t);
        let (_, weights) =
            Exact.causal_attention(&qkv.view(), 1, heads, Some(&slopes)).unwrap();
        let qkv32 = qkv.mapv(|v| v as f32);
        let (_, fast) = Fast.causal_attention(&qkv32.view(), 1, heads, Some(&slopes)).unwrap();
        for h in 0..heads {
            let q = qkv.slice(s![.., h * d_head..(h + 1) * d_head]);
            let off = heads * d_head + h * d_head;
            let k = qkv.slice(s![.., off..off + d_head]);
            for i in 0..t {
                let scores: Vec<f64> = (0..=i)
                    .map(|j| {
                        q.row(i).dot(&k.row(j)) / (d_head as f64).sqrt() + bias[[h, i, j]]
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::MIN, f64::max);
                let total: f64 = scores.iter().map(|s| (s - max).exp()).sum();
                for (j, s) in scores.iter().enumerate() {
                    let expected = (s - max).exp() / total;
                    assert!((weights[[0, h, i, j]] - expected).abs() < 1e-12, "{h} {i} {j}");
                    assert!((f64::from(fast[[0, h, i, j]]) - expected).abs() < 1e-5);
                }
            }
        }
    }

    #[test]
    fn every_kind_starts_from_the_same_weights_and_keeps_texts_apart() {
        let learned =
            Gpt::<f64>::init(small(Positions::Learned), &mut StdRng::seed_from_u64(4));
        let learned = learned.unwrap();
        let two = array![[1, 4, 0, 2, 6, 3], [5, 5, 1, 0, 2, 2]];
        for positions in Positions::all() {
            let gpt =
                Gpt::<f64>::init(small(positions), &mut StdRng::seed_from_u64(4)).unwrap();
            for ((name, a), (_, b)) in gpt.tensors().iter().zip(learned.tensors()) {
                if name != "transformer.wpe.weight" {
                    assert_eq!(a, &b, "{positions:?}: {name}");
                }
            }
            // a batch of two texts: each row as it would be alone
            let both = gpt.logits(&two.view()).unwrap();
            for b in 0..2 {
                let alone = gpt.logits(&two.slice(s![b..b + 1, ..])).unwrap();
                assert_eq!(both.index_axis(Axis(0), b), alone.index_axis(Axis(0), 0));
            }
            // room for more positions changes nothing about the first six
            match gpt.with_context(12) {
                Ok(longer) => {
                    assert_eq!(longer.wpe.slice(s![..6, ..]), gpt.wpe);
                    assert_eq!(longer.logits(&two.view()).unwrap(), both, "{positions:?}");
                }
                Err(_) => assert_eq!(positions, Positions::Learned),
            }
        }
    }
}
