#!/usr/bin/env python3
"""Writes src/model/testdata/engram_token_map_v41.json: the Engram compressed token map of
the real DeepSeek-V4.1 tokenizer, computed with the HF `tokenizers` normalisers the way
upstream transformers' build_compressed_token_map does (NFKC, NFD, StripAccents, Lowercase,
[ \\t\\r\\n]+ -> " ", a lone " " survives, Strip; byte fragments keyed by their raw token).
Stored as a checksum (FNV-1a 64 over the int32 little-endian map) plus sampled entries.

Usage: python3 tools/reference/make_engram_token_map_golden.py TOKENIZER_JSON [OUT.json]
       (needs numpy and tokenizers)
"""
import json
import sys

import numpy as np
from tokenizers import Regex, Tokenizer, normalizers


def token_map(tok):
    sentinel = "\ue000"
    norm = normalizers.Sequence([
        normalizers.NFKC(), normalizers.NFD(), normalizers.StripAccents(),
        normalizers.Lowercase(), normalizers.Replace(Regex(r"[ \t\r\n]+"), " "),
        normalizers.Replace(Regex(r"^ $"), sentinel), normalizers.Strip(),
        normalizers.Replace(sentinel, " ")])
    key_to_id, lookup = {}, []
    for token_id in range(tok.get_vocab_size(with_added_tokens=True)):
        text = tok.decode([token_id], skip_special_tokens=False)
        key = tok.id_to_token(token_id) if "\ufffd" in text else (norm.normalize_str(text) or text)
        lookup.append(key_to_id.setdefault(key, len(key_to_id)))
    return np.array(lookup, dtype="<i4"), len(key_to_id)


def fnv1a64(data: bytes) -> int:
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    out = sys.argv[2] if len(sys.argv) > 2 else "src/model/testdata/engram_token_map_v41.json"
    lookup, size = token_map(Tokenizer.from_file(sys.argv[1]))
    rng = np.random.default_rng(1)
    sample_ids = sorted(set(rng.integers(0, len(lookup), 200).tolist()) |
                        {0, 1, 2, 128799, 128821, 129264, len(lookup) - 1})
    doc = {"vocab": len(lookup), "compressed_vocab_size": size,
           "fnv1a64_int32_le": str(fnv1a64(lookup.tobytes())),
           "samples": {str(i): int(lookup[i]) for i in sample_ids}}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
