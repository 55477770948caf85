"""How fast each CPU this process may use runs host work (`pipeline.measure.cpu_speed`), as a table: the interpreter's
loop and the framework's dispatch, each CPU's median over rotated rounds. The last two lines name the slowest CPU and
the fastest, for `taskset -c`.

    python -m bench.cpu_speed [--rounds 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from pipeline.measure.cpu_speed import cpu_speeds, ranked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    found = cpu_speeds(sorted(os.sched_getaffinity(0)), args.rounds, python_n=200_000, dispatch_n=4_000)
    print("| cpu | python ms | dispatch ms |")
    print("|---|---|---|")
    for c, t in found.items():
        print(f"| {c} | {t['python']:.2f} | {t['dispatch']:.2f} |")
    for key in ("python", "dispatch"):
        values = [t[key] for t in found.values()]
        print(f"{key}: fastest {min(values):.2f} ms, slowest {max(values):.2f} ms ({max(values) / min(values):.2f}x)")
    if args.json:
        args.json.write_text(json.dumps({str(c): t for c, t in found.items()}, indent=1))
    order = ranked(found)
    print(f"slowest {order[-1]}")
    print(f"fastest {order[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
