#!/usr/bin/env python3
"""regret.py - tabulate tuning regret from `bench_ops --regret --csv F`.

    python3 bench/regret.py regret.csv [--cases bench/regret_cases.txt]

For each case: the config the case's first call tuned (its bucket's pick,
tuned on the bucket's tuning batch over the safelist), the fastest config of
the sweep of the whole config space on the case, their times (from the
head-to-head re-timing after the sweep where the CSV has it, else the
sweep's), and regret = pick / fastest - 1. Then the median and worst regret per op and
over all cases, as markdown. A case whose pick the sweep did not time is
listed and left out of the summary.
"""
import argparse
import csv
import statistics
import sys


def case_names(path):
    """bench_ops names a case of a file "op:LINE"; a "#= NAME" line names
    the case below it."""
    names, pending = {}, None
    with open(path) as f:
        for num, line in enumerate(f, 1):
            s = line.strip()
            if s.startswith("#="):
                pending = s[2:].strip()
            elif s and not s.startswith("#"):
                names[f"{s.split()[0]}:{num}"] = pending or f"{s.split()[0]}:{num}"
                pending = None
    return names


def self_test():
    """Crafted files with known regrets (a CPU test runs this)."""
    import contextlib
    import io
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        cases, data = os.path.join(d, "cases.txt"), os.path.join(d, "r.csv")
        with open(cases, "w") as f:
            f.write("# x\n#= a-tb\nrmsnorm v rows=4,cols=8\n#= a-away\nrmsnorm v rows=3,cols=8\n"
                    "swiglu v rows=4,cols=8\n")
        hdr = "case,op,variant,shape,us,tflops,gbps,tune_s,config,same_copy_gbps\n"
        with open(data, "w") as f:
            f.write(hdr + 'rmsnorm:3,rmsnorm,"v","s",10.0,0,1,0.5,"bm=1",1\n'
                    'rmsnorm:3,rmsnorm,"v","s",10.0,0,1,,"sweep bm=1"\n'
                    'rmsnorm:3,rmsnorm,"v","s",11.0,0,1,,"sweep bm=2"\n'
                    'rmsnorm:5,rmsnorm,"v","s",12.0,0,1,0.0,"bm=1",1\n'
                    'rmsnorm:5,rmsnorm,"v","s",12.0,0,1,,"sweep bm=1"\n'
                    'rmsnorm:5,rmsnorm,"v","s",10.0,0,1,,"sweep bm=2"\n'
                    'rmsnorm:5,rmsnorm,"v","s",11.0,,,,"h2h pick bm=1"\n'
                    'rmsnorm:5,rmsnorm,"v","s",10.0,,,,"h2h best bm=2"\n'
                    'swiglu:6,swiglu,"v","s",5.0,0,1,0.1,"w=9",1\n'
                    'swiglu:6,swiglu,"v","s",5.0,0,1,,"sweep w=1"\n')
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = main([data, "--cases", cases])
        text = out.getvalue()
    want = ["| a-tb | `bm=1` | 10.00 | 10.00 | (the pick) | 0.00% | 2 |",
            "| a-away | `bm=1` | 11.00 | 10.00 | `bm=2` | 10.00% | 2 |",
            "| rmsnorm | 2 | 5.00% | 10.00% |", "| all | 2 | 5.00% | 10.00% |",
            "swiglu:6: the pick `w=9` was not timed by the sweep (left out)"]
    bad = [w for w in want if w not in text]
    if rc != 0 or bad:
        print(text + "\nregret.py self-test: missing:\n" + "\n".join(bad))
        return 1
    print("regret.py self-test: ok")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", nargs="?")
    ap.add_argument("--cases", default="bench/regret_cases.txt")
    ap.add_argument("--self-test", action="store_true", help="check this script on crafted files")
    a = ap.parse_args(argv)
    if a.self_test:
        return self_test()
    if not a.csv:
        ap.error("the CSV of bench_ops --regret is required")
    names = case_names(a.cases)
    picks, sweeps, h2h, order = {}, {}, {}, []
    with open(a.csv) as f:
        for r in csv.DictReader(f):
            c = r["case"]
            if r["config"].startswith("sweep "):
                sweeps.setdefault(c, {})[r["config"][6:]] = float(r["us"])
            elif r["config"].startswith("h2h "):
                kind, cfg = r["config"][4:].split(" ", 1)
                h2h.setdefault(c, {})[kind] = (cfg, float(r["us"]))
            else:
                picks[c] = (r["op"], r["config"], float(r["us"]))
                order.append(c)
    rows, by_op, missing = [], {}, []
    for c in order:
        op, pick, call_us = picks[c]
        sw = sweeps.get(c, {})
        if not sw or pick not in sw:
            missing.append((names.get(c, c), pick))
            continue
        best_cfg = min(sw, key=sw.get)
        pu, bu = sw[pick], sw[best_cfg]
        hh = h2h.get(c, {})
        if "pick" in hh and "best" in hh:  # timed again side by side: use those
            pu, (best_cfg, bu) = hh["pick"][1], hh["best"]
        reg = pu / bu - 1
        rows.append((names.get(c, c), op, pick, pu, bu, best_cfg, reg, len(sw)))
        by_op.setdefault(op, []).append(reg)
    print("| case | pick | pick us | best us | best config | regret | configs |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for n, op, pick, pu, bu, bc, reg, k in rows:
        print(f"| {n} | `{pick}` | {pu:.2f} | {bu:.2f} | "
              f"{'(the pick)' if bc == pick else '`' + bc + '`'} | {100 * reg:.2f}% | {k} |")
    print()
    print("| op | cases | median regret | worst |")
    print("| --- | --- | --- | --- |")
    allr = []
    for op, regs in by_op.items():
        allr += regs
        print(f"| {op} | {len(regs)} | {100 * statistics.median(regs):.2f}% | "
              f"{100 * max(regs):.2f}% |")
    if allr:
        print(f"| all | {len(allr)} | {100 * statistics.median(allr):.2f}% | "
              f"{100 * max(allr):.2f}% |")
    for n, pick in missing:
        print(f"\n{n}: the pick `{pick}` was not timed by the sweep (left out)")
    return 0 if allr else 1


if __name__ == "__main__":
    sys.exit(main())
