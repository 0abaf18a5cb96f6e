#!/usr/bin/env python3
"""Times writing 64 characters after prompts of 16 to 1024 characters, through the KV cache and
without it, in PyTorch (transformers' `generate`) and in the book's Rust, on this machine
(chapter 16).

Run it from anywhere in the repository (torch and transformers as pinned in
tools/requirements.txt; nothing is downloaded):

    python3 tools/bench_generate.py                 # both, side by side
    python3 tools/bench_generate.py --lengths 16,1024 --runs 5

The model is chapter 15's shape (GPT-2's decoder: 4 blocks of 4 heads, d_model = 128, a
vocabulary of 71 characters, no dropout, the exact GELU) with room for 2048 positions, so that
the longest prompt and what is written after it fit; random weights (the time does not depend
on them). On the PyTorch side: GPT2LMHeadModel in float32, model.eval(),
torch.inference_mode(), torch.set_num_threads(--threads), and
model.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False, use_cache=...)
(greedy, transformers' default attention implementation, SDPA); on ours,
`cargo run --release --example generate_speed`, the crate's fast f32 path through
attention::gpt::generate::Writer, which writes on one core whatever --threads says (PyTorch
gets --threads, 2 by default: the comparison gives PyTorch the machine's two cores and ours
one). Both time the whole call, the prompt's prefill included, and report characters written
per second, the median of --runs runs after one warm-up run. "No cache" is, on both sides, one
causal pass over the whole text for every character (transformers' use_cache=False; ours the
same pass, through a cache thrown away after it).

For a model this small, transformers' time per character is mostly Python's: generate's
bookkeeping and the modules' calls, not arithmetic. The table measures what a reader gets
from each library, not the arithmetic alone.

The machine's other load shows up in every number: close other programs, and rerun when the
numbers look noisy.
"""

import argparse
import csv
import io
import os
import statistics
import subprocess
import sys
import time

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

from bench_bert import ROOT, cpu_summary  # noqa: E402

NEW = 64


def torch_rates(lengths, runs):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=71, n_positions=2048, n_embd=128, n_layer=4, n_head=4,
                        activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).eval()
    rates = {}
    for length in lengths:
        ids = torch.randint(0, 71, (1, length))
        mask = torch.ones_like(ids)
        for cache in (True, False):
            def call():
                with torch.inference_mode():
                    out = model.generate(ids, attention_mask=mask, max_new_tokens=NEW, min_new_tokens=NEW,
                                         do_sample=False, use_cache=cache, pad_token_id=0)
                assert out.shape[1] == length + NEW
            call()  # warm-up
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                call()
                times.append(time.perf_counter() - start)
            rates[(length, cache)] = NEW / statistics.median(times)
    return rates


def our_rates(lengths, runs, threads):
    command = ["cargo", "run", "--quiet", "--release", "--example", "generate_speed", "--",
               "--lengths", ",".join(map(str, lengths)), "--tokens", str(NEW), "--runs", str(runs)]
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), MATMUL_NUM_THREADS=str(threads))
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"error: {' '.join(command)} failed ({done.returncode}):\n{done.stderr.strip()}")
    rates = {}
    for row in csv.DictReader(io.StringIO(done.stdout)):
        rates[(int(row["prompt"]), row["way"] == "cache")] = float(row["chars_per_second"])
    return rates


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="16,32,64,128,256,512,1024", help="prompt lengths, comma-separated (at most 1984)")
    parser.add_argument("--runs", type=int, default=3, help="runs per length and way; the median is reported")
    parser.add_argument("--threads", type=int, default=2, help="threads for both sides")
    parser.add_argument("--save", metavar="FILE",
                        help="also write the table as CSV (examples/data/ch16_speed.csv is the book's)")
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    if not lengths or min(lengths) < 1 or max(lengths) > 2048 - NEW or args.runs < 1 or args.threads < 1:
        parser.error("lengths must be 1 to 1984, --runs and --threads at least 1")
    torch.set_num_threads(args.threads)
    print(f"CPU: {cpu_summary()}")
    print(f"torch {torch.__version__}, {args.threads} threads; characters written per second, median of {args.runs}")
    ours = our_rates(lengths, args.runs, args.threads)
    theirs = torch_rates(lengths, args.runs)
    print(f"{'prompt':>6}  {'ours, cache':>11}  {'PyTorch, cache':>14}  {'ratio':>5}  {'ours, no cache':>14}  {'PyTorch, no cache':>17}  {'ratio':>5}")
    for length in lengths:
        row = [f"{length:>6}"]
        for cache in (True, False):
            a, b = ours[(length, cache)], theirs[(length, cache)]
            width = 11 if cache else 14
            row.append(f"{a:>{width}.1f}  {b:>{width + 3}.1f}  {a / b:>5.2f}")
        print("  ".join(row))
    print("ratio: ours / PyTorch, characters per second (above 1: ours is faster)")
    if args.save:
        save(args, lengths, ours, theirs)


def save(args, lengths, ours, theirs):
    """Writes the table as CSV, whole or not at all (a temporary file renamed over FILE)."""
    lines = [
        "# chapter 16: python3 tools/bench_generate.py --save examples/data/ch16_speed.csv",
        f"# CPU: {cpu_summary()}",
        f"# torch {torch.__version__} on {args.threads} threads, ours on one core; greedy, {NEW} characters written",
        f"# characters per second, the median of {args.runs} runs after a warm-up",
        "prompt,ours_cache,torch_cache,ours_no_cache,torch_no_cache",
    ]
    for length in lengths:
        values = [ours[(length, True)], theirs[(length, True)], ours[(length, False)], theirs[(length, False)]]
        lines.append(",".join([str(length)] + [f"{v:.1f}" for v in values]))
    temporary = args.save + ".part"
    with open(temporary, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
    os.replace(temporary, args.save)
    print(f"wrote {args.save}")


if __name__ == "__main__":
    main()
