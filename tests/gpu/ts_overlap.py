# SPDX-License-Identifier: MIT
"""ts_overlap.py: judges time slicing from the kernels' own clocks.

    python3 ts_overlap.py QUANTUM_MS A_FILE B_FILE
    python3 ts_overlap.py --selftest

A_FILE and B_FILE hold one "START END" line (%globaltimer, ns) per kernel of
app a and app b. Sorted by start, the kernels form runs of one app; a
handoff is the change from one run to the next. Time slicing holds when
  - no kernel of one app overlaps a kernel of the other except the last
    kernel of a run with the first of the next (the handoff itself; a
    lone kernel of one app inside the other's turn is no handoff: it makes
    a run of its own, and both runs of a handoff hold more than one),
  - there were handoffs (both apps ran, in turns), and
  - the turns were not much shorter than the quantum: at most
    2 * wall / quantum + 4 handoffs (without time slicing the hardware
    interleaves the two apps' kernels every few milliseconds).
Prints the figures as "key value" pairs and "verdict pass|fail"; exit 0
on pass, 1 on fail, 2 on bad input.
"""
import sys


def judge(quantum_ms, a, b):
    ks = sorted([(s, e, "a") for s, e in a] + [(s, e, "b") for s, e in b])
    if not a or not b:
        return {"kernels_a": len(a), "kernels_b": len(b), "verdict": "fail"}
    run, pos = 0, []
    for i, k in enumerate(ks):
        if i > 0 and k[2] != ks[i - 1][2]:
            run += 1
        pos.append(run)
    first = {}
    last = {}
    for i, r in enumerate(pos):
        first.setdefault(r, i)
        last[r] = i
    handoffs = run

    def length(r):
        return last[r] - first[r] + 1
    inside = at_handoff = 0
    inside_ns = 0
    active = []  # indexes whose end is past the current start
    for i, (s, e, app) in enumerate(ks):
        active = [j for j in active if ks[j][1] > s]
        for j in active:
            if ks[j][2] == app:
                continue
            ok = (pos[i] == pos[j] + 1 and last[pos[j]] == j and
                  first[pos[i]] == i and length(pos[i]) > 1 and
                  length(pos[j]) > 1)
            if ok:
                at_handoff += 1
            else:
                inside += 1
                inside_ns += min(e, ks[j][1]) - s
        active.append(i)
    wall_ns = max(k[1] for k in ks) - ks[0][0]
    max_handoffs = int(2 * wall_ns / (quantum_ms * 1e6)) + 4
    good = inside == 0 and handoffs >= 2 and handoffs <= max_handoffs
    return {
        "kernels_a": len(a), "kernels_b": len(b), "handoffs": handoffs,
        "max_handoffs": max_handoffs, "overlaps_at_handoffs": at_handoff,
        "overlaps_outside": inside, "overlap_outside_ms": round(inside_ns / 1e6, 3),
        "wall_ms": round(wall_ns / 1e6, 1), "verdict": "pass" if good else "fail",
    }


def read(path):
    out = []
    with open(path) as f:
        for line in f:
            s, e = line.split()
            out.append((int(s), int(e)))
    return out


def selftest():
    ms = 1000000
    # turns of 100 ms made of 2 ms kernels, one overlap at each handoff
    a, b = [], []
    for turn in range(6):
        dst = a if turn % 2 == 0 else b
        t0 = turn * 100 * ms
        dst.extend((t0 + i * 2 * ms, t0 + (i + 1) * 2 * ms + (ms if i == 49 else 0))
                   for i in range(50))
    assert judge(100, a, b)["verdict"] == "pass", judge(100, a, b)
    # the hardware's own interleaving: a kernel of b inside a's turn
    bad_b = b + [(a[10][0] + ms // 2, a[10][0] + ms)]
    assert judge(100, a, bad_b)["overlaps_outside"] == 1
    assert judge(100, a, bad_b)["verdict"] == "fail"
    # alternating kernels: no overlap, but turns far below the quantum
    alt_a = [(i * 4 * ms, i * 4 * ms + 2 * ms) for i in range(100)]
    alt_b = [(s + 2 * ms, e + 2 * ms) for s, e in alt_a]
    assert judge(100, alt_a, alt_b)["verdict"] == "fail"
    assert judge(100, a, [])["verdict"] == "fail"
    print("selftest ok")
    return 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--selftest":
        return selftest()
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    r = judge(float(argv[1]), read(argv[2]), read(argv[3]))
    for k, v in r.items():
        print(k, v)
    return 0 if r["verdict"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
