#!/usr/bin/env python3
"""Decode-speed baseline: the upstream Hugging Face DeepSeek-V4.1 reference on a GPU.

Runs the transformers DeepSeek-V4.1 modeling code (the reference behind
shared/goldens/v41, kept OUT of the repository in .ref/, see bench/gpu/REFERENCE.md)
unmodified, on a checkpoint in the release format (native tensor names, FP8 / MXFP4 /
BF16 / F32 storage). Two modes:

  --check-goldens DIR   load a golden case (e.g. tiny_a) in float32, prefill prompt 0
                        through the cache path and compare with prompt.0.prefill_logits
                        (exit 1 when the median row max-abs diff exceeds 1e-3, or the
                        Engram hash ids differ).
  --bench DIR           load a checkpoint in --dtype, and for each (batch, context):
                        fill the cache with `context` random tokens per sequence, time
                        `--steps` greedy decode steps, report tokens/s = batch / median
                        step time. Results go to --json OUT.

The only runtime change to transformers 5.17.0 is the one the goldens used: a wrap of
`cache_utils.get_layer_types_and_kwargs` so that the V4.1 `shared_compressed_attention`
cache layer (`DeepseekV41CSACache(config)`) receives `config=`.
"""

import argparse
import gc
import importlib
import importlib.util
import json
import statistics
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch
from torch import nn

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_REF_DIR = REPO_ROOT / ".ref" / "transformers_deepseek_v41"
PACKAGE = "transformers.models.deepseek_v41"
# Checkpoint prefixes upstream ignores on load (`_keys_to_ignore_on_load_unexpected`).
IGNORED_PREFIXES = ("mtp.", "vision.", "aligner.", "image_start", "image_end", "image_newline")
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
START = time.monotonic()


def log(message: str) -> None:
    print(f"[{time.monotonic() - START:8.1f}s] {message}", flush=True)


# --------------------------------------------------------------------------- reference


def import_reference(ref_dir: Path) -> types.SimpleNamespace:
    """Registers ref_dir as the package `transformers.models.deepseek_v41` (so its
    relative imports resolve against the installed transformers) and returns its
    configuration and modeling modules."""
    import transformers.models  # noqa: F401  (the parent package must exist)

    init_file = ref_dir / "__init__.py"
    for name in ("configuration_deepseek_v41.py", "modeling_deepseek_v41.py"):
        if not (ref_dir / name).is_file():
            sys.exit(f"error: {ref_dir / name} is missing; recreate .ref/ as bench/gpu/REFERENCE.md says")
    if PACKAGE not in sys.modules:
        if init_file.is_file():
            spec = importlib.util.spec_from_file_location(
                PACKAGE, init_file, submodule_search_locations=[str(ref_dir)]
            )
            package = importlib.util.module_from_spec(spec)
            sys.modules[PACKAGE] = package
            spec.loader.exec_module(package)  # upstream's lazy __init__ replaces the entry
        else:  # a bare package is enough for the two modules we import
            package = types.ModuleType(PACKAGE)
            package.__path__ = [str(ref_dir)]
            sys.modules[PACKAGE] = package
    configuration = importlib.import_module(PACKAGE + ".configuration_deepseek_v41")
    modeling = importlib.import_module(PACKAGE + ".modeling_deepseek_v41")
    return types.SimpleNamespace(configuration=configuration, modeling=modeling)


def wrap_cache_layer_kwargs() -> None:
    """The goldens' only runtime change: transformers 5.17.0 passes `config=` to cache
    layers only for the V4 layer types; give it to V4.1's shared_compressed_attention."""
    from transformers import cache_utils

    original = cache_utils.get_layer_types_and_kwargs
    if getattr(original, "_v41_wrapped", False):
        return

    def get_layer_types_and_kwargs(config):
        layer_types, layer_kwargs = original(config)
        if "shared_compressed_attention" in layer_types:
            layer_kwargs["config"] = config
        return layer_types, layer_kwargs

    get_layer_types_and_kwargs._v41_wrapped = True
    cache_utils.get_layer_types_and_kwargs = get_layer_types_and_kwargs


def build_config(ref, checkpoint_dir: Path):
    """DeepseekV41Config from a release-format config.json. The quantization_config is
    dropped (weights are dequantised here); the release field `engram_pad_token_id` is
    upstream's `engram_pad_id`."""
    raw = json.loads((checkpoint_dir / "config.json").read_text())
    raw.pop("quantization_config", None)
    text = dict(raw.get("text_config") or {})
    if "engram_pad_token_id" in text:
        text.setdefault("engram_pad_id", text.pop("engram_pad_token_id"))
    raw["text_config"] = text
    config = ref.configuration.DeepseekV41Config(**raw)
    config.get_text_config()._attn_implementation = "eager"
    return config


# --------------------------------------------------------------------------- checkpoint


class SafetensorsFile:
    """Minimal safetensors reader: memory-maps the file and hands out raw bytes per
    tensor (any dtype, including F8_E8M0 and packed I8), so nothing depends on the
    safetensors library's dtype support."""

    def __init__(self, path: Path):
        with open(path, "rb") as handle:
            header_len = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(header_len))
        header.pop("__metadata__", None)
        self.path = path
        self.entries = header
        self.data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_len)

    def raw(self, name: str, device) -> tuple[torch.Tensor, str, list]:
        """(uint8 bytes on `device`, safetensors dtype string, shape)."""
        entry = self.entries[name]
        begin, end = entry["data_offsets"]
        host = torch.from_numpy(np.array(self.data[begin:end]))
        return host.to(device), entry["dtype"], entry["shape"]


class Checkpoint:
    """All shards of a checkpoint directory: name -> shard."""

    def __init__(self, directory: Path):
        index = directory / "model.safetensors.index.json"
        shard_of = {}
        if index.is_file():
            weight_map = json.loads(index.read_text())["weight_map"]
            shards = {f: SafetensorsFile(directory / f) for f in sorted(set(weight_map.values()))}
            shard_of = {name: shards[f] for name, f in weight_map.items()}
        else:
            shard = SafetensorsFile(directory / "model.safetensors")
            shard_of = {name: shard for name in shard.entries}
        self.shard_of = shard_of

    def names(self) -> list:
        return sorted(self.shard_of)

    def raw(self, name: str, device):
        return self.shard_of[name].raw(name, device)


def typed(raw: torch.Tensor, dtype: str, shape: list) -> torch.Tensor:
    """Reinterprets raw bytes as the stored dtype (packed FP4 stays uint8)."""
    torch_dtype = {
        "F32": torch.float32,
        "BF16": torch.bfloat16,
        "F16": torch.float16,
        "F8_E4M3": torch.float8_e4m3fn,
        "F8_E8M0": torch.uint8,  # raw exponent bytes
        "I8": torch.uint8,  # packed e2m1 pairs
        "U8": torch.uint8,
        "I32": torch.int32,
        "I64": torch.int64,
    }.get(dtype)
    if torch_dtype is None:
        raise ValueError(f"unsupported safetensors dtype {dtype}")
    return raw.view(torch_dtype).reshape(shape)


def pow2_from_e8m0(exponents: torch.Tensor) -> torch.Tensor:
    return torch.exp2(exponents.to(torch.float32) - 127.0)


def dequant_fp8_blocks(weight: torch.Tensor, scale: torch.Tensor, dtype) -> torch.Tensor:
    """W[n,k] = e4m3(W[n,k]) * 2^(S[n/32, k/32] - 127)."""
    rows, cols = weight.shape
    factors = pow2_from_e8m0(scale).repeat_interleave(32, 0)[:rows].repeat_interleave(32, 1)[:, :cols]
    return (weight.to(torch.float32) * factors).to(dtype)


def dequant_fp8_rows(weight: torch.Tensor, scale: torch.Tensor, dtype, rows_per_chunk: int = 1 << 20):
    """Engram table: T[r,c] = e4m3(T[r,c]) * 2^(S[r, c/32] - 127), in row chunks so a
    large table never needs an fp32 copy of itself."""
    out = torch.empty(weight.shape, dtype=dtype, device=weight.device)
    for begin in range(0, weight.shape[0], rows_per_chunk):
        w = weight[begin : begin + rows_per_chunk].to(torch.float32)
        s = pow2_from_e8m0(scale[begin : begin + rows_per_chunk]).repeat_interleave(32, 1)[:, : w.shape[1]]
        out[begin : begin + rows_per_chunk] = (w * s).to(dtype)
    return out


def dequant_mxfp4(packed: torch.Tensor, scale: torch.Tensor, dtype) -> torch.Tensor:
    """Packed e2m1 [N, K/2] (low nibble = even element, bit 3 = sign) times
    2^(S[n, k/32] - 127) -> [N, K]."""
    lut = torch.tensor(E2M1_VALUES + tuple(-v for v in E2M1_VALUES), device=packed.device)
    codes = torch.stack([packed & 0x0F, packed >> 4], dim=-1).reshape(packed.shape[0], -1)
    factors = pow2_from_e8m0(scale).repeat_interleave(32, 1)[:, : codes.shape[1]]
    return (lut[codes.long()] * factors).to(dtype)


def hf_name(native: str) -> str:
    """Native release name -> parameter name in DeepseekV41ForCausalLM. The modules
    mirror the release scheme one to one below `model.`; only the head is renamed."""
    return "lm_head.weight" if native == "head.weight" else "model." + native


def param_dtype(name: str, model_dtype, keep_fp32: list):
    """Mirrors from_pretrained(dtype=...): `_keep_in_fp32_modules_strict` stay fp32."""
    return torch.float32 if name.split(".")[-1] in keep_fp32 else model_dtype


def load_weight(ckpt: Checkpoint, native: str, target_dtype, device) -> torch.Tensor:
    raw, dtype, shape = ckpt.raw(native, device)
    weight = typed(raw, dtype, shape)
    scale_name = native[: -len("weight")] + "scale"
    has_scale = native.endswith(".weight") and scale_name in ckpt.shard_of
    if dtype == "F8_E4M3":
        if not has_scale:
            raise ValueError(f"{native}: FP8 tensor without {scale_name}")
        scale = typed(*ckpt.raw(scale_name, device))
        if native.endswith("engram.embed.weight"):  # quirk 2: apply the row scales here
            return dequant_fp8_rows(weight, scale, target_dtype)
        return dequant_fp8_blocks(weight, scale, target_dtype)
    if dtype == "I8":
        if not has_scale:
            raise ValueError(f"{native}: packed FP4 tensor without {scale_name}")
        return dequant_mxfp4(weight, typed(*ckpt.raw(scale_name, device)), target_dtype)
    if dtype in ("BF16", "F32", "F16"):
        return weight.to(target_dtype)
    raise ValueError(f"{native}: unexpected storage dtype {dtype}")


def materialize_rotary(model, ref, device) -> None:
    """The model is built on the meta device; rebuild the (non-persistent) RoPE buffers
    on `device` with upstream's own `_init_weights`."""
    for module in model.modules():
        if isinstance(module, ref.modeling.DeepseekV41RotaryEmbedding):
            for name, buffer in list(module.named_buffers(recurse=False)):
                setattr(module, name, torch.empty(buffer.shape, dtype=torch.float32, device=device))
            model._init_weights(module)


def load_model(ref, checkpoint_dir: Path, dtype, device):
    """Builds DeepseekV41ForCausalLM on the meta device and fills it tensor by tensor on
    `device` (packed bytes freed as we go; no host-side fp32 copy of the model)."""
    config = build_config(ref, checkpoint_dir)
    with torch.device("meta"):
        model = ref.modeling.DeepseekV41ForCausalLM(config)
    keep_fp32 = list(model._keep_in_fp32_modules_strict or [])
    ckpt = Checkpoint(checkpoint_dir)
    params = dict(model.named_parameters())
    loaded, skipped = set(), []
    names = [n for n in ckpt.names() if not n.endswith(".scale")]
    log(f"loading {len(names)} tensors from {checkpoint_dir} as {dtype} on {device}")
    for i, native in enumerate(names):
        if native.startswith(IGNORED_PREFIXES):
            skipped.append(native)
            continue
        name = hf_name(native)
        if name not in params:
            raise KeyError(f"checkpoint tensor {native} has no parameter {name} in the model")
        value = load_weight(ckpt, native, param_dtype(name, dtype, keep_fp32), device)
        if tuple(value.shape) != tuple(params[name].shape):
            raise ValueError(f"{native}: shape {tuple(value.shape)} != model {tuple(params[name].shape)}")
        module_name, _, attr = name.rpartition(".")
        model.get_submodule(module_name)._parameters[attr] = nn.Parameter(value, requires_grad=False)
        loaded.add(name)
        if (i + 1) % 500 == 0:
            log(f"  {i + 1}/{len(names)} tensors")
    for name, param in params.items():
        if name in loaded:
            continue
        if name.endswith("engram.embed.scale"):  # unused in float mode; zero-stride ones
            module_name, _, attr = name.rpartition(".")
            ones = torch.ones(1, 1, dtype=dtype, device=device).expand(param.shape)
            model.get_submodule(module_name)._parameters[attr] = nn.Parameter(ones, requires_grad=False)
        else:
            raise KeyError(f"model parameter {name} missing from the checkpoint")
    materialize_rotary(model, ref, device)
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        if tensor.is_meta:
            raise RuntimeError(f"{name} is still on the meta device")
    model.eval()
    if skipped:
        log(f"ignored {len(skipped)} tensors upstream does not model (mtp/vision/...)")
    return model, config


def attach_engram_hash(model, ref, checkpoint_dir: Path, source: str) -> str:
    """Engram hash state: engram_hash.safetensors when present (source auto/file), else
    upstream's own derivation from config + tokenizer.json (bind_tokenizer)."""
    text_model = model.model
    if text_model.engram_layout is None:
        return "none (no Engram layers)"
    hash_file = checkpoint_dir / "engram_hash.safetensors"
    if source == "file" or (source == "auto" and hash_file.is_file()):
        shard = SafetensorsFile(hash_file)
        get = {n: typed(*shard.raw(n, "cpu")).clone() for n in shard.entries}
        layout = text_model.engram_layout
        state = object.__new__(ref.modeling.DeepseekV41NgramHashState)
        state.layout = layout
        state.max_ngram_size = layout.max_ngram_size
        state.pad_id = int(get["pad_id"].reshape(-1)[0])
        n_layers = len(layout.layer_ids)
        state.primes = get["primes"].long().reshape(n_layers, layout.max_ngram_size - 1, layout.n_heads)
        state.offsets = get["offsets"].long()
        state.multipliers = get["multipliers"].long()
        state.token_map = get["token_map"].long()
        state.history = None
        if not torch.equal(state.primes, torch.tensor(layout.primes)):
            log("WARNING: engram_hash.safetensors primes differ from upstream's EngramLayout")
        text_model.engram_hash_state = state
        return f"file {hash_file.name}"
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(checkpoint_dir / "tokenizer.json"))
    text_model.bind_tokenizer(tokenizer)
    return "upstream bind_tokenizer(tokenizer.json)"


def reset_sequence(model) -> None:
    """Quirk 5: a new sequence must start from an empty Engram history."""
    state = model.model.engram_hash_state
    if state is not None:
        state.history = None


def new_cache(model):
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


# --------------------------------------------------------------------------- goldens


def row_diffs(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    return (actual.float().cpu() - expected.float()).abs().amax(dim=-1)


def check_goldens(ref, args) -> int:
    from safetensors.torch import load_file

    case = Path(args.check_goldens)
    device = torch.device(args.device)
    model, _ = load_model(ref, case, torch.float32, device)
    log(f"engram hash: {attach_engram_hash(model, ref, case, args.hash_source)}")
    goldens = load_file(str(case / "goldens.safetensors"))
    ok = True

    rotary = model.model.rotary_emb
    for kind in ("main", "compress"):
        key = f"rope.{kind}_inv_freq"
        if key in goldens:
            diff = (getattr(rotary, f"{kind}_inv_freq").cpu() - goldens[key]).abs().max().item()
            log(f"{key}: max |diff| {diff:.3e}")

    ids = goldens["prompt.0.input_ids"].long().unsqueeze(0).to(device)
    positions = torch.arange(ids.shape[1], device=device).unsqueeze(0)
    state = model.model.engram_hash_state
    if state is not None and "prompt.0.engram_hash_ids" in goldens:
        hash_ids = state(ids, positions, None)[0].cpu()
        same = torch.equal(hash_ids, goldens["prompt.0.engram_hash_ids"].long())
        log(f"engram hash ids prompt 0: {'exact' if same else 'MISMATCH'}")
        ok = ok and same
    reset_sequence(model)

    with torch.no_grad():
        out = model(input_ids=ids, position_ids=positions, past_key_values=new_cache(model), use_cache=True)
    d = row_diffs(out.logits[0], goldens["prompt.0.prefill_logits"])
    max_diff, median = d.max().item(), d.median().item()
    print(f"prompt 0 prefill ({ids.shape[1]} tokens): max |logits - golden| = {max_diff:.3e}, "
          f"median row diff = {median:.3e}, rows > 1e-3: {(d > 1e-3).sum().item()}", flush=True)
    ok = ok and median <= 1e-3

    if args.greedy_check:  # informational: 16 cached greedy steps of prompt 0
        reset_sequence(model)
        cache = new_cache(model)
        with torch.no_grad():
            logits = model(input_ids=ids, position_ids=positions, past_key_values=cache).logits[:, -1]
            tokens = []
            for step in range(goldens["prompt.0.greedy_tokens"].numel()):
                token = logits.argmax(-1, keepdim=True)
                tokens.append(int(token))
                pos = torch.tensor([[ids.shape[1] + step]], device=device)
                logits = model(input_ids=token, position_ids=pos, past_key_values=cache).logits[:, -1]
        same = tokens == goldens["prompt.0.greedy_tokens"].tolist()
        log(f"greedy tokens prompt 0: {'identical' if same else 'DIFFERENT'} {tokens}")
    print("check-goldens:", "PASS" if ok else "FAIL", flush=True)
    return 0 if ok else 1


# --------------------------------------------------------------------------- bench


class Skip(Exception):
    """A configuration that cannot be measured within the limits."""


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free_bytes(device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return 8 << 30


def prefill_chunk(config, batch: int, end_pos: int, budget: int, cap: int) -> int:
    """Largest chunk whose eager attention / indexer temporaries fit in `budget` bytes.
    Per query row the reference materialises ~4 fp32-sized copies of the
    [heads, window + chunk + compressed] score matrix and ~3 of the indexer's
    [index_heads, compressed] scores; `compressed` is bounded by end_pos (ratio 1)."""
    ratios = [r for r in config.compress_ratios[: config.num_hidden_layers] if r > 0]
    compressed = end_pos // min(ratios) if ratios else 0
    chunk = cap
    while chunk > 1:
        per_row = 16 * config.num_attention_heads * (config.sliding_window + chunk + compressed)
        per_row += 12 * config.index_n_heads * compressed
        per_row += 24 * config.hc_mult * config.hidden_size  # residual streams, mHC temporaries
        if batch * chunk * per_row <= budget:
            break
        chunk //= 2
    return chunk


def fill_by_prefill(model, config, ids, device, limit_s: float, max_chunk: int):
    """Feeds the prompt through the model's normal cache path in chunks; returns the
    cache and the logits at the last position. Raises Skip when over `limit_s` (or
    projected to be far over it)."""
    batch, context = ids.shape
    cache = new_cache(model)
    budget = int(free_bytes(device) * 0.45)
    start, pos, hidden = time.monotonic(), 0, None
    # Cost model for the projection: a chunk of n tokens ending near `pos` costs
    # ~ rate * n * (base + pos) (MoE + projections ~ base, attention ~ pos).
    base = 2048.0
    while pos < context:
        n = min(prefill_chunk(config, batch, min(context, pos + max_chunk), budget, max_chunk), context - pos)
        chunk_start = time.monotonic()
        positions = torch.arange(pos, pos + n, device=device).unsqueeze(0).expand(batch, -1)
        with torch.no_grad():
            hidden = model.model(
                input_ids=ids[:, pos : pos + n], position_ids=positions, past_key_values=cache, use_cache=True
            ).last_hidden_state[:, -1:]
        synchronize(device)
        took = time.monotonic() - chunk_start
        rate = took / (n * (base + pos + n / 2))
        pos += n
        elapsed = time.monotonic() - start
        remaining = rate * ((context - pos) * base + (context**2 - pos**2) / 2)
        log(f"    prefill {pos}/{context} (chunk {n}, {took:.2f}s, elapsed {elapsed:.1f}s, "
            f"projected total {elapsed + remaining:.0f}s)")
        if elapsed > limit_s:
            raise Skip(f"prefill exceeded the time limit ({limit_s:.0f}s) at {pos}/{context} tokens")
        if pos > n and elapsed + remaining > 1.5 * limit_s:
            raise Skip(f"prefill projected at {elapsed + remaining:.0f}s > 1.5x limit {limit_s:.0f}s "
                       f"(stopped at {pos}/{context} tokens)")
    with torch.no_grad():
        logits = model.lm_head(hidden).float()
    return cache, logits, time.monotonic() - start


def fill_synthetic(model, config, ids, device):
    """Builds the cache state a `context`-token prefill would leave (same shapes: the
    window ring, each KV source's compressed KV + indexer keys + partial-group buffer,
    the Engram history) from random values, without running the prefill. Decode cost
    is shape-driven, so step times are comparable; logits are not meaningful."""
    batch, context = ids.shape
    dtype = model.lm_head.weight.dtype
    cache = new_cache(model)
    window = config.sliding_window
    gen = torch.Generator(device=device).manual_seed(1)

    def rand(*shape, dt=dtype):
        return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(dt)

    for layer_idx, layer in enumerate(cache.layers):
        kv = rand(batch, 1, min(window - 1, context), config.head_dim)
        layer.update(kv, kv)
        layer.cumulative_length = context
        if hasattr(layer, "compressed_kv"):
            ratio = config.compress_ratios[layer_idx]
            groups, rest = context // ratio, context % ratio
            layer.compressed_kv["compressor"] = rand(batch, 1, groups, config.head_dim)
            layer.compressed_kv["indexer"] = rand(batch, 1, groups, config.index_head_dim)
            layer.entry_count["compressor"] = groups
            if ratio > 1:
                layer.buffer_kv["compressor"] = rand(batch, rest, config.head_dim, dt=torch.float32)
                layer.buffer_gate["compressor"] = rand(batch, rest, config.head_dim, dt=torch.float32)
    state = model.model.engram_hash_state
    if state is not None:
        state._to(device)
        state.history = state.token_map[ids]
    with torch.no_grad():
        hidden = model.model.embed(ids[:, -1:]).to(dtype)
        logits = model.lm_head(hidden).float()
    return cache, logits, 0.0


def time_decode(model, cache, logits, context: int, steps: int, warmup: int, device, limit_s: float):
    """Greedy decode: one token per sequence per step. Returns per-step seconds."""
    batch = logits.shape[0]
    token = logits[:, -1].argmax(-1, keepdim=True)
    times, start = [], time.monotonic()
    for step in range(warmup + steps):
        positions = torch.full((batch, 1), context + step, device=device, dtype=torch.long)
        synchronize(device)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model(input_ids=token, position_ids=positions, past_key_values=cache, use_cache=True)
            token = out.logits[:, -1].argmax(-1, keepdim=True)
        synchronize(device)
        if step >= warmup:
            times.append(time.perf_counter() - t0)
        if time.monotonic() - start > limit_s:
            if len(times) >= 3:
                log(f"    decode time limit reached after {len(times)} timed steps")
                break
            raise Skip(f"decode exceeded the time limit ({limit_s:.0f}s) after {step + 1} steps")
    return times


def run_one(model, config, args, device, batch: int, context: int, limit_s: float, fill: str) -> dict:
    reset_sequence(model)
    gen = torch.Generator().manual_seed(1000 * batch + context)
    # Random ids, avoiding BOS/EOS/PAD (0..2) and the image token (vocab - 1).
    ids = torch.randint(3, config.vocab_size - 1, (batch, context), generator=gen)
    ids[:, 0] = config.bos_token_id if config.bos_token_id is not None else 0
    ids = ids.to(device)
    if fill == "prefill":
        cache, logits, prefill_s = fill_by_prefill(model, config, ids, device, limit_s, args.prefill_chunk)
    else:
        cache, logits, prefill_s = fill_synthetic(model, config, ids, device)
    times = time_decode(model, cache, logits, context, args.steps, args.warmup, device, limit_s)
    step = statistics.median(times)
    del cache
    return {
        "batch": batch,
        "context": context,
        "fill": fill,
        "steps": len(times),
        "step_ms": round(step * 1e3, 3),
        "step_ms_min": round(min(times) * 1e3, 3),
        "tokens_per_s": round(batch / step, 2),
        "prefill_s": round(prefill_s, 2),
    }


def release_memory(device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def bench(ref, args) -> int:
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    ckpt_dir = Path(args.bench)
    model, _ = load_model(ref, ckpt_dir, dtype, device)
    text_config = model.config
    hash_source = attach_engram_hash(model, ref, ckpt_dir, args.hash_source)
    load_s = time.monotonic() - START
    log(f"model loaded in {load_s:.1f}s; engram hash: {hash_source}")
    if device.type == "cuda":
        log(f"GPU memory: {torch.cuda.memory_allocated(device) / 2**30:.1f} GiB allocated, "
            f"{free_bytes(device) / 2**30:.1f} GiB free")
    report = {
        "config": {
            "checkpoint": str(ckpt_dir),
            "reference": "huggingface/transformers deepseek_v41 (see bench/gpu/REFERENCE.md)",
            "dtype": args.dtype,
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
            "torch": torch.__version__,
            "transformers": __import__("transformers").__version__,
            "num_hidden_layers": text_config.num_hidden_layers,
            "hidden_size": text_config.hidden_size,
            "n_routed_experts": text_config.n_routed_experts,
            "moe_intermediate_size": text_config.moe_intermediate_size,
            "steps": args.steps,
            "warmup": args.warmup,
            "fill": args.fill,
            "time_limit_s": args.time_limit,
            "total_limit_s": args.total_limit,
            "engram_hash": hash_source,
            "load_s": round(load_s, 1),
        },
        "results": [],
    }
    configs = [(b, c) for c in args.contexts for b in args.batches]
    configs.sort(key=lambda bc: (bc[0] * bc[1], bc[1]))
    for batch, context in configs:
        # auto: the real prefill first; only when it is skipped, a synthetic cache.
        fills = ["prefill", "synthetic"] if args.fill == "auto" else [args.fill]
        for fill in fills:
            entry = measure(model, text_config, args, device, batch, context, fill)
            report["results"].append(entry)
            if args.json:
                Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
            if "skipped" not in entry or entry["skipped"] == TOTAL_LIMIT_REACHED:
                break
    print_table(report)
    return 0


TOTAL_LIMIT_REACHED = "total time limit reached"


def measure(model, config, args, device, batch: int, context: int, fill: str) -> dict:
    """One (batch, context, fill) measurement, or {"skipped": reason}."""
    left = args.total_limit - (time.monotonic() - START)
    entry = {"batch": batch, "context": context, "fill": fill}
    if left < 10:
        entry["skipped"] = TOTAL_LIMIT_REACHED
    else:
        log(f"batch {batch} context {context} fill {fill}: start ({left:.0f}s of total budget left)")
        try:
            entry = run_one(model, config, args, device, batch, context, min(args.time_limit, left), fill)
            log(f"batch {batch} context {context}: {entry['step_ms']:.2f} ms/step, "
                f"{entry['tokens_per_s']:.1f} tok/s (prefill {entry['prefill_s']:.1f}s)")
        except Skip as why:
            entry["skipped"] = str(why)
        except torch.cuda.OutOfMemoryError as oom:
            entry["skipped"] = "out of memory: " + str(oom).splitlines()[0][:200]
    if "skipped" in entry:
        log(f"batch {batch} context {context} fill {fill}: skipped ({entry['skipped']})")
    release_memory(device)
    return entry


def print_table(report: dict) -> None:
    print(f"\n{'batch':>5} {'context':>8} {'step ms':>10} {'tokens/s':>10} {'prefill s':>10}  note", flush=True)
    for r in report["results"]:
        if "skipped" in r:
            print(f"{r['batch']:>5} {r['context']:>8} {'-':>10} {'-':>10} {'-':>10}  "
                  f"fill={r['fill']} skipped: {r['skipped']}")
        else:
            print(f"{r['batch']:>5} {r['context']:>8} {r['step_ms']:>10.2f} {r['tokens_per_s']:>10.1f} "
                  f"{r['prefill_s']:>10.1f}  fill={r['fill']}")
    sys.stdout.flush()


# --------------------------------------------------------------------------- main


def int_list(text: str) -> list:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check-goldens", metavar="DIR", help="golden case directory (e.g. .../v41/tiny_a)")
    mode.add_argument("--bench", metavar="DIR", help="release-format checkpoint directory")
    p.add_argument("--ref-dir", default=str(DEFAULT_REF_DIR), help="upstream files (default: .ref/...)")
    p.add_argument("--device", default="cuda", help="torch device (cuda, cuda:1, cpu)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--batches", type=int_list, default=[1, 8, 32])
    p.add_argument("--contexts", type=int_list, default=[4096, 32768])
    p.add_argument("--steps", type=int, default=16, help="timed decode steps per configuration")
    p.add_argument("--warmup", type=int, default=2, help="untimed decode steps first")
    p.add_argument("--time-limit", type=float, default=120.0, help="seconds for a prefill, and for a decode")
    p.add_argument("--total-limit", type=float, default=300.0, help="seconds for the whole run, load included")
    p.add_argument("--fill", choices=["prefill", "synthetic", "auto"], default="prefill",
                   help="prefill: real chunked prefill through the cache path; synthetic: random cache "
                   "state of the same shapes (no prefill); auto: prefill, synthetic where it was skipped")
    p.add_argument("--prefill-chunk", type=int, default=2048,
                   help="largest prefill chunk (tokens per sequence); smaller when memory requires")
    p.add_argument("--hash-source", choices=["auto", "file", "tokenizer"], default="auto",
                   help="Engram hash constants: engram_hash.safetensors if present (auto), or tokenizer.json")
    p.add_argument("--greedy-check", action="store_true", help="also compare prompt 0 greedy tokens")
    p.add_argument("--json", metavar="OUT", help="write results JSON here (rewritten after each config)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    ref = import_reference(Path(args.ref_dir))
    wrap_cache_layer_kwargs()
    log(f"torch {torch.__version__}, transformers {__import__('transformers').__version__}, "
        f"reference from {args.ref_dir}")
    if args.check_goldens:
        return check_goldens(ref, args)
    return bench(ref, args)


if __name__ == "__main__":
    sys.exit(main())
