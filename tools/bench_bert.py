#!/usr/bin/env python3
"""Times transformers' forward pass of all-MiniLM-L6-v2 on one 16-token sentence (chapter 13).

Run it from anywhere in the repository (torch and transformers as pinned in
tools/requirements.txt; no network: the model is the committed copy in
crates/pretrained/model/all-MiniLM-L6-v2):

    python3 tools/bench_bert.py                      # PyTorch alone
    python3 tools/bench_bert.py --compare            # ours and PyTorch side by side
    python3 tools/bench_bert.py --compare --rounds 5 # 5 interleaved rounds, best median of each

What is timed, on the PyTorch side: BertModel's forward pass (attn_implementation="eager",
float32 weights and arithmetic, model.eval(), torch.no_grad(), torch.set_num_threads(2)) from
token ids to the last hidden states of one sentence of 16 tokens ([CLS] and [SEP] included;
the ids are prepared once, outside the timing). Each measurement is the median wall-clock time
of --runs calls (50) after --warmup calls (5).

--compare also runs `cargo run --release --example ch13_real_model -- --time "SENTENCE"`, which
times our two forward passes of the same sentence, taking turns, and prints a line
`fast path: median X ms` (the weights packed once, f32 kernels) and a line
`plain path: median Y ms` (the layers as the chapters built them, where the chapter's figures
come from);
RAYON_NUM_THREADS and MATMUL_NUM_THREADS are set to --threads for it. With --rounds N, ours
and PyTorch alternate N times, ours first, so that a change in the machine's load affects both
alike; each side's best median is reported, and the ratios ours / PyTorch (below 1: ours is
faster).

The machine's other load shows up in every number: close other programs, and rerun when the
numbers look noisy.
"""

import argparse
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import time

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL = ROOT / "crates" / "pretrained" / "model" / "all-MiniLM-L6-v2"
SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank."
TOKENS = 16
FLAGS = ["sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile"]


def cpu_summary():
    name, flags = platform.processor() or platform.machine(), set()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and name in ("", platform.machine(), platform.processor()):
                name = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    have = [f for f in FLAGS if f in flags] if flags else ["(unknown)"]
    return f"{name}, {os.cpu_count()} logical CPUs, flags: {' '.join(have)}"


def load(model_dir):
    from tokenizers import Tokenizer
    from transformers import AutoModel

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    model = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager", dtype=torch.float32, add_pooling_layer=False)
    model.eval()
    return tok, model


def torch_median_ms(tok, model, sentence, runs, warmup):
    ids = tok.encode(sentence).ids
    inputs = {
        "input_ids": torch.tensor([ids]),
        "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
        "token_type_ids": torch.zeros(1, len(ids), dtype=torch.long),
    }
    times = []
    with torch.no_grad():
        for i in range(warmup + runs):
            start = time.perf_counter()
            model(**inputs)
            if i >= warmup:
                times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def our_medians_ms(sentence, threads):
    """Our fast path's and plain path's median times, in ms."""
    command = ["cargo", "run", "--quiet", "--release", "--example", "ch13_real_model", "--", "--time", sentence]
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), MATMUL_NUM_THREADS=str(threads))
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"error: {' '.join(command)} failed ({done.returncode}):\n{done.stderr.strip()}")
    medians = []
    for path in ("fast", "plain"):
        match = re.search(path + r" path:\s+median\s+([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)\s*ms", done.stdout)
        if match is None:
            sys.exit(f"error: no `{path} path: median X ms` in the output of {' '.join(command)}:\n{done.stdout.strip()}")
        medians.append(float(match.group(1)))
    return tuple(medians)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compare", action="store_true", help="also time ours, both paths (cargo run --release --example ch13_real_model -- --time)")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds of ours and PyTorch; the best median of each is reported")
    parser.add_argument("--runs", type=int, default=50, help="timed calls per median (default 50)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls first (default 5)")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    parser.add_argument("--sentence", default=SENTENCE, help=f"the sentence (default: {TOKENS} tokens)")
    parser.add_argument("--model", type=pathlib.Path, default=MODEL, help="a BERT-layout directory (default: the committed copy)")
    args = parser.parse_args()
    if args.rounds < 1 or args.runs < 1 or args.warmup < 0 or args.threads < 1:
        parser.error("--rounds, --runs and --threads must be at least 1, --warmup at least 0")
    if not (args.model / "model.safetensors").is_file():
        sys.exit(f"error: {args.model} has no model.safetensors")

    torch.set_num_threads(args.threads)
    tok, model = load(args.model)
    tokens = len(tok.encode(args.sentence).ids)
    print(f"CPU: {cpu_summary()}")
    print(f"torch {torch.__version__} (CPU capability {torch.backends.cpu.get_cpu_capability()}), {args.threads} threads")
    print(f"sentence: {args.sentence!r} ({tokens} tokens with [CLS] and [SEP])")
    print(f"forward pass, f32, median of {args.runs} runs after {args.warmup} warm-up runs, {args.rounds} round(s)")

    fast, plain, theirs = [], [], []
    for r in range(args.rounds):
        if args.compare:
            ours = our_medians_ms(args.sentence, args.threads)
            fast.append(ours[0])
            plain.append(ours[1])
        theirs.append(torch_median_ms(tok, model, args.sentence, args.runs, args.warmup))
        line = f"round {r + 1}: PyTorch {theirs[-1]:.3f} ms"
        if args.compare:
            line += f", ours {fast[-1]:.3f} ms (fast path), {plain[-1]:.3f} ms (plain path)"
        print(line)
    best_torch = min(theirs)
    print(f"PyTorch:          best median {best_torch:.3f} ms")
    if args.compare:
        for name, times in (("fast path", fast), ("plain path", plain)):
            print(f"ours, {name + ':':<11} best median {min(times):.3f} ms, ratio ours / PyTorch {min(times) / best_torch:.3f}")


if __name__ == "__main__":
    main()
