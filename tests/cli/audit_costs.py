#!/usr/bin/env python3
"""Independent audit of the instance `osdp plan --emit-costs FILE` writes (schema_version 1).

The instance is a multiple-choice knapsack with a max-transient term: one choice per operator,
    time = fixed.time_s + sum(chosen time_s)
    peak = fixed.memory_bytes + sum(chosen persistent_bytes) + max(chosen transient_bytes)
subject to peak <= memory_capacity_bytes.

Checks: the schema; when a selection was chosen, that the reported objective is what the chosen
items add up to and that it fits; and, when the product of the choice counts is at most
--brute-force-limit, that no selection is faster (every combination is tried). Without a
selection (no plan fits) a small instance is brute-forced to confirm that nothing fits.

Standard library only. Exit status 0 when every check passes, 1 otherwise.
"""

import argparse
import itertools
import json
import math
import sys

REL = 1e-9  # relative tolerance on sums of floating-point figures


def close(a, b):
    return abs(a - b) <= REL * max(1.0, abs(a), abs(b))


def is_number(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--brute-force-limit", type=float, default=2e5,
                    help="brute-force when the product of choice counts is at most this (default 2e5)")
    ap.add_argument("--require-brute-force", action="store_true",
                    help="fail when the instance is too large to brute-force")
    args = ap.parse_args()

    failures = []

    def fail(msg):
        failures.append(msg)
        print(f"FAIL: {msg}")

    try:
        with open(args.file, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"FAIL: {args.file}: cannot read JSON: {e}")
        return 1

    # --- schema -------------------------------------------------------------------------------
    if doc.get("schema_version") != 1:
        fail(f"schema_version is {doc.get('schema_version')!r}, expected 1")
    cap = doc.get("memory_capacity_bytes")
    fixed = doc.get("fixed", {})
    ops = doc.get("operators")
    if not is_number(cap) or cap <= 0:
        fail(f"memory_capacity_bytes is {cap!r}")
    if not (is_number(fixed.get("time_s")) and is_number(fixed.get("memory_bytes"))):
        fail(f"fixed is {fixed!r}, expected time_s and memory_bytes")
    if not isinstance(ops, list) or not ops:
        fail("operators is not a non-empty array")
    if failures:
        return 1
    for i, op in enumerate(ops):
        ch = op.get("choices")
        if not isinstance(op.get("name"), str) or not isinstance(ch, list) or not ch:
            fail(f"operators[{i}]: needs a name and a non-empty choices array")
            continue
        for j, c in enumerate(ch):
            for k in ("time_s", "persistent_bytes", "transient_bytes"):
                if not is_number(c.get(k)) or c[k] < 0:
                    fail(f"operators[{i}].choices[{j}].{k} is {c.get(k)!r}")
    if failures:
        return 1

    t0 = fixed["time_s"]
    m0 = fixed["memory_bytes"]
    times = [[c["time_s"] for c in op["choices"]] for op in ops]
    pers = [[c["persistent_bytes"] for c in op["choices"]] for op in ops]
    trans = [[c["transient_bytes"] for c in op["choices"]] for op in ops]

    def cost(sel):
        t = t0 + sum(times[g][i] for g, i in enumerate(sel))
        p = m0 + sum(pers[g][i] for g, i in enumerate(sel)) + max(trans[g][i] for g, i in enumerate(sel))
        return t, p

    # --- the chosen selection -----------------------------------------------------------------
    has_choice = ["chosen" in op for op in ops]
    chosen = None
    if all(has_choice):
        chosen = [op["chosen"] for op in ops]
        for g, i in enumerate(chosen):
            if not isinstance(i, int) or not 0 <= i < len(ops[g]["choices"]):
                fail(f"operators[{g}].chosen is {i!r} (of {len(ops[g]['choices'])} choices)")
        if failures:
            return 1
        obj = doc.get("objective", {})
        t, p = cost(chosen)
        if not close(obj.get("time_s", float("nan")), t):
            fail(f"objective.time_s {obj.get('time_s')!r} != fixed.time_s + sum(chosen time_s) = {t!r}")
        if not close(obj.get("peak_memory_bytes", float("nan")), p):
            fail(f"objective.peak_memory_bytes {obj.get('peak_memory_bytes')!r} != fixed + sum(persistent)"
                 f" + max(transient) = {p!r}")
        if p > cap * (1 + REL):
            fail(f"peak {p:.0f} B exceeds memory_capacity_bytes {cap:.0f} B")
        print(f"chosen: time {t:.9g} s, peak {p:.0f} B of {cap:.0f} B")
    elif any(has_choice):
        fail("some operators have 'chosen' and some do not")
        return 1
    else:
        if "objective" in doc:
            fail("an objective without a chosen selection")
        print("no selection chosen (the search found no plan that fits)")

    # --- brute force --------------------------------------------------------------------------
    combos = math.prod(len(op["choices"]) for op in ops)
    if combos > args.brute_force_limit:
        msg = f"brute force skipped: {combos:.3g} combinations > {args.brute_force_limit:.3g}"
        if args.require_brute_force:
            fail(msg)
        else:
            print(msg)
    else:
        best_t, best_sel, min_peak = math.inf, None, math.inf
        for sel in itertools.product(*[range(len(op["choices"])) for op in ops]):
            t, p = cost(sel)
            min_peak = min(min_peak, p)
            if p <= cap and t < best_t:
                best_t, best_sel = t, sel
        print(f"brute force: {combos} combinations, smallest peak {min_peak:.0f} B, "
              + (f"optimum {best_t:.9g} s" if best_sel else "nothing fits"))
        if chosen is not None:
            t, _ = cost(chosen)
            if best_sel is None:
                fail("brute force finds nothing that fits, yet a selection was chosen")
            elif not close(t, best_t) and t > best_t:
                fail(f"chosen time {t:.12g} s is worse than the optimum {best_t:.12g} s "
                     f"(selection {list(best_sel)})")
        elif best_sel is not None:
            fail(f"no selection was chosen, but {list(best_sel)} fits with time {best_t:.9g} s")

    print(f"{args.file}: {'FAILED' if failures else 'all checks passed'} ({len(ops)} operators)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
