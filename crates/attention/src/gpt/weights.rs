//! Chapter *A model that writes*: the weights of a GPT, their initialisation, and their names.
//!
//! Every tensor is stored the way the book multiplies: a linear map is `X · W + b` with
//! `W: (d_in, d_out)`, which is also how GPT-2's `Conv1D` stores its weights, so a checkpoint
//! in Hugging Face's GPT-2 layout holds these arrays unchanged, under the names
//! [`Gpt::tensors`] gives.
//!
//! Anchors (below the doc comments): `gpt_weights`, `gpt_init`.

use ndarray::{Array1, Array2, ArrayViewD, ArrayViewMutD};
use rand::Rng;
use rand_distr::{Distribution, Normal};

use super::config::{GptConfig, tensor_names};
use crate::error::Result;
use crate::float::Float;

/// A linear map `X · W + b`: `w: (d_in, d_out)`, `b: (d_out)`.
///
/// ```
/// use attention::gpt::{kernels::{Exact, Kernels}, weights::Dense};
/// use ndarray::array;
///
/// let dense = Dense { w: array![[1.0, 0.0, 2.0]], b: array![0.0, 1.0, 0.0] }; // (1, 3)
/// assert_eq!(Exact.dense(&array![[3.0]].view(), &dense), array![[3.0, 1.0, 6.0]]);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Dense<A> {
    /// `(d_in, d_out)`.
    pub w: Array2<A>,
    /// `(d_out)`.
    pub b: Array1<A>,
}

/// A layer norm's gain `γ` and shift `β`, both `(d_model)`.
///
/// ```
/// use attention::gpt::{ops::layer_norm, weights::Norm};
/// use ndarray::array;
///
/// let norm = Norm { gamma: array![2.0, 2.0], beta: array![1.0, 1.0] };
/// let y = layer_norm(&array![[0.0, 4.0]].view(), &norm, 1e-12).unwrap();
/// assert!((y[[0, 0]] + 1.0_f64).abs() < 1e-9 && (y[[0, 1]] - 3.0).abs() < 1e-9); // ±1 · 2 + 1
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Norm<A> {
    /// `γ`, the gain.
    pub gamma: Array1<A>,
    /// `β`, the shift.
    pub beta: Array1<A>,
}

/// One pre-LN decoder block: `x + attn(ln_1(x))`, then `x + mlp(ln_2(x))`.
///
/// ```
/// use attention::gpt::{config::GptConfig, weights::Gpt};
///
/// let gpt = Gpt::<f32>::zeros(GptConfig::shakespeare(65));
/// let block = &gpt.blocks[0];
/// assert_eq!((block.c_attn.w.dim(), block.mlp_proj.w.dim()), ((128, 384), (512, 128)));
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: gpt_weights
pub struct Block<A> {
    /// Before attention.
    pub ln_1: Norm<A>,
    /// (d, 3d): Q, K and V side by side.
    pub c_attn: Dense<A>,
    /// (d, d): the heads' merged output, projected.
    pub attn_proj: Dense<A>,
    /// Before the MLP.
    pub ln_2: Norm<A>,
    /// (d, 4d): up.
    pub c_fc: Dense<A>,
    /// (4d, d): down.
    pub mlp_proj: Dense<A>,
}

/// GPT-2's decoder: embeddings, blocks, a final layer norm; the LM head is `wteᵀ`.
///
/// ```
/// use attention::gpt::{config::GptConfig, weights::Gpt};
///
/// let gpt = Gpt::<f32>::zeros(GptConfig::shakespeare(71));
/// assert_eq!((gpt.wte.dim(), gpt.wpe.dim(), gpt.blocks.len()), ((71, 128), (64, 128), 4));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Gpt<A> {
    /// The sizes.
    pub config: GptConfig,
    /// (V, d): one row per token; also the LM head, transposed.
    pub wte: Array2<A>,
    /// (T, d): one row per position.
    pub wpe: Array2<A>,
    /// The decoder blocks, first to last.
    pub blocks: Vec<Block<A>>,
    /// The final layer norm, before the head.
    pub ln_f: Norm<A>,
}
// ANCHOR_END: gpt_weights

impl<A: Float> Gpt<A> {
    /// nanoGPT's initialisation, seeded by `rng`: every matrix `N(0, 0.02)` except the two
    /// maps that write into the residual stream (`attn_proj`, `mlp_proj`), which get
    /// `N(0, 0.02/√(2·n_layer))` so that the stream's variance does not grow with depth;
    /// shifts 0, gains 1. Draws go in the order of [`Gpt::tensors`].
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, weights::Gpt};
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let gpt = Gpt::<f32>::init(GptConfig::shakespeare(71), &mut StdRng::seed_from_u64(0)).unwrap();
    /// assert_eq!(gpt.wte.dim(), (71, 128));
    /// assert_eq!(gpt.blocks[3].c_fc.w.dim(), (128, 512));
    /// let n: usize = gpt.tensors().iter().map(|(_, t)| t.len()).sum();
    /// // every shift is there, at zero, though this configuration does not train them
    /// assert_eq!(n, gpt.config.parameter_count() + 4 * (9 + 2) * 128 + 128);
    /// ```
    // ANCHOR: gpt_init
    pub fn init<R: Rng + ?Sized>(config: GptConfig, rng: &mut R) -> Result<Self> {
        config.validate()?;
        let (v, t, d) = (config.vocab_size, config.block_size, config.n_embd);
        let std = 0.02;
        let residual_std = std / (2.0 * config.n_layer as f64).sqrt();
        let mut normal = |rows: usize, cols: usize, std: f64| {
            let dist = Normal::new(0.0, std).expect("a positive standard deviation");
            Array2::from_shape_simple_fn((rows, cols), || A::from_f64_lossy(dist.sample(rng)))
        };
        let dense = |w: Array2<A>| {
            let b = Array1::zeros(w.ncols());
            Dense { w, b }
        };
        let norm = || Norm { gamma: Array1::ones(d), beta: Array1::zeros(d) };
        let wte = normal(v, d, std);
        let mut wpe = normal(t, d, std); // drawn in any case: the other weights stay the same
        if let Some(table) = config.positions.fixed_table(t, d)? {
            wpe = table; // fixed sinusoids, or zeros
        }
        let mut blocks = Vec::with_capacity(config.n_layer);
        for _ in 0..config.n_layer {
            blocks.push(Block {
                ln_1: norm(),
                c_attn: dense(normal(d, 3 * d, std)),
                attn_proj: dense(normal(d, d, residual_std)),
                ln_2: norm(),
                c_fc: dense(normal(d, 4 * d, std)),
                mlp_proj: dense(normal(4 * d, d, residual_std)),
            });
        }
        Ok(Gpt { config, wte, wpe, blocks, ln_f: norm() })
    }
    // ANCHOR_END: gpt_init

    /// A model of the same shape with every number zero: the start of a gradient.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, weights::Gpt};
    ///
    /// let z = Gpt::<f64>::zeros(GptConfig::shakespeare(65));
    /// assert!(z.tensors().iter().all(|(_, t)| t.iter().all(|&x| x == 0.0)));
    /// ```
    // ANCHOR: gpt_zeros
    pub fn zeros(config: GptConfig) -> Self {
        let (v, t, d) = (config.vocab_size, config.block_size, config.n_embd);
        let dense =
            |i: usize, o: usize| Dense { w: Array2::zeros((i, o)), b: Array1::zeros(o) };
        let norm = || Norm { gamma: Array1::zeros(d), beta: Array1::zeros(d) };
        let blocks = (0..config.n_layer)
            .map(|_| Block {
                ln_1: norm(),
                c_attn: dense(d, 3 * d),
                attn_proj: dense(d, d),
                ln_2: norm(),
                c_fc: dense(d, 4 * d),
                mlp_proj: dense(4 * d, d),
            })
            .collect();
        Gpt {
            config,
            wte: Array2::zeros((v, d)),
            wpe: Array2::zeros((t, d)),
            blocks,
            ln_f: norm(),
        }
    }
    // ANCHOR_END: gpt_zeros

    /// Every tensor with its name in Hugging Face's GPT-2 layout (`transformer.wte.weight`,
    /// `transformer.h.0.attn.c_attn.weight`, …), in a fixed order: the tables, each block,
    /// the final layer norm. The LM head is not listed: it is `transformer.wte.weight`.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, weights::Gpt};
    ///
    /// let gpt = Gpt::<f32>::zeros(GptConfig::shakespeare(65));
    /// let names: Vec<String> = gpt.tensors().into_iter().map(|(n, _)| n).collect();
    /// assert_eq!(names.len(), 2 + 4 * 12 + 2);
    /// assert_eq!(names[2], "transformer.h.0.ln_1.weight");
    /// assert_eq!(names[4], "transformer.h.0.attn.c_attn.weight");
    /// assert_eq!(names[51], "transformer.ln_f.bias");
    /// ```
    // ANCHOR: gpt_tensors
    pub fn tensors(&self) -> Vec<(String, ArrayViewD<'_, A>)> {
        let mut out = vec![self.wte.view().into_dyn(), self.wpe.view().into_dyn()];
        for b in &self.blocks {
            out.extend([
                b.ln_1.gamma.view().into_dyn(),
                b.ln_1.beta.view().into_dyn(),
                b.c_attn.w.view().into_dyn(),
                b.c_attn.b.view().into_dyn(),
                b.attn_proj.w.view().into_dyn(),
                b.attn_proj.b.view().into_dyn(),
                b.ln_2.gamma.view().into_dyn(),
                b.ln_2.beta.view().into_dyn(),
                b.c_fc.w.view().into_dyn(),
                b.c_fc.b.view().into_dyn(),
                b.mlp_proj.w.view().into_dyn(),
                b.mlp_proj.b.view().into_dyn(),
            ]);
        }
        out.extend([self.ln_f.gamma.view().into_dyn(), self.ln_f.beta.view().into_dyn()]);
        tensor_names(self.blocks.len()).into_iter().zip(out).collect() // the blocks there are
    }
    // ANCHOR_END: gpt_tensors

    /// The tensors of [`Gpt::tensors`], mutable, in the same order and with the same names.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, weights::Gpt};
    ///
    /// let mut gpt = Gpt::<f32>::zeros(GptConfig::shakespeare(65));
    /// for (_, mut t) in gpt.tensors_mut() {
    ///     t.fill(1.0);
    /// }
    /// assert_eq!(gpt.blocks[0].mlp_proj.b[0], 1.0);
    /// ```
    // ANCHOR: gpt_tensors_mut
    pub fn tensors_mut(&mut self) -> Vec<(String, ArrayViewMutD<'_, A>)> {
        let names = tensor_names(self.blocks.len());
        let mut out = vec![self.wte.view_mut().into_dyn(), self.wpe.view_mut().into_dyn()];
        for b in &mut self.blocks {
            out.extend([
                b.ln_1.gamma.view_mut().into_dyn(),
                b.ln_1.beta.view_mut().into_dyn(),
                b.c_attn.w.view_mut().into_dyn(),
                b.c_attn.b.view_mut().into_dyn(),
                b.attn_proj.w.view_mut().into_dyn(),
                b.attn_proj.b.view_mut().into_dyn(),
                b.ln_2.gamma.view_mut().into_dyn(),
                b.ln_2.beta.view_mut().into_dyn(),
                b.c_fc.w.view_mut().into_dyn(),
                b.c_fc.b.view_mut().into_dyn(),
                b.mlp_proj.w.view_mut().into_dyn(),
                b.mlp_proj.b.view_mut().into_dyn(),
            ]);
        }
        out.extend([
            self.ln_f.gamma.view_mut().into_dyn(),
            self.ln_f.beta.view_mut().into_dyn(),
        ]);
        names.into_iter().zip(out).collect()
    }
    // ANCHOR_END: gpt_tensors_mut

    /// The same model with every number passed through `f`, the config unchanged: with
    /// `f64::from`, an `f32` model (as a checkpoint stores it) widened exactly to `f64`.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, weights::Gpt};
    ///
    /// let mut gpt = Gpt::<f32>::zeros(GptConfig::shakespeare(65));
    /// gpt.blocks[2].c_fc.b[5] = 0.1;
    /// let wide: Gpt<f64> = gpt.map_weights(f64::from);
    /// assert_eq!(wide.blocks[2].c_fc.b[5], 0.1f32 as f64);
    /// assert_eq!(wide.map_weights(|x| x as f32), gpt);
    /// ```
    pub fn map_weights<B: Float>(&self, f: impl Fn(A) -> B) -> Gpt<B> {
        let dense = |d: &Dense<A>| Dense { w: d.w.mapv(&f), b: d.b.mapv(&f) };
        let norm = |n: &Norm<A>| Norm { gamma: n.gamma.mapv(&f), beta: n.beta.mapv(&f) };
        Gpt {
            config: self.config,
            wte: self.wte.mapv(&f),
            wpe: self.wpe.mapv(&f),
            blocks: self
                .blocks
                .iter()
                .map(|b| Block {
                    ln_1: norm(&b.ln_1),
                    c_attn: dense(&b.c_attn),
                    attn_proj: dense(&b.attn_proj),
                    ln_2: norm(&b.ln_2),
                    c_fc: dense(&b.c_fc),
                    mlp_proj: dense(&b.mlp_proj),
                })
                .collect(),
            ln_f: norm(&self.ln_f),
        }
    }

    /// Whether the tensor called `name` is trained: every tensor with `bias`; without it,
    /// all but the shifts (names ending in `.bias`), which stay zero. The position table
    /// `wpe` only with learned positions.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, weights::Gpt};
    ///
    /// let gpt = Gpt::<f32>::zeros(GptConfig::shakespeare(65));
    /// assert!(gpt.is_trained("transformer.h.0.ln_1.weight"));
    /// assert!(!gpt.is_trained("transformer.h.0.ln_1.bias"));
    /// ```
    // ANCHOR: is_trained
    pub fn is_trained(&self, name: &str) -> bool {
        if name == "transformer.wpe.weight" {
            return self.config.positions.learned();
        }
        self.config.bias || !name.ends_with(".bias")
    }
    // ANCHOR_END: is_trained
}
