#!/usr/bin/env python3
"""Where all-MiniLM-L6-v2's heads park their weight, measured with transformers (chapter 13).

Run it from anywhere in the repository (torch, transformers and sentence-transformers as pinned
in tools/requirements.txt; no network: the model is the committed copy in
crates/pretrained/model/all-MiniLM-L6-v2):

    python3 tools/first_position.py

It runs the chapter's grid sentence, "The cat sat on the mat because it was tired.", through
transformers' BertModel (attn_implementation="eager", float32, model.eval(), torch.no_grad(),
token type 0), as the tokenizer gives it and changed at its start, and prints for each input the
weight a head puts on position 0, averaged over the queries: its mean over the 72 heads and how
many heads put more than half there; where [CLS] stands elsewhere, the same for [CLS] (and how
many heads put more than 0.2 on it), and how many heads put more than half on the two together:

    as the tokenizer gives it, without [CLS], [SEP] in [CLS]'s place, [CLS] moved to
    position 6, a second [CLS] at position 7, the positions 50 to 62 (position_ids) instead of
    0 to 12, and without [CLS] at positions 50 to 62.

It then prints, for [CLS] moved to position 6, the heads over 0.3 on it and the three heads with
the most weight on the two together among those over 0.5 on neither alone; and the mean weight
on other tokens put at position 6 in the sentence without [CLS]: [SEP], ".", "dog", [MASK].

The chapter computes the same counts with the book's own layers (examples/ch13_real_model.rs,
asserted in the chapter's Check block); this script is the reference side. It also prints the
dtype in which sentence-transformers and transformers load the committed float16 copy when no
dtype is asked for.

Nothing here is needed by the tests.
"""

import os
import pathlib

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import torch  # noqa: E402
from transformers import AutoModel, AutoTokenizer  # noqa: E402
from transformers.utils import logging  # noqa: E402

MODEL = pathlib.Path(__file__).resolve().parent.parent / "crates/pretrained/model/all-MiniLM-L6-v2"
SENTENCE = "The cat sat on the mat because it was tired."
CLS, SEP = 101, 102


def weight_on(model, ids, first=0):
    """Every head's weight on every key, averaged over the queries: (layers, heads, L)."""
    t = torch.tensor([ids])
    positions = torch.arange(first, first + len(ids)).unsqueeze(0)
    with torch.no_grad():
        out = model(
            input_ids=t,
            token_type_ids=torch.zeros_like(t),
            position_ids=positions,
            output_attentions=True,
        )
    weights = torch.stack([a[0] for a in out.attentions])  # (layers, heads, L, L)
    return weights.mean(-2)


def row(what, w, cls=None):
    """One line of the table: position 0, and [CLS] at `cls` when it stands elsewhere."""
    line = f"  {what:<38}{float(w[..., 0].mean()):>6.3f} {int((w[..., 0] > 0.5).sum()):>5}"
    if cls is not None:
        c, both = w[..., cls], w[..., 0] + w[..., cls]
        line += (f"   {float(c.mean()):>5.3f} {int((c > 0.5).sum()):>5} {int((c > 0.2).sum()):>5}"
                 f"   {int((both > 0.5).sum()):>6}")
    print(line)


def main():
    logging.set_verbosity_error()
    model = AutoModel.from_pretrained(str(MODEL), attn_implementation="eager", dtype=torch.float32)
    model.eval()
    if model.dtype != torch.float32:
        raise SystemExit(f"{MODEL} loaded as {model.dtype}, not float32")
    ids = AutoTokenizer.from_pretrained(str(MODEL))(SENTENCE)["input_ids"]
    sep_first = [SEP] + ids[1:]
    moved = ids[1:]
    moved.insert(6, CLS)
    second = list(ids)
    second.insert(7, CLS)
    print(f"transformers, eager, float32: {SENTENCE!r} changed at its start; the weight on a key,")
    print("averaged over the queries: its mean over the 72 heads and the heads over 0.5 (one column:")
    print("over 0.2), on position 0, on [CLS] where it is not at 0, and on both:")
    print(f"{'':<40}{'position 0':>12}   {'[CLS] elsewhere':>17}   {'both':>6}")
    print(f"{'':<40}{'mean':>6} {'>0.5':>5}   {'mean':>5} {'>0.5':>5} {'>0.2':>5}   {'>0.5':>6}")
    row("as the tokenizer gives it", weight_on(model, ids))
    row("without [CLS]", weight_on(model, ids[1:]))
    row("[SEP] in [CLS]'s place", weight_on(model, sep_first))
    w = weight_on(model, moved)
    row("[CLS] moved to position 6", w, cls=6)
    row("a second [CLS] at position 7", weight_on(model, second), cls=7)
    row("positions 50 to 62 instead of 0 to 12", weight_on(model, ids, first=50))
    row("without [CLS], positions 50 to 62", weight_on(model, ids[1:], first=50))
    a, b = w[..., 0], w[..., 6]
    split = [(float(a[l, h] + b[l, h]), l, h) for l in range(a.shape[0]) for h in range(a.shape[1])
             if a[l, h] + b[l, h] > 0.5 and a[l, h] <= 0.5 and b[l, h] <= 0.5]
    most = ", ".join(f"{l}.{h} ({float(a[l, h]):.2f}, {float(b[l, h]):.2f})"
                     for _, l, h in sorted(split, reverse=True)[:3])
    print(f"[CLS] moved to position 6: {int((b > 0.3).sum())} heads over 0.3 on it; "
          f"{len(split)} over 0.5 on both, on neither alone, the most: {most}")
    others = []
    for name, token in [("[SEP]", SEP), ('"."', 1012), ('"dog"', 3899), ("[MASK]", 103)]:
        m = ids[1:]
        m.insert(6, token)
        others.append(f"{name} {float(weight_on(model, m)[..., 6].mean()):.3f}")
    print("other tokens at position 6, without [CLS], mean weight on them: " + ", ".join(others))

    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(MODEL), device="cpu")
    print("the committed float16 copy, loaded without a dtype:")
    print(f"  sentence-transformers: {sorted({str(p.dtype) for p in st.parameters()})}")
    print(f"  transformers:          {AutoModel.from_pretrained(str(MODEL)).dtype}")


if __name__ == "__main__":
    main()
