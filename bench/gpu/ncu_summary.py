#!/usr/bin/env python3
"""Summarises an Nsight Compute CSV (`ncu --csv --print-units base --metrics ...`) of one decode
step or kernel bench: per kernel name (or per launch with --launches) the launches, summed
device time (us), DRAM bytes read (MB) and their rate (TB/s, and the share of --hbm-gbps when
given), and the launch-weighted means of every other metric in the file (issue active,
warps per SM, stall reasons per issued instruction, ...), largest time first.

    ncu_summary.py run115/ncu-ls-b1.csv [--top 30] [--launches] [--hbm-gbps 4515]
    ncu_summary.py --self-test

Used for the issue 9 notes (bench/gpu/RESULTS.md): the ncu lines there come from these columns.
"""
import argparse
import collections
import csv
import io
import re
import sys

TIME = "gpu__time_duration.sum"
DRAM = "dram__bytes_read.sum"


def short_name(kernel):
    """The kernel name without its parameter list and namespaces, templates kept."""
    name = kernel.split("(")[0]
    for prefix in ("deepinfer::", "backend::cuda::kernels::", "<unnamed>::", "unnamed>::",
                   "(anonymous namespace)::"):
        name = name.replace(prefix, "")
    return re.sub(r"^void ", "", name).strip()


def read_launches(text):
    """{launch id: {"name", "grid", metric: value}} from ncu's CSV (log lines before the header
    are skipped; values with thousands separators are accepted; non-numeric values dropped)."""
    lines = text.splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if header is None:
        raise ValueError("no ncu CSV header (a line starting with \"ID\") found")
    launches = {}
    for row in csv.DictReader(lines[header:]):
        launch = launches.setdefault(
            int(row["ID"]), {"name": short_name(row["Kernel Name"]), "grid": row.get("Grid Size", "")})
        try:
            launch[row["Metric Name"]] = float(row["Metric Value"].replace(",", ""))
        except ValueError:
            pass
    return launches


def summarise(launches, by_launch):
    """Rows {"key", "n", "us", "mb", other metrics (means)}, largest time first."""
    groups = collections.OrderedDict()
    for lid, launch in sorted(launches.items()):
        key = f"{lid:4d} {launch['name']} {launch['grid']}" if by_launch else launch["name"]
        groups.setdefault(key, []).append(launch)
    metrics = sorted({m for launch in launches.values() for m in launch if m not in ("name", "grid")})
    rows = []
    for key, group in groups.items():
        row = {"key": key, "n": len(group),
               "us": sum(g.get(TIME, 0.0) for g in group) / 1e3,
               "mb": sum(g.get(DRAM, 0.0) for g in group) / 1e6}
        for m in metrics:
            if m in (TIME, DRAM):
                continue
            values = [g[m] for g in group if m in g]
            if values:
                row[m] = sum(values) / len(values)
        rows.append(row)
    rows.sort(key=lambda r: -r["us"])
    return rows, [m for m in metrics if m not in (TIME, DRAM)]


def label(metric):
    """A short column label: the stall reason, or the metric's first words."""
    stall = re.search(r"stalled_([a-z_]+?)(_per_issue_active)?\.ratio", metric)
    if stall:
        return stall.group(1)[:8]
    return metric.split("__")[-1].split(".")[0][:8]


def render(rows, metrics, top, hbm_gbps):
    out = io.StringIO()
    total_us = sum(r["us"] for r in rows)
    total_mb = sum(r["mb"] for r in rows)
    out.write(f"{sum(r['n'] for r in rows)} launches, {total_us:.1f} us, {total_mb:.1f} MB read\n")
    head = f"{'kernel':60s} {'n':>4s} {'us':>9s} {'MB':>9s} {'TB/s':>6s}"
    if hbm_gbps:
        head += f" {'%HBM':>5s}"
    head += "".join(f" {label(m):>8s}" for m in metrics)
    out.write(head + "\n")
    for r in rows[:top]:
        tbs = r["mb"] / r["us"] if r["us"] > 0 else 0.0  # MB/us = TB/s
        line = f"{r['key'][:60]:60s} {r['n']:4d} {r['us']:9.1f} {r['mb']:9.1f} {tbs:6.2f}"
        if hbm_gbps:
            line += f" {100 * tbs * 1e3 / hbm_gbps:5.1f}"
        line += "".join(f" {r[m]:8.2f}" if m in r else f" {'-':>8s}" for m in metrics)
        out.write(line + "\n")
    return out.getvalue()


SAMPLE = '''==PROF== Connected to process 1
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","b","h","void deepinfer::backend::cuda::kernels::<unnamed>::LinearStreamKernel<1>(StreamMany)","1","7","(256, 1, 1)","(320, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","50,000"
"0","1","b","h","void deepinfer::backend::cuda::kernels::<unnamed>::LinearStreamKernel<1>(StreamMany)","1","7","(256, 1, 1)","(320, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","150,000,000"
"0","1","b","h","void deepinfer::backend::cuda::kernels::<unnamed>::LinearStreamKernel<1>(StreamMany)","1","7","(256, 1, 1)","(320, 1, 1)","0","9.0","Command line profiler metrics","smsp__issue_active.avg.pct_of_peak_sustained_active","%","40"
"1","1","b","h","QuantizeStreamKernel(float const*)","1","7","(256, 1, 1)","(40, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","3,000"
"1","1","b","h","QuantizeStreamKernel(float const*)","1","7","(256, 1, 1)","(40, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","30,000"
"2","1","b","h","void deepinfer::backend::cuda::kernels::<unnamed>::LinearStreamKernel<1>(StreamMany)","1","7","(256, 1, 1)","(160, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","20,000"
"2","1","b","h","void deepinfer::backend::cuda::kernels::<unnamed>::LinearStreamKernel<1>(StreamMany)","1","7","(256, 1, 1)","(160, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","40,000,000"
"2","1","b","h","void deepinfer::backend::cuda::kernels::<unnamed>::LinearStreamKernel<1>(StreamMany)","1","7","(256, 1, 1)","(160, 1, 1)","0","9.0","Command line profiler metrics","smsp__issue_active.avg.pct_of_peak_sustained_active","%","30"
'''


def self_test():
    launches = read_launches(SAMPLE)
    assert sorted(launches) == [0, 1, 2], launches
    assert launches[0]["name"] == "LinearStreamKernel<1>", launches[0]["name"]
    assert short_name("void unnamed>::LinearStreamKernel<1, 0>(StreamMany)") == "LinearStreamKernel<1, 0>"
    rows, metrics = summarise(launches, by_launch=False)
    assert [r["key"] for r in rows] == ["LinearStreamKernel<1>", "QuantizeStreamKernel"], rows
    first = rows[0]
    assert first["n"] == 2 and abs(first["us"] - 70.0) < 1e-9 and abs(first["mb"] - 190.0) < 1e-9
    assert abs(first["smsp__issue_active.avg.pct_of_peak_sustained_active"] - 35.0) < 1e-9
    text = render(rows, metrics, top=10, hbm_gbps=4500.0)
    assert "3 launches, 73.0 us, 190.0 MB read" in text, text
    assert " 2.71  60.3" in text, text  # 190 MB / 70 us; 2.71 of 4.5 TB/s
    by_launch, _ = summarise(launches, by_launch=True)
    assert len(by_launch) == 3 and by_launch[0]["key"].startswith("   0 LinearStreamKernel<1>")
    try:
        read_launches("no csv here")
        raise AssertionError("a file without a header must be rejected")
    except ValueError:
        pass
    print("ncu_summary self-test: ok")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", nargs="?", help="ncu --csv output (log lines before the header are fine)")
    parser.add_argument("--top", type=int, default=30, help="rows to print (default 30)")
    parser.add_argument("--launches", action="store_true", help="one row per launch, in launch order")
    parser.add_argument("--hbm-gbps", type=float, default=0.0, help="HBM ceiling for a %%HBM column")
    parser.add_argument("--self-test", action="store_true", help="check the parser on a built-in sample")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return 0
    if not args.csv:
        parser.error("a CSV file is required (or --self-test)")
    with open(args.csv, encoding="utf-8", errors="replace") as f:
        launches = read_launches(f.read())
    rows, metrics = summarise(launches, args.launches)
    if args.launches:
        rows.sort(key=lambda r: int(r["key"].split()[0]))
    sys.stdout.write(render(rows, metrics, args.top if not args.launches else len(rows), args.hbm_gbps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
