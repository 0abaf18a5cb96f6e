//! Chapter *Generating one token at a time*: the key/value cache and decoding token by token.
//!
//! A language model writes one token at a time, and each new token may only look back. With
//! a causal mask, the keys and values of the tokens already written never change when a
//! new token arrives, so there is no need to compute them again: a [`KvCache`] keeps them.
//! The prompt goes through one causal pass that fills the cache
//! ([`GroupedQueryAttention::prefill`]); then each step ([`GroupedQueryAttention::step`])
//! projects only the new token, appends its key and value, and lets its one query attend over
//! the cache. Decoding a whole sequence this way ([`GroupedQueryAttention::decode`]) gives the
//! same outputs as one causal pass. (This is the attention layer's part of generation only:
//! choosing the next token from an output row is a model's job.)
//!
//! The query is never cached. Row `t` of a causal pass is the only place where query `t` is
//! used: later tokens compare *their* queries with the keys of the past and average the
//! values of the past, but no later row ever reads an earlier query. Keys and values are
//! read again at every later step; a query is read once, in its own step.
//!
//! A cache with a sliding window of `W` ([`KvCache::windowed`]) keeps only the last `W`
//! keys and values, so its memory is bounded by `W` however long the text: the token at
//! position `p` goes into slot `p mod W`, over the oldest entry (a rolling buffer, as in
//! Mistral's reference code). Slots then hold positions out of order, which attention does
//! not mind: a query attends to a set of keys, and their position is in the keys (RoPE) or
//! nowhere. Anything computed from positions at score time (a window's mask, as in
//! [`GroupedQueryAttention::prefill`], or a bias such as ALiBi's) must use the positions the
//! slots hold ([`KvCache::positions`]), not the slot numbers.
//!
//! What the cache saves ([`token_cost`]): without it, every new token runs the whole prefix
//! through the layer again, `n` projections and `n²` scores for the `n`-th token; with it,
//! one projection and `n` scores. What it costs: `2 · layers · G · d_head` numbers of memory
//! per token ([`kv_cache_bytes_per_token`]).
//!
//! Anchors (below the doc comments): `kv_cache`, `kv_new`, `kv_append`, `kv_check`,
//! `kv_views`, `new_cache`, `decode_step`, `prefill`, `decode`, `token_cost`, `cache_bytes`.

use ndarray::{
    Array2, Array3, ArrayRef1, ArrayRef2, ArrayView3, Axis, Ix1, Ix2, concatenate, s,
};

use crate::error::{AttentionError, Result};
use crate::float::Float;
use crate::gqa::{GroupedQueryAttention, group_size, sdpa_gqa};
use crate::mask::Mask;
use crate::multihead::{MultiHeadOutput, head_width};
use crate::sdpa::Attention;

/// The keys and values of one attention layer for the tokens decoded so far: `(G, n, d_head)`
/// each, `G` key/value heads, `n` cached tokens.
///
/// A full cache ([`KvCache::new`]) holds up to `capacity` tokens and refuses one more; a
/// windowed cache ([`KvCache::windowed`]) holds the last `W` and overwrites the oldest.
///
/// ```
/// use attention::decode::KvCache;
/// use ndarray::Array2;
///
/// let mut cache = KvCache::<f64>::new(2, 4, 10).unwrap(); // G = 2, d_head = 4, 10 tokens
/// cache.append(&Array2::ones((2, 4)), &Array2::zeros((2, 4))).unwrap();
/// assert_eq!(cache.keys().dim(), (2, 1, 4));
/// assert_eq!(cache.position(), 1); // the next token is at position 1
/// ```
#[derive(Debug, Clone, PartialEq)]
// ANCHOR: kv_cache
pub struct KvCache<A> {
    keys: Array3<A>,       // (G, slots, d_head): slots = capacity, or W
    values: Array3<A>,     // (G, slots, d_head)
    len: usize,            // how many slots hold a token
    position: usize,       // the absolute position of the next token
    window: Option<usize>, // Some(W): keep only the last W tokens
}
// ANCHOR_END: kv_cache

impl<A: Float> KvCache<A> {
    /// An empty cache for `capacity` tokens of `kv_heads` key/value heads of width `d_head`.
    /// Appending token `capacity + 1` fails with [`AttentionError::CacheFull`].
    ///
    /// ```
    /// use attention::decode::KvCache;
    ///
    /// let cache = KvCache::<f32>::new(8, 64, 4096).unwrap();
    /// assert_eq!(cache.bytes(), 2 * 8 * 4096 * 64 * 4); // keys and values, f32
    /// assert_eq!(
    ///     KvCache::<f32>::new(8, 64, 0).unwrap_err().to_string(),
    ///     "KV cache has capacity = 0: it must be at least 1"
    /// );
    /// ```
    // ANCHOR: kv_new
    pub fn new(kv_heads: usize, d_head: usize, capacity: usize) -> Result<Self> {
        KvCache::with_slots(kv_heads, d_head, capacity, None)
    }
    // ANCHOR_END: kv_new

    /// An empty cache that keeps the last `window` tokens (`W`, counting the newest), for the
    /// sliding-window mask [`Mask::sliding_window`](crate::mask::Mask::sliding_window). It
    /// never fills up; its memory is that of `W` tokens.
    ///
    /// ```
    /// use attention::{decode::KvCache, AttentionError};
    /// use ndarray::Array2;
    ///
    /// let mut cache = KvCache::<f64>::windowed(1, 2, 3).unwrap();
    /// for p in 0..5 {
    ///     let k = Array2::from_elem((1, 2), p as f64);
    ///     cache.append(&k, &k).unwrap();
    /// }
    /// assert_eq!(cache.len(), 3);
    /// assert_eq!(cache.positions(), [3, 4, 2]); // slot p mod 3 holds position p
    /// assert_eq!(KvCache::<f64>::windowed(1, 2, 0), Err(AttentionError::ZeroWindow));
    /// ```
    // ANCHOR: kv_new
    pub fn windowed(kv_heads: usize, d_head: usize, window: usize) -> Result<Self> {
        if window == 0 {
            return Err(AttentionError::ZeroWindow);
        }
        KvCache::with_slots(kv_heads, d_head, window, Some(window))
    }
    // ANCHOR_END: kv_new

    /// The shared constructor: zeroed `(G, slots, d_head)` keys and values.
    // ANCHOR: kv_new
    fn with_slots(
        kv_heads: usize,
        d_head: usize,
        slots: usize,
        window: Option<usize>,
    ) -> Result<Self> {
        for (size, dim) in [(kv_heads, "kv_heads"), (d_head, "d_head"), (slots, "capacity")] {
            if size == 0 {
                return Err(AttentionError::Empty { what: "KV cache".into(), dim });
            }
        }
        let keys = Array3::zeros((kv_heads, slots, d_head));
        Ok(KvCache { values: keys.clone(), keys, len: 0, position: 0, window })
    }
    // ANCHOR_END: kv_new

    /// Adds one token's key and value, `k, v: (G, d_head)`, at position
    /// [`position`](KvCache::position). A full cache refuses it; a windowed one overwrites
    /// its oldest token.
    ///
    /// ```
    /// use attention::{decode::KvCache, AttentionError};
    /// use ndarray::Array2;
    ///
    /// let mut cache = KvCache::<f64>::new(2, 4, 1).unwrap();
    /// let kv = Array2::zeros((2, 4));
    /// cache.append(&kv, &kv).unwrap();
    /// assert_eq!(
    ///     cache.append(&kv, &kv),
    ///     Err(AttentionError::CacheFull { capacity: 1, position: 1 })
    /// );
    /// assert_eq!(
    ///     cache.append(&Array2::zeros((1, 4)), &kv).unwrap_err().to_string(),
    ///     "k has shape [1, 4] but a shape (kv_heads, d_head) = (2, 4) was expected"
    /// );
    /// ```
    // ANCHOR: kv_append
    pub fn append(&mut self, k: &ArrayRef2<A>, v: &ArrayRef2<A>) -> Result<()> {
        self.check("k", k.shape())?;
        self.check("v", v.shape())?;
        self.check_room(1)?;
        // A full cache never wraps; a windowed one overwrites its oldest token.
        let slot = self.position % self.slots();
        self.keys.slice_mut(s![.., slot, ..]).assign(k);
        self.values.slice_mut(s![.., slot, ..]).assign(v);
        self.len = (self.len + 1).min(self.slots());
        self.position += 1;
        Ok(())
    }
    // ANCHOR_END: kv_append

    /// Checks that a key or value has the cache's shape `(G, d_head)`.
    // ANCHOR: kv_check
    fn check(&self, name: &str, shape: &[usize]) -> Result<()> {
        let (kv_heads, _, d_head) = self.keys.dim();
        if shape != [kv_heads, d_head] {
            let expected =
                format!("a shape (kv_heads, d_head) = ({kv_heads}, {d_head}) was expected");
            return Err(AttentionError::shape(name, shape, &expected));
        }
        Ok(())
    }

    /// Checks that `tokens` more tokens fit: a full cache refuses them when it has fewer
    /// free slots ([`AttentionError::CacheFull`], naming the first position with no room);
    /// a windowed cache always takes them.
    pub(crate) fn check_room(&self, tokens: usize) -> Result<()> {
        let slots = self.slots();
        if self.window.is_none() && self.len + tokens > slots {
            let position = self.position + (slots - self.len); // the first one with no room
            return Err(AttentionError::CacheFull { capacity: slots, position });
        }
        Ok(())
    }
    // ANCHOR_END: kv_check

    /// The cached keys, `(G, len, d_head)`, in slot order (see [`KvCache::positions`]).
    ///
    /// ```
    /// use attention::decode::KvCache;
    /// use ndarray::Array2;
    ///
    /// let mut cache = KvCache::<f64>::new(1, 2, 4).unwrap();
    /// cache.append(&Array2::ones((1, 2)), &Array2::zeros((1, 2))).unwrap();
    /// assert_eq!(cache.keys().sum(), 2.0);
    /// ```
    // ANCHOR: kv_views
    pub fn keys(&self) -> ArrayView3<'_, A> {
        self.keys.slice(s![.., ..self.len, ..])
    }
    // ANCHOR_END: kv_views

    /// The cached values, `(G, len, d_head)`, in the same order as the keys.
    ///
    /// ```
    /// use attention::decode::KvCache;
    /// use ndarray::Array2;
    ///
    /// let mut cache = KvCache::<f64>::new(1, 2, 4).unwrap();
    /// cache.append(&Array2::ones((1, 2)), &Array2::zeros((1, 2))).unwrap();
    /// assert_eq!(cache.values().dim(), (1, 1, 2));
    /// ```
    // ANCHOR: kv_views
    pub fn values(&self) -> ArrayView3<'_, A> {
        self.values.slice(s![.., ..self.len, ..])
    }
    // ANCHOR_END: kv_views

    /// The absolute position of the token in each cached slot, in slot order: `0, 1, …` for
    /// a full cache; for a window, slot `s` holds the one recent position `p` with
    /// `p mod W = s`.
    ///
    /// ```
    /// use attention::decode::KvCache;
    /// use ndarray::Array2;
    ///
    /// let mut cache = KvCache::<f64>::windowed(1, 1, 2).unwrap();
    /// let kv = Array2::zeros((1, 1));
    /// for _ in 0..3 {
    ///     cache.append(&kv, &kv).unwrap();
    /// }
    /// assert_eq!(cache.positions(), [2, 1]);
    /// ```
    // ANCHOR: kv_views
    pub fn positions(&self) -> Vec<usize> {
        let slots = self.keys.shape()[1];
        let first = self.position - self.len; // the oldest cached position
        (0..self.len).map(|s| first + (s + slots - first % slots) % slots).collect()
    }
    // ANCHOR_END: kv_views

    /// How many tokens are cached (at most the capacity, or `W`).
    ///
    /// ```
    /// use attention::decode::KvCache;
    ///
    /// assert_eq!(KvCache::<f64>::new(1, 2, 4).unwrap().len(), 0);
    /// ```
    // ANCHOR: kv_views
    pub fn len(&self) -> usize {
        self.len
    }
    // ANCHOR_END: kv_views

    /// Whether no token has been cached yet.
    ///
    /// ```
    /// use attention::decode::KvCache;
    ///
    /// assert!(KvCache::<f64>::new(1, 2, 4).unwrap().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The absolute position of the next token: how many tokens have been appended in all
    /// (a windowed cache has forgotten all but the last `W` of them).
    ///
    /// ```
    /// use attention::decode::KvCache;
    /// use ndarray::Array2;
    ///
    /// let mut cache = KvCache::<f64>::windowed(1, 1, 1).unwrap();
    /// let kv = Array2::zeros((1, 1));
    /// cache.append(&kv, &kv).unwrap();
    /// cache.append(&kv, &kv).unwrap();
    /// assert_eq!((cache.position(), cache.len()), (2, 1));
    /// ```
    // ANCHOR: kv_views
    pub fn position(&self) -> usize {
        self.position
    }
    // ANCHOR_END: kv_views

    /// The number of slots: the capacity of a full cache, `W` for a windowed one.
    ///
    /// ```
    /// use attention::decode::KvCache;
    ///
    /// assert_eq!(KvCache::<f64>::windowed(2, 8, 16).unwrap().slots(), 16);
    /// ```
    // ANCHOR: kv_views
    pub fn slots(&self) -> usize {
        self.keys.shape()[1]
    }
    // ANCHOR_END: kv_views

    /// The window `W`, or `None` for a full cache.
    ///
    /// ```
    /// use attention::decode::KvCache;
    ///
    /// assert_eq!(KvCache::<f64>::windowed(2, 8, 16).unwrap().window(), Some(16));
    /// assert_eq!(KvCache::<f64>::new(2, 8, 16).unwrap().window(), None);
    /// ```
    // ANCHOR: kv_views
    pub fn window(&self) -> Option<usize> {
        self.window
    }
    // ANCHOR_END: kv_views

    /// The memory the cache holds, filled or not: `2 · G · slots · d_head` elements.
    ///
    /// ```
    /// use attention::decode::KvCache;
    ///
    /// assert_eq!(KvCache::<f64>::windowed(2, 8, 16).unwrap().bytes(), 2 * 2 * 16 * 8 * 8);
    /// ```
    pub fn bytes(&self) -> usize {
        (self.keys.len() + self.values.len()) * std::mem::size_of::<A>()
    }
}

impl<A: Float> GroupedQueryAttention<A> {
    /// An empty cache that fits this layer: `kv_heads` heads of `d_head`, room for
    /// `capacity` tokens, or the last `W` tokens when `window` is `Some(W)`.
    ///
    /// ```
    /// use attention::gqa::GroupedQueryAttention;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let rng = &mut StdRng::seed_from_u64(0);
    /// let gqa = GroupedQueryAttention::<f64>::random(8, 4, 2, rng).unwrap();
    /// let cache = gqa.new_cache(100, Some(16)).unwrap();
    /// assert_eq!(cache.slots(), 16);
    /// ```
    // ANCHOR: new_cache
    pub fn new_cache(&self, capacity: usize, window: Option<usize>) -> Result<KvCache<A>> {
        match window {
            Some(w) => KvCache::windowed(self.kv_heads(), self.d_head(), w),
            None => KvCache::new(self.kv_heads(), self.d_head(), capacity),
        }
    }
    // ANCHOR_END: new_cache

    /// One decoding step: the new token `x: (d_model,)`, at position `cache.position()`,
    /// is projected, its key and value go into the cache, and its query attends over every
    /// cached token. Returns the token's output `(d_model,)` and weights `(H, cache.len())`,
    /// in the cache's slot order.
    ///
    /// ```
    /// use attention::gqa::GroupedQueryAttention;
    /// use ndarray::Array1;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let rng = &mut StdRng::seed_from_u64(0);
    /// let gqa = GroupedQueryAttention::<f64>::random(8, 4, 2, rng).unwrap();
    /// let mut cache = gqa.new_cache(10, None).unwrap();
    /// gqa.step(&Array1::ones(8), &mut cache).unwrap();
    /// let second = gqa.step(&Array1::zeros(8), &mut cache).unwrap();
    /// assert_eq!(second.output.dim(), 8);
    /// assert_eq!(second.weights.dim(), (4, 2)); // 4 query heads, 2 cached tokens
    /// ```
    // ANCHOR: decode_step
    pub fn step(
        &self,
        x: &ArrayRef1<A>,
        cache: &mut KvCache<A>,
    ) -> Result<MultiHeadOutput<A, Ix1>> {
        let x = x.view().insert_axis(Axis(0)); // (1, d_model): one token
        let (q, k, v) = self.project(&x, cache.position())?; // (H, 1, d_head), (G, 1, d_head)
        cache.append(&k.index_axis(Axis(1), 0), &v.index_axis(Axis(1), 0))?;
        let (keys, values) = (cache.keys(), cache.values()); // (G, len, d_head)
        let Attention { output, weights } = sdpa_gqa(&q, &keys, &values, None)?;
        let output = self.combine(&output)?.index_axis_move(Axis(0), 0); // (d_model,)
        Ok(MultiHeadOutput { output, weights: weights.index_axis_move(Axis(1), 0) })
    }
    // ANCHOR_END: decode_step

    /// Prefill: the prompt `x: (P, d_model)`, the tokens at positions `cache.position()` …
    /// `cache.position() + P − 1`, in one pass. All `P` queries, keys and values are
    /// projected at once; each query attends over the keys the cache already held and the
    /// prompt's own keys up to its position (within the window, for a windowed cache); then
    /// the prompt's keys and values go into the cache, ready for [`step`](Self::step). Returns
    /// the outputs `(P, d_model)` and the weights `(H, P, n + P)`, `n` the tokens cached
    /// before, the columns in the order of [`KvCache::positions`] followed by the prompt.
    ///
    /// On an empty cache this is one causal pass ([`forward`] with [`Mask::causal`], or
    /// [`Mask::sliding_window`] for a windowed cache), and the steps after it give the rows
    /// that pass would give the later tokens. A full cache without room for all `P` tokens
    /// refuses the prompt and stays as it was.
    ///
    /// [`forward`]: GroupedQueryAttention::forward
    /// [`Mask::causal`]: crate::mask::Mask::causal
    /// [`Mask::sliding_window`]: crate::mask::Mask::sliding_window
    ///
    /// ```
    /// use attention::{gqa::GroupedQueryAttention, mask::Mask};
    /// use ndarray::Array2;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let rng = &mut StdRng::seed_from_u64(0);
    /// let gqa = GroupedQueryAttention::<f64>::random(8, 4, 2, rng).unwrap();
    /// let x = Array2::from_shape_fn((5, 8), |(i, j)| ((3 * i + j) % 7) as f64 / 7.0);
    /// let one_pass = gqa.forward(&x, Some(&Mask::causal(5))).unwrap();
    ///
    /// let mut cache = gqa.new_cache(5, None).unwrap();
    /// let prompt = gqa.prefill(&x.slice(ndarray::s![..3, ..]), &mut cache).unwrap();
    /// assert_eq!((prompt.output.dim(), cache.len()), ((3, 8), 3));
    /// let next = gqa.step(&x.row(3), &mut cache).unwrap(); // token 3, one step
    /// assert!((&next.output - &one_pass.output.row(3)).iter().all(|d| d.abs() < 1e-12));
    /// ```
    // ANCHOR: prefill
    pub fn prefill(
        &self,
        x: &ArrayRef2<A>,
        cache: &mut KvCache<A>,
    ) -> Result<MultiHeadOutput<A, Ix2>> {
        let (p, start) = (x.nrows(), cache.position()); // the prompt's first position
        if p == 0 {
            return Err(AttentionError::Empty { what: "x".into(), dim: "L" });
        }
        cache.check_room(p)?;
        let (q, k, v) = self.project(x, start)?; // rotated at start, …, start + p − 1
        cache.check("k", &[k.shape()[0], k.shape()[2]])?;
        // The keys the prompt sees: the cached ones, then its own, with their positions.
        let keys = concatenate(Axis(1), &[cache.keys(), k.view()]).expect("shapes checked");
        let values =
            concatenate(Axis(1), &[cache.values(), v.view()]).expect("shapes checked");
        let positions: Vec<usize> =
            cache.positions().into_iter().chain(start..start + p).collect();
        let window = cache.window();
        // Query start + i may see the key at position j if j ≤ start + i, within the window.
        let mask = Mask::from_array(Array2::from_shape_fn((p, positions.len()), |(i, j)| {
            let (query, key) = (start + i, positions[j]);
            key <= query && window.is_none_or(|w| query - key < w)
        }))?;
        let Attention { output, weights } = sdpa_gqa(&q, &keys, &values, Some(&mask))?;
        for t in 0..p {
            cache.append(&k.index_axis(Axis(1), t), &v.index_axis(Axis(1), t))?;
        }
        Ok(MultiHeadOutput { output: self.combine(&output)?, weights })
    }
    // ANCHOR_END: prefill

    /// Decodes `x: (L, d_model)` token by token through a fresh cache (room for `L`
    /// tokens, or the last `W` when `window` is `Some(W)`), and returns what [`forward`]
    /// returns with [`Mask::causal`] (or [`Mask::sliding_window`]): outputs `(L, d_model)`
    /// and weights `(H, L, L)`, 0 for every key that was not in the cache.
    ///
    /// [`forward`]: GroupedQueryAttention::forward
    /// [`Mask::causal`]: crate::mask::Mask::causal
    /// [`Mask::sliding_window`]: crate::mask::Mask::sliding_window
    ///
    /// ```
    /// use attention::{gqa::GroupedQueryAttention, mask::Mask};
    /// use ndarray::Array2;
    /// use rand::{rngs::StdRng, SeedableRng};
    ///
    /// let rng = &mut StdRng::seed_from_u64(0);
    /// let gqa = GroupedQueryAttention::<f64>::random(8, 4, 2, rng).unwrap();
    /// let x = Array2::from_shape_fn((6, 8), |(i, j)| ((3 * i + j) % 7) as f64 / 7.0);
    /// let decoded = gqa.decode(&x, Some(3)).unwrap();
    /// let full = gqa.forward(&x, Some(&Mask::sliding_window(6, 3).unwrap())).unwrap();
    /// assert!((decoded.output - full.output).iter().all(|d| d.abs() < 1e-12));
    /// assert!((decoded.weights - full.weights).iter().all(|d| d.abs() < 1e-12));
    /// ```
    // ANCHOR: decode
    pub fn decode(
        &self,
        x: &ArrayRef2<A>,
        window: Option<usize>,
    ) -> Result<MultiHeadOutput<A, Ix2>> {
        let l = x.nrows();
        if l == 0 {
            return Err(AttentionError::Empty { what: "x".into(), dim: "L" });
        }
        let mut cache = self.new_cache(l, window)?;
        let mut output = Array2::zeros((l, self.d_model()));
        let mut weights = Array3::zeros((self.heads(), l, l));
        for (t, token) in x.rows().into_iter().enumerate() {
            let step = self.step(&token, &mut cache)?;
            output.row_mut(t).assign(&step.output);
            for (slot, p) in cache.positions().into_iter().enumerate() {
                // the weight of key p in row t
                weights.slice_mut(s![.., t, p]).assign(&step.weights.column(slot));
            }
        }
        Ok(MultiHeadOutput { output, weights })
    }
    // ANCHOR_END: decode
}

/// The multiply-adds one attention layer spends to produce one new token's output.
///
/// ```
/// use attention::decode::TokenCost;
///
/// let cost = TokenCost { projections: 10, attention: 5 };
/// assert_eq!(cost.total(), 15);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// ANCHOR: token_cost
pub struct TokenCost {
    /// In `x · W_Q`, `x · W_K`, `x · W_V` and the output's `· W_O`.
    pub projections: usize,
    /// In the scores `q · kᵀ` and the weighted sum of the values.
    pub attention: usize,
}

// ANCHOR_END: token_cost
impl TokenCost {
    /// `projections + attention`.
    ///
    /// ```
    /// use attention::decode::token_cost;
    ///
    /// assert_eq!(token_cost(8, 2, 2, 1, true).unwrap().total(), 4 * 64 + 2 * 8);
    /// ```
    pub fn total(&self) -> usize {
        self.projections + self.attention
    }
}

/// The multiply-adds to produce the output of the `n`-th token (it sees `n` tokens, itself
/// included) in a layer of width `d_model` with `heads` query heads and `kv_heads` key/value
/// heads of `d_head = d_model / heads`.
///
/// With a cache (`cached`), only the new token is projected (`2·d_model² +
/// 2·d_model·G·d_head`) and its one query meets `n` keys and values (`2·n·d_model`). Without
/// one, the whole prefix goes through [`forward`](GroupedQueryAttention::forward) again:
/// `n` times the projections and all `n × n` scores and weighted sums (`2·n²·d_model`, the
/// masked ones included, as [`sdpa`](crate::sdpa::sdpa) computes them). Both parts are `n`
/// times larger without the cache, and in both cases attention overtakes the projections
/// past `n = d_model + G·d_head`.
///
/// ```
/// use attention::decode::token_cost;
///
/// // d_model = 512, 8 heads, MHA: 4·512² per token with a cache, whatever n
/// let cached = token_cost(512, 8, 8, 1000, true).unwrap();
/// assert_eq!(cached.projections, 4 * 512 * 512);
/// assert_eq!(cached.attention, 2 * 1000 * 512);
/// let uncached = token_cost(512, 8, 8, 1000, false).unwrap();
/// assert_eq!(uncached.projections, 1000 * 4 * 512 * 512);
/// assert_eq!(uncached.attention, 2 * 1000 * 1000 * 512);
/// assert!(token_cost(512, 8, 3, 10, true).is_err());
/// ```
// ANCHOR: token_cost
pub fn token_cost(
    d_model: usize,
    heads: usize,
    kv_heads: usize,
    n: usize,
    cached: bool,
) -> Result<TokenCost> {
    let d_head = head_width(d_model, heads)?;
    group_size(heads, kv_heads)?;
    let per_token = 2 * d_model * d_model + 2 * d_model * kv_heads * d_head; // Q, O; K, V
    let per_pair = 2 * heads * d_head; // q·k and weight·v, every head
    Ok(if cached {
        TokenCost { projections: per_token, attention: n * per_pair }
    } else {
        TokenCost { projections: n * per_token, attention: n * n * per_pair }
    })
}
// ANCHOR_END: token_cost

/// The memory a KV cache needs per token: `2 · layers · kv_heads · d_head ·
/// bytes_per_element` bytes (a key and a value per layer and key/value head).
///
/// ```
/// use attention::decode::kv_cache_bytes_per_token;
///
/// // 32 layers, 32 key/value heads of 128, 2-byte elements (f16): 512 KiB per token
/// assert_eq!(kv_cache_bytes_per_token(32, 32, 128, 2), 524_288);
/// ```
// ANCHOR: cache_bytes
pub fn kv_cache_bytes_per_token(
    layers: usize,
    kv_heads: usize,
    d_head: usize,
    bytes_per_element: usize,
) -> usize {
    2 * layers * kv_heads * d_head * bytes_per_element // keys and values
}
// ANCHOR_END: cache_bytes

#[cfg(test)]
mod tests {
    use ndarray::{Array, Array1, Dimension};
    use rand::{SeedableRng, rngs::StdRng};

    use super::*;
    use crate::embeddings::random_matrix;
    use crate::mask::Mask;
    use crate::rope::{Rope, RopeLayout};

    fn max_diff<A: Float, D: Dimension>(a: &Array<A, D>, b: &Array<A, D>) -> f64 {
        assert_eq!(a.shape(), b.shape());
        let diff = a.iter().zip(b).map(|(&x, &y)| (x - y).abs()).fold(A::zero(), A::max);
        diff.to_f64().unwrap()
    }

    /// The layers the equivalence tests run: d_model = 16, H = 4 and G = 4 (MHA), 2 (GQA),
    /// 1 (MQA), without RoPE.
    fn layers<A: Float>() -> Vec<GroupedQueryAttention<A>> {
        [4, 2, 1]
            .into_iter()
            .map(|g| {
                let rng = &mut StdRng::seed_from_u64(100 + g as u64);
                GroupedQueryAttention::random(16, 4, g, rng).unwrap()
            })
            .collect()
    }

    /// The same layers with RoPE (rotate-half base 10 000 and interleaved base 100).
    fn rope_layers<A: Float>() -> Vec<GroupedQueryAttention<A>> {
        let layouts = [(RopeLayout::RotateHalf, 10_000.0), (RopeLayout::Interleaved, 100.0)];
        let mut out = Vec::new();
        for (layer, (layout, base)) in layers().into_iter().zip(layouts.into_iter().cycle()) {
            out.push(layer.with_rope(Rope::new(4, base, layout).unwrap()).unwrap());
        }
        out
    }

    fn check_decode_equals_one_pass<A: Float>(
        layers: &[GroupedQueryAttention<A>],
        tolerance: f64,
    ) {
        let l = 11;
        let x: Array2<A> = random_matrix(l, 16, 1.0, &mut StdRng::seed_from_u64(1));
        for gqa in layers {
            for window in [None, Some(1), Some(3), Some(l - 1), Some(l), Some(2 * l)] {
                let mask = window_mask(l, window);
                let one_pass = gqa.forward(&x, Some(&mask)).unwrap();
                let decoded = gqa.decode(&x, window).unwrap();
                let case = format!("G = {}, window {window:?}", gqa.kv_heads());
                assert!(max_diff(&decoded.output, &one_pass.output) < tolerance, "{case}");
                assert!(max_diff(&decoded.weights, &one_pass.weights) < tolerance, "{case}");
                // the blocked keys have exactly zero weight in both
                for ((h, i, j), &w) in decoded.weights.indexed_iter() {
                    if !mask.allows(&[i, j]) {
                        assert_eq!(w, A::zero(), "{case}: head {h}, query {i}, key {j}");
                    }
                }
            }
        }
    }

    /// The mask a cache with this window applies: causal without one, a sliding window with.
    fn window_mask(l: usize, window: Option<usize>) -> Mask {
        match window {
            None => Mask::causal(l),
            Some(w) => Mask::sliding_window(l, w).unwrap(),
        }
    }

    #[test]
    fn decoding_through_the_cache_equals_one_causal_pass_f64() {
        check_decode_equals_one_pass::<f64>(&layers(), 1e-12);
    }

    #[test]
    fn decoding_through_the_cache_equals_one_causal_pass_f32() {
        check_decode_equals_one_pass::<f32>(&layers(), 1e-5);
    }

    #[test]
    fn decoding_with_rope_at_absolute_positions_equals_one_causal_pass_f64() {
        check_decode_equals_one_pass::<f64>(&rope_layers(), 1e-12);
    }

    #[test]
    fn decoding_with_rope_at_absolute_positions_equals_one_causal_pass_f32() {
        check_decode_equals_one_pass::<f32>(&rope_layers(), 1e-5);
    }

    #[test]
    fn rope_rotates_each_heads_q_and_k_at_its_absolute_position() {
        let x: Array2<f64> = random_matrix(7, 16, 1.0, &mut StdRng::seed_from_u64(4));
        for (plain, rotated) in layers::<f64>().iter().zip(rope_layers::<f64>()) {
            let rope = rotated.rope().unwrap();
            let (q, k, v) = plain.project(&x, 0).unwrap();
            let (q_r, k_r, v_r) = rotated.project(&x, 0).unwrap();
            assert_eq!(q_r, rope.apply(&q, 0).unwrap());
            assert_eq!(k_r, rope.apply(&k, 0).unwrap());
            assert_eq!(v_r, v); // values are not rotated
            // rows 3.. projected on their own, starting at position 3, turn the same way
            let (q3, k3, _) = rotated.project(&x.slice(s![3.., ..]), 3).unwrap();
            let q_tail = q_r.slice(s![.., 3.., ..]).to_owned();
            let k_tail = k_r.slice(s![.., 3.., ..]).to_owned();
            assert!(max_diff(&q3, &q_tail) < 1e-12 && max_diff(&k3, &k_tail) < 1e-12);
            // and RoPE changes the layer's output (beyond the first token, which it leaves)
            let causal = Mask::causal(7);
            let (a, b) =
                (plain.forward(&x, Some(&causal)), rotated.forward(&x, Some(&causal)));
            let (a, b) = (a.unwrap().output, b.unwrap().output);
            assert!(max_diff(&a.row(0).to_owned(), &b.row(0).to_owned()) < 1e-12);
            assert!(max_diff(&a, &b) > 1e-3);
        }
    }

    #[test]
    fn decoding_one_step_at_a_time_gives_the_rows_of_the_causal_pass() {
        let gqa = &layers::<f64>()[1];
        let x: Array2<f64> = random_matrix(6, 16, 1.0, &mut StdRng::seed_from_u64(2));
        let one_pass = gqa.forward(&x, Some(&Mask::causal(6))).unwrap();
        let mut cache = gqa.new_cache(6, None).unwrap();
        for t in 0..6 {
            let step = gqa.step(&x.row(t), &mut cache).unwrap();
            assert_eq!((cache.len(), cache.position()), (t + 1, t + 1));
            assert_eq!(step.weights.dim(), (4, t + 1));
            let row = one_pass.output.row(t).to_owned();
            assert!(max_diff(&step.output, &row) < 1e-12, "token {t}");
            let weights = one_pass.weights.slice(s![.., t, ..=t]).to_owned();
            assert!(max_diff(&step.weights, &weights) < 1e-12, "token {t}");
        }
    }

    /// Prefill the first `p` tokens in one pass, then decode the rest one step at a time:
    /// every output row and every weight must be the causal (or sliding-window) pass's.
    fn check_prefill_then_decode<A: Float>(
        layers: &[GroupedQueryAttention<A>],
        tolerance: f64,
    ) {
        let l = 11;
        let x: Array2<A> = random_matrix(l, 16, 1.0, &mut StdRng::seed_from_u64(5));
        for gqa in layers {
            for window in [None, Some(1), Some(3), Some(l)] {
                let mask = window_mask(l, window);
                let one_pass = gqa.forward(&x, Some(&mask)).unwrap();
                for p in [1, 2, 4, l] {
                    let case =
                        format!("G = {}, window {window:?}, prompt of {p}", gqa.kv_heads());
                    let mut cache = gqa.new_cache(l, window).unwrap();
                    let prompt = gqa.prefill(&x.slice(s![..p, ..]), &mut cache).unwrap();
                    assert_eq!(
                        (cache.position(), cache.len()),
                        (p, p.min(window.unwrap_or(l)))
                    );
                    let rows = one_pass.output.slice(s![..p, ..]).to_owned();
                    assert!(max_diff(&prompt.output, &rows) < tolerance, "{case}");
                    let weights = one_pass.weights.slice(s![.., ..p, ..p]).to_owned();
                    assert!(max_diff(&prompt.weights, &weights) < tolerance, "{case}");
                    for t in p..l {
                        let step = gqa.step(&x.row(t), &mut cache).unwrap();
                        let row = one_pass.output.row(t).to_owned();
                        assert!(max_diff(&step.output, &row) < tolerance, "{case}: token {t}");
                        for (slot, q) in cache.positions().into_iter().enumerate() {
                            let (got, want) = (
                                step.weights.column(slot),
                                one_pass.weights.slice(s![.., t, q]),
                            );
                            assert!(
                                max_diff(&got.to_owned(), &want.to_owned()) < tolerance,
                                "{case}: token {t}, key {q}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn prefill_then_decode_gives_every_row_of_the_causal_pass_f64() {
        check_prefill_then_decode::<f64>(&layers(), 1e-12);
        check_prefill_then_decode::<f64>(&rope_layers(), 1e-12);
    }

    #[test]
    fn prefill_then_decode_gives_every_row_of_the_causal_pass_f32() {
        check_prefill_then_decode::<f32>(&rope_layers(), 1e-5);
    }

    #[test]
    fn a_prompt_in_chunks_sees_the_cached_keys_at_their_true_positions() {
        // Chunks after the first meet a cache that already holds keys, and a windowed cache
        // that has wrapped holds them out of order: the mask must come from the positions.
        let l = 11;
        let x: Array2<f64> = random_matrix(l, 16, 1.0, &mut StdRng::seed_from_u64(6));
        for gqa in rope_layers::<f64>() {
            for window in [None, Some(2), Some(3), Some(5)] {
                let mask = window_mask(l, window);
                let one_pass = gqa.forward(&x, Some(&mask)).unwrap();
                let mut cache = gqa.new_cache(l, window).unwrap();
                let mut start = 0;
                for chunk in [3, 4, 1, 3] {
                    let case =
                        format!("G = {}, window {window:?}, chunk at {start}", gqa.kv_heads());
                    let before: Vec<usize> = cache.positions();
                    let out = gqa
                        .prefill(&x.slice(s![start..start + chunk, ..]), &mut cache)
                        .unwrap();
                    let rows = one_pass.output.slice(s![start..start + chunk, ..]).to_owned();
                    assert!(max_diff(&out.output, &rows) < 1e-12, "{case}");
                    let keys: Vec<usize> =
                        before.into_iter().chain(start..start + chunk).collect();
                    assert_eq!(out.weights.dim(), (4, chunk, keys.len()), "{case}");
                    for (i, j) in (0..chunk).flat_map(|i| (0..keys.len()).map(move |j| (i, j)))
                    {
                        let got = out.weights.slice(s![.., i, j]).to_owned();
                        let want =
                            one_pass.weights.slice(s![.., start + i, keys[j]]).to_owned();
                        assert!(
                            max_diff(&got, &want) < 1e-12,
                            "{case}: query {}, key {}",
                            start + i,
                            keys[j]
                        );
                    }
                    start += chunk;
                }
                assert_eq!(cache.position(), l);
            }
        }
    }

    #[test]
    fn prefill_refuses_what_does_not_fit_and_leaves_the_cache_as_it_was() {
        let [mha, gqa, _] = &layers::<f64>()[..] else { unreachable!() };
        let x: Array2<f64> = random_matrix(5, 16, 1.0, &mut StdRng::seed_from_u64(7));
        let mut cache = gqa.new_cache(4, None).unwrap();
        gqa.prefill(&x.slice(s![..2, ..]), &mut cache).unwrap();
        let before = cache.clone();
        // 2 cached + 3 more > 4 slots: position 4 is the first with no room
        let err = gqa.prefill(&x.slice(s![2.., ..]), &mut cache).unwrap_err();
        assert_eq!(err, AttentionError::CacheFull { capacity: 4, position: 4 });
        assert_eq!(cache, before);
        assert_eq!(
            gqa.prefill(&Array2::zeros((0, 16)), &mut cache).unwrap_err().to_string(),
            "x has L = 0: it must be at least 1"
        );
        assert_eq!(
            mha.prefill(&x.slice(s![..1, ..]), &mut cache).unwrap_err().to_string(),
            "k has shape [4, 4] but a shape (kv_heads, d_head) = (2, 4) was expected"
        );
        assert_eq!(cache, before);
        // a windowed cache takes a prompt longer than its window and keeps the last W
        let mut window = gqa.new_cache(1, Some(2)).unwrap();
        gqa.prefill(&x, &mut window).unwrap();
        assert_eq!((window.positions(), window.position()), (vec![4, 3], 5));
    }

    #[test]
    fn a_windowed_cache_never_holds_more_than_w_tokens() {
        let gqa = &layers::<f64>()[2];
        let x: Array2<f64> = random_matrix(20, 16, 1.0, &mut StdRng::seed_from_u64(3));
        for window in 1..6 {
            let mut cache = gqa.new_cache(1, Some(window)).unwrap();
            let bytes = cache.bytes();
            assert_eq!(bytes, window * kv_cache_bytes_per_token(1, 1, 4, 8));
            for t in 0..20 {
                gqa.step(&x.row(t), &mut cache).unwrap();
                assert_eq!(cache.len(), (t + 1).min(window));
                assert_eq!(cache.keys().dim(), (1, (t + 1).min(window), 4));
                assert_eq!(cache.slots(), window);
                assert_eq!(cache.bytes(), bytes);
                let mut positions = cache.positions();
                for (slot, &p) in positions.iter().enumerate() {
                    assert_eq!(p % window, slot);
                }
                positions.sort();
                let first = (t + 1).saturating_sub(window);
                assert_eq!(positions, (first..=t).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn a_full_cache_refuses_token_n_plus_1_and_stays_as_it_was() {
        let gqa = &layers::<f64>()[0];
        let mut cache = gqa.new_cache(3, None).unwrap();
        for _ in 0..3 {
            gqa.step(&Array1::ones(16), &mut cache).unwrap();
        }
        let before = cache.clone();
        let err = gqa.step(&Array1::ones(16), &mut cache).unwrap_err();
        assert_eq!(err, AttentionError::CacheFull { capacity: 3, position: 3 });
        assert_eq!(
            err.to_string(),
            "the KV cache is full: it holds 3 tokens and has no room for token 3"
        );
        assert_eq!(cache, before);
        assert_eq!(cache.bytes(), 3 * kv_cache_bytes_per_token(1, 4, 4, 8));
    }

    #[test]
    fn decoding_refuses_bad_windows_caches_and_tokens() {
        let [mha, gqa, _] = &layers::<f64>()[..] else { unreachable!() };
        let x = Array2::<f64>::zeros((4, 16));
        assert_eq!(mha.decode(&x, Some(0)).unwrap_err(), AttentionError::ZeroWindow);
        assert_eq!(
            mha.decode(&Array2::zeros((0, 16)), None).unwrap_err().to_string(),
            "x has L = 0: it must be at least 1"
        );
        assert_eq!(
            mha.decode(&Array2::zeros((4, 15)), None).unwrap_err().to_string(),
            "x has d_in = 15 but W has d_in = 16"
        );
        let mut other = gqa.new_cache(4, None).unwrap(); // G = 2: not mha's cache
        assert_eq!(
            mha.step(&Array1::zeros(16), &mut other).unwrap_err().to_string(),
            "k has shape [4, 4] but a shape (kv_heads, d_head) = (2, 4) was expected"
        );
        assert!(other.is_empty());
        let mut cache = KvCache::<f64>::new(2, 4, 4).unwrap();
        assert_eq!(
            cache
                .append(&Array2::zeros((2, 4)), &Array2::zeros((2, 3)))
                .unwrap_err()
                .to_string(),
            "v has shape [2, 3] but a shape (kv_heads, d_head) = (2, 4) was expected"
        );
        assert!(cache.is_empty());
        for (g, d, n, dim) in
            [(0, 4, 4, "kv_heads"), (2, 0, 4, "d_head"), (2, 4, 0, "capacity")]
        {
            assert_eq!(
                KvCache::<f64>::new(g, d, n).unwrap_err().to_string(),
                format!("KV cache has {dim} = 0: it must be at least 1")
            );
        }
    }

    #[test]
    fn token_cost_counts_the_shapes_multiply_adds() {
        // d_model = 16, H = 4, G = 2, d_head = 4: W_Q, W_O 16 × 16, W_K, W_V 16 × 8
        let per_token = 2 * 16 * 16 + 2 * 16 * 8;
        for n in [1, 2, 7, 100] {
            let cached = token_cost(16, 4, 2, n, true).unwrap();
            assert_eq!(cached, TokenCost { projections: per_token, attention: 2 * n * 16 });
            let uncached = token_cost(16, 4, 2, n, false).unwrap();
            assert_eq!(uncached.projections, n * per_token);
            assert_eq!(uncached.attention, n * n * 2 * 16);
            // the first token costs the same either way
            assert_eq!(n == 1, cached == uncached);
        }
        // with or without a cache, attention overtakes the projections past
        // n = d_model + G·d_head, and the cache saves a factor n
        let crossover = 16 + 2 * 4;
        for n in [crossover - 1, crossover, crossover + 1] {
            for cached in [true, false] {
                let c = token_cost(16, 4, 2, n, cached).unwrap();
                assert_eq!(c.attention.cmp(&c.projections), n.cmp(&crossover), "n = {n}");
            }
            let (with, without) = (
                token_cost(16, 4, 2, n, true).unwrap(),
                token_cost(16, 4, 2, n, false).unwrap(),
            );
            assert_eq!(without.total(), n * with.total());
        }
        assert_eq!(
            token_cost(16, 4, 3, 1, true).unwrap_err(),
            AttentionError::KvHeads { heads: 4, kv_heads: 3 }
        );
        assert_eq!(
            token_cost(16, 3, 1, 1, true).unwrap_err(),
            AttentionError::Heads { heads: 3, d_model: 16 }
        );
    }

    #[test]
    fn cache_bytes_per_token_is_two_layers_kv_heads_d_head_bytes() {
        // 2 (k and v) · 32 layers · 8 kv heads · 128 · 2 bytes
        assert_eq!(kv_cache_bytes_per_token(32, 8, 128, 2), 131_072);
        let cache = KvCache::<f32>::new(8, 128, 1000).unwrap();
        assert_eq!(cache.bytes(), 1000 * kv_cache_bytes_per_token(1, 8, 128, 4));
    }
}
