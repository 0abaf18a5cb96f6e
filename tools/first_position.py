#!/usr/bin/env python3
"""Where all-MiniLM-L6-v2's heads park their weight, measured with transformers (chapter 13).

Run it from anywhere in the repository (torch, transformers and sentence-transformers as pinned
in tools/requirements.txt; no network: the model is the committed copy in
crates/pretrained/model/all-MiniLM-L6-v2):

    python3 tools/first_position.py

It runs the chapter's grid sentence, "The cat sat on the mat because it was tired.", through
transformers' BertModel (attn_implementation="eager", float32, model.eval(), torch.no_grad(),
token type 0), as the tokenizer gives it and changed at its start, and prints for each input how
many of the 72 heads put more than half of their weight, averaged over the queries, on position
0 (and, for [CLS] moved to position 6, on position 6):

    as the tokenizer gives it, without [CLS], [SEP] in [CLS]'s place, [CLS] moved to
    position 6, and the positions 50 to 62 (position_ids) instead of 0 to 12.

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


def parked(model, ids, key=0, first=0):
    """How many heads put more than 0.5 of their weight, averaged over the queries, on `key`."""
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
    return int((weights[..., key].mean(-1) > 0.5).sum())


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
    print(f"transformers, eager, float32: heads over 0.5 on position 0 of {SENTENCE!r}")
    print(f"  as the tokenizer gives it                   {parked(model, ids):>2}")
    print(f"  without [CLS]                               {parked(model, ids[1:]):>2}")
    print(f"  [SEP] in [CLS]'s place                      {parked(model, sep_first):>2}")
    print(f"  [CLS] moved to position 6                   {parked(model, moved):>2}"
          f"   on [CLS] itself: {parked(model, moved, key=6)}")
    print(f"  positions 50 to 62 instead of 0 to 12       {parked(model, ids, first=50):>2}")

    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(MODEL), device="cpu")
    print("the committed float16 copy, loaded without a dtype:")
    print(f"  sentence-transformers: {sorted({str(p.dtype) for p in st.parameters()})}")
    print(f"  transformers:          {AutoModel.from_pretrained(str(MODEL)).dtype}")


if __name__ == "__main__":
    main()
