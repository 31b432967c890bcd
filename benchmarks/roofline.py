"""The machine's roofline: copy bandwidth against working-set size (the cache staircase) and a matmul roof.

    python benchmarks/roofline.py [--threads 1] [--quick]

Each row copies between two preallocated float32 buffers (no page faults), moving the stated bytes (half read, half
written); the last line is a 1024 x 1024 float32 matmul rate and the ridge point it implies with the largest size's
bandwidth. The input layer's arithmetic intensity is at most 0.25 FLOP/byte in float32 (1/6 at batch 1;
course_embed.lab.roofline).
It measures the CPU only, whatever --device says (it says so when asked for cuda). This is a sweep of one
operation, not a comparison of variants, so it does not go through course_embed.lab.bench.compare and prints no
noise floor.
"""

from __future__ import annotations

from course_embed.lab import roofline

from common import machine, parse


def main() -> None:
    args = parse(__doc__.splitlines()[0])
    print(machine())
    if "cuda" in args.device:
        print("roofline.py measures the CPU only: no CUDA rows")
    sizes = [2**14, 2**16] if args.quick else [2**k for k in range(14, 31, 2)]  # 16 KiB ... 1 GiB
    sweep = roofline.bandwidth_sweep(sizes, threads=args.threads, min_run_time=0.005 if args.quick else 0.1)
    print(f"{'working set':>14}  {'GB/s':>6}")
    for nbytes, gbps in sweep:
        print(f"{nbytes / 2**20:10.3f} MiB  {gbps:6.1f}")
    n = 64 if args.quick else 1024
    peak = roofline.matmul_gflops(n, threads=args.threads, min_run_time=0.005 if args.quick else 0.2)
    print(
        f"matmul {n}^3 float32: {peak:.0f} GFLOP/s; ridge point {peak / sweep[-1][1]:.0f} FLOP/byte at the "
        f"largest working set; input layer (32, 128, 512): {roofline.input_layer_intensity(32, 128, 512):.2f} "
        f"FLOP/byte"
    )


if __name__ == "__main__":
    main()
