//! Chapter 10, *Generating one token at a time*: decoding through a KV cache, grouped-query
//! attention, the sliding window, and what the cache saves and costs.
//!
//! ```text
//! cargo run --release --example ch10_generation [-- --out-dir DIR] [--help]
//! cargo run --release --example ch10_generation -- --timings [--positions 1,16,256] [--runs N] [--csv FILE]
//! ```
//!
//! The first form prints the numbers the chapter quotes (the same text goes to
//! `ch10_output.txt`) and draws `ch10_generate.png`, `ch10_window.png`,
//! `ch10_window_cache.png`, `ch10_cost.png`, `ch10_time_per_token.png` and the diagram
//! `ch10_cache_growth.svg` (the cache growing by one key and one value per step).
//!
//! The last figure is drawn from a committed measurement, `examples/data/ch10_timings.csv`,
//! not from this run: timings are not reproducible byte for byte, the figures must be.
//! `--timings` measures on this machine (after the figures): the time per generated token with
//! and without the cache, at each position, and prints a table; `--csv FILE` also writes the
//! measurement in the committed file's format, with the CPU and build in its header. That is
//! how the committed file was made.

#[allow(dead_code)] // `run_chapter`: this example parses more options, with `common::parse`
mod common;
use common::stdout;
#[path = "common/timing.rs"]
mod timing;

use std::error::Error;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use attention::decode::{kv_cache_bytes_per_token, token_cost};
use attention::embeddings::{EmbeddingTable, Vocabulary};
use attention::gqa::GroupedQueryAttention;
use attention::mask::Mask;
use attention::multihead::{MultiHeadAttention, MultiHeadOutput};
use attention::rope::{Rope, RopeLayout};
use common::colors;
use figures::diagram::{Color, Diagram, Grid, Style, TextStyle};
use figures::{Axis, Heatmap, HeatmapGrid, LineChart, Panel, ValueRange};
use ndarray::{Array2, Axis as Ax, s};
use rand::{Rng, SeedableRng, rngs::StdRng};

/// The sentence generated token by token in the first figure.
const SENTENCE: &str = "the cat sat on the mat";
/// The longer sentence of the sliding-window figures, and the window.
const WINDOW_SENTENCE: &str = "the cat sat on the mat and slept";
const WINDOW: usize = 3;
/// The prompt of the prefill: the first tokens of `SENTENCE`, in one causal pass.
const PROMPT: usize = 3;
/// The small layer of the figures: d_model = 16, H = 4 query heads, G = 2 key/value heads,
/// d_head = 4, RoPE (rotate-half, base 10 000).
const D_MODEL: usize = 16;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const ROPE_BASE: f64 = 10_000.0;
/// The head whose weights the figures show.
const SHOWN_HEAD: usize = 0;
/// The layer of the cost model and the timings: d_model = 256, H = 8, G = 2 (d_head = 32).
const COST_D_MODEL: usize = 256;
const COST_HEADS: usize = 8;
const COST_KV_HEADS: usize = 2;
/// The positions of the cost table and figure.
const COST_POSITIONS: [usize; 13] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];
/// The positions of the timing sweep.
const POSITIONS: [usize; 9] = [1, 4, 16, 64, 128, 256, 512, 1024, 2048];
/// The committed measurement the timing figure is drawn from (made with `--timings --csv`).
const TIMINGS_CSV: &str = include_str!("data/ch10_timings.csv");
/// Where that file lives, for the report.
const TIMINGS_PATH: &str = "examples/data/ch10_timings.csv";
/// Seed of everything random.
const SEED: u64 = 10;

/// The tokens of a sentence, their embeddings `X: (L, d_model)` and the chapter's seeded
/// grouped-query layer with RoPE.
type Setup = (Vec<&'static str>, Array2<f64>, GroupedQueryAttention<f64>);

fn setup(sentence: &'static str) -> Result<Setup, Box<dyn Error>> {
    let tokens: Vec<&str> = sentence.split_whitespace().collect();
    let vocab = Vocabulary::from_sentence(WINDOW_SENTENCE); // both sentences' words
    let mut rng = StdRng::seed_from_u64(SEED);
    let table = EmbeddingTable::<f64>::random(vocab.len(), D_MODEL, &mut rng)?;
    let x = table.lookup(&vocab.encode(sentence)?)?;
    let rope = Rope::new(D_MODEL / HEADS, ROPE_BASE, RopeLayout::RotateHalf)?;
    let layer =
        GroupedQueryAttention::random(D_MODEL, HEADS, KV_HEADS, &mut rng)?.with_rope(rope)?;
    Ok((tokens, x, layer))
}

/// The largest absolute difference between two arrays of the same shape.
fn max_diff<D: ndarray::Dimension>(a: &ndarray::Array<f64, D>, b: &ndarray::Array<f64, D>) -> f64 {
    (a - b).mapv(f64::abs).fold(0.0, |m: f64, &d| m.max(d))
}

/// The weights of one query row `(L_k,)`, printed to 4 decimals.
fn row_text(row: ndarray::ArrayView1<f64>) -> String {
    row.iter().map(|w| format!("{w:.4}")).collect::<Vec<_>>().join(" ")
}

/// `bytes` in the largest binary unit that leaves a number of at least 1, to 2 decimals at
/// most (`512 KiB`, `1.25 GiB`).
fn human(bytes: usize) -> String {
    let units = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < units.len() {
        value /= 1024.0;
        unit += 1;
    }
    let text = format!("{value:.2}");
    format!("{} {}", text.trim_end_matches('0').trim_end_matches('.'), units[unit])
}

/// A number with thousands separators: `67,108,864`.
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A published model's attention shape.
struct Model {
    name: &'static str,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    d_head: usize,
    window: Option<usize>,
}

/// Published model configurations, with their sources.
///
/// - Llama 2 7B: `meta-llama/Llama-2-7b-hf` config.json: 32 layers, hidden 4096, 32 heads,
///   32 key/value heads (no GQA), so d_head = 128.
/// - Llama 2 70B: `meta-llama/Llama-2-70b-hf` config.json: 80 layers, hidden 8192, 64 heads,
///   8 key/value heads (GQA), d_head = 128.
/// - Llama 3 8B: `meta-llama/Meta-Llama-3-8B` config.json: 32 layers, hidden 4096, 32 heads,
///   8 key/value heads, d_head = 128.
/// - Mistral 7B (v0.1): `mistralai/Mistral-7B-v0.1` config.json and the reference code's
///   params.json: 32 layers, hidden 4096, 32 heads, 8 key/value heads, head_dim 128,
///   sliding_window 4096 (later Mistral 7B versions dropped the window).
/// - Falcon 7B: `tiiuae/falcon-7b` config.json: 32 layers, hidden 4544, 71 heads,
///   `multi_query: true` (one key/value head), so d_head = 4544 / 71 = 64; its fused
///   query_key_value projection has 4672 = (71 + 2) · 64 outputs. (Newer copies of the config
///   also carry `num_kv_heads: 71`, which Transformers ignores when `multi_query` is set.)
///
/// Checked against copies of those config.json files (the Hugging Face originals of the Llama
/// models are gated) and, for Falcon, against the module printout of the loaded model.
const MODELS: [Model; 5] = [
    Model { name: "Llama 2 7B", layers: 32, heads: 32, kv_heads: 32, d_head: 128, window: None },
    Model { name: "Llama 2 70B", layers: 80, heads: 64, kv_heads: 8, d_head: 128, window: None },
    Model { name: "Llama 3 8B", layers: 32, heads: 32, kv_heads: 8, d_head: 128, window: None },
    Model {
        name: "Mistral 7B",
        layers: 32,
        heads: 32,
        kv_heads: 8,
        d_head: 128,
        window: Some(4096),
    },
    Model { name: "Falcon 7B", layers: 32, heads: 71, kv_heads: 1, d_head: 64, window: None },
];

/// Everything the example prints, as one text (also written to `ch10_output.txt`).
fn report() -> Result<String, Box<dyn Error>> {
    let mut out = String::new();
    generation_report(&mut out)?;
    window_report(&mut out)?;
    cost_report(&mut out)?;
    timing_report(&mut out)?;
    size_report(&mut out)?;
    Ok(out)
}

/// Watch it generate: one step at a time through the cache.
fn generation_report(out: &mut String) -> Result<(), Box<dyn Error>> {
    let (tokens, x, layer) = setup(SENTENCE)?;
    let l = tokens.len();
    writeln!(out, "== Watch it generate ==")?;
    writeln!(
        out,
        "\"{SENTENCE}\": L = {l}, d_model = {D_MODEL}, d_head = {}\nH = {HEADS} query heads, G = {KV_HEADS} key/value heads",
        layer.d_head()
    )?;
    writeln!(
        out,
        "RoPE: rotate-half, base {ROPE_BASE}, applied to q and k at each token's position"
    )?;
    writeln!(out, "step  token  cache length  head {SHOWN_HEAD}'s weights over the cached keys")?;
    let mut cache = layer.new_cache(l, None)?;
    for (t, token) in tokens.iter().enumerate() {
        let step = layer.step(&x.row(t), &mut cache)?;
        writeln!(
            out,
            "{t:>4}  {token:<5}  {:>12}  {}",
            cache.len(),
            row_text(step.weights.row(SHOWN_HEAD))
        )?;
    }
    let one_pass = layer.forward(&x, Some(&Mask::causal(l)))?;
    let decoded = layer.decode(&x, None)?;
    let same = max_diff(&decoded.output, &one_pass.output) < 1e-12
        && max_diff(&decoded.weights, &one_pass.weights) < 1e-12;
    writeln!(out, "token by token == one causal pass (outputs and weights within 1e-12): {same}")?;
    // Prefill, then decode: the prompt in one causal pass that fills the cache, then one step
    // per token; every output row is the causal pass's.
    let mut filled = layer.new_cache(l, None)?;
    let prompt = layer.prefill(&x.slice(s![..PROMPT, ..]), &mut filled)?;
    let rows = one_pass.output.slice(s![..PROMPT, ..]).to_owned();
    let mut same = max_diff(&prompt.output, &rows) < 1e-12;
    for t in PROMPT..l {
        let step = layer.step(&x.row(t), &mut filled)?;
        same &= max_diff(&step.output, &one_pass.output.row(t).to_owned()) < 1e-12;
    }
    writeln!(
        out,
        "prefill \"{}\" in one causal pass, then one step each for \"{}\":\n  \
         every output row == the causal pass's (within 1e-12): {same}",
        tokens[..PROMPT].join(" "),
        tokens[PROMPT..].join(" ")
    )?;
    let (keys, values) = (cache.keys(), cache.values());
    writeln!(
        out,
        "the cache: keys {:?} and values {:?} (G, tokens, d_head); no query is kept",
        keys.shape(),
        values.shape()
    )?;
    // The causal pass over the first l - 1 tokens is the first l - 1 rows of the pass over l:
    // adding a token changes no earlier output, so no earlier query is needed again.
    let shorter = layer.forward(&x.slice(s![..l - 1, ..]), Some(&Mask::causal(l - 1)))?;
    let unchanged =
        max_diff(&shorter.output, &one_pass.output.slice(s![..l - 1, ..]).to_owned()) < 1e-12;
    writeln!(out, "adding token {} changes no earlier output (within 1e-12): {unchanged}", l - 1)?;
    // G = H is multi-head attention, with the same weights.
    let rng = &mut StdRng::seed_from_u64(SEED);
    let mha = MultiHeadAttention::<f64>::random(D_MODEL, HEADS, rng)?;
    let gqa = GroupedQueryAttention::<f64>::random(
        D_MODEL,
        HEADS,
        HEADS,
        &mut StdRng::seed_from_u64(SEED),
    )?;
    let equal = mha.forward(&x, None)? == gqa.forward(&x, None)?;
    writeln!(out, "G = H: grouped-query attention equals MultiHeadAttention exactly: {equal}")?;
    let err = GroupedQueryAttention::<f64>::random(D_MODEL, HEADS, 3, rng).unwrap_err();
    writeln!(out, "G = 3 with H = {HEADS}: error: {err}\n")?;
    Ok(())
}

/// The sliding window: its mask, the rolling cache, and the equivalence.
fn window_report(out: &mut String) -> Result<(), Box<dyn Error>> {
    let (tokens, x, layer) = setup(WINDOW_SENTENCE)?;
    let l = tokens.len();
    writeln!(out, "== Sliding window ==")?;
    writeln!(
        out,
        "\"{WINDOW_SENTENCE}\": L = {l}, W = {WINDOW}: query i sees keys j with 0 <= i - j < {WINDOW}"
    )?;
    let mask = Mask::sliding_window(l, WINDOW)?;
    let width = tokens.iter().map(|t| t.len()).max().unwrap_or(0);
    for (i, token) in tokens.iter().enumerate() {
        let cells: Vec<&str> =
            (0..l).map(|j| if mask.allows(&[i, j]) { "1" } else { "." }).collect();
        writeln!(out, "  {token:<width$}  {}", cells.join(" "))?;
    }
    let seen =
        |limit: usize| (0..l).map(|i| (i + 1).min(limit).to_string()).collect::<Vec<_>>().join(" ");
    writeln!(out, "keys per query: {} (W counting itself)", seen(WINDOW))?;
    writeln!(out, "with i - j = W let through as well: {} (W + 1 keys)", seen(WINDOW + 1))?;

    writeln!(
        out,
        "the windowed cache, position held by each of its {WINDOW} slots after each step:"
    )?;
    let mut cache = layer.new_cache(l, Some(WINDOW))?;
    let mut longest = 0;
    for (t, token) in tokens.iter().enumerate() {
        layer.step(&x.row(t), &mut cache)?;
        longest = longest.max(cache.len());
        let mut slots = vec!["-".to_string(); WINDOW];
        for (slot, p) in cache.positions().into_iter().enumerate() {
            slots[slot] = p.to_string();
        }
        writeln!(out, "  step {t} ({token:<width$}): [{}]", slots.join(", "))?;
    }
    writeln!(
        out,
        "cache length never above W = {WINDOW}: {}; its memory: {} bytes at every step (f64)",
        longest <= WINDOW,
        cache.bytes()
    )?;
    let windowed = layer.decode(&x, Some(WINDOW))?;
    let full = layer.forward(&x, Some(&mask))?;
    let same = max_diff(&windowed.output, &full.output) < 1e-12
        && max_diff(&windowed.weights, &full.weights) < 1e-12;
    writeln!(
        out,
        "windowed decoding == one pass with the sliding-window mask (within 1e-12): {same}\n"
    )?;
    Ok(())
}

/// The cost model: multiply-adds per generated token, from the shapes.
fn cost_report(out: &mut String) -> Result<(), Box<dyn Error>> {
    let d_head = COST_D_MODEL / COST_HEADS;
    writeln!(out, "== Cost per generated token (multiply-adds, one layer) ==")?;
    writeln!(
        out,
        "d_model = {COST_D_MODEL}, H = {COST_HEADS}, G = {COST_KV_HEADS}, d_head = {d_head}; the n-th token sees n tokens"
    )?;
    writeln!(
        out,
        "{:>6} {:>11} {:>11} {:>15} {:>15} {:>6}",
        "n", "cache: proj", "cache: attn", "no cache: proj", "no cache: attn", "ratio"
    )?;
    for n in COST_POSITIONS {
        let cached = token_cost(COST_D_MODEL, COST_HEADS, COST_KV_HEADS, n, true)?;
        let full = token_cost(COST_D_MODEL, COST_HEADS, COST_KV_HEADS, n, false)?;
        writeln!(
            out,
            "{n:>6} {:>11} {:>11} {:>15} {:>15} {:>6}",
            grouped(cached.projections),
            grouped(cached.attention),
            grouped(full.projections),
            grouped(full.attention),
            full.total() / cached.total()
        )?;
    }
    let crossover = COST_D_MODEL + COST_KV_HEADS * d_head;
    writeln!(
        out,
        "with or without a cache, attention overtakes the projections at n = d_model + G·d_head = {crossover}"
    )?;
    writeln!(
        out,
        "without a cache, both parts are n times larger: the n-th token costs n times as much\n"
    )?;
    Ok(())
}

/// One row of a timing run: the position and the median ms per token with and without cache.
struct Timing {
    position: usize,
    cached_ms: f64,
    uncached_ms: f64,
}

/// The committed measurement: its `#` header lines and its rows.
fn committed_timings() -> Result<(Vec<String>, Vec<Timing>), Box<dyn Error>> {
    let (header, fields) = timing::committed_csv(TIMINGS_CSV);
    let mut rows = Vec::new();
    for row in fields {
        let [position, cached, uncached] = row[..] else {
            return Err(format!("{TIMINGS_PATH}: a row must have 3 fields: {}", row.join(",")).into());
        };
        rows.push(Timing { position: position.parse()?, cached_ms: cached.parse()?, uncached_ms: uncached.parse()? });
    }
    Ok((header, rows))
}

/// The committed measurement, as the chapter quotes it.
fn timing_report(out: &mut String) -> Result<(), Box<dyn Error>> {
    let (header, rows) = committed_timings()?;
    writeln!(out, "== Measured time per generated token ({TIMINGS_PATH}) ==")?;
    for line in &header {
        writeln!(out, "{line}")?;
    }
    writeln!(out, "{:>8} {:>12} {:>14} {:>8}", "position", "cache ms", "no cache ms", "ratio")?;
    for r in &rows {
        writeln!(
            out,
            "{:>8} {:>12.4} {:>14.4} {:>8.1}",
            r.position,
            r.cached_ms,
            r.uncached_ms,
            r.uncached_ms / r.cached_ms
        )?;
    }
    writeln!(out)?;
    Ok(())
}

/// Parameters and cache sizes: MHA, GQA and MQA of one configuration, then published models.
fn size_report(out: &mut String) -> Result<(), Box<dyn Error>> {
    // Llama 2 7B's attention shape (d_model 4096, 32 heads of 128, 32 layers) with G varied.
    let (d_model, heads, d_head, layers, bytes, tokens) = (4096, 32, 128, 32, 2, 4096);
    writeln!(
        out,
        "== MHA, GQA, MQA: d_model = {d_model}, H = {heads}, d_head = {d_head}, {layers} layers, 16-bit cache =="
    )?;
    writeln!(
        out,
        "{:<4} {:>3} {:>12} {:>22} {:>16} {:>16}",
        "", "G", "W_K, W_V", "attention params/layer", "cache per token", "at 4096 tokens"
    )?;
    for (name, g) in [("MHA", 32), ("GQA", 8), ("GQA", 4), ("MQA", 1)] {
        let params = 2 * d_model * d_model + 2 * d_model * g * d_head;
        let per_token = kv_cache_bytes_per_token(layers, g, d_head, bytes);
        writeln!(
            out,
            "{name:<4} {g:>3} {:>12} {:>22} {:>16} {:>16}",
            format!("{d_model} × {}", g * d_head),
            grouped(params),
            human(per_token),
            human(per_token * tokens)
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "== KV cache per sequence, published models: 2·layers·kv_heads·d_head·2 bytes (16-bit) =="
    )?;
    writeln!(
        out,
        "{:<12} {:>6} {:>5} {:>8} {:>6} {:>15} {:>15}",
        "model", "layers", "heads", "kv heads", "d_head", "per token", "at 4096 tokens"
    )?;
    for Model { name, layers, heads, kv_heads, d_head, window } in MODELS {
        let per_token = kv_cache_bytes_per_token(layers, kv_heads, d_head, 2);
        writeln!(
            out,
            "{name:<12} {layers:>6} {heads:>5} {kv_heads:>8} {d_head:>6} {:>15} {:>15}",
            human(per_token),
            human(per_token * tokens)
        )?;
        if let Some(w) = window {
            let long = 32_768; // Mistral 7B v0.1's max_position_embeddings
            writeln!(
                out,
                "{:<12} window {w}: at {} tokens still {} (without the window: {})",
                "",
                grouped(long),
                human(per_token * w.min(long)),
                human(per_token * long)
            )?;
        }
    }
    Ok(())
}

/// The cells of an `(L, L)` weight matrix decoded up to step `t`: rows `0..=t` from the
/// steps; every other cell (a future query, or a key not in the cache) is to be marked.
fn generated_so_far(l: usize, t: usize) -> Array2<bool> {
    Array2::from_shape_fn((l, l), |(i, j)| i <= t && j <= i)
}

/// The diagram of decoding through a KV cache for steps `0..steps`, with queries and keys of
/// width `d_k` and values of width `d_v`: at step `t` the new token's query `q_t` meets `Kᵀ`,
/// the `t` cached keys and its own as columns, giving one new row of `t + 1` scores; their
/// softmax weighs the `t + 1` rows of `V`. What is computed at the step is coloured, what is
/// read from the cache is grey, and the key and value added to the cache are outlined.
fn cache_growth(steps: usize, d_k: usize, d_v: usize) -> Diagram {
    const CELL: f64 = 22.0;
    const BAND: f64 = 146.0;
    let cached = Color::GREY.tint(0.7);
    let label = TextStyle::new(15.0);
    let small = TextStyle::new(13.0).color(Color::MUTED);
    let new_edge = Color::INK;
    let mut d = Diagram::new(760, 84 + steps as u32 * BAND as u32 + 62, "Decoding with a KV cache: one new key, value and row of scores per step");
    d.describe(format!(
        "{steps} decoding steps, t = 0 to {}, one per band. At step t the new token gives a \
         query q_t, a key k_t and a value v_t, computed now. The transposed key cache K^T has \
         t + 1 columns: the t keys read from the cache, grey, and k_t, outlined, added now. q_t \
         times K^T is one new row of t + 1 scores, divided by the square root of d_k; softmax \
         turns it into weights, which multiply the value cache V, t + 1 rows: t cached and v_t \
         added now. The result is the output o_t. Queries are used once and never cached; the \
         caches grow by one column of K^T and one row of V per step.",
        steps - 1
    ));
    d.text(20.0, 28.0, "The KV cache: per step, one new key, one new value and one new row of scores", &TextStyle::new(16.0).bold());
    // The legend.
    let legend_y = 48.0;
    d.rect(20.0, legend_y, 16.0, 16.0, &Style::fill(colors::Q.tint(colors::FILL)).and_stroke(Color::GREY, 1.0));
    d.text(42.0, legend_y + 8.0, "computed at this step", &label.middle());
    d.rect(225.0, legend_y, 16.0, 16.0, &Style::fill(cached).and_stroke(Color::GREY, 1.0));
    d.text(247.0, legend_y + 8.0, "read from the cache", &label.middle());
    d.rect(420.0, legend_y, 16.0, 16.0, &Style::fill(Color::WHITE).and_stroke(new_edge, 3.0));
    d.text(442.0, legend_y + 8.0, "added to the cache at this step", &label.middle());

    for t in 0..steps {
        let y0 = 84.0 + t as f64 * BAND;
        if t > 0 {
            d.line((20.0, y0 - 6.0), (740.0, y0 - 6.0), &Style::stroke(Color::GREY.tint(0.5), 1.0));
        }
        let n = t + 1;
        let row_y = y0 + 28.0 + d_k as f64 * CELL + 6.0; // the row of q_t, the scores, the weights
        d.text(20.0, row_y - 34.0, &format!("step {t}"), &label.bold());
        d.text(20.0, row_y - 14.0, &format!("{t} cached, 1 new"), &small);
        // q_t: computed now, used once.
        let q = Grid::new((118.0, row_y), (1, d_k), (CELL, CELL)).fill(colors::Q.tint(colors::FILL)).border(colors::Q, 1.5);
        d.grid(&q);
        d.text(q.center().0, row_y - 7.0, &format!("q_{{{t}}}"), &label.centered());
        d.text(q.right() + 14.0, row_y + CELL / 2.0, "·", &label.bold().centered().middle());
        // Kᵀ: one column per key, the last one new.
        let kt = Grid::new((q.right() + 28.0, y0 + 28.0), (d_k, n), (CELL, CELL))
            .fill_with(|_, c| Some(if c == t { colors::K.tint(colors::FILL) } else { cached }));
        d.grid(&kt);
        d.rect(kt.left() + t as f64 * CELL, kt.top(), CELL, kt.height(), &Style::stroke(new_edge, 3.0));
        for c in 0..n {
            let style = if c == t { TextStyle::new(13.0).bold() } else { small };
            d.text(kt.cell(0, c).0, kt.top() - 6.0, &format!("k_{{{c}}}"), &style.centered());
        }
        d.text(kt.right() + 8.0, kt.top() + 12.0, "K^{T}", &label.middle());
        d.text(kt.right() + 8.0, kt.top() + 31.0, &format!("({d_k}, {n})"), &small.middle());
        // One new row of scores, under Kᵀ's columns.
        let scores = Grid::new((kt.left(), row_y), (1, n), (CELL, CELL)).fill(colors::Q.tint(colors::FILL)).border(colors::Q, 1.5);
        d.grid(&scores);
        let after = kt.left() + 4.0 * CELL + 12.0; // room for the widest row, at step 3
        d.arrow((scores.right() + 6.0, row_y + CELL / 2.0), (after + 62.0, row_y + CELL / 2.0), &Style::stroke(Color::MUTED, 1.5));
        d.text(after + 30.0, row_y - 6.0, "softmax", &small.centered());
        d.text(scores.center().0, row_y + CELL + 15.0, &format!("1 × {n} scores / √d_{{k}}"), &small.centered());
        // The weights times V: t + 1 rows, the last one new.
        let weights = Grid::new((after + 72.0, row_y), (1, n), (CELL, CELL)).fill(colors::Q.tint(colors::FILL)).border(colors::Q, 1.5);
        d.grid(&weights);
        d.text(weights.center().0, row_y + CELL + 15.0, "weights", &small.centered());
        let v_left = after + 72.0 + 4.0 * CELL + 30.0;
        d.text(v_left - 15.0, row_y + CELL / 2.0, "·", &label.bold().centered().middle());
        let v = Grid::new((v_left, row_y + CELL - n as f64 * CELL), (n, d_v), (CELL, CELL))
            .fill_with(|r, _| Some(if r == t { colors::V.tint(colors::FILL) } else { cached }));
        d.grid(&v);
        d.rect(v.left(), v.top() + t as f64 * CELL, v.width(), CELL, &Style::stroke(new_edge, 3.0));
        for r in 0..n {
            let style = if r == t { TextStyle::new(13.0).bold() } else { small };
            d.text(v.right() + 5.0, v.cell(r, 0).1, &format!("v_{{{r}}}"), &style.middle());
        }
        d.text(v.center().0, v.top() - 7.0, &format!("V ({n}, {d_v})"), &label.centered());
        // The output.
        let o_left = v.right() + 62.0;
        d.text(o_left - 18.0, row_y + CELL / 2.0, "=", &label.centered().middle());
        let o = Grid::new((o_left, row_y), (1, d_v), (CELL, CELL)).fill(colors::V.tint(colors::FILL)).border(colors::V, 1.5);
        d.grid(&o);
        d.text(o.center().0, row_y - 7.0, &format!("o_{{{t}}}"), &label.centered());
    }
    let bottom = 84.0 + steps as f64 * BAND;
    d.text(20.0, bottom + 18.0, "Queries are used once, in their own step, and never cached. Keys and values are computed once", &small);
    d.text(20.0, bottom + 38.0, "and read again at every later step: the caches gain one column of Kᵀ and one row of V per step.", &small);
    d
}

/// Draws this chapter's figures and writes its report into `out_dir`; returns the files written.
pub fn render_figures(out_dir: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let mut written = Vec::new();

    // (a) Watch it generate: the weights of one head, one more row per step.
    let (tokens, x, layer) = setup(SENTENCE)?;
    let MultiHeadOutput { weights, .. } = layer.decode(&x, None)?;
    let w = weights.index_axis(Ax(0), SHOWN_HEAD);
    let mut grid = HeatmapGrid::new().title(format!(
        "Decoding through the KV cache: head {SHOWN_HEAD}, one new query row per step"
    ));
    for (t, token) in tokens.iter().enumerate() {
        let shown = generated_so_far(w.nrows(), t);
        let keys = if t == 0 { "1 key".to_string() } else { format!("{} keys", t + 1) };
        let title = format!("step {t}: \"{token}\", {keys}");
        grid = grid.panel(Panel::new(&w).title(title).labels(&tokens).allowed(&shown));
    }
    let generate = out_dir.join("ch10_generate.png");
    grid.range(ValueRange::Fixed(0.0, 1.0))
        .colorbar_label("attention weight")
        .mask_mark("")
        .mask_legend("not computed (yet)")
        .columns(2)
        .axis_titles_on_every_panel()
        .annotate(true)
        .save(&generate)?;
    written.push(generate);

    // (b) The sliding window next to the causal mask, and the rolling cache.
    let (tokens, x, layer) = setup(WINDOW_SENTENCE)?;
    let l = tokens.len();
    let causal = layer.decode(&x, None)?.weights;
    let windowed = layer.decode(&x, Some(WINDOW))?.weights;
    let causal_mask = Mask::causal(l).as_array().into_dimensionality()?.to_owned();
    let window_mask = Mask::sliding_window(l, WINDOW)?.as_array().into_dimensionality()?.to_owned();
    let window_png = out_dir.join("ch10_window.png");
    HeatmapGrid::new()
        .title(format!("Head {SHOWN_HEAD}, causal and with a sliding window of W = {WINDOW}"))
        .panel(
            Panel::new(&causal.index_axis(Ax(0), SHOWN_HEAD))
                .title("causal: every earlier key")
                .labels(&tokens)
                .allowed(&causal_mask),
        )
        .panel(
            Panel::new(&windowed.index_axis(Ax(0), SHOWN_HEAD))
                .title(format!("window W = {WINDOW}: the last {WINDOW} keys"))
                .labels(&tokens)
                .allowed(&window_mask),
        )
        .range(ValueRange::Fixed(0.0, 1.0))
        .colorbar_label("attention weight")
        .mask_mark("0")
        .axis_titles_on_every_panel()
        .save(&window_png)?;
    written.push(window_png);

    let mut held = Array2::<f64>::zeros((l, WINDOW));
    let mut empty = Array2::from_elem((l, WINDOW), true);
    let mut cache = layer.new_cache(l, Some(WINDOW))?;
    for t in 0..l {
        layer.step(&x.row(t), &mut cache)?;
        for (slot, p) in cache.positions().into_iter().enumerate() {
            held[[t, slot]] = p as f64;
            empty[[t, slot]] = false;
        }
    }
    let steps: Vec<String> = tokens.iter().enumerate().map(|(t, w)| format!("{t}: {w}")).collect();
    let slots: Vec<String> = (0..WINDOW).map(|s| s.to_string()).collect();
    let cache_png = out_dir.join("ch10_window_cache.png");
    Heatmap::new(&held)
        .title(format!("The windowed cache (W = {WINDOW}):\nposition held by each slot"))
        .row_labels(&steps)
        .col_labels(&slots)
        .row_title("after step")
        .col_title("slot (position mod W)")
        .masked(&empty)
        .mask_mark("")
        .mask_legend("empty")
        .precision(0)
        .colorbar_label("position of the cached token")
        .save(&cache_png)?;
    written.push(cache_png);

    // The cache growing, as a diagram: the first four steps of a layer with d_k = 3, d_v = 2.
    let growth = cache_growth(4, 3, 2).save(out_dir.join("ch10_cache_growth.svg"))?;
    written.push(growth);

    // (c) The cost model.
    let cost = |cached: bool, pick: fn(attention::decode::TokenCost) -> usize| {
        COST_POSITIONS.map(|n| {
            let c = token_cost(COST_D_MODEL, COST_HEADS, COST_KV_HEADS, n, cached)
                .expect("valid shapes");
            (n as f64, pick(c) as f64)
        })
    };
    let cost_png = out_dir.join("ch10_cost.png");
    LineChart::new()
        .title(format!(
            "Multiply-adds per token, one layer (d = {COST_D_MODEL}, H = {COST_HEADS}, G = {COST_KV_HEADS})"
        ))
        .x_label("position n (tokens in view)")
        .y_label("multiply-adds")
        .x_axis(Axis::Log2)
        .y_axis(Axis::Log10)
        .series("no cache: projections, n·(2d² + 2d·G·d_head)", cost(false, |c| c.projections))
        .series("no cache: attention, 2·n²·d", cost(false, |c| c.attention))
        .series("cache: projections, 2d² + 2d·G·d_head", cost(true, |c| c.projections))
        .series("cache: attention, 2·n·d", cost(true, |c| c.attention))
        .save(&cost_png)?;
    written.push(cost_png);

    // (d) The committed measurement.
    let (header, rows) = committed_timings()?;
    let cpu = header.iter().find_map(|h| h.strip_prefix("CPU: ")).unwrap_or("unknown CPU");
    let cpu = cpu.split(" (").next().unwrap_or(cpu); // the model name, without the CPU count
    // Name the vector instructions too: the model name alone does not tell the generations
    // apart ("AMD EPYC" is every one of them).
    let avx512 = header.iter().any(|h| h.starts_with("CPU features") && h.contains("avx512f yes"));
    let cpu = if avx512 { format!("{cpu}, AVX-512") } else { cpu.to_string() };
    let time_png = out_dir.join("ch10_time_per_token.png");
    LineChart::new()
        .title(format!("Measured time per token, one layer, f32 ({cpu})"))
        .x_label("position n (tokens in view)")
        .y_label("median ms per token")
        .x_axis(Axis::Log2)
        .y_axis(Axis::Log10)
        .series(
            "no cache: the whole prefix again",
            rows.iter().map(|r| (r.position as f64, r.uncached_ms)),
        )
        .series("KV cache: one token", rows.iter().map(|r| (r.position as f64, r.cached_ms)))
        .save(&time_png)?;
    written.push(time_png);

    let text = out_dir.join("ch10_output.txt");
    std::fs::write(&text, report()?)?;
    written.push(text);
    Ok(written)
}

/// Random `f32` entries in `[-1, 1)`.
fn random(rows: usize, cols: usize, rng: &mut StdRng) -> Array2<f32> {
    Array2::from_shape_simple_fn((rows, cols), || rng.random_range(-1.0..1.0))
}

/// Times one generated token at each position: with the cache (one [`step`], the cache
/// holding the earlier tokens) and without (a causal [`forward`] over the whole prefix).
///
/// [`step`]: GroupedQueryAttention::step
/// [`forward`]: GroupedQueryAttention::forward
fn sweep(positions: &[usize], runs: usize) -> Result<Vec<Timing>, Box<dyn Error>> {
    let mut rng = StdRng::seed_from_u64(SEED);
    let layer =
        GroupedQueryAttention::<f32>::random(COST_D_MODEL, COST_HEADS, COST_KV_HEADS, &mut rng)?;
    let longest = positions.iter().max().copied().unwrap_or(1) + runs + 1;
    let x = random(longest, COST_D_MODEL, &mut rng);
    let mut rows = Vec::new();
    for &n in positions {
        // The cache holds tokens 0 … n − 2; each timed step adds one (n − 1, n, … ).
        let mut cache = layer.new_cache(n + runs + 1, None)?;
        if n > 1 {
            let (_, k, v) = layer.project(&x.slice(s![..n - 1, ..]), 0)?;
            for t in 0..n - 1 {
                cache.append(&k.slice(s![.., t, ..]), &v.slice(s![.., t, ..]))?;
            }
        }
        let mut next = n - 1;
        let cached_ms = timing::median_ms(runs, || {
            let step = layer.step(&x.row(next), &mut cache).map(|s| s.output);
            next += 1;
            step
        });
        let prefix = x.slice(s![..n, ..]);
        let mask = Mask::causal(n);
        let uncached_ms =
            timing::median_ms(runs, || layer.forward(&prefix, Some(&mask)).map(|o| o.output));
        rows.push(Timing { position: n, cached_ms, uncached_ms });
    }
    Ok(rows)
}

/// The measurement in the committed file's format.
fn csv(rows: &[Timing], runs: usize) -> String {
    let (cpu, features) = timing::machine();
    let d_head = COST_D_MODEL / COST_HEADS;
    let mut out = String::new();
    out += &format!(
        "# one GroupedQueryAttention layer, f32, d_model {COST_D_MODEL}, H {COST_HEADS}, G {COST_KV_HEADS}, d_head {d_head}, no RoPE\n"
    );
    out += &format!(
        "# median ms per generated token over {runs} tokens after one warm-up; one thread\n"
    );
    out += &format!("# CPU: {cpu}\n");
    out += &format!("# CPU features matrixmultiply detects at run time: {features}\n");
    let compiled = [
        ("avx2", cfg!(target_feature = "avx2")),
        ("fma", cfg!(target_feature = "fma")),
        ("avx512f", cfg!(target_feature = "avx512f")),
    ]
    .map(|(name, on)| format!("{name} {}", if on { "on" } else { "off" }))
    .join(", ");
    let profile = if cfg!(debug_assertions) { "debug assertions on" } else { "release" };
    out += &format!("# build: {profile}; compiled-in target features: {compiled}\n");
    out += "position,cached_ms,uncached_ms\n";
    for r in rows {
        out += &format!("{},{:.4},{:.4}\n", r.position, r.cached_ms, r.uncached_ms);
    }
    out
}

/// What `--help` says this example does.
const ABOUT: &str = "\
    Chapter 10, Generating one token at a time: decoding through a KV cache, grouped-query \
    attention, the sliding window, and what the cache saves and costs.\n\n\
    Prints the numbers the chapter quotes (the same text goes to ch10_output.txt) and draws \
    ch10_generate.png, ch10_window.png, ch10_window_cache.png, ch10_cost.png, \
    ch10_time_per_token.png and the diagram ch10_cache_growth.svg into book/img/ (or \
    --out-dir); ch10_time_per_token.png from the committed \
    measurement examples/data/ch10_timings.csv. With --timings, then measures the time per \
    generated token on this machine, with and without the cache.";

/// The command line.
#[derive(clap::Parser, Debug)]
struct Cli {
    #[command(flatten)]
    output: common::Output,
    /// After the figures, time one generated token at each position, with and without the
    /// cache, on this machine (f32, one thread) and print a table
    #[arg(long, conflicts_with = "figures_only")]
    timings: bool,
    /// With --timings: also write the measurement to FILE, in the format of the committed
    /// examples/data/ch10_timings.csv (CPU and build in its header)
    #[arg(long, value_name = "FILE", requires = "timings")]
    csv: Option<PathBuf>,
    /// The positions of the timing sweep
    #[arg(long, value_name = "N,N,...", value_delimiter = ',', default_values_t = POSITIONS,
        value_parser = at_least_one)]
    positions: Vec<usize>,
    /// Timed tokens per position, after one warm-up; the median is reported
    #[arg(long, value_name = "N", default_value_t = 9, value_parser = at_least_one)]
    runs: usize,
}

/// A count or a position on the command line: a whole number, at least 1.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("expected a whole number, at least 1".into()),
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let cli: Cli = common::parse(env!("CARGO_CRATE_NAME"), ABOUT);
    let dir = cli.output.dir()?;
    common::render_into(&dir, render_figures)?;
    if !cli.timings {
        return Ok(());
    }
    stdout::line(format_args!(
        "\nTime per generated token on this machine ({} tokens per position after one warm-up):",
        cli.runs
    ));
    let rows = sweep(&cli.positions, cli.runs)?;
    let text = csv(&rows, cli.runs);
    stdout::print(format_args!("{text}"));
    if let Some(path) = cli.csv {
        std::fs::write(&path, &text)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        stdout::line(format_args!("wrote {}", path.display()));
    }
    Ok(())
}
