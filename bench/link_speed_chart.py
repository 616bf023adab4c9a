#!/usr/bin/python3
"""The table and chart of bench/link_speed_chart.sh, from its rows.

    bench/link_speed_chart.py ROWS.jsonl CHART.svg

ROWS.jsonl: bench/compression_bench.sh's rows ({"name", "link", "img_s"}),
one or more rounds of each. Prints a Markdown table (the median img/s of
each row at each rate, the rounds, and bigbatch's best over PyTorch's best
at that rate) and draws CHART.svg with gnuplot: img/s against the link
rate, one line per row.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

# (row suffix, label); bigbatch's first.
SERIES = [
    ("bb_fp32", "bigbatch, fp32 wire"),
    ("bb_fp16", "bigbatch, fp16 wire"),
    ("bb_powersgd", "bigbatch, PowerSGD rank 4"),
    ("pt_none", "PyTorch DDP, no hook"),
    ("pt_fp16", "PyTorch DDP, fp16_compress_hook"),
    ("pt_powersgd", "PyTorch DDP, powerSGD_hook rank 4"),
]


def mbit(link):
    """A tc rate in Mbit/s; None for unshaped."""
    m = re.fullmatch(r"([0-9.]+)(kbit|mbit|gbit)", link)
    if not m:
        return None
    return float(m.group(1)) * {"kbit": 1e-3, "mbit": 1.0, "gbit": 1e3}[m.group(2)]


def main():
    rows_path, chart = sys.argv[1], sys.argv[2]
    rows = [json.loads(line) for line in open(rows_path) if line.strip()]
    links = []
    for r in rows:
        if r["link"] not in links:
            links.append(r["link"])
    # The unshaped links plot one decade right of the fastest shaped rate.
    shaped = [mbit(l) for l in links if mbit(l)]
    unshaped_x = 10 * max(shaped) if shaped else 1e4
    x = {l: (mbit(l) or unshaped_x) for l in links}
    links.sort(key=lambda l: x[l])

    median, rounds = {}, {}
    for link in links:
        for suffix, _ in SERIES:
            vals = [r["img_s"] for r in rows
                    if r["link"] == link and r["name"].endswith("_" + suffix) and r["img_s"]]
            rounds[link, suffix] = len(vals)
            median[link, suffix] = statistics.median(vals) if vals else None

    head = "| link | " + " | ".join(label for _, label in SERIES) + \
        " | bigbatch's best ÷ PyTorch's best |"
    print(head)
    print("|" + "---|" * (len(SERIES) + 2))
    for link in links:
        cells = []
        for suffix, _ in SERIES:
            v = median[link, suffix]
            cells.append(f"{v:,.0f}" if v else "failed")
        bb = [median[link, s] for s, _ in SERIES if s.startswith("bb") and median[link, s]]
        pt = [median[link, s] for s, _ in SERIES if s.startswith("pt") and median[link, s]]
        ratio = f"**{max(bb) / max(pt):.2f}×**" if bb and pt else ""
        n = sorted({rounds[link, s] for s, _ in SERIES if rounds[link, s]})
        note = "single run" if n == [1] else f"median of {'/'.join(map(str, n))} rounds"
        name = "unshaped" if mbit(link) is None else link.replace("mbit", " Mbit/s").replace(
            "gbit", " Gbit/s")
        print(f"| {name} ({note}) | " + " | ".join(cells) + f" | {ratio} |")

    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "rows.dat")
        with open(data, "w") as f:
            for i, (suffix, label) in enumerate(SERIES):
                f.write(f"# {label}\n")
                for link in links:
                    v = median[link, suffix]
                    if v:
                        f.write(f"{x[link]} {v}\n")
                f.write("\n\n")
        tics = ", ".join(f'"{"unshaped" if mbit(l) is None else l}" {x[l]}' for l in links)
        styles = ["lc rgb '#1b5e20' pt 7", "lc rgb '#2e7d32' pt 5", "lc rgb '#66bb6a' pt 9",
                  "lc rgb '#b71c1c' pt 6 dt 2", "lc rgb '#e53935' pt 4 dt 2",
                  "lc rgb '#ef9a9a' pt 8 dt 2"]
        plots = ", ".join(f"'{data}' index {i} with linespoints lw 2 {styles[i]} title '{label}'"
                          for i, (_, label) in enumerate(SERIES))
        script = f"""
set terminal svg size 760,440 font 'sans,12' background rgb 'white' noenhanced
set output '{os.path.abspath(chart)}'
set title 'Default CNN, 2 emulated hosts x 1 rank, batch 64 a rank (bench/link_speed_chart.sh)'
set logscale x
set xrange [{min(x.values()) / 1.5}:{max(x.values()) * 1.5}]
set xtics ({tics})
set xlabel 'link rate (each host, tc tbf)'
set ylabel 'img/s (the slower rank)'
set yrange [0:*]
set key bottom right box opaque
set grid
plot {plots}
"""
        subprocess.run(["gnuplot"], input=script, text=True, check=True)


if __name__ == "__main__":
    main()
