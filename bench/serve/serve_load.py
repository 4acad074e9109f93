"""Load generator for `deepinfer serve`: N concurrent streaming chat-completion clients on
loopback. Reports completions, errors, throughput, client-side TTFT / inter-token latency and
the server's own per-token overhead (from /metrics, histogram
deepinfer_server_token_overhead_seconds, interpolated p50/p99).

  python3 bench/serve/serve_load.py --port 8000 --clients 1000 --max-tokens 16

Bounded: at most 5000 clients, loopback only, every request has a deadline (--timeout).
Raw asyncio sockets (no HTTP library) so that the client costs little CPU."""

import argparse
import asyncio
import json
import statistics
import sys
import time

MODEL = "deepseek-ai/DeepSeek-V4.1-Flash-1017"


class Result:
    def __init__(self):
        self.ok = False
        self.error = ""
        self.start = 0.0
        self.event_times = []
        self.completion_tokens = 0
        self.end = 0.0


async def read_chunked_sse(reader, on_event):
    """Reads a chunked body, calling on_event(payload) for each SSE data line."""
    pending = b""
    while True:
        size_line = await reader.readline()
        if not size_line:
            raise ConnectionError("connection closed mid-body")
        size = int(size_line.strip(), 16)
        data = await reader.readexactly(size + 2)
        if size == 0:
            return
        pending += data[:-2]
        while b"\n\n" in pending:
            frame, pending = pending.split(b"\n\n", 1)
            for line in frame.split(b"\n"):
                if line.startswith(b"data: "):
                    on_event(line[6:])


async def one_client(host, port, body, api_key, timeout, result):
    result.start = time.perf_counter()
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        headers = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                   "Connection: close\r\n")
        if api_key:
            headers += f"Authorization: Bearer {api_key}\r\n"
        writer.write(headers.encode() + b"\r\n" + body)
        await writer.drain()

        async def run():
            status_line = await reader.readline()
            status = int(status_line.split()[1])
            chunked = False
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                if line.lower().startswith(b"transfer-encoding: chunked"):
                    chunked = True
            if status != 200 or not chunked:
                raise RuntimeError(f"HTTP {status}: {(await reader.read(300))!r}")
            done = []

            def on_event(payload):
                now = time.perf_counter()
                if payload == b"[DONE]":
                    done.append(True)
                    return
                chunk = json.loads(payload)
                if "error" in chunk:
                    raise RuntimeError(f"stream error: {chunk['error']}")
                usage = chunk.get("usage")
                if usage:
                    result.completion_tokens = usage["completion_tokens"]
                if chunk.get("choices"):
                    delta = chunk["choices"][0]["delta"]
                    if delta.get("content") or delta.get("reasoning_content"):
                        result.event_times.append(now)

            await read_chunked_sse(reader, on_event)
            if not done:
                raise RuntimeError("stream ended without [DONE]")

        await asyncio.wait_for(run(), timeout)
        result.ok = True
    except Exception as error:  # noqa: BLE001 - every failure is an error of the run
        result.error = f"{type(error).__name__}: {error}"
    finally:
        result.end = time.perf_counter()
        if writer is not None:
            writer.close()


def fetch_metrics(host, port, api_key):
    import urllib.request
    request = urllib.request.Request(f"http://{host}:{port}/metrics")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read().decode()


def histogram(text, name):
    """{upper_bound: cumulative_count} of a Prometheus histogram."""
    buckets = {}
    for line in text.splitlines():
        if line.startswith(name + "_bucket{le=\""):
            bound = line.split('"')[1]
            buckets[float("inf") if bound == "+Inf" else float(bound)] = float(line.split()[-1])
    return buckets


def histogram_quantile(before, after, q):
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0
    if total <= 0:
        return float("nan")
    target = q * total
    lower, previous = 0.0, 0.0
    for bound, cumulative in zip(bounds, counts):
        if cumulative >= target:
            if bound == float("inf"):
                return lower
            fraction = (target - previous) / max(cumulative - previous, 1e-12)
            return lower + (bound - lower) * fraction
        lower, previous = bound, cumulative
    return lower


def percentile(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def main_async(args):
    body = json.dumps({
        "model": args.model, "stream": True, "max_tokens": args.max_tokens,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": args.prompt}],
    }).encode()
    results = [Result() for _ in range(args.clients)]
    start = time.perf_counter()
    await asyncio.gather(*(one_client(args.host, args.port, body, args.api_key, args.timeout, r)
                           for r in results))
    return results, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", default="")
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--prompt", default="Write a short poem about the sea.")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("loopback only")
    if not 1 <= args.clients <= 5000:
        sys.exit("--clients must be in [1, 5000]")

    before = fetch_metrics(args.host, args.port, args.api_key)
    results, elapsed = asyncio.run(main_async(args))
    after = fetch_metrics(args.host, args.port, args.api_key)

    ok = [r for r in results if r.ok]
    errors = [r for r in results if not r.ok]
    tokens = sum(r.completion_tokens for r in ok)
    ttft = [r.event_times[0] - r.start for r in ok if r.event_times]
    itl = [b - a for r in ok for a, b in zip(r.event_times, r.event_times[1:])]
    name = "deepinfer_server_token_overhead_seconds"
    hb, ha = histogram(before, name), histogram(after, name)
    report = {
        "clients": args.clients,
        "completed": len(ok),
        "errors": len(errors),
        "first_errors": sorted({r.error for r in errors})[:5],
        "wall_seconds": round(elapsed, 3),
        "completion_tokens": tokens,
        "tokens_per_second": round(tokens / elapsed, 1) if elapsed > 0 else None,
        "requests_per_second": round(len(ok) / elapsed, 2) if elapsed > 0 else None,
        "client_ttft_p50_s": round(percentile(ttft, 0.5), 4),
        "client_ttft_p99_s": round(percentile(ttft, 0.99), 4),
        "client_itl_p50_s": round(percentile(itl, 0.5), 4),
        "client_itl_p99_s": round(percentile(itl, 0.99), 4),
        "server_overhead_per_token_p50_us": round(histogram_quantile(hb, ha, 0.5) * 1e6, 2),
        "server_overhead_per_token_p99_us": round(histogram_quantile(hb, ha, 0.99) * 1e6, 2),
    }
    print(json.dumps(report, indent=2))
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
