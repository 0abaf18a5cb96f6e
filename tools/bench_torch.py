#!/usr/bin/env python3
"""Times PyTorch's CPU scaled_dot_product_attention on the shapes chapter 8 times ours on.

Run it from anywhere in the repository (torch as pinned in tools/requirements.txt):

    python3 tools/bench_torch.py                 # PyTorch alone: CSV L,causal,torch_ms
    python3 tools/bench_torch.py --compare       # ours and PyTorch side by side

Shapes: float32, (batch, heads, L, d) = (1, 8, L, 64), L in 128, 512, 1024, 2048, 4096, with
and without is_causal=True, on torch.set_num_threads(2) (--threads to change). Each case runs
once to warm up, then --runs times; the median wall-clock time is reported, as
examples/ch08_scale.rs does for ours (same shapes, same thread count, same warm-up rule).

--compare also runs `cargo run --release --example ch08_scale -- --csv` with the same runs and
threads (one length at a time, alternating with PyTorch), then prints one table: median ms of our plain path, our tiled path and
PyTorch, and the ratio tiled / PyTorch (below 1: ours is faster).

The machine's other load shows up in every number: close other programs, and rerun the key
points when the numbers look noisy.
"""

import argparse
import csv
import io
import pathlib
import statistics
import subprocess
import sys
import time

import torch

HEADS = 8
D = 64
LENGTHS = [128, 512, 1024, 2048, 4096]


def median_ms(runs, f):
    f()  # warm-up
    times = []
    for _ in range(max(runs, 1)):
        start = time.perf_counter()
        f()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def torch_times(lengths, runs, threads):
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(8)
    rows = []
    with torch.inference_mode():
        for length in lengths:
            q, k, v = (torch.rand(1, HEADS, length, D, generator=gen) * 2 - 1 for _ in range(3))
            for causal in (False, True):
                sdpa = torch.nn.functional.scaled_dot_product_attention
                ms = median_ms(runs, lambda: sdpa(q, k, v, is_causal=causal))
                rows.append((length, causal, ms))
    return rows


def our_times(lengths, runs, threads):
    command = [
        "cargo", "run", "--quiet", "--release", "--example", "ch08_scale", "--",
        "--csv", "--lengths", ",".join(map(str, lengths)), "--runs", str(runs), "--threads", str(threads),
    ]
    root = pathlib.Path(__file__).resolve().parent.parent
    out = subprocess.run(command, check=True, capture_output=True, text=True, cwd=root).stdout
    rows = {}
    for r in csv.DictReader(io.StringIO(out)):
        rows[(int(r["L"]), r["causal"] == "true")] = (float(r["plain_ms"]), float(r["tiled_ms"]))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compare", action="store_true", help="also run ours and print a side-by-side table")
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]

    if args.compare:
        # One length at a time, ours then PyTorch's, so that a change in the machine's load
        # during the run affects both sides of a row alike.
        ours, theirs = {}, []
        for length in lengths:
            ours.update(our_times([length], args.runs, args.threads))
            theirs += torch_times([length], args.runs, args.threads)
    else:
        ours, theirs = None, torch_times(lengths, args.runs, args.threads)
    if ours is None:
        print("L,causal,torch_ms")
        for length, causal, ms in theirs:
            print(f"{length},{str(causal).lower()},{ms:.3f}")
        return
    print(f"f32, {HEADS} heads, d = {D}, {args.threads} threads, median of {args.runs} runs after a warm-up (ms)")
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}")
    print("     L  causal   ours plain   ours tiled     PyTorch   tiled/PyTorch")
    for length, causal, torch_ms in theirs:
        plain, tiled = ours[(length, causal)]
        print(f"{length:>6}  {'yes' if causal else 'no':<6} {plain:>11.2f} {tiled:>12.2f} {torch_ms:>11.2f} {tiled / torch_ms:>15.2f}")


if __name__ == "__main__":
    sys.exit(main())
