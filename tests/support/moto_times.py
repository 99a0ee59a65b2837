#!/usr/bin/env python3
"""Where a run's time went, from the log moto_lean.py writes with MOTO_LEAN_TIMES=FILE.

Usage: moto_times.py FILE [WINDOW_SECONDS]   (default 60)

Prints the calls, moto's own time per action, the time between calls (in pauses of at
least 0.1 s, 0.3 s, ...: waits of the callers, not moto's work) and, per window, the calls,
moto's time and the items stored.
"""
import collections
import sys


def main(path, window):
    rows = []
    for line in open(path):
        t, handler, action, ms, items = line.split()
        rows.append((float(t), action, float(ms), int(items)))
    start = rows[0][0] - rows[0][2] / 1000
    span = rows[-1][0] - start
    busy = sum(r[2] for r in rows) / 1000
    print(f"calls {len(rows)}, span {span:.0f} s, moto busy {busy:.0f} s, items at end {rows[-1][3]}")
    per_action = collections.defaultdict(lambda: [0, 0.0])
    for _, action, ms, _ in rows:
        per_action[action][0] += 1
        per_action[action][1] += ms
    for action, (n, ms) in sorted(per_action.items(), key=lambda x: -x[1][1])[:12]:
        print(f"  {action:28s} {n:7d} {ms / 1000:8.1f} s {ms / n:7.1f} ms/call")
    idle = 0.0
    in_pauses = collections.Counter()
    for a, b in zip(rows, rows[1:]):
        gap = (b[0] - b[2] / 1000) - a[0]
        idle += max(gap, 0.0)
        for least in (0.1, 0.3, 0.5, 1, 2, 5):
            if gap >= least:
                in_pauses[least] += gap
    print(
        f"between calls {idle:.0f} s; of it in pauses of at least x s:",
        {k: round(v) for k, v in sorted(in_pauses.items())},
    )
    windows = collections.defaultdict(lambda: [0, 0.0, 0])
    for t, _, ms, items in rows:
        w = windows[int((t - start) // window)]
        w[0] += 1
        w[1] += ms
        w[2] = items
    for k in sorted(windows):
        n, ms, items = windows[k]
        print(f"  t+{k * window:6d} s: calls {n:6d}, moto {ms / 1000:6.1f} s, items {items}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 60)
