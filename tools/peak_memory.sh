#!/usr/bin/env bash
# Peak memory of the plain and the tiled path, one head, d = 64, f32, L = 4096, 8192, 16384:
#
#     bash tools/peak_memory.sh [L ...]
#
# Runs `examples/ch08_scale --peak WHAT --len L` under `/usr/bin/time -v` (Debian: apt-get
# install time) and prints its maximum resident set size. WHAT = inputs only builds Q, K, V
# (the baseline: the program and its inputs); plain and tiled also compute the output once.
# "above inputs" is the peak minus that baseline.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x /usr/bin/time ]; then
    echo "error: /usr/bin/time is missing (Debian/Ubuntu: apt-get install time)" >&2
    exit 1
fi
lengths=("$@")
[ ${#lengths[@]} -gt 0 ] || lengths=(4096 8192 16384)
cargo build --quiet --release --example ch08_scale
bin=target/release/examples/ch08_scale

peak_kib() { # what, L -> max RSS in KiB
    /usr/bin/time -v "$bin" --peak "$1" --len "$2" 2>&1 >/dev/null | awk -F': ' '/Maximum resident set size/ {print $2}'
}

printf '%6s %11s %14s %14s %14s %16s %16s\n' L "inputs MiB" "baseline MiB" "plain MiB" "tiled MiB" "plain above in." "tiled above in."
for l in "${lengths[@]}"; do
    base=$(peak_kib inputs "$l")
    plain=$(peak_kib plain "$l")
    tiled=$(peak_kib tiled "$l")
    awk -v l="$l" -v b="$base" -v p="$plain" -v t="$tiled" 'BEGIN {
        printf "%6d %11.2f %14.1f %14.1f %14.1f %16.1f %16.1f\n", l, 3 * l * 64 * 4 / 1048576, b / 1024, p / 1024, t / 1024, (p - b) / 1024, (t - b) / 1024
    }'
done
