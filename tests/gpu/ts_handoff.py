# SPDX-License-Identifier: MIT
"""ts_handoff.py: the device's side of time-slicing handoffs (issue 49).

    python3 ts_handoff.py A_FILE B_FILE
    python3 ts_handoff.py --selftest

A_FILE and B_FILE hold one "START END" line (%globaltimer, ns) per kernel
of app a and app b. Sorted by start, the kernels form runs of one app; a
handoff is the change from one run to the next, and its device gap is the
time from the end of the run's last kernel to the start of the next run's
first (what the card spent idle handing over; negative: they overlapped).
Prints "handoffs N gap_p50_us X gap_p99_us Y busy F share_a A share_b B"
(busy: kernel time over the span of both; share: each app's kernel time
over that span).
"""
import sys


def judge(a, b):
    ks = sorted([(s, e, "a") for s, e in a] + [(s, e, "b") for s, e in b])
    if not ks:
        return {"handoffs": 0}
    gaps = []
    last_end = {"a": 0, "b": 0}
    for i in range(1, len(ks)):
        prev = ks[i - 1][2]
        last_end[prev] = max(last_end[prev], ks[i - 1][1])
        if ks[i][2] != prev:
            gaps.append(ks[i][0] - last_end[prev])
    span = max(e for _, e, _ in ks) - min(s for s, _, _ in ks)
    work = {"a": sum(e - s for s, e in a), "b": sum(e - s for s, e in b)}
    gaps.sort()

    def pct(p):
        return gaps[min(len(gaps) - 1, (len(gaps) * p + 99) // 100 - 1)] if gaps else 0

    return {
        "handoffs": len(gaps),
        "gap_p50_us": round(pct(50) / 1e3, 1),
        "gap_p99_us": round(pct(99) / 1e3, 1),
        "busy": round((work["a"] + work["b"]) / span, 3) if span else 0,
        "share_a": round(work["a"] / span, 3) if span else 0,
        "share_b": round(work["b"] / span, 3) if span else 0,
    }


def load(path):
    out = []
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) == 2:
                out.append((int(p[0]), int(p[1])))
    return out


def selftest():
    # a: 0-10, 10-20; b: 25-35; a: 36-46 (gaps 5 and 1 us, in ns * 1000)
    a = [(0, 10000), (10000, 20000), (36000, 46000)]
    b = [(25000, 35000)]
    r = judge(a, b)
    assert r["handoffs"] == 2, r
    assert r["gap_p50_us"] == 1.0 and r["gap_p99_us"] == 5.0, r
    assert r["busy"] == round(40 / 46, 3), r
    return "selftest ok"


def main():
    if sys.argv[1:] == ["--selftest"]:
        print(selftest())
        return 0
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    r = judge(load(sys.argv[1]), load(sys.argv[2]))
    print(" ".join("%s %s" % kv for kv in r.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
