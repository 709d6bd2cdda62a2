"""Call the thread probe many times and print what each call saw: the evidence for issue 33's "the probe sees
load on an idle machine", to be run on an idle machine and again with one core kept busy.

Each line: the choice, the five readings of the CPUs busy with other work (:func:`course_lib.runtime.
measure_threads`, 50 ms each) and their median, the matmul speedup, and beside them the signal of the earlier
probe (``/proc/loadavg``'s runnable tasks less this process's, the median of 16 samples taken within a few
milliseconds), so that both can be compared on the same machine at the same moment. Target: on an idle
2-core machine every call chooses 2; with ``python -c "while True: pass"`` running, every call chooses 1.

Usage::

    python tools/probe_threads.py                  # 30 calls
    python tools/probe_threads.py --calls 60 --json probes.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def _runnable_here() -> int:
    """This process's threads in state R (at least the caller)."""
    count = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat") as stat:
                count += stat.read().rsplit(")", 1)[1].split()[0] == "R"
        except (OSError, IndexError):
            continue
    return max(1, count)


def earlier_signal(samples: int = 16) -> float | None:
    """The earlier probe's load signal: the median of ``samples`` readings of /proc/loadavg's runnable tasks
    less this process's runnable threads (counted before and after each reading, the larger taken off)."""
    readings = []
    for _ in range(samples):
        before = _runnable_here()
        try:
            with open("/proc/loadavg") as loadavg:
                running = int(loadavg.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return None
        readings.append(max(0, running - max(before, _runnable_here())))
    return float(statistics.median(readings))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=30, help="probe calls (default 30)")
    parser.add_argument("--pause", type=float, default=0.2, help="seconds between calls (default 0.2)")
    parser.add_argument("--json", help="also write every call's record to this file")
    args = parser.parse_args(argv)
    from course_lib.runtime import measure_threads

    records = []
    for i in range(args.calls):
        measured = measure_threads()
        record = {"threads": measured.threads, "busy_elsewhere": measured.busy_elsewhere,
                  "readings": [round(n, 3) for n in measured.samples], "speedup": measured.speedup,
                  "earlier_signal": earlier_signal()}
        records.append(record)
        busy = "-" if measured.busy_elsewhere is None else f"{measured.busy_elsewhere:.2f}"
        speedup = "not timed" if measured.speedup is None else f"{measured.speedup:.2f}x"
        print(f"{i:3d}  threads {measured.threads}  busy elsewhere {busy} {record['readings']}  "
              f"2 threads {speedup}  earlier signal {record['earlier_signal']}", flush=True)
        time.sleep(args.pause)
    chose_two = sum(r["threads"] == 2 for r in records)
    print(f"chose 2 threads in {chose_two} of {len(records)} calls; the earlier signal saw >= 0.5 CPUs busy in "
          f"{sum((r['earlier_signal'] or 0) >= 0.5 for r in records)}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(records, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
