#!/usr/bin/env python3
"""Writes a tiny GPT-2 checkpoint and PyTorch's numbers for it, which chapter 15's GPT and
`pretrained::gpt2` must reproduce (crates/pretrained/tests/gpt2_reference.rs).

Run from anywhere in the repository, with the pins of tools/requirements.txt (torch 2.15.0,
transformers 5.23.0, safetensors 0.8.0) and no network:

    python3 tools/make_gpt_fixtures.py

The tests read what this writes and never run Python. Two runs write identical bytes.

What it writes, in crates/pretrained/tests/fixtures/tiny-gpt2/:

  config.json model.safetensors   transformers' GPT2LMHeadModel with biases (2 blocks of 2 heads,
                                  n_embd 16, n_positions 8, the exact GELU "gelu", epsilon 1e-5,
                                  no dropout, head tied to wte, bos/eos null), every parameter
                                  redrawn at random (seeded), saved by save_pretrained(
                                  safe_serialization=True) in float32; it also writes
                                  generation_config.json, which is deleted (the checkpoint layout
                                  is these three files). The weights file has no lm_head.weight
                                  (transformers drops a tied copy), which this script checks.
  vocab.json                      the 7 characters of TEXT, sorted, each with its rank as id
  reference.safetensors           everything float64 (the model loaded back from the directory
                                  and converted with .double(), so the reference starts from
                                  the stored float32 weights), ids int64:
      tokens targets              (2, 6): windows of TEXT at OFFSETS, and the characters that
                                  follow each position
      logits                      (2, 6, 7)
      loss                        (1,): the mean cross-entropy of logits against targets
      grad.<name>                 the gradient of loss by autograd for every parameter, under
                                  its GPT-2 name (grad.transformer.wte.weight holds the tied
                                  head's share and the embedding's)
      adamw.tokens adamw.targets  (3, 2, 6): one batch per step, windows at STEP_OFFSETS
      adamw.lr                    (3,): the learning rate of each step, LRS
      adamw.loss                  (3,): the loss before each step
      adamw.grad_norm             (3,): the global gradient norm before clipping, as
                                  clip_grad_norm_ returns it (each is above 1: every step clips)
      adamw.<name>                every parameter after the third step

And, in crates/pretrained/tests/fixtures/shakespeare-char/, for the committed model of chapter
15 (crates/pretrained/model/shakespeare-char/, read by GPT2LMHeadModel.from_pretrained as it is):

  logits.safetensors              float64 (the stored float32 weights converted with .double()),
                                  ids int64: tokens (2, 64), the first two windows of 64
                                  characters of the validation text (the corpus's last 10 %),
                                  and logits (2, 64, 71)

The three steps are nanoGPT's: torch.optim.AdamW with betas (0.9, 0.99), eps 1e-8, weight decay
0.1 on the tensors with two axes and 0 on the others, and
torch.nn.utils.clip_grad_norm_(params, 1.0) before each step.
"""

import importlib.metadata
import json
import os
import pathlib
import shutil
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import safetensors  # noqa: E402
import safetensors.torch  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

PINS = {"torch": "2.15.0", "transformers": "5.23.0", "safetensors": "0.8.0"}

OUT = pathlib.Path(__file__).resolve().parent.parent / "crates/pretrained/tests/fixtures/tiny-gpt2"
TEXT = "to be or not to be"  # 7 distinct characters
T = 6  # positions per window, fewer than n_positions = 8: wpe's last rows get no gradient
OFFSETS = [0, 7]
STEP_OFFSETS = [[3, 9], [1, 11], [5, 10]]
LRS = [1e-2, 6e-3, 3e-3]
SEED = 1500
KEPT_FILES = ["config.json", "model.safetensors"]


def fail(message):
    raise SystemExit(f"error: {message}")


def check_versions():
    for name, pin in PINS.items():
        found = importlib.metadata.version(name)
        if found != pin:
            print(f"warning: {name} {found} is installed, tools/requirements.txt pins {pin}", file=sys.stderr)


def windows(ids, offsets):
    """(tokens, targets), each (len(offsets), T): T ids from each offset, and the ids one further."""
    tokens = torch.tensor([ids[o : o + T] for o in offsets])
    targets = torch.tensor([ids[o + 1 : o + T + 1] for o in offsets])
    return tokens, targets


def loss_of(model, tokens, targets):
    logits = model(input_ids=tokens).logits
    return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def write_checkpoint(chars):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=len(chars),
        n_positions=8,
        n_ctx=8,
        n_embd=16,
        n_layer=2,
        n_head=2,
        n_inner=None,
        activation_function="gelu",
        layer_norm_epsilon=1e-5,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=True,
        scale_attn_weights=True,
        bos_token_id=None,
        eos_token_id=None,
        bias=True,  # ours: the shifts are trained (transformers keeps the key)
    )
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(config)
    # GPT-2's own initialisation (N(0, 0.02), gains 1, shifts 0) gives near-uniform attention
    # and a gradient that a swapped gain and shift would not change: redraw every parameter.
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.copy_(1 + 0.2 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            elif name.startswith(("transformer.wte", "transformer.wpe")):
                p.copy_(0.5 * noise)
            else:
                p.copy_(0.3 * noise)
    if OUT.exists():
        shutil.rmtree(OUT)
    model.save_pretrained(str(OUT), safe_serialization=True)
    written = sorted(p.name for p in OUT.iterdir())
    print(f"save_pretrained wrote {written}")
    for name in written:
        if name not in KEPT_FILES:
            (OUT / name).unlink()
    names = safetensors.safe_open(str(OUT / "model.safetensors"), "pt").keys()
    if any(n.startswith("lm_head") for n in names) or len(names) != 2 + 12 * 2 + 2:
        fail(f"model.safetensors holds {sorted(names)}")
    vocab = {c: i for i, c in enumerate(chars)}
    (OUT / "vocab.json").write_text(json.dumps(vocab, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def load_checkpoint():
    """The saved directory, as transformers reads it, checked, in float64."""
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(str(OUT), attn_implementation="eager")
    if model.dtype != torch.float32:
        fail(f"the checkpoint loaded as {model.dtype}")
    if model.lm_head.weight is not model.transformer.wte.weight:
        fail("the LM head is not tied to wte")
    u = torch.linspace(-4, 4, 101)
    if not torch.equal(model.transformer.h[0].mlp.act(u), F.gelu(u)):
        fail("activation_function 'gelu' is not the exact GELU")
    config = json.loads((OUT / "config.json").read_text())
    if config.get("bias") is not True or config["bos_token_id"] is not None:
        fail(f"config.json lost a key: {config}")
    model.generate(torch.tensor([[0, 1]]), max_new_tokens=3, do_sample=False)  # null bos/eos are fine
    return model.double().eval()


def adamw_steps(model, ids, refs):
    """nanoGPT's optimiser for three steps; the norms, losses and final parameters go into refs."""
    named = list(model.named_parameters())
    groups = [
        {"params": [p for _, p in named if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for _, p in named if p.dim() < 2], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=LRS[0], betas=(0.9, 0.99), eps=1e-8, foreach=False)
    batches = [windows(ids, offsets) for offsets in STEP_OFFSETS]
    norms, losses = [], []
    for (tokens, targets), lr in zip(batches, LRS):
        opt.zero_grad()
        _, loss = loss_of(model, tokens, targets)
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item())
        losses.append(loss.item())
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
    if min(norms) <= 1.0:
        fail(f"a step did not clip: norms {norms}")
    refs["adamw.tokens"] = torch.stack([b[0] for b in batches])
    refs["adamw.targets"] = torch.stack([b[1] for b in batches])
    refs["adamw.lr"] = torch.tensor(LRS, dtype=torch.float64)
    refs["adamw.loss"] = torch.tensor(losses, dtype=torch.float64)
    refs["adamw.grad_norm"] = torch.tensor(norms, dtype=torch.float64)
    for name, p in named:
        refs[f"adamw.{name}"] = p.detach().clone()
    print(f"AdamW: losses {losses}, norms before clipping {norms}")


def main():
    check_versions()
    torch.set_num_threads(1)  # one thread: the same summation order on every run
    chars = sorted(set(TEXT))
    if len(chars) != 7:
        fail(f"TEXT has {len(chars)} characters, not 7")
    ids = [chars.index(c) for c in TEXT]
    write_checkpoint(chars)

    model = load_checkpoint()
    start = {k: v.clone() for k, v in model.state_dict().items()}
    tokens, targets = windows(ids, OFFSETS)
    logits, loss = loss_of(model, tokens, targets)
    loss.backward()
    refs = {"tokens": tokens, "targets": targets, "logits": logits.detach(), "loss": loss.detach().reshape(1)}
    for name, p in model.named_parameters():
        refs[f"grad.{name}"] = p.grad.detach().clone()
    print(f"loss {loss.item():.6f}; {len(list(model.parameters()))} parameters, {sum(p.numel() for p in model.parameters())} numbers")

    model.zero_grad()
    model.load_state_dict(start)
    adamw_steps(model, ids, refs)
    safetensors.torch.save_file({k: v.contiguous() for k, v in refs.items()}, str(OUT / "reference.safetensors"))
    for path in sorted(OUT.iterdir()):
        print(f"  {path.stat().st_size:>8}  {path.relative_to(OUT.parent.parent.parent.parent.parent)}")


SHAKESPEARE = pathlib.Path(__file__).resolve().parent.parent / "crates/pretrained/model/shakespeare-char"
CORPUS = pathlib.Path(__file__).resolve().parent.parent / "data/shakespeare/input.txt"
SHAKESPEARE_OUT = OUT.parent / "shakespeare-char"


def committed_model_logits():
    """transformers' logits for the committed model on the start of the validation text."""
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(str(SHAKESPEARE), attn_implementation="eager").double().eval()
    vocab = json.loads((SHAKESPEARE / "vocab.json").read_text(encoding="utf-8"))
    text = CORPUS.read_text(encoding="utf-8")
    val = text[int(0.9 * len(text)):]  # attention::gpt::data::train_and_validation's cut
    if int(0.9 * len(text)) != len(text) * 9 // 10:
        fail("the validation split differs from the train tool's")
    ids = [vocab[c] for c in val[:128]]
    tokens = torch.tensor(ids, dtype=torch.int64).reshape(2, 64)
    with torch.no_grad():
        logits = model(tokens).logits
    SHAKESPEARE_OUT.mkdir(parents=True, exist_ok=True)
    path = SHAKESPEARE_OUT / "logits.safetensors"
    safetensors.torch.save_file({"tokens": tokens, "logits": logits.contiguous()}, str(path))
    print(f"  {path.stat().st_size:>8}  {path}")


if __name__ == "__main__":
    main()
    committed_model_logits()
