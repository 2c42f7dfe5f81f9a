#!/usr/bin/env python3
"""`meshtrain schedule` (share/docs/usage.md, Commands): the simulated pipeline schedules against their closed
forms — gpipe and 1f1b idle (p − 1)/(m + p − 1) of the stages' time, interleaved (p − 1)/(v·m + p − 1), ZB-H1
(p − 1)(F + B − W) per stage — and against a second simulator written here, which replays the lists the
command prints (--lists) with eager sends; the activation peaks against the schedules' rules; bad input: exit 2
naming the option, nothing on stdout.

usage: test_schedule_command.py --meshtrain BIN
"""
import argparse
import json
import re
import subprocess
import sys
import unittest

MESHTRAIN = None


def schedule(*args):
    return subprocess.run([MESHTRAIN, "schedule", *map(str, args)], capture_output=True, text=True, timeout=60)


def run_json(*args):
    p = schedule(*args, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def replay(lines, p, v, costs):
    """The makespan of the printed lists with eager sends: a send leaves its message at the sender's time, a
    receive waits for it. Activations go from virtual stage c·p + s to the next; gradients back."""
    lists = []
    for line in lines:
        acts = []
        for token in line.split(": ", 1)[1].split():
            kind, micro, chunk = re.fullmatch(r"([A-Za-z]+?)(\d+)(?:\.(\d+))?", token).groups()
            acts.append((kind, int(micro), int(chunk or 0)))
        lists.append(acts)
    f, b, w = (c / v for c in costs)
    cost = {"F": f, "B": b + w, "BI": b, "BW": w}

    def peer(s, kind, c):  # (stage, chunk) a message goes to or comes from
        virtual = c * p + s + (1 if kind in ("sendA", "recvG") else -1)
        return virtual % p, virtual // p

    clock, pc, messages = [0.0] * p, [0] * p, {}
    progress = True
    while progress:
        progress = False
        for s in range(p):
            while pc[s] < len(lists[s]):
                kind, micro, c = lists[s][pc[s]]
                if kind in cost:
                    clock[s] += cost[kind]
                elif kind.startswith("send"):
                    to, tc = peer(s, kind, c)
                    messages[(to, tc, micro, kind[-1])] = clock[s]
                else:
                    key = (s, c, micro, kind[-1])
                    if key not in messages:
                        break
                    clock[s] = max(clock[s], messages.pop(key))
                pc[s] += 1
                progress = True
    assert all(pc[s] == len(lists[s]) for s in range(p)), "the replay is stuck"
    return max(clock)


class Schedule(unittest.TestCase):
    def check(self, kind, p, m, v, costs, want_fraction):
        args = ["--kind", kind, "--stages", p, "--micro-batches", m, "--costs", ",".join(map(str, costs))]
        if kind == "interleaved":
            args += ["--chunks", v]
        got = run_json(*args)
        where = f"{kind} p {p} m {m} v {v} costs {costs}"
        self.assertAlmostEqual(got["idle_fraction"], want_fraction, delta=1e-12, msg=where)
        self.assertAlmostEqual(got["closed_form_idle_fraction"], want_fraction, delta=1e-12, msg=where)
        work = m * sum(costs)
        for stage in got["per_stage"]:
            self.assertAlmostEqual(stage["idle"], got["makespan"] - work, delta=1e-9, msg=where)
        if kind in ("interleaved", "zb-h1"):
            text = schedule(*args, "--lists").stdout.splitlines()
            lines = [line for line in text if line.startswith("stage ") and ": " in line]
            self.assertEqual(len(lines), p)
            self.assertAlmostEqual(replay(lines, p, v, costs), got["makespan"], delta=1e-9, msg=where)
        return got

    def test_gpipe_and_1f1b(self):
        for kind in ("gpipe", "1f1b"):
            for p in (2, 4, 8):
                for m in (1, p, 3 * p):
                    got = self.check(kind, p, m, 1, (1, 1.5, 0.5), (p - 1) / (m + p - 1))
                    peaks = [s["peak_activations"] for s in got["per_stage"]]
                    self.assertEqual(peaks, [m if kind == "gpipe" else min(p - s, m) for s in range(p)])

    def test_interleaved(self):
        for p in (2, 4, 8):
            for v in (2, 4):
                for m in (p, 2 * p, 4 * p):
                    got = self.check("interleaved", p, m, v, (1, 2, 0), (p - 1) / (v * m + p - 1))
                    # Megatron-LM's warm-up 2(p − s − 1) + (v − 1)p chunk forwards and one more, in chunks of 1/v.
                    peaks = [s["peak_activations"] for s in got["per_stage"]]
                    want = [(m * v if m == p else min(2 * (p - s - 1) + (v - 1) * p + 1, m * v)) / v for s in range(p)]
                    self.assertEqual(peaks, want)

    def test_zero_bubble_h1(self):
        for costs in ((1, 1, 1), (1, 2, 1), (2, 2, 1), (1, 1, 0.5)):
            f, b, w = costs
            for p in (2, 4, 8):
                for m in (p, 2 * p, 4 * p):
                    idle = (p - 1) * (f + b - w)
                    got = self.check("zb-h1", p, m, 1, costs, idle / (m * (f + b + w) + idle))
                    self.assertEqual([s["peak_activations"] for s in got["per_stage"]], [p] * p)
        # W > F: no closed form claimed.
        self.assertIsNone(run_json("--kind", "zb-h1", "--stages", 4, "--micro-batches", 8, "--costs", "1,1,2")
                          ["closed_form_idle_fraction"])

    def test_table(self):
        p = schedule("--kind", "zb-h1", "--stages", 4, "--micro-batches", 8)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("makespan 27, idle 0.1111 of the stages' time (closed form 0.1111)", p.stdout)
        self.assertEqual(schedule("--help").returncode, 0)

    def test_bad_input(self):
        cases = [
            (["--kind", "zb-h2", "--stages", 4, "--micro-batches", 8], ["--kind zb-h2", "gpipe, 1f1b, interleaved"]),
            (["--kind", "1f1b", "--stages", 0, "--micro-batches", 8], ["--stages 0"]),
            (["--kind", "1f1b", "--stages", 2, "--micro-batches", 0], ["--micro-batches 0"]),
            (["--kind", "interleaved", "--stages", 4, "--micro-batches", 6, "--chunks", 2],
             ["--micro-batches 6", "--stages 4", "say 8"]),
            (["--kind", "zb-h1", "--stages", 4, "--micro-batches", 8, "--chunks", 2], ["--chunks 2", "interleaved"]),
            (["--kind", "interleaved", "--stages", 4, "--micro-batches", 8, "--chunks", 0], ["--chunks 0"]),
            (["--kind", "1f1b", "--stages", 2, "--micro-batches", 2, "--costs", "1,-1,1"], ["--costs 1,-1,1"]),
            (["--kind", "1f1b", "--stages", 2, "--micro-batches", 2, "--costs", "1,1"], ["--costs 1,1", "F,B,W"]),
            (["--stages", 2, "--micro-batches", 2], ["'--kind' is required"]),
        ]
        for args, needles in cases:
            p = schedule(*args)
            self.assertEqual(p.returncode, 2, f"{args}: {p.stderr}")
            self.assertEqual(p.stdout, "", args)
            for needle in needles:
                self.assertIn(needle, p.stderr, args)


def main():
    global MESHTRAIN
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--meshtrain", required=True)
    args, rest = ap.parse_known_args()
    MESHTRAIN = args.meshtrain
    return 0 if unittest.main(argv=[sys.argv[0]] + rest, exit=False).result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
