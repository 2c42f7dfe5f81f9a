#!/usr/bin/python3
"""Writes PyTorch's float32 → bfloat16 and float32 → float16 roundings of many float32 values, as an
oracle for meshtrain's 16-bit conversions (tests/kernels/test_half_types.cpp).

The inputs are special values (±0, ±Inf, NaN, the formats' limits), every float16/bfloat16 value
and the midpoints between neighbours with one float32 ulp either side (where round-to-nearest-even
is decided), and random float32 bit patterns. Output, little-endian, no header:
  uint32 count, then count records of (uint32 float bits, uint16 bf16 bits, uint16 fp16 bits).

usage: /usr/bin/python3 make_half_reference.py --out half_reference.bin [--random 200000 --seed 3]
"""
import argparse

import numpy as np
import torch


def neighbours_and_midpoints(dtype):
    """Every finite value of the 16-bit dtype, and the float32 midpoints between consecutive ones
    with their float32 neighbours."""
    bits = np.arange(0, 1 << 15, dtype=np.int32).astype(np.int16)  # non-negative patterns
    values = torch.from_numpy(bits).view(dtype).to(torch.float64)
    values = values[torch.isfinite(values)]
    values, _ = torch.sort(values)
    mids = (values[1:] + values[:-1]) / 2  # exact in float64; exact in float32 too
    mids32 = mids.to(torch.float32)
    up = torch.nextafter(mids32, torch.full_like(mids32, float("inf")))
    down = torch.nextafter(mids32, torch.zeros_like(mids32))
    # above the largest finite value: its midpoint with the next power of two, and neighbours
    top = values[-1].item()
    ulp = top - values[-2].item()
    over = torch.tensor([top + ulp / 2], dtype=torch.float32)
    over_up = torch.nextafter(over, torch.tensor([float("inf")]))
    over_down = torch.nextafter(over, torch.tensor([0.0]))
    return torch.cat([values.to(torch.float32), mids32, up, down, over, over_up, over_down])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--random", type=int, default=200000)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()

    special = torch.tensor([0.0, float("inf"), float("nan"), 1.0, 65504.0, 65520.0, 65519.996,
                            2.0**-14, 2.0**-24, 2.0**-25, 1.5 * 2.0**-25, 3.3895313892515355e38,
                            3.4028234663852886e38, 1.1754943508222875e-38, 1.401298464324817e-45],
                           dtype=torch.float32)
    positive = torch.cat([special, neighbours_and_midpoints(torch.bfloat16),
                          neighbours_and_midpoints(torch.float16)])
    rng = np.random.default_rng(args.seed)
    random_bits = rng.integers(0, 1 << 32, size=args.random, dtype=np.uint64).astype(np.uint32)
    random_values = torch.from_numpy(random_bits.view(np.int32)).view(torch.float32)
    values = torch.cat([positive, -positive, random_values])

    bf16 = values.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    fp16 = values.to(torch.float16).view(torch.int16).numpy().view(np.uint16)
    f32 = values.view(torch.int32).numpy().view(np.uint32)
    records = np.zeros(len(values), dtype=[("f", "<u4"), ("b", "<u2"), ("h", "<u2")])
    records["f"], records["b"], records["h"] = f32, bf16, fp16
    with open(args.out, "wb") as out:
        out.write(np.uint32(len(values)).astype("<u4").tobytes())
        out.write(records.tobytes())


if __name__ == "__main__":
    main()
