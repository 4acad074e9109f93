#!/usr/bin/env python3
"""Runs deepinfer's tokenizer_bench and HF `tokenizers` (Rust, PyPI 0.23.2) on the same
generated corpus, in the same run, checks that both produce the same ids, and prints both
throughputs.

  python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers==0.23.2
  /tmp/tokvenv/bin/python bench/tokenizer/compare_hf.py --bench build/bin/tokenizer_bench

Single-thread HF = `Tokenizer.encode(doc, add_special_tokens=False)` in a Python loop with
RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false (one call per 1-8 KB document, so the
Python call overhead is small). Multi-thread HF = `encode_batch` over all documents with
Rayon's default thread count (all cores). Best of --repeats passes, MB = 10^6 input bytes.
Wall-clock figures, plus single-thread figures by process CPU time (steadier on a shared
machine).
The single-thread HF measurement runs in a child process so that the environment variables
take effect before Rayon starts.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_TOKENIZER = os.path.join(REPO, "assets/tokenizers/deepseek-v4.1/tokenizer.json")


def load_corpus(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def hf_measure(tokenizer_path, corpus_path, repeats, mode):
    """Returns a result dict for mode 'single' or 'batch' (run in this process)."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer_path)
    docs = load_corpus(corpus_path)
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    times, cpu_times, first, ids = [], [], None, None
    for _ in range(repeats):
        cpu_start = time.process_time()
        start = time.perf_counter()
        if mode == "single":
            out = [tok.encode(d, add_special_tokens=False).ids for d in docs]
        else:
            out = [e.ids for e in tok.encode_batch(docs, add_special_tokens=False)]
        elapsed = time.perf_counter() - start
        cpu_times.append(time.process_time() - cpu_start)
        first = elapsed if first is None else first
        times.append(elapsed)
        ids = out
    tokens = sum(len(x) for x in ids)
    best = min(times)
    return {"mode": mode, "bytes": nbytes, "tokens": tokens, "best_s": best,
            "first_pass_s": first, "mb_per_s": nbytes / 1e6 / best,
            "tokens_per_s": tokens / best, "cpu_mb_per_s": nbytes / 1e6 / min(cpu_times),
            "ids": ids}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", default=os.path.join(REPO, "build/bin/tokenizer_bench"))
    parser.add_argument("--tokenizer", default=DEFAULT_TOKENIZER)
    parser.add_argument("--corpus-mb", type=float, default=12.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hf-child", choices=["single", "batch"], help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.hf_child:  # internal: one HF measurement, result as JSON into --out
        result = hf_measure(args.tokenizer, args.corpus, args.repeats, args.hf_child)
        with open(args.out, "w") as f:
            json.dump(result, f)
        return 0

    import tokenizers
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.jsonl")
        ids_path = os.path.join(tmp, "ids.jsonl")
        ours = json.loads(subprocess.run(
            [args.bench, "--tokenizer", args.tokenizer, "--corpus-mb", str(args.corpus_mb),
             "--repeats", str(args.repeats), "--write-corpus", corpus, "--dump-ids", ids_path,
             "--json"], check=True, capture_output=True, text=True).stdout)
        hf = {}
        for mode in ("single", "batch"):
            env = dict(os.environ)
            if mode == "single":
                env.update(RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
            out = os.path.join(tmp, f"hf_{mode}.json")
            subprocess.run([sys.executable, __file__, "--hf-child", mode, "--tokenizer",
                            args.tokenizer, "--corpus", corpus, "--repeats", str(args.repeats),
                            "--out", out], check=True, env=env)
            with open(out) as f:
                hf[mode] = json.load(f)
        with open(ids_path) as f:
            our_ids = [json.loads(line)["ids"] for line in f]

    mismatches = sum(a != b for a, b in zip(our_ids, hf["single"]["ids"]))
    mismatches += abs(len(our_ids) - len(hf["single"]["ids"]))
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{platform.platform()}")
    print(f"HF tokenizers {tokenizers.__version__}; corpus {ours['docs']} docs, "
          f"{ours['bytes'] / 1e6:.2f} MB, {ours['tokens']} tokens; "
          f"id mismatches vs HF: {mismatches} documents")
    print(f"{'':30}{'deepinfer':>14}{'HF tokenizers':>16}{'ratio':>8}")
    rows = [
        ("single-thread MB/s", ours["single_mb_per_s"], hf["single"]["mb_per_s"]),
        ("single-thread tokens/s", ours["single_tokens_per_s"], hf["single"]["tokens_per_s"]),
        ("single-thread MB/s (CPU time)", ours["single_cpu_mb_per_s"], hf["single"]["cpu_mb_per_s"]),
        (f"batch ({ours['batch_threads']} thr) MB/s", ours["batch_mb_per_s"],
         hf["batch"]["mb_per_s"]),
        ("batch tokens/s", ours["batch_tokens_per_s"], hf["batch"]["tokens_per_s"]),
    ]
    for name, a, b in rows:
        print(f"{name:30}{a:14.2f}{b:16.2f}{a / b:8.2f}x")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
