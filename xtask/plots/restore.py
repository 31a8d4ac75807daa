"""Plots `cargo xtask bench restore`'s JSON report: where a user's wait goes at each size.

Left: the wait from creating the restoring Cluster to `Running`, stage by stage, beside the two
baselines of the same run (an empty Cluster to `Running`, and a raw copy of the restored bytes).
Right: how the overhead (total - both baselines) grows with size, against the 30 s target at
1 GiB. Run by `cargo xtask bench restore --plot FILE`; the report's format is the bench's
`SizeReport` (crates/lifeboat-e2e/src/bin/lifeboat-bench-restore.rs).
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TARGET_OVERHEAD_S = 30.0


def label(mib):
    return f"{mib // 1024} GiB" if mib >= 1024 and mib % 1024 == 0 else f"{mib} MiB"


def main(report_path, out_path):
    with open(report_path) as f:
        reports = sorted(json.load(f), key=lambda r: r["size_mib"])
    if not reports:
        sys.exit(f"{report_path} holds no round")
    # Stage keys are "NN name", numbered in the order they ran.
    stages = sorted({k for r in reports for k in r["restore_stages"]})
    colours = plt.get_cmap("tab20").colors

    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 5.5), width_ratios=[3, 2])
    rows = []
    for r in reports:
        name = label(r["size_mib"])
        rows += [(f"{name} restore", r, "restore"), (f"{name} empty", r, "empty"),
                 (f"{name} raw copy", r, "copy")]
    for y, (name, r, kind) in enumerate(rows):
        if kind == "restore":
            start = 0.0
            for i, k in enumerate(stages):
                d = r["restore_stages"].get(k, 0.0)
                left.barh(y, d, left=start, color=colours[i % len(colours)],
                          label=k[3:] if y == 0 else None)
                start += d
            left.text(start + 0.5, y, f"{r['restore_seconds']:.1f} s "
                      f"(overhead {r['overhead_seconds']:.1f} s)", va="center", fontsize=8)
        elif kind == "empty":
            left.barh(y, r["empty_seconds"], color="0.75", hatch="//", edgecolor="0.5",
                      label="empty Cluster to Running" if y == 1 else None)
            left.text(r["empty_seconds"] + 0.5, y, f"{r['empty_seconds']:.1f} s", va="center",
                      fontsize=8)
        else:
            left.barh(y, r["raw_copy_seconds"], color="0.35",
                      label="raw copy (cp + sync)" if y == 2 else None)
            left.text(r["raw_copy_seconds"] + 0.5, y, f"{r['raw_copy_seconds']:.1f} s",
                      va="center", fontsize=8)
    left.set_yticks(range(len(rows)), [n for n, _, _ in rows], fontsize=8)
    left.invert_yaxis()
    longest = max(max(r["restore_seconds"], r["empty_seconds"]) for r in reports)
    left.set_xlim(0, longest * 1.35)
    left.set_xlabel("seconds from creating the Cluster")
    left.set_title("Restoring Cluster to Running, stage by stage, and the baselines")
    left.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))

    sizes = [r["size_mib"] for r in reports]
    right.plot(sizes, [r["overhead_seconds"] for r in reports], "o-", label="overhead")
    right.plot(sizes, [r["restore_seconds"] for r in reports], "s--", label="restore to Running")
    right.plot(sizes, [r["empty_seconds"] + r["raw_copy_seconds"] for r in reports], "^:",
               label="empty Cluster + raw copy")
    right.axhline(TARGET_OVERHEAD_S, color="red", lw=0.8, label="overhead target at 1 GiB")
    right.set_xscale("log", base=2)
    right.set_xticks(sizes, [label(s) for s in sizes])
    right.set_xlabel("RDB a volume")
    right.set_ylabel("seconds")
    right.set_title("How the cost grows with size")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: restore.py REPORT.json OUT.png")
    main(sys.argv[1], sys.argv[2])
