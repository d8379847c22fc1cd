#!/usr/bin/env python3
"""Runs every test target of the workspace, several at once, and prints each target's output
whole when it ends, then the time each took. Used by scripts/test.

Most test targets spend their time waiting (a fake's clock, a deployer's polls, a guest booting),
so on a 2-core machine one target at a time leaves the CPU idle most of the run: even the QEMU
suites under TCG keep only about half a core busy (`stack` ran 551 s on 375 s of CPU alone).
Four lanes run at once instead. They take jobs from one queue, longest first (by the last
measured times below), each the first job whose kind has room:

  qemu    targets that boot QEMU guests: at most 2 at once (with 3, load reached 17 and a
          TCG guest missed its shutdown timeout in `stack`)
  docker  targets that build or run the fake-proxmox image or other containers: one at a time
          (one image tag)
  other   everything else, doc tests included: no limit but the lanes

The two longest suites, `stack` and `lab`, run as two shards each (`--shard I/2`, balanced by
their committed durations files in tests/data/), so the four halves and the shorter QEMU
targets share the two QEMU places evenly and the lanes end close together.

The list of targets comes from cargo itself (`cargo test --workspace --no-run`), so a new target
runs without being named here; it is of kind `other` unless listed below.

  scripts/test-lanes.py              build, then run every target; exit 101 if any failed
  HARNESS_TEST_LANES=1 ...           one lane: every target one after the other
"""

import json
import os
import subprocess
import sys
import threading
import time

# (package, target) pairs by kind; a `lib` target is named by its crate name.
QEMU = {
    ("provision-harness", "lab"),
    ("provision-harness", "harness_selftest_lab"),
    ("provision-harness", "trace_lab"),
    ("provision-harness", "trace"),
    ("provision-harness", "stack"),
    ("provision-harness", "rehearse_lab"),
    ("provision-harness", "rehearse_stack"),
    ("fake-proxmox", "lab_backend"),
    ("fake-proxmox", "lab_executor"),
    ("fake-proxmox", "lab_faults"),
    ("fake-proxmox", "lab_containers"),
    ("fake-proxmox", "proxmoxer_lab"),
    ("vm-lab", "cloud_image"),
    ("vm-lab", "lab"),
    ("vm-lab", "guests"),
    ("vm-lab", "containers"),
    ("vm-lab", "vm_lab"),
    ("vm-lab", "vm-lab"),
}
DOCKER = {
    ("provision-harness", "two_sites"),
    ("provision-harness", "container_readme"),
    ("provision-harness", "container_testcontainers"),
    ("provision-harness", "real_target"),
    ("provision-harness", "setup_script"),
    ("fake-proxmox", "python_package"),
}
LIMITS = {"qemu": 2, "docker": 1}
LANES = 4
# Cucumber suites run as shards: target -> (shards, durations file that balances them).
SHARDED = {
    ("provision-harness", "stack"): (2, "tests/data/stack.durations.json"),
    ("provision-harness", "lab"): (2, "tests/data/lab.durations.json"),
}
# Seconds each target took in a full run on the 2-core machine (the longest first in the queue);
# a target not named here counts as 30 s. A sharded target's figure is for the whole suite.
ESTIMATE = {
    ("provision-harness", "stack"): 955,
    ("provision-harness", "lab"): 706,
    ("provision-harness", "ansible_deployer"): 527,
    ("provision-harness", "crash_points"): 420,
    ("provision-harness", "harness_selftest_lab"): 173,
    ("fake-proxmox", "python_package"): 170,
    ("provision-harness", "harness_selftest"): 136,
    ("vm-lab", "lab"): 110,
    ("fake-proxmox", "lab_faults"): 63,
    ("fake-proxmox", "fake_proxmox"): 49,
    ("vm-lab", "cloud_image"): 48,
    ("provision-harness", "rollout"): 37,
    ("provision-harness", "two_sites"): 35,
}

# The host's pace (vm-lab's `pace` module): the test binaries multiply their wall-clock waits on
# guests, clusters and external deployers by HARNESS_TIME_SCALE. It is measured here, before any
# target starts, as the wall time of a fixed Python loop against that loop's time on the 2-core
# machine the waits were tuned on (Xeon at 2.6 GHz, 2026-12-05: 0.128 s, best of 5). Wall time,
# not CPU time: a runner whose cores are throttled or taken by its neighbours runs the loop in as
# much CPU time as an idle one, and only the clock on the wall shows it. A CI runner
# measured 3.4 times the CPU for the same suite (ansible_deployer: 921 s against 271 s) and
# failed on waits alone; scaled, it waits longer instead. A value in the environment wins.
PACE_ENV = "HARNESS_TIME_SCALE"
PACE_REFERENCE_S = 0.128
PACE_ROUNDS = 3_000_000


def calibration_round() -> float:
    t = time.perf_counter()
    x = 0
    for i in range(PACE_ROUNDS):
        x += i * i % 7
    return time.perf_counter() - t


def host_pace() -> tuple:
    """(factor, how it was found)"""
    given = os.environ.get(PACE_ENV, "").strip()
    if given:
        return given, f"{PACE_ENV}={given} from the environment"
    best = min(calibration_round() for _ in range(5))
    # Within a fifth of the reference is the reference: the loop's time varies by about a tenth
    # between runs on one idle machine.
    ratio = best / PACE_REFERENCE_S
    factor = 1.0 if ratio < 1.2 else round(ratio, 2)
    return f"{factor:.2f}", (
        f"a calibration loop took {best:.3f} s against {PACE_REFERENCE_S} s on the "
        f"reference machine"
    )


started = time.monotonic()
print_lock = threading.Lock()


def stamp() -> str:
    secs = int(time.monotonic() - started)
    return f"{secs // 60:02d}:{secs % 60:02d}"


def say(text: str) -> None:
    with print_lock:
        sys.stdout.write(text)
        sys.stdout.flush()


def package_name(package_id: str) -> str:
    # `path+file:///work/main/vm-lab#0.1.0` or `path+file:///work/main#provision-harness@0.1.0`
    url, _, frag = package_id.partition("#")
    if "@" in frag:
        return frag.split("@")[0]
    return url.rstrip("/").rsplit("/", 1)[-1]


def list_targets() -> list:
    build = subprocess.run(
        ["cargo", "test", "--workspace", "--no-run", "--message-format=json-render-diagnostics"],
        stdout=subprocess.PIPE,
        text=True,
    )
    if build.returncode != 0:
        say("scripts/test-lanes.py: the build failed (cargo's errors above)\n")
        sys.exit(build.returncode)
    targets, seen = [], set()
    for line in build.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg.get("profile", {}).get("test"):
            continue
        kind = msg["target"]["kind"][0]
        if kind not in ("lib", "rlib", "bin", "test"):
            continue
        key = (package_name(msg["package_id"]), kind, msg["target"]["name"])
        if key not in seen:
            seen.add(key)
            package_dir = os.path.dirname(msg["manifest_path"])
            targets.append((*key, msg["executable"], package_dir))
    return targets


# Builds a test would otherwise run inside its lane, in a first-run burst where every lane
# competes for the cores: done here, in the build phase, and a no-op once built. `maturin build`
# (python_package) builds the fake-proxmox binary with fake-proxmox's features alone, which
# differ from the workspace's unified ones (cargo unifies features over the packages a command
# selects): 2.3 min of compiling on a fresh 2-core machine; the test's wheel then takes 2 s.
PREBUILDS = [
    ["cargo", "build", "-p", "fake-proxmox", "--bin", "fake-proxmox"],
]


def prebuild() -> None:
    for cmd in PREBUILDS:
        done = subprocess.run(cmd)
        if done.returncode != 0:
            say(f"scripts/test-lanes.py: {' '.join(cmd)} failed (cargo's errors above)\n")
            sys.exit(done.returncode)


def kind_of(pkg: str, name: str) -> str:
    if (pkg, name) in QEMU:
        return "qemu"
    if (pkg, name) in DOCKER:
        return "docker"
    return "other"


class Queue:
    """The jobs not started yet, longest first, and how many of each kind run now."""

    def __init__(self, jobs: list, limits: dict):
        self.jobs = sorted(jobs, key=lambda j: -j["estimate"])
        self.limits = limits
        self.running = {k: 0 for k in limits}
        self.cond = threading.Condition()

    def take(self):
        """The next job this lane may start, waiting while only full kinds are left; None at
        the end."""
        with self.cond:
            while True:
                if not self.jobs:
                    return None
                for i, job in enumerate(self.jobs):
                    kind = job["kind"]
                    if kind not in self.limits or self.running[kind] < self.limits[kind]:
                        if kind in self.running:
                            self.running[kind] += 1
                        return self.jobs.pop(i)
                self.cond.wait()

    def done(self, job) -> None:
        with self.cond:
            if job["kind"] in self.running:
                self.running[job["kind"]] -= 1
            self.cond.notify_all()


def run_lane(lane: str, queue: Queue, results: list) -> None:
    while (job := queue.take()) is not None:
        try:
            run_one(lane, job, results)
        finally:
            queue.done(job)


def run_one(lane: str, job: dict, results: list) -> None:
    pkg, kind, name = job["pkg"], job["target_kind"], job["name"]
    label = f"{pkg} {kind} {name}" if kind != "doc" else "doc tests"
    if job["shard"]:
        label += f" (shard {job['shard']})"
    say(f"== [{stamp()}] {lane}: {label} started\n")
    t = time.monotonic()
    if kind == "doc":
        cmd, cwd, env = ["cargo", "test", "--workspace", "--doc"], None, None
    else:
        # The test binary run as `cargo test` runs it (the way cargo-nextest does too): from
        # its package's directory, with the variables cargo sets. Not `cargo test -p PKG`,
        # which would rebuild with that package's features alone.
        cmd, cwd = [job["executable"]], job["package_dir"]
        env = dict(os.environ, CARGO_MANIFEST_DIR=cwd, CARGO_PKG_NAME=pkg)
        env.setdefault("CARGO", "cargo")
        # Beside the QEMU suites, four playbooks at once starved their TCG guests (load 13-18
        # at the start of a run; a stack step then missed its 40 s SSH answer): two at once
        # leave the guests more of the cores in a lane that is not the critical path.
        if (pkg, name) == ("provision-harness", "ansible_deployer"):
            env.setdefault("ANSIBLE_DEPLOYER_PARALLEL", "2")
        if job["shard"]:
            env["HARNESS_SHARD"] = job["shard"]
            env["HARNESS_DURATIONS"] = os.path.join(cwd, job["durations"])
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    raw = proc.stdout.read()
    # wait4, not wait: its rusage is the CPU the target and every process it reaped used
    # (QEMU guests, fakes, pip), which says where the test command's time goes on a machine
    # whose cores are all busy: there, CPU is what lanes compete for, not wall time.
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    cpu = usage.ru_utime + usage.ru_stime
    secs = time.monotonic() - t
    verdict = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
    output = raw.decode("utf-8", "replace")
    say(
        f"== [{stamp()}] {lane}: {label}: {verdict} in {secs:.1f} s ({cpu:.1f} s CPU); "
        f"its output:\n"
        f"{output}"
        f"== end of {label}\n"
    )
    results.append((secs, lane, label, proc.returncode, cpu, output))


# What marks a failure in the output of libtest, cucumber and the harness's own runners.
FAILURE_MARKS = ("panicked at", "FAILED", "Step failed", "\u2718", "Error:", "error:",
                 "failed:", "assertion")


def failure_lines(output: str, context: int = 4, limit: int = 120) -> str:
    """The lines of `output` that say what failed, each with the `context` lines after it,
    at most `limit` lines; the output's last lines when none matches."""
    lines = output.splitlines()
    keep: list = []
    taken = set()
    for i, line in enumerate(lines):
        if any(m in line for m in FAILURE_MARKS):
            for j in range(i, min(i + 1 + context, len(lines))):
                if j not in taken:
                    taken.add(j)
                    keep.append(lines[j])
        if len(keep) >= limit:
            keep = keep[:limit] + ["[...]"]
            break
    if not keep:
        keep = lines[-40:]
    return "\n".join(keep)


# The lines that say most about a failure, for the short list a log's last lines show.
CAUSE_MARKS = ("Captured output:", "panicked at", "the table says", "failed otherwise than the table",
               "not in expected-outcomes", "is in the table but did not run", "Error:")


def short_causes(output: str, per_target: int = 4, width: int = 220) -> list:
    """At most `per_target` lines of `output` that name a cause (a libtest panic's message line
    after its location), each cut to `width` characters."""
    lines = output.splitlines()
    out: list = []
    for i, line in enumerate(lines):
        if not any(m in line for m in CAUSE_MARKS):
            continue
        text = line.strip()
        if "panicked at" in line and i + 1 < len(lines):
            text += " " + lines[i + 1].strip()
        out.append(text[:width])
        if len(out) >= per_target:
            break
    return out


def jobs_of(targets: list) -> list:
    jobs = []
    for pkg, kind, name, executable, package_dir in targets:
        job = {
            "pkg": pkg, "target_kind": kind, "name": name, "executable": executable,
            "package_dir": package_dir, "kind": kind_of(pkg, name),
            "estimate": ESTIMATE.get((pkg, name), 30), "shard": None, "durations": None,
        }
        shards, durations = SHARDED.get((pkg, name), (1, None))
        if shards == 1:
            jobs.append(job)
            continue
        for i in range(1, shards + 1):
            jobs.append(dict(job, shard=f"{i}/{shards}", durations=durations,
                             estimate=job["estimate"] / shards))
    jobs.append({
        "pkg": "", "target_kind": "doc", "name": "doc", "executable": "", "package_dir": "",
        "kind": "other", "estimate": 60, "shard": None, "durations": None,
    })
    return jobs


def main() -> None:
    targets = list_targets()
    prebuild()
    built = time.monotonic() - started
    pace, why = host_pace()
    os.environ[PACE_ENV] = pace
    say(f"== [{stamp()}] host pace: waits on guests and external deployers x {pace} ({why})\n")
    jobs = jobs_of(targets)
    one = os.environ.get("HARNESS_TEST_LANES") == "1"
    lanes = ["one"] if one else [f"lane-{i}" for i in range(1, LANES + 1)]
    queue = Queue(jobs, {} if one else LIMITS)
    count = {}
    for j in jobs:
        count[j["kind"]] = count.get(j["kind"], 0) + 1
    say(
        f"== [{stamp()}] built; {len(targets) + 1} test targets as {len(jobs)} jobs ("
        + ", ".join(f"{k} {v}" for k, v in sorted(count.items()))
        + f") in {len(lanes)} lane(s), at most "
        + ", ".join(f"{v} {k}" for k, v in LIMITS.items())
        + " at once\n"
    )
    results: list = []
    threads = [
        threading.Thread(target=run_lane, args=(lane, queue, results)) for lane in lanes
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    end = time.monotonic() - started
    print("\n== time per test target (longest first)")
    print("    wall       CPU")
    print(f"{built:8.1f} s            build, before the first target")
    for secs, lane, label, code, cpu, _ in sorted(results, reverse=True):
        mark = "" if code == 0 else "  FAILED"
        print(f"{secs:8.1f} s  {cpu:7.1f} s  {lane:6}  {label}{mark}")
    for lane in lanes:
        busy = sum(r[0] for r in results if r[1] == lane)
        used = sum(r[4] for r in results if r[1] == lane)
        print(f"{busy:8.1f} s  {used:7.1f} s  lane {lane} in all")
    total_cpu = sum(r[4] for r in results)
    print(f"{end:8.1f} s  {total_cpu:7.1f} s  in all (the lanes at once)")
    failed = [r[2] for r in results if r[3] != 0]
    if failed:
        # A CI log is often read from its end only: each failure's cause again, here.
        for r in sorted(results, key=lambda r: r[2]):
            if r[3] != 0:
                print(f"\n== why {r[2]} failed (its output's failure lines):")
                print(failure_lines(r[5]))
        # Last, a few lines per failed target, so even a log's last screen names every cause.
        print("\n== the failures in short:")
        for r in sorted(results, key=lambda r: r[2]):
            if r[3] != 0:
                causes = short_causes(r[5]) or ["(no cause line found: see its failure lines above)"]
                print(f"{r[2]}:")
                for c in causes:
                    print(f"    {c}")
        print(f"FAILED test targets ({len(failed)}): " + ", ".join(sorted(failed)))
        sys.exit(101)
    print(f"all {len(results)} test targets passed")


if __name__ == "__main__":
    main()
