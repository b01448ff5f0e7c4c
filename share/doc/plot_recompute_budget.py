#!/usr/bin/python3
"""Extra forward FLOPs against activation memory: recompute.policy "budget"
swept over budgets, against the fixed policies full, sqrt and none.

A documentation tool: it draws share/doc/recompute_budget.png for
share/doc/benchmarks.md. It needs python3 with matplotlib (Debian/Ubuntu:
`apt-get install -y --no-install-recommends python3-matplotlib`, then run it
with /usr/bin/python3). It is not part of the build or of the tests.

It runs only `trainer --plan` (no training): on the quickstart model with
model.n_layer = 16 at 2 ranks, for the policies full, sqrt and none, and for
"budget" at POINTS budgets from just above the smallest feasible budget (found
by bisection on recompute.budget_mb: the smallest that does not make --plan
exit 2) up to the activations of "none". From each plan it reads
"activations X MiB per rank" and "extra forward FLOPs Y%".

It prints the data table (markdown) and checks, at every budget point:
  - the plan meets its budget: activations <= budget_mb;
  - budget is no worse than sqrt (full) wherever sqrt's (full's) activations
    fit the budget: budget's extra FLOPs <= sqrt's (full's).
--plan prints MiB to 3 decimals, so both checks allow for half a unit of that
last digit (0.0005 MiB), and two of the budgets are sqrt's and full's printed
activations plus 0.0005 MiB: the tightest budgets sure to hold them.
A failed check is printed and makes the exit code 1 (the plot is still written).

Usage:
  /usr/bin/python3 share/doc/plot_recompute_budget.py [--trainer build/trainer]
      [--data build/data/mobydick.h5] [--input inputs/quickstart.toml]
      [--ranks 2] [--layers 16] [--points 16] [--out share/doc/recompute_budget.png]
"""

import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ACT_RE = re.compile(r"^\s*activations\s+([0-9.]+) MiB per rank", re.M)
FLOPS_RE = re.compile(r"extra forward FLOPs ([0-9.]+)%")
RERUN_RE = re.compile(r"block forwards re-run in backward: (\d+)")
HALF_ULP = 0.0005  # half the last printed digit of "activations X MiB" (3 decimals)


def plan(args, policy, budget=None):
    """Runs trainer --plan; returns (activations MiB, extra FLOPs %, re-runs), or None on exit 2."""
    cmd = [args.trainer, "--plan", args.input, "--ranks", str(args.ranks),
           "--set", f"data.path={args.data}", "--set", f"model.n_layer={args.layers}",
           "--set", f"recompute.policy={policy}"]
    if budget is not None:
        cmd += ["--set", f"recompute.budget_mb={budget:.6f}"]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode == 2 and budget is not None and "cannot be met" in (r.stdout + r.stderr):
        return None
    if r.returncode != 0:
        sys.exit(f"plot_recompute_budget: {' '.join(cmd)} failed (exit {r.returncode}):\n{r.stdout}{r.stderr}")
    a, f, n = ACT_RE.search(r.stdout), FLOPS_RE.search(r.stdout), RERUN_RE.search(r.stdout)
    if not (a and f and n):
        sys.exit(f"plot_recompute_budget: cannot parse the plan of {' '.join(cmd)}:\n{r.stdout}")
    return float(a.group(1)), float(f.group(1)), int(n.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trainer", default=os.path.join(ROOT, "build", "trainer"))
    p.add_argument("--data", default=os.path.join(ROOT, "build", "data", "mobydick.h5"))
    p.add_argument("--input", default=os.path.join(ROOT, "inputs", "quickstart.toml"))
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--points", type=int, default=16, help="budgets swept (at least 12)")
    p.add_argument("--out", default=os.path.join(ROOT, "share", "doc", "recompute_budget.png"))
    args = p.parse_args()
    if args.points < 12:
        sys.exit("plot_recompute_budget: --points must be at least 12")

    fixed = {name: plan(args, name) for name in ("full", "sqrt", "none")}
    none_act = fixed["none"][0]

    # The smallest feasible budget, by bisection (to 0.001 MiB).
    lo, hi = 0.0, none_act  # lo infeasible (budget_mb must be > 0), hi feasible
    if plan(args, "budget", hi) is None:
        sys.exit("plot_recompute_budget: even the activations of policy none are not a feasible budget")
    while hi - lo > 1e-3:
        mid = (lo + hi) / 2
        if plan(args, "budget", mid) is None:
            lo = mid
        else:
            hi = mid
    smallest = hi
    print(f"smallest feasible recompute.budget_mb: {smallest:.3f} MiB (infeasible at {lo:.3f})")

    # Budgets: evenly spaced from just above the smallest feasible to none's
    # activations, plus the activations of full and sqrt themselves (where the
    # comparison with them is tightest).
    first = smallest + 0.01
    budgets = [first + (none_act - first) * k / (args.points - 1) for k in range(args.points)]
    budgets += [smallest + d for d in (0.25, 0.5, 1.0, 2.0)]  # the steep low end
    budgets = [round(b, 3) for b in budgets]
    # --plan prints MiB to 3 decimals, so a policy's true activations may be up to
    # HALF_ULP above the printed value: the tight points sit that much above it.
    budgets += [round(fixed[name][0] + HALF_ULP, 4) for name in ("full", "sqrt")]
    budgets = sorted(set(b for b in budgets if b >= smallest))

    rows, failures = [], []
    for b in budgets:
        res = plan(args, "budget", b)
        if res is None:
            failures.append(f"budget {b:g} MiB: --plan refused it although {smallest:.3f} MiB is feasible")
            continue
        act, flops, reruns = res
        notes = []
        if act > b + HALF_ULP:
            failures.append(f"budget {b:g} MiB: activations {act:.3f} MiB exceed the budget")
            notes.append("OVER BUDGET")
        for name in ("sqrt", "full"):
            f_act, f_flops, _ = fixed[name]
            if f_act + HALF_ULP <= b + 1e-9 and flops > f_flops + 1e-9:  # name surely fits
                failures.append(f"budget {b:g} MiB: {name} fits ({f_act:.3f} MiB) with {f_flops:.1f}% "
                                f"extra FLOPs, but budget plans {flops:.1f}%")
                notes.append(f"worse than {name}")
        rows.append((b, act, flops, reruns, "; ".join(notes)))

    print()
    print(f"| policy | recompute.budget_mb | activations per rank (MiB) | block forwards re-run | extra forward FLOPs | note |")
    print("|---|---|---|---|---|---|")
    for name in ("none", "sqrt", "full"):
        act, flops, reruns = fixed[name]
        print(f"| {name} | - | {act:.3f} | {reruns} | {flops:.1f}% | |")
    for b, act, flops, reruns, note in rows:
        print(f"| budget | {b:g} | {act:.3f} | {reruns} | {flops:.1f}% | {note} |")
    print()

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    pts = sorted((act, flops) for _, act, flops, _, _ in rows)
    # With x MiB of activations at hand, the best budget plan is the one with the
    # largest activations <= x: a staircase that holds each point to the right.
    xs = [a for a, _ in pts] + [max(none_act, pts[-1][0]) * 1.04]
    ys = [f for _, f in pts] + [pts[-1][1]]
    # The y axis stops at YMAX: the few plans near the smallest budget recompute
    # several forward passes; they are drawn as arrows at the top, labelled.
    ymax = max(200.0, 1.3 * fixed["full"][1])
    ax.step(xs, [min(y, ymax * 1.1) for y in ys], where="post", color="tab:blue", linewidth=1.5,
            label='policy "budget" (swept)')
    inside = [(a, f) for a, f in pts if f <= ymax]
    ax.plot([a for a, _ in inside], [f for _, f in inside], "o", color="tab:blue", markersize=5)
    above = [(a, f) for a, f in pts if f > ymax]
    if above:
        ax.plot([a for a, _ in above], [ymax * 0.97] * len(above), "^", color="tab:blue", markersize=7)
        ax.annotate("off scale: " + ", ".join(f"{f:.0f}% at {a:.2f}" for a, f in above) + " MiB",
                    (above[-1][0], ymax * 0.97), textcoords="offset points", xytext=(10, -4),
                    fontsize=8, color="tab:blue")
    colors = {"full": "tab:red", "sqrt": "tab:green", "none": "tab:gray"}
    for name in ("full", "sqrt", "none"):
        act, flops, _ = fixed[name]
        ax.plot([act], [flops], "D", color=colors[name], markersize=9, zorder=5)
        ax.annotate(f'{name}\n{act:.1f} MiB, {flops:.1f}%', (act, flops), textcoords="offset points",
                    xytext={"sqrt": (8, -32), "full": (-32, -6)}.get(name, (8, 8)), color=colors[name],
                    fontsize=9, ha="right" if name == "full" else "left")
    ax.set_ylim(-8, ymax)
    ax.set_xlim(0, max(none_act, pts[-1][0]) * 1.12)
    ax.axvline(smallest, color="black", linestyle=":", linewidth=1)
    ax.annotate(f"smallest feasible budget\n{smallest:.2f} MiB", (smallest, ymax * 0.2),
                textcoords="offset points", xytext=(6, 0), fontsize=8, ha="left")
    ax.set_xlabel("activations per rank (MiB)")
    ax.set_ylabel("extra forward FLOPs (% of one forward pass)")
    ax.set_title(f"Recompute: extra FLOPs against activation memory "
                 f"({args.layers}-layer quickstart model, {args.ranks} ranks, trainer --plan)", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"plot written to {args.out}")

    if failures:
        print(f"\n{len(failures)} check(s) failed:")
        for f in failures:
            print(f"  CHECK FAILED: {f}")
        return 1
    print("\nchecks: every budget plan meets its budget and is no worse than sqrt or full wherever they fit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
