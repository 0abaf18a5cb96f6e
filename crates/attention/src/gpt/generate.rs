//! Chapter *Writing, token by token*: chapter 10's KV cache in a trained model.
//!
//! A GPT writes one token at a time, and chapter 15's [`sample`](super::sample::sample)
//! runs the whole context through the model again for every one of them. Every block's
//! attention is causal, so the keys and values of the tokens already seen never change: a
//! [`GptCache`] keeps them, one chapter 10 [`KvCache`] per block.
//!
//! - **Prefill** ([`Gpt::prefill_with`]): the prompt goes through one causal pass, and every
//!   block leaves its keys and values in its cache. The logits of its last row predict the
//!   first token written.
//! - **Decode** ([`Gpt::step_with`]): each new token alone goes through the model at the
//!   next position; in every block its query attends over the cache, its own key and value
//!   appended first. One row of work per block instead of the whole context.
//!
//! On the exact path the logits of every step have the same bits as the same row of one full
//! causal pass over the same tokens (the tests check it, and a bound of `1e-12` in `f64`); on
//! the fast path they differ by `f32` rounding (its products are summed in another order).
//!
//! The model knows `block_size` positions, so its cache holds `block_size` tokens. A
//! [`Writer`] writes on past that: when the text outgrows the model's window, it keeps the
//! last `block_size / 2` tokens, fills a fresh cache with them, and goes on. Chapter 15's
//! `sample` slides its window by one token every step instead, which costs a full pass
//! every step: a cache slid by one token would not give that pass, whatever the positions,
//! because every cached key above the first block was computed with the dropped token in
//! view (and learned positions have no vector past `block_size`).
//!
//! Anchors (below the doc comments): `gpt_cache`, `prefill_with`, `block_cached`,
//! `writer`, `writer_next`, `writer_advance`.

use ndarray::{Array1, Array2, ArrayView2, s};
use rand::Rng;

use super::kernels::Kernels;
use super::positions::rotate_qk;
use super::sample::Sampler;
use super::weights::{Block, Gpt};
use crate::decode::KvCache;
use crate::error::{AttentionError, Result};
use crate::float::Float;

/// The keys and values of every block of a [`Gpt`] for the tokens it has seen: one
/// [`KvCache`] per block, `(heads, tokens, d_head)` each, room for `block_size` tokens.
///
/// ```
/// use attention::gpt::{config::GptConfig, weights::Gpt};
///
/// let gpt = Gpt::<f32>::zeros(GptConfig::shakespeare(71));
/// let cache = gpt.new_cache().unwrap();
/// assert_eq!((cache.position(), cache.blocks().len()), (0, 4));
/// // 4 blocks · keys and values · 64 tokens · 128 numbers · 4 bytes
/// assert_eq!(cache.bytes(), 4 * 2 * 64 * 128 * 4);
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: gpt_cache
pub struct GptCache<A> {
    blocks: Vec<KvCache<A>>, // one per block, (n_head, block_size, d_head) keys and values
}
// ANCHOR_END: gpt_cache

impl<A: Float> GptCache<A> {
    /// The number of tokens cached, which is the position of the next token.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, kernels::Exact, weights::Gpt};
    ///
    /// let gpt = Gpt::<f64>::zeros(GptConfig { n_layer: 1, n_embd: 8, n_head: 2, ..GptConfig::shakespeare(5) });
    /// let mut cache = gpt.new_cache().unwrap();
    /// gpt.prefill_with(&Exact, &mut cache, &[1, 2, 3]).unwrap();
    /// assert_eq!(cache.position(), 3);
    /// ```
    pub fn position(&self) -> usize {
        self.blocks.first().map_or(0, KvCache::position)
    }

    /// Every block's cache, first block first.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, weights::Gpt};
    ///
    /// let gpt = Gpt::<f32>::zeros(GptConfig::shakespeare(71));
    /// assert_eq!(gpt.new_cache().unwrap().blocks()[0].keys().dim(), (4, 0, 32));
    /// ```
    pub fn blocks(&self) -> &[KvCache<A>] {
        &self.blocks
    }

    /// The memory the keys and values take, in bytes, whether filled or not.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, weights::Gpt};
    ///
    /// let gpt = Gpt::<f64>::zeros(GptConfig::shakespeare(71));
    /// assert_eq!(gpt.new_cache().unwrap().bytes(), 4 * 2 * 64 * 128 * 8);
    /// ```
    pub fn bytes(&self) -> usize {
        self.blocks.iter().map(KvCache::bytes).sum()
    }
}

impl<A: Float> Gpt<A> {
    /// An empty cache for this model: one [`KvCache`] per block, `n_head` heads of `d_head`,
    /// room for `block_size` tokens.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, weights::Gpt};
    ///
    /// let gpt = Gpt::<f32>::zeros(GptConfig::shakespeare(71));
    /// assert_eq!(gpt.new_cache().unwrap().blocks()[3].slots(), 64);
    /// ```
    pub fn new_cache(&self) -> Result<GptCache<A>> {
        self.cache_with_room(self.config.block_size)
    }

    /// An empty cache with room for `slots` tokens (at most `block_size`): a full pass that
    /// throws its cache away needs no more room than its text.
    // ANCHOR: cache_with_room
    fn cache_with_room(&self, slots: usize) -> Result<GptCache<A>> {
        let c = &self.config;
        let blocks = (0..c.n_layer)
            .map(|_| KvCache::new(c.n_head, c.d_head(), slots.min(c.block_size)))
            .collect::<Result<_>>()?;
        Ok(GptCache { blocks })
    }
    // ANCHOR_END: cache_with_room

    /// Runs `tokens`, the next tokens of a text whose earlier tokens `cache` holds, through
    /// the model at positions `cache.position()` onwards, and appends their keys and values
    /// to the cache. Returns the logits `(tokens.len(), V)`: row `i` predicts the token after
    /// `tokens[i]`. On an empty cache this is the prefill of a prompt; with one token, a
    /// decoding step ([`Gpt::step_with`]).
    ///
    /// An error, with the cache left as it was, names a token outside the vocabulary, a
    /// cache without room for all the tokens (the model knows `block_size` positions), or a
    /// cache made for a model of other sizes.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, kernels::Exact, weights::Gpt};
    /// use ndarray::{array, s};
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let config = GptConfig { n_layer: 2, n_embd: 8, n_head: 2, block_size: 6, ..GptConfig::shakespeare(5) };
    /// let gpt = Gpt::<f64>::init(config, &mut StdRng::seed_from_u64(0)).unwrap();
    /// let full = gpt.logits(&array![[1, 4, 0, 2, 3]].view()).unwrap(); // (1, 5, V)
    ///
    /// let mut cache = gpt.new_cache().unwrap();
    /// let prompt = gpt.prefill_with(&Exact, &mut cache, &[1, 4, 0]).unwrap();
    /// assert_eq!(prompt, full.slice(s![0, ..3, ..])); // bit for bit
    /// let next = gpt.step_with(&Exact, &mut cache, 2).unwrap();
    /// assert_eq!(next, full.slice(s![0, 3, ..]));
    ///
    /// assert!(gpt.prefill_with(&Exact, &mut cache, &[0, 0, 0]).is_err()); // room for 2
    /// assert_eq!(cache.position(), 4); // unchanged by the error
    /// ```
    // ANCHOR: prefill_with
    pub fn prefill_with<K: Kernels<A>>(
        &self,
        k: &K,
        cache: &mut GptCache<A>,
        tokens: &[usize],
    ) -> Result<Array2<A>> {
        self.check_cache(cache, tokens)?;
        let start = cache.position(); // the first token's position
        let mut x = Array2::zeros((tokens.len(), self.config.n_embd));
        for (i, (mut row, &token)) in x.rows_mut().into_iter().zip(tokens).enumerate() {
            row.assign(&self.wte.row(token));
            row.zip_mut_with(&self.wpe.row(start + i), |x, &p| *x = *x + p);
        }
        for (block, kv) in self.blocks.iter().zip(&mut cache.blocks) {
            x = self.block_cached(k, block, x, kv)?;
        }
        let h = k.norm(&x.view(), &self.ln_f, self.config.layer_norm_epsilon)?;
        Ok(k.matmul(&h.view(), &self.wte.t())) // the tied head
    }
    // ANCHOR_END: prefill_with

    /// One decoding step: the logits `(V,)` after `token`, the token at position
    /// `cache.position()`, whose keys and values join the cache. [`Gpt::prefill_with`]
    /// with one token.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, kernels::Exact, weights::Gpt};
    /// use ndarray::array;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let config = GptConfig { n_layer: 1, n_embd: 8, n_head: 2, block_size: 4, ..GptConfig::shakespeare(5) };
    /// let gpt = Gpt::<f64>::init(config, &mut StdRng::seed_from_u64(0)).unwrap();
    /// let mut cache = gpt.new_cache().unwrap();
    /// let steps: Vec<_> = [3, 1, 4].iter().map(|&t| gpt.step_with(&Exact, &mut cache, t).unwrap()).collect();
    /// let full = gpt.logits(&array![[3, 1, 4]].view()).unwrap();
    /// assert_eq!(steps[2], full.slice(ndarray::s![0, 2, ..]));
    /// ```
    // ANCHOR: step_with
    pub fn step_with<K: Kernels<A>>(
        &self,
        k: &K,
        cache: &mut GptCache<A>,
        token: usize,
    ) -> Result<Array1<A>> {
        let logits = self.prefill_with(k, cache, &[token])?;
        Ok(logits.row(0).to_owned())
    }
    // ANCHOR_END: step_with

    /// One block for the new tokens `x: (n, d)`: chapter 15's block, except that attention
    /// reads every key and value from the cache, the new tokens' appended first.
    // ANCHOR: block_cached
    fn block_cached<K: Kernels<A>>(
        &self,
        k: &K,
        block: &Block<A>,
        x: Array2<A>,
        cache: &mut KvCache<A>,
    ) -> Result<Array2<A>> {
        let (d, eps) = (self.config.n_embd, self.config.layer_norm_epsilon);
        let (heads, d_head) = (self.config.n_head, self.config.d_head());
        let h1 = k.norm(&x.view(), &block.ln_1, eps)?;
        let mut qkv = k.dense(&h1.view(), &block.c_attn); // (n, 3d): Q, K, V side by side
        if let Some(thetas) = self.config.rope_thetas() {
            let n = qkv.nrows(); // the new tokens, at positions cache.position() onwards
            rotate_qk(&mut qkv, n, cache.position(), heads, &thetas, false);
        }
        for row in qkv.rows() {
            let heads_of = |part: usize| {
                let cols = row.slice(s![part * d..(part + 1) * d]);
                cols.to_shape((heads, d_head)).expect("d = heads · d_head").to_owned()
            };
            cache.append(&heads_of(1), &heads_of(2))?; // its key and value, (heads, d_head)
        }
        let q = qkv.slice(s![.., ..d]);
        let alibi = self.config.alibi_slopes();
        let y = k.cached_attention(&q, &cache.keys(), &cache.values(), alibi.as_deref())?;
        let x1 = &x + &k.dense(&y.view(), &block.attn_proj);
        let h2 = k.norm(&x1.view(), &block.ln_2, eps)?;
        let g = k.gelu(&k.dense(&h2.view(), &block.c_fc).view());
        Ok(&x1 + &k.dense(&g.view(), &block.mlp_proj))
    }
    // ANCHOR_END: block_cached

    /// Checks, before anything is appended, that `tokens` can go into `cache`.
    // ANCHOR: check_cache
    fn check_cache(&self, cache: &GptCache<A>, tokens: &[usize]) -> Result<()> {
        let c = &self.config;
        c.validate()?;
        let position = cache.position();
        let fits = cache.blocks.len() == c.n_layer
            && cache.blocks.iter().all(|kv| {
                let (heads, _, d_head) = kv.keys().dim();
                (heads, d_head, kv.window(), kv.position())
                    == (c.n_head, c.d_head(), None, position)
                    && kv.slots() <= c.block_size
            });
        if !fits {
            return Err(AttentionError::Invalid {
                what: "cache".into(),
                problem: format!(
                    "it was made for another model (this one has {} blocks of {} heads of {}, \
                     {} positions)",
                    c.n_layer,
                    c.n_head,
                    c.d_head(),
                    c.block_size
                ),
            });
        }
        let ids = ArrayView2::from_shape((1, tokens.len()), tokens).expect("one row");
        if tokens.is_empty() {
            return Err(AttentionError::Empty { what: "tokens".into(), dim: "n" });
        }
        self.check_tokens(&ids)?; // in the vocabulary
        match cache.blocks.first() {
            Some(kv) => kv.check_room(tokens.len()),
            None => Ok(()),
        }
    }
    // ANCHOR_END: check_cache
}

/// A text being written: the prompt and every token drawn so far, and the model's prediction
/// for the next token, kept up to date through a [`GptCache`] (or, for comparison, by a full
/// pass over the context at every step).
///
/// The model sees the last tokens of the text, at most `block_size` of them, starting at
/// position 0. When a new token would not fit, the writer keeps the last `block_size / 2`
/// tokens and starts again from them (with the cache, one prefill); so both ways see the
/// same tokens at the same positions, and on the exact path write the same text.
///
/// ```
/// use attention::gpt::{config::GptConfig, generate::Writer, kernels::Exact, sample::Sampler, weights::Gpt};
/// use rand::{rngs::StdRng, SeedableRng};
///
/// let config = GptConfig { n_layer: 1, n_embd: 8, n_head: 2, block_size: 4, ..GptConfig::shakespeare(5) };
/// let gpt = Gpt::<f64>::init(config, &mut StdRng::seed_from_u64(0)).unwrap();
/// let write = |cache: bool| {
///     let mut writer = Writer::new(&gpt, &Exact, &[0, 1], cache).unwrap();
///     let mut rng = StdRng::seed_from_u64(7);
///     (0..10).map(|_| writer.next(&Sampler::default(), &mut rng).unwrap()).collect::<Vec<_>>()
/// };
/// assert_eq!(write(true), write(false)); // through the cache or not: the same text
/// ```
#[derive(Debug, Clone)]
// ANCHOR: writer
pub struct Writer<'a, A, K> {
    gpt: &'a Gpt<A>,
    kernels: &'a K,
    cache: Option<GptCache<A>>, // None: a full pass over the window at every step
    text: Vec<usize>,           // the prompt, then every token written
    start: usize,               // the model sees text[start..], at positions 0, 1, …
    logits: Option<Array1<A>>,  // the prediction after the whole text, once computed
}
// ANCHOR_END: writer

impl<'a, A: Float, K: Kernels<A>> Writer<'a, A, K> {
    /// A writer after `prompt` (at least one token; of a longer prompt than `block_size`,
    /// the model sees the last `block_size` tokens), through a cache if `cache`. Runs the
    /// prefill (or the first full pass).
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, generate::Writer, kernels::Exact, weights::Gpt};
    ///
    /// let gpt = Gpt::<f32>::zeros(GptConfig { n_layer: 1, n_embd: 8, n_head: 2, ..GptConfig::shakespeare(5) });
    /// assert!(Writer::new(&gpt, &Exact, &[], true).is_err());
    /// assert_eq!(
    ///     Writer::new(&gpt, &Exact, &[0, 9], true).unwrap_err().to_string(),
    ///     "tokens: token 9 at (0, 1) is outside the vocabulary of 5"
    /// );
    /// ```
    pub fn new(
        gpt: &'a Gpt<A>,
        kernels: &'a K,
        prompt: &[usize],
        cache: bool,
    ) -> Result<Self> {
        if prompt.is_empty() {
            return Err(AttentionError::Empty { what: "prompt".into(), dim: "tokens" });
        }
        let start = prompt.len().saturating_sub(gpt.config.block_size);
        let cache = if cache { Some(gpt.new_cache()?) } else { None };
        let mut writer =
            Writer { gpt, kernels, cache, text: prompt.to_vec(), start, logits: None };
        writer.logits = Some(writer.refill(start)?);
        Ok(writer)
    }

    /// Draws the next token with `sampler` from the model's prediction, appends it to the
    /// text, and returns it.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, generate::Writer, kernels::Exact, sample::Sampler, weights::Gpt};
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let gpt = Gpt::<f32>::zeros(GptConfig { n_layer: 1, n_embd: 8, n_head: 2, ..GptConfig::shakespeare(5) });
    /// let mut writer = Writer::new(&gpt, &Exact, &[3], true).unwrap();
    /// // a model of zeros gives every token the same logit: greedy takes the first
    /// assert_eq!(writer.next(&Sampler::greedy(), &mut StdRng::seed_from_u64(0)).unwrap(), 0);
    /// assert_eq!(writer.text(), [3, 0]);
    /// ```
    // ANCHOR: writer_next
    pub fn next<R: Rng + ?Sized>(&mut self, sampler: &Sampler, rng: &mut R) -> Result<usize> {
        let logits = match self.logits.take() {
            Some(logits) => logits,
            None => self.advance()?, // the model has not seen the last token yet
        };
        let picked = sampler.pick(logits.as_slice().expect("one row"), rng);
        self.logits = Some(logits); // kept until a token is drawn: an error changes nothing
        let token = picked?;
        self.logits = None;
        self.text.push(token);
        Ok(token)
    }
    // ANCHOR_END: writer_next

    /// The prediction after the whole text, whose last token the model has not seen: one
    /// decoding step (or one full pass); a fresh start from the last `block_size / 2`
    /// tokens when the window is full.
    // ANCHOR: writer_advance
    fn advance(&mut self) -> Result<Array1<A>> {
        let start = self.window_start();
        if start != self.start {
            let logits = self.refill(start)?; // the window was full: start from its last half
            self.start = start;
            return Ok(logits);
        }
        let last = *self.text.last().expect("a prompt");
        match &mut self.cache {
            Some(cache) => self.gpt.step_with(self.kernels, cache, last),
            None => self.full_pass(self.start),
        }
    }
    // ANCHOR_END: writer_advance

    /// The prediction after `text[start..]` from scratch: a fresh cache filled by one
    /// prefill (kept only if it succeeds), or one full pass.
    // ANCHOR: refill
    fn refill(&mut self, start: usize) -> Result<Array1<A>> {
        let window = &self.text[start..];
        match &mut self.cache {
            Some(cache) => {
                let mut fresh = self.gpt.new_cache()?;
                let logits = self.gpt.prefill_with(self.kernels, &mut fresh, window)?;
                *cache = fresh;
                Ok(logits.row(window.len() - 1).to_owned())
            }
            None => self.full_pass(start),
        }
    }
    // ANCHOR_END: refill

    /// The last row of the logits of one full causal pass over `text[start..]`: a prefill
    /// into a cache thrown away after it, which is the pass [`Gpt::logits_with`] makes (the
    /// tests check it, bit for bit on the exact path) without keeping what training needs.
    // ANCHOR: full_pass
    fn full_pass(&self, start: usize) -> Result<Array1<A>> {
        let window = &self.text[start..];
        let mut scratch = self.gpt.cache_with_room(window.len())?;
        let logits = self.gpt.prefill_with(self.kernels, &mut scratch, window)?;
        Ok(logits.row(window.len() - 1).to_owned())
    }
    // ANCHOR_END: full_pass

    /// The text so far: the prompt, then every token written.
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, generate::Writer, kernels::Exact, weights::Gpt};
    ///
    /// let gpt = Gpt::<f32>::zeros(GptConfig { n_layer: 1, n_embd: 8, n_head: 2, ..GptConfig::shakespeare(5) });
    /// assert_eq!(Writer::new(&gpt, &Exact, &[1, 2], false).unwrap().text(), [1, 2]);
    /// ```
    pub fn text(&self) -> &[usize] {
        &self.text
    }

    /// The tokens the next prediction comes from: the end of the text, at most `block_size`
    /// tokens (the last `block_size / 2` once the window is full).
    ///
    /// ```
    /// use attention::gpt::{config::GptConfig, generate::Writer, kernels::Exact, weights::Gpt};
    ///
    /// let config = GptConfig { n_layer: 1, n_embd: 8, n_head: 2, block_size: 3, ..GptConfig::shakespeare(5) };
    /// let gpt = Gpt::<f32>::zeros(config);
    /// assert_eq!(Writer::new(&gpt, &Exact, &[0, 1, 2, 3, 4], true).unwrap().window(), [2, 3, 4]);
    /// ```
    pub fn window(&self) -> &[usize] {
        &self.text[self.window_start()..]
    }

    /// Where the window starts once the last token is in: where it starts now, or, if the
    /// text outgrew it, `block_size / 2` tokens before the end.
    // ANCHOR: window_start
    fn window_start(&self) -> usize {
        let block_size = self.gpt.config.block_size;
        if self.text.len() - self.start > block_size {
            self.text.len() - (block_size / 2).max(1)
        } else {
            self.start
        }
    }
    // ANCHOR_END: window_start
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpt::config::GptConfig;
    use crate::gpt::kernels::{Exact, Fast};
    use crate::gpt::positions::Positions;
    use ndarray::Array2;
    use rand::{SeedableRng, rngs::StdRng};

    fn config() -> GptConfig {
        GptConfig {
            n_layer: 2,
            n_embd: 16,
            n_head: 4,
            block_size: 12,
            ..GptConfig::shakespeare(7)
        }
    }

    fn text(n: usize, seed: u64) -> Vec<usize> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n).map(|_| rng.random_range(0..7)).collect()
    }

    /// Prefill of `p` tokens, then one step per token: every row of logits, in order.
    fn through_cache<A: Float, K: Kernels<A>>(
        gpt: &Gpt<A>,
        k: &K,
        t: &[usize],
        p: usize,
    ) -> Array2<A> {
        let mut cache = gpt.new_cache().unwrap();
        let mut rows = gpt.prefill_with(k, &mut cache, &t[..p]).unwrap();
        for &token in &t[p..] {
            let row = gpt.step_with(k, &mut cache, token).unwrap();
            rows.push_row(row.view()).unwrap();
        }
        rows
    }

    fn full<A: Float, K: Kernels<A>>(gpt: &Gpt<A>, k: &K, t: &[usize]) -> Array2<A> {
        let ids = ArrayView2::from_shape((1, t.len()), t).unwrap();
        gpt.logits_with(k, &ids).unwrap().index_axis_move(ndarray::Axis(0), 0)
    }

    #[test]
    fn every_step_equals_the_full_pass_on_the_exact_path() {
        let t = text(12, 2);
        for positions in Positions::all() {
            let config = GptConfig { positions, ..config() };
            let gpt = Gpt::<f64>::init(config, &mut StdRng::seed_from_u64(1)).unwrap();
            let reference = full(&gpt, &Exact, &t);
            for p in [1, 5, 12] {
                let cached = through_cache(&gpt, &Exact, &t, p);
                let worst = (&cached - &reference).iter().fold(0.0_f64, |m, d| m.max(d.abs()));
                assert!(worst < 1e-12, "{positions:?}, prefill {p}: {worst}");
                assert_eq!(cached, reference, "{positions:?}, prefill {p}: not bit for bit");
            }
        }
        // f32 too: the exact path gives the same bits in any float type
        let gpt32 = Gpt::<f32>::init(config(), &mut StdRng::seed_from_u64(1)).unwrap();
        assert_eq!(through_cache(&gpt32, &Exact, &t, 3), full(&gpt32, &Exact, &t));
    }

    #[test]
    fn the_fast_path_through_the_cache_agrees_to_f32_rounding() {
        let t = text(12, 4);
        for positions in Positions::all() {
            let config = GptConfig { positions, ..config() };
            let gpt = Gpt::<f32>::init(config, &mut StdRng::seed_from_u64(3)).unwrap();
            let reference = full(&gpt, &Exact, &t);
            let scale = reference.iter().fold(0.0_f32, |m, v| m.max(v.abs()));
            for p in [1, 6] {
                let cached = through_cache(&gpt, &Fast, &t, p);
                let worst = (&cached - &reference).iter().fold(0.0_f32, |m, d| m.max(d.abs()));
                let bound = 1e-5 * scale.max(1.0);
                assert!(worst <= bound, "{positions:?}, prefill {p}: {worst} (scale {scale})");
            }
            // the fast full pass too
            let fast = full(&gpt, &Fast, &t);
            let worst = (&fast - &reference).iter().fold(0.0_f32, |m, d| m.max(d.abs()));
            assert!(worst <= 1e-5 * scale.max(1.0), "{positions:?}, full pass: {worst}");
        }
    }

    #[test]
    fn a_cache_not_reset_between_prompts_gives_other_logits() {
        let gpt = Gpt::<f64>::init(config(), &mut StdRng::seed_from_u64(1)).unwrap();
        let (first, second) = (text(4, 5), text(4, 6));
        let mut cache = gpt.new_cache().unwrap();
        gpt.prefill_with(&Exact, &mut cache, &first).unwrap();
        // the classic mistake: the second prompt appended after the first one's keys
        let stale = gpt.prefill_with(&Exact, &mut cache, &second).unwrap();
        let fresh = full(&gpt, &Exact, &second);
        let gap = (&stale - &fresh).iter().fold(0.0_f64, |m, d| m.max(d.abs()));
        assert!(gap > 1e-3, "{gap}");
        let mut cache = gpt.new_cache().unwrap();
        assert_eq!(gpt.prefill_with(&Exact, &mut cache, &second).unwrap(), fresh);
    }

    #[test]
    fn a_refused_draw_changes_nothing_and_long_prompts_keep_their_end() {
        let gpt = Gpt::<f64>::init(config(), &mut StdRng::seed_from_u64(8)).unwrap();
        let bad = Sampler { top_p: Some(2.0), ..Sampler::default() };
        let good = Sampler::default();
        let prompt = text(20, 3); // longer than block_size = 12: the model sees the last 12
        let mut cached = Writer::new(&gpt, &Exact, &prompt, true).unwrap();
        let mut plain = Writer::new(&gpt, &Exact, &prompt, false).unwrap();
        assert_eq!(cached.window(), &prompt[8..]);
        let (mut a, mut b) = (StdRng::seed_from_u64(1), StdRng::seed_from_u64(1));
        for step in 0..25 {
            if step % 5 == 2 {
                assert!(cached.next(&bad, &mut a).is_err()); // and nothing moves
            }
            assert_eq!(
                cached.next(&good, &mut a).unwrap(),
                plain.next(&good, &mut b).unwrap()
            );
        }
        assert_eq!(cached.text(), plain.text());
    }

    #[test]
    fn errors_leave_the_cache_as_it_was() {
        let gpt = Gpt::<f64>::init(config(), &mut StdRng::seed_from_u64(1)).unwrap();
        let mut cache = gpt.new_cache().unwrap();
        gpt.prefill_with(&Exact, &mut cache, &text(10, 1)).unwrap();
        let before = cache.clone();
        let err = gpt.prefill_with(&Exact, &mut cache, &text(3, 1)).unwrap_err();
        assert_eq!(err, AttentionError::CacheFull { capacity: 12, position: 12 });
        let err = gpt.prefill_with(&Exact, &mut cache, &[1, 7]).unwrap_err().to_string();
        assert_eq!(err, "tokens: token 7 at (0, 1) is outside the vocabulary of 7");
        assert!(gpt.prefill_with(&Exact, &mut cache, &[]).is_err());
        let other = Gpt::<f64>::zeros(GptConfig { n_head: 2, ..config() });
        let err = other.prefill_with(&Exact, &mut cache, &[1]).unwrap_err().to_string();
        assert!(err.starts_with("cache: it was made for another model"), "{err}");
        let longer = Gpt::<f64>::zeros(GptConfig { block_size: 24, ..config() });
        let err =
            gpt.prefill_with(&Exact, &mut longer.new_cache().unwrap(), &[1]).unwrap_err();
        assert!(err.to_string().starts_with("cache: it was made for another model"));
        assert_eq!(cache, before);
    }

    #[test]
    fn the_writer_starts_again_from_half_the_window_and_both_ways_agree() {
        let gpt = Gpt::<f64>::init(config(), &mut StdRng::seed_from_u64(8)).unwrap();
        let sampler = Sampler { temperature: 1.0, ..Sampler::default() };
        let mut cached = Writer::new(&gpt, &Exact, &text(5, 9), true).unwrap();
        let mut plain = Writer::new(&gpt, &Exact, &text(5, 9), false).unwrap();
        let (mut a, mut b) = (StdRng::seed_from_u64(10), StdRng::seed_from_u64(10));
        let mut lengths = vec![];
        for _ in 0..30 {
            let (x, y) =
                (cached.next(&sampler, &mut a).unwrap(), plain.next(&sampler, &mut b));
            assert_eq!(x, y.unwrap());
            lengths.push(cached.window().len());
        }
        // one more token each step up to the 12 the model knows; then the last 6
        assert_eq!(lengths[..10], [6, 7, 8, 9, 10, 11, 12, 6, 7, 8]);
        assert_eq!(cached.text(), plain.text());
        assert_eq!(cached.text().len(), 35);
        // Each prediction is the full pass's last row over the window the writer reports.
        let mut writer = Writer::new(&gpt, &Exact, &text(5, 9), true).unwrap();
        let mut rng = StdRng::seed_from_u64(10);
        for _ in 0..20 {
            writer.next(&sampler, &mut rng).unwrap();
            let reference = full(&gpt, &Exact, writer.window());
            let logits = writer.advance().unwrap();
            assert_eq!(logits, reference.row(reference.nrows() - 1));
            writer.logits = Some(logits);
        }
    }
}
