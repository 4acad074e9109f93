#!/usr/bin/env python3
"""Writes src/model/testdata/numpy_rng_goldens.json: reference draws of NumPy's
default_rng(seed).integers(low, high, size, dtype=np.int64) and of the raw PCG64 stream,
used by engram_hash_numpy_rng_test.cc to check the C++ replica bit for bit.

Usage: python3 tools/reference/make_numpy_rng_goldens.py [OUT.json]   (needs numpy)
"""
import json
import sys

import numpy as np

INT64_MAX = np.iinfo(np.int64).max


def cases():
    # Engram's own draws: seed 10007 * layer_id, bound (2^63-1) // vocab // 2, size 4..8.
    for layer_id in (0, 1, 2, 3, 4, 14, 39):
        for vocab in (396, 512, 99092, 129280, 7):
            yield 10007 * layer_id, 0, max(1, INT64_MAX // vocab // 2), 4
    # Other ranges: 32-bit paths (buffered halves), powers of two, full 63-bit, tiny.
    highs = [1, 2, 3, 7, 100, 2**31 - 1, 2**32 - 1, 2**32, 2**32 + 1, 2**33 + 12345,
             10**15 + 37, 2**62, INT64_MAX // 3, INT64_MAX]
    for seed in (0, 1, 42, 12345, 2**32 - 1, 2**32, 2**40 + 7, 2**63 + 11, 2**64 - 1):
        for high in highs:
            yield seed, 0, high, 9
    for seed, low, high in ((5, -10, 10), (6, -(2**62), 2**62), (7, 100, 101),
                            (8, -(2**63), 2**63 - 1), (9, 1000, 2**32 + 1000)):
        yield seed, low, high, 7


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "src/model/testdata/numpy_rng_goldens.json"
    integers = []
    for seed, low, high, size in cases():
        values = np.random.default_rng(seed).integers(low, high, size=size, dtype=np.int64)
        integers.append({"seed": str(seed), "low": str(low), "high": str(high),
                         "values": [str(int(v)) for v in values]})
    raw = []
    for seed in (0, 1, 10007, 2**64 - 1):
        values = np.random.default_rng(seed).bit_generator.random_raw(6)
        raw.append({"seed": str(seed), "values": [str(int(v)) for v in values]})
    doc = {"numpy_version": np.__version__,
           "note": "integers as decimal strings (64-bit values do not fit JSON doubles)",
           "integers": integers, "random_raw": raw}
    with open(out, "w") as f:
        json.dump(doc, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
