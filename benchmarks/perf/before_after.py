"""The round's cost on two source trees side by side: code before a change against code after, in one invocation.

Each repeat runs `round_cost.one_run` (default DG-LMC, logistic regression on breast_cancer, 4 chains) in a fresh
Python process per tree, PYTHONPATH pointing at that tree, the trees interleaved repeat by repeat so that a loaded
machine slows both alike. Variants: in-process with b = 4, 8, 16, 32 shards (all shards stepped in one process, as
batches), the paper's rules (kernel "lmc") with 8 shards, kernel "mala" with 8 shards (one message per shard, each
stepped alone), and algorithms "fald", "qlsd" and "ula" with 4 shards. Prints each tree's median round (µs, the
median over repeats of each run's median round) and the ratio.

    git worktree add /tmp/before <base commit>
    python benchmarks/perf/before_after.py --before /tmp/before --after . [--repeats 5] [--rounds 400]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

#: (label, shards, extra sampling parameters)
VARIANTS = (
    [(f"laplace_mh, {b} shards", b, {}) for b in (4, 8, 16, 32)]
    + [
        ("lmc (paper's rules), 8 shards", 8, {"preconditioner": None}),
        ("mala (one message per shard), 8 shards", 8, {"local_kernel": "mala"}),
    ]
    + [(f"algorithm {a}, 4 shards", 4, {"algorithm": a}) for a in ("fald", "qlsd", "ula")]
)

CHILD = r"""
import json, sys, warnings
import numpy as np
import raysampler as rs
X, y = rs.datasets.load("breast_cancer")
out = {}
for label, b, params in json.loads(sys.argv[1]):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = rs.sample(rs.models.LogisticRegression(prior_scale=1.0), rs.shard(X, y, num_shards=b), chains=4,
                        num_rounds=int(sys.argv[2]), burn_in=int(sys.argv[2]) // 10, seed=0, executor="local",
                        balance=False, progress=False, **params)
    out[label] = 1e6 * res.run_stats.breakdown().round_s
print(json.dumps(out))
"""


def run(tree: pathlib.Path, rounds: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(VARIANTS), str(rounds)],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=pathlib.Path, required=True, help="the tree before the change")
    ap.add_argument("--after", type=pathlib.Path, default=pathlib.Path("."), help="the tree after it (default: .)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=400, help="rounds after burn-in per run")
    args = ap.parse_args()
    times: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    for r in range(args.repeats):
        for name, tree in (("before", args.before), ("after", args.after)):
            for label, us in run(tree, args.rounds).items():
                times[name].setdefault(label, []).append(us)
        print(f"repeat {r + 1}/{args.repeats} done", flush=True)
    print(f"\n{'variant':40} {'before µs':>10} {'after µs':>10} {'after/before':>13}")
    for label, _, _ in VARIANTS:
        b, a = statistics.median(times["before"][label]), statistics.median(times["after"][label])
        print(f"{label:40} {b:10.0f} {a:10.0f} {a / b:13.3f}")


if __name__ == "__main__":
    main()
