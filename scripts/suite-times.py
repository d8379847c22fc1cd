#!/usr/bin/env python3
"""Passes `cargo test`'s output through unchanged and, when it ends, prints how long each test
target ran (from its `Running …` or `Doc-tests …` line to the next one), longest first, and
the time before the first target (the build). Used by scripts/test."""

import sys
import time


def main() -> None:
    start = time.monotonic()
    current, since, first = None, start, None
    rows = []
    for line in iter(sys.stdin.readline, ""):
        sys.stdout.write(line)
        sys.stdout.flush()
        text = line.strip()
        if text.startswith("Running ") or text.startswith("Doc-tests "):
            now = time.monotonic()
            if current is None:
                first = now
            else:
                rows.append((now - since, current))
            current, since = text, now
    end = time.monotonic()
    if current is not None:
        rows.append((end - since, current))
    if not rows:
        return
    print("\n== time per test target (longest first)")
    print(f"{(first or end) - start:8.1f} s  build, before the first target")
    for secs, what in sorted(rows, reverse=True):
        name = what.split(" (")[0]
        print(f"{secs:8.1f} s  {name}")
    print(f"{end - start:8.1f} s  in all")


if __name__ == "__main__":
    main()
