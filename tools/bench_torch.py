#!/usr/bin/env python3
"""Times PyTorch's CPU scaled_dot_product_attention on the shapes chapter 8 times ours on.

Run it from anywhere in the repository (torch as pinned in tools/requirements.txt):

    python3 tools/bench_torch.py                 # PyTorch alone: CSV L,causal,torch_ms
    python3 tools/bench_torch.py --compare       # ours and PyTorch side by side
    python3 tools/bench_torch.py --compare --gemm   # and the rates against torch's sgemm

Shapes: float32, (batch, heads, L, d) = (1, 8, L, 64), L in 128, 512, 1024, 2048, 4096
(--lengths to change), with and without is_causal=True, on torch.set_num_threads(2) (--threads
to change). Each case runs once to warm up, then --runs times (default 5), and the median
wall-clock time of those runs is one measurement, as examples/ch08_scale.rs does for ours (same
shapes, same thread count, same warm-up rule). The whole sweep is repeated --rounds times
(default 3), and each case reports its best (lowest) median: "best of 3 rounds of a 5-run
median". The CSV mode reports that statistic too (--rounds 1 gives a single median).

--compare also runs `cargo run --release --example ch08_scale -- --csv --lengths L --runs N
--threads T`, interleaved with PyTorch: in each round, for each length, ours first, then
PyTorch's same two cases, so that a change in the machine's load hits both sides alike. Above
the table it prints the CPU model and whether it has AVX2, FMA and AVX-512F, the torch version
and its CPU capability, the thread count and the statistic. The table gives, per case, the best
median in ms of our plain path, our tiled path and PyTorch, the ratio tiled / PyTorch of those
best medians (below 1: ours is faster), and each round's tiled / PyTorch ratio, so that the
scatter between rounds shows.

--gemm measures the rate of a dense float32 matrix product through torch: torch.mm of two
2048 × 2048 matrices on the same thread count, 2·n³ FLOPs, best of 5 after a warm-up, a
practical ceiling for this machine. It is measured before each length of each round, as often
as the cases, so that the machine's load hurts it no more than them, and the best measurement
counts. With --compare it goes into the header, and each non-causal row gets the tiled path's
rate, 4·L²·64·8 FLOPs (Q·Kᵀ and P·V, 8 heads) over its best time, and that rate as a share of
the sgemm rate. Without --compare the sgemm rate goes to stderr, so that stdout stays plain CSV.

The machine's other load shows up in every number: close other programs, and rerun the key
points when the numbers look noisy.
"""

import argparse
import csv
import io
import pathlib
import platform
import statistics
import subprocess
import sys
import time

import torch

HEADS = 8
D = 64
LENGTHS = [128, 512, 1024, 2048, 4096]
GEMM_N = 2048
GEMM_RUNS = 5
VECTOR_FLAGS = ("avx2", "fma", "avx512f")


def median_ms(runs, f):
    f()  # warm-up
    times = []
    for _ in range(max(runs, 1)):
        start = time.perf_counter()
        f()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def torch_times(lengths, runs, threads):
    """{(L, causal): median ms} of PyTorch's SDPA, one median per case."""
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(8)
    rows = {}
    sdpa = torch.nn.functional.scaled_dot_product_attention
    with torch.inference_mode():
        for length in lengths:
            q, k, v = (torch.rand(1, HEADS, length, D, generator=gen) * 2 - 1 for _ in range(3))
            for causal in (False, True):
                rows[(length, causal)] = median_ms(runs, lambda: sdpa(q, k, v, is_causal=causal))
    return rows


def our_times(lengths, runs, threads):
    """{(L, causal): (plain median ms, tiled median ms)} from examples/ch08_scale.rs --csv."""
    command = [
        "cargo", "run", "--quiet", "--release", "--example", "ch08_scale", "--",
        "--csv", "--lengths", ",".join(map(str, lengths)), "--runs", str(runs), "--threads", str(threads),
    ]
    root = pathlib.Path(__file__).resolve().parent.parent
    done = subprocess.run(command, capture_output=True, text=True, cwd=root)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed (exit {done.returncode}):\n{done.stderr}")
    rows = {}
    for r in csv.DictReader(io.StringIO(done.stdout)):
        rows[(int(r["L"]), r["causal"] == "true")] = (float(r["plain_ms"]), float(r["tiled_ms"]))
    return rows


def sgemm_gflops(threads):
    """GFLOP/s of torch.mm on two float32 GEMM_N × GEMM_N matrices: best of GEMM_RUNS after a warm-up."""
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(8)
    a, b = (torch.rand(GEMM_N, GEMM_N, generator=gen) for _ in range(2))
    with torch.inference_mode():
        torch.mm(a, b)  # warm-up
        best = float("inf")
        for _ in range(GEMM_RUNS):
            start = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - start)
    return 2 * GEMM_N**3 / best / 1e9


def cpu_description():
    """The CPU model and which of VECTOR_FLAGS it has, from /proc/cpuinfo where there is one."""
    model, flags = None, None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model is None:
                    model = value.strip()
                elif key == "flags" and flags is None:
                    flags = set(value.split())
    except OSError:
        pass
    model = model or platform.processor() or platform.machine() or "unknown CPU"
    if flags is None:
        return f"{model} (vector flags unknown: no /proc/cpuinfo)"
    return model + ": " + ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in VECTOR_FLAGS)


def tiled_gflops(length, ms):
    """Rate of the non-causal tiled path: Q·Kᵀ and P·V, 2·L²·d FLOPs each, for every head."""
    return 4 * length**2 * D * HEADS / (ms / 1e3) / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compare", action="store_true", help="also run ours and print a side-by-side table")
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)), help="comma-separated sequence lengths")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per case; their median is one measurement")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the whole sweep; each case keeps its best")
    parser.add_argument("--threads", type=int, default=2, help="threads for ours, PyTorch and the sgemm")
    parser.add_argument("--gemm", action="store_true", help="also measure torch's sgemm rate and compare the tiled path with it")
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    rounds = max(args.rounds, 1)
    statistic = f"best of {rounds} round{'s' if rounds > 1 else ''} of a {args.runs}-run median"

    # Per round, per length: ours first, then PyTorch's same cases, so that a change in the
    # machine's load during the sweep affects both sides of a row alike. The sgemm rate is
    # measured before each length, and the best one kept, like the times.
    ours_rounds, theirs_rounds, gemm_rates = [], [], []
    for _ in range(rounds):
        ours, theirs = {}, {}
        for length in lengths:
            if args.gemm:
                gemm_rates.append(sgemm_gflops(args.threads))
            if args.compare:
                ours.update(our_times([length], args.runs, args.threads))
            theirs.update(torch_times([length], args.runs, args.threads))
        ours_rounds.append(ours)
        theirs_rounds.append(theirs)
    cases = list(theirs_rounds[0])
    gemm = max(gemm_rates) if gemm_rates else None
    gemm_line = (
        f"sgemm: torch.mm, f32 {GEMM_N}×{GEMM_N} · {GEMM_N}×{GEMM_N}, {args.threads} threads, best of {GEMM_RUNS} after "
        f"a warm-up, measured {len(gemm_rates)} times ({min(gemm_rates):.1f} to {gemm:.1f}): {gemm:.1f} GFLOP/s"
        if gemm is not None
        else None
    )
    best_theirs = {c: min(r[c] for r in theirs_rounds) for c in cases}

    if not args.compare:
        if gemm_line:
            print(gemm_line, file=sys.stderr)
        print("L,causal,torch_ms")
        for length, causal in cases:
            print(f"{length},{str(causal).lower()},{best_theirs[(length, causal)]:.3f}")
        return

    print(f"CPU: {cpu_description()}")
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}")
    print(f"f32, {HEADS} heads, d = {D}, {args.threads} threads, {statistic} (ms; one warm-up run per case and round)")
    if gemm_line:
        print(gemm_line)
    header = "     L  causal   ours plain   ours tiled     PyTorch   tiled/PyTorch"
    if gemm is not None:
        header += "   tiled GFLOP/s  % of sgemm"
    print(header + "   rounds: tiled/PyTorch")
    for length, causal in cases:
        plain = min(r[(length, causal)][0] for r in ours_rounds)
        tiled = min(r[(length, causal)][1] for r in ours_rounds)
        torch_ms = best_theirs[(length, causal)]
        line = f"{length:>6}  {'yes' if causal else 'no':<6} {plain:>11.2f} {tiled:>12.2f} {torch_ms:>11.2f} {tiled / torch_ms:>15.2f}"
        if gemm is not None:
            if causal:
                line += f"{'-':>16}{'-':>12}"
            else:
                rate = tiled_gflops(length, tiled)
                line += f"{rate:>16.1f}{100 * rate / gemm:>11.0f}%"
        per_round = " ".join(
            f"{o[(length, causal)][1] / t[(length, causal)]:.2f}" for o, t in zip(ours_rounds, theirs_rounds)
        )
        print(f"{line}   {per_round}")


if __name__ == "__main__":
    sys.exit(main())
