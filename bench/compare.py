#!/usr/bin/env python3
"""Compares a benchmark run (bench/run.py's results.json) with the committed one.

For every model, batch and mode (infer, train) both runs have, prints graft's median step time
in each, their ratio new/old, and the noise: the spread of each run's own timings (half the
inter-quartile range over the median, the two runs' added). A ratio is flagged when it moved by
more than the noise and by more than --min-change (default 5%). The other frameworks' times are
compared the same way when both runs have them: a machine that got slower moves them too, which
tells a slower graft from a slower machine. Exit status 1 when a graft time got slower beyond the
noise (--fail-on-slower), 0 otherwise.

  python3 bench/compare.py NEW.json [--base bench/results/results.json]
"""
import argparse
import json
import math
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def spread(times):
    """Half the inter-quartile range over the median: the relative noise of one run's timings."""
    if not times or len(times) < 4:
        return 0.0
    q = statistics.quantiles(times, n=4)
    med = statistics.median(times)
    return (q[2] - q[0]) / 2 / med if med > 0 else 0.0


def entries(report):
    """{(model, batch, mode, framework): result} for every timed result of a report."""
    out = {}
    for row in report.get("rows", []):
        for mode in ("infer", "train"):
            for fw, res in (row.get(mode) or {}).items():
                if isinstance(res, dict) and res.get("median_s"):
                    out[(row["model"], row["batch"], mode, fw)] = res
        # The bf16 table's runs (hosts with avx512_bf16): graft's and PyTorch autocast's.
        for key, fw in (("infer_bf16", "graft_bf16"), ("infer_bf16_torch", "torch_bf16")):
            bf16 = row.get(key)
            if isinstance(bf16, dict) and bf16.get("median_s"):
                out[(row["model"], row["batch"], "infer", fw)] = bf16
    return out


def compare(base, new, min_change):
    """Rows of (key, old_s, new_s, ratio, noise, flag) for the results both reports have."""
    b, n = entries(base), entries(new)
    rows = []
    for key in sorted(set(b) & set(n)):
        old_s, new_s = b[key]["median_s"], n[key]["median_s"]
        ratio = new_s / old_s
        noise = spread(b[key].get("times", [])) + spread(n[key].get("times", []))
        moved = abs(math.log(ratio))
        flag = ""
        if moved > math.log1p(max(noise, min_change)):
            flag = "slower" if ratio > 1 else "faster"
        rows.append((key, old_s, new_s, ratio, noise, flag))
    return rows, sorted(set(b) - set(n)), sorted(set(n) - set(b))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("new", help="results.json of the run to check")
    ap.add_argument("--base", default=os.path.join(HERE, "results", "results.json"))
    ap.add_argument("--min-change", type=float, default=0.05, help="smallest relative change flagged")
    ap.add_argument("--fail-on-slower", action="store_true", help="exit 1 when a graft time got slower")
    a = ap.parse_args(argv)
    with open(a.base) as f:
        base = json.load(f)
    with open(a.new) as f:
        new = json.load(f)
    if base.get("threads") != new.get("threads"):
        print(f"note: threads differ (base {base.get('threads')}, new {new.get('threads')})")
    rows, gone, added = compare(base, new, a.min_change)
    print(f"{'model':<16} {'batch':>5} {'mode':<5} {'framework':<9} {'base ms':>9} {'new ms':>9} {'new/base':>8} "
          f"{'noise':>6}  flag")
    slower = 0
    for (model, batch, mode, fw), old_s, new_s, ratio, noise, flag in rows:
        print(f"{model:<16} {batch:>5} {mode:<5} {fw:<9} {old_s * 1e3:>9.3f} {new_s * 1e3:>9.3f} {ratio:>8.3f} "
              f"{noise * 100:>5.1f}%  {flag}")
        if fw == "graft" and flag == "slower":
            slower += 1
    for key in gone:
        print(f"only in the base run: {key}")
    for key in added:
        print(f"only in the new run: {key}")
    flagged = sum(1 for r in rows if r[5])
    print(f"{len(rows)} results compared, {flagged} moved beyond the noise, {slower} graft results slower")
    return 1 if a.fail_on_slower and slower else 0


if __name__ == "__main__":
    sys.exit(main())
