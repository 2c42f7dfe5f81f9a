#!/usr/bin/python3
"""Plots of a scaling study's CSV (slurm/scaling/study.py collect writes it; this reads nothing else).

usage: share/plot/plot_scaling.py scaling.csv [--out-dir DIR] [--title TEXT] [--dump-json FILE]

Writes two PNGs into --out-dir (default: the CSV's directory):
  scaling_throughput.png  tokens/s against ranks (log-log, the baseline's ideal line dashed) and
                          scaling efficiency against ranks (ideal 1 dashed), one line per layout;
  scaling_breakdown.png   per point, seconds per step stacked as compute / communication /
                          all-to-all (expert parallelism's token exchange; drawn when a point
                          had one) / idle (pipeline bubble and waits), medians over ranks, with
                          the planner's predicted step time as a marker; below, the same as
                          shares of the step (the CSV's comm_fraction, all_to_all_fraction and
                          bubble_fraction).
Only rows whose status is `ok` are drawn. --dump-json writes the series as they were drawn, read
back from the figures' artists (lines, bars, markers), so a test can compare them with the CSV.
"""
import argparse
import csv
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# (seconds column, share column, label, colour), bottom to top; the compute share is what the others leave.
STACK = (("compute_s", None, "compute", "#4c72b0"), ("comm_s", "comm_fraction", "communication", "#dd8452"),
         ("all_to_all_s", "all_to_all_fraction", "all-to-all (experts' tokens)", "#55a868"),
         ("idle_s", "bubble_fraction", "idle (pipeline bubble, waits)", "#8c8c8c"))


def read_rows(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "ok"]
    for r in rows:
        r["ranks"] = int(r["ranks"])
    return rows


def number(text):
    return float(text) if text not in ("", None) else float("nan")


def stack_of(rows):
    """STACK without the all-to-all layer when no point had one (no expert parallelism, or a CSV
    from before the column): dense studies' plots keep their three layers."""
    exchanged = any(number(r.get("all_to_all_s")) > 0 for r in rows)
    return [layer for layer in STACK if exchanged or layer[0] != "all_to_all_s"]


def by_layout(rows):
    """{layout: rows sorted by ranks}, layouts in the CSV's order of first appearance."""
    layouts = {}
    for r in rows:
        layouts.setdefault(r["layout"], []).append(r)
    return {name: sorted(rs, key=lambda r: r["ranks"]) for name, rs in layouts.items()}


def plot_throughput(rows, title, path):
    fig, (ax_t, ax_e) = plt.subplots(1, 2, figsize=(11, 4.2))
    layouts = by_layout(rows)
    ranks = sorted({r["ranks"] for r in rows})
    base = [r for r in rows if number(r["efficiency"]) == 1.0 and number(r["speedup"]) == 1.0]
    if base:
        b = base[0]
        ideal = [number(b["tokens_per_s"]) * n / b["ranks"] for n in ranks]
        ax_t.plot(ranks, ideal, "k--", lw=0.8, label=f"ideal from {b['ranks']} rank{'s' if b['ranks'] > 1 else ''}",
                  gid="ideal")
    ax_e.axhline(1.0, color="k", ls="--", lw=0.8, gid="ideal")
    for name, rs in layouts.items():
        x = [r["ranks"] for r in rs]
        ax_t.plot(x, [number(r["tokens_per_s"]) for r in rs], "o-", label=name, gid=name)
        ax_e.plot(x, [number(r["efficiency"]) for r in rs], "o-", label=name, gid=name)
    for ax in (ax_t, ax_e):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ranks, [str(n) for n in ranks])
        ax.set_xlabel("ranks")
        ax.grid(True, which="both", alpha=0.3)
    ax_t.set_yscale("log")
    ax_t.set_ylabel("tokens/s (median step after warm-up)")
    ax_t.set_title("throughput")
    ax_t.legend(fontsize=8)
    ax_e.set_ylabel("efficiency (tokens/s per rank ÷ baseline's)")
    ax_e.set_ylim(bottom=0)
    ax_e.set_title("scaling efficiency")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    dump = {"throughput": {}, "efficiency": {}}
    for ax, key, column in ((ax_t, "throughput", "tokens_per_s"), (ax_e, "efficiency", "efficiency")):
        for line in ax.get_lines():
            if line.get_gid() in layouts:
                dump[key][line.get_gid()] = {"ranks": [int(v) for v in line.get_xdata()],
                                             column: [float(v) for v in line.get_ydata()]}
    plt.close(fig)
    return dump


def plot_breakdown(rows, title, path):
    """Top: seconds per step stacked, the prediction as a marker; bottom: the same as shares of the step."""
    order = sorted(rows, key=lambda r: (r["ranks"], r["point"]))
    labels = [f"{r['ranks']}\n{r['layout']}" for r in order]
    x = list(range(len(order)))
    fig, (ax_s, ax_f) = plt.subplots(2, 1, figsize=(max(6.0, 0.9 * len(order) + 2.5), 7.0), sharex=True,
                                     gridspec_kw={"height_ratios": [3, 2]})
    bars, shares = {}, {}
    bottom_s, bottom_f = [0.0] * len(order), [0.0] * len(order)
    stack = stack_of(order)
    fractions = {column: [number(r[share]) for r in order] for column, share, _, _ in stack if share}
    fractions["compute_s"] = [1 - sum(fractions[column][i] for column in fractions) for i in range(len(order))]
    for column, _, label, color in stack:
        heights = [number(r[column]) for r in order]
        bars[column] = ax_s.bar(x, heights, 0.7, bottom=bottom_s, label=label, color=color)
        bottom_s = [b + (h if h == h else 0.0) for b, h in zip(bottom_s, heights)]
        shares[column] = ax_f.bar(x, fractions[column], 0.7, bottom=bottom_f, color=color)
        bottom_f = [b + (h if h == h else 0.0) for b, h in zip(bottom_f, fractions[column])]
    predicted = ax_s.plot(x, [number(r["predicted_step_time_s"]) for r in order], "k_", ms=22, mew=2,
                          label="predicted step (meshtrain plan)")[0]
    ax_s.set_ylabel("seconds per step\n(median over ranks)")
    ax_s.set_title(f"{title}: where a step's time goes")
    ax_s.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax_s.grid(True, axis="y", alpha=0.3)
    ax_f.set_ylabel("share of the step")
    ax_f.set_ylim(0, 1)
    ax_f.grid(True, axis="y", alpha=0.3)
    ax_f.set_xticks(x, labels, fontsize=8)
    ax_f.set_xlabel("ranks, layout")
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")  # the legend and title may reach past the axes
    dump = {"points": [r["point"] for r in order]}
    for column, share, _, _ in stack:
        dump[column] = [float(p.get_height()) for p in bars[column].patches]
        if share:
            dump[share] = [float(p.get_height()) for p in shares[column].patches]
    dump["stack_bottom_s"] = {column: [float(p.get_y()) for p in bars[column].patches] for column, _, _, _ in stack}
    dump["predicted_step_time_s"] = [float(v) for v in predicted.get_ydata()]
    plt.close(fig)
    return dump


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--out-dir", help="where the PNGs go (default: the CSV's directory)")
    ap.add_argument("--title", default="scaling study")
    ap.add_argument("--dump-json", help="write the plotted series, read back from the figures, to this file")
    args = ap.parse_args()
    out = args.out_dir or os.path.dirname(os.path.abspath(args.csv))
    os.makedirs(out, exist_ok=True)
    rows = read_rows(args.csv)
    if not rows:
        print(f"plot_scaling.py: {args.csv} has no row with status ok: nothing to plot", file=sys.stderr)
        return 1
    throughput = os.path.join(out, "scaling_throughput.png")
    breakdown = os.path.join(out, "scaling_breakdown.png")
    dump = plot_throughput(rows, args.title, throughput)
    dump["breakdown"] = plot_breakdown(rows, args.title, breakdown)
    print(f"wrote {throughput}\nwrote {breakdown}")
    if args.dump_json:
        with open(args.dump_json, "w") as f:
            json.dump(dump, f, indent=1, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
