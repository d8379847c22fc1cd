#!/usr/bin/env python3
"""Runs every test target of the workspace, in lanes that run at the same time, and prints each
target's output whole when it ends, then the time each took. Used by scripts/test.

Most test targets spend their time waiting (a fake's clock, a deployer's polls, a guest booting),
so on a 2-core machine one target at a time leaves the CPU idle most of the run: even the QEMU
suites under TCG keep only about half a core busy (`lab` ran 752 s on 405 s of CPU beside
`stack`). Four lanes run at once instead, each one target at a time:

  qemu-a, qemu-b  the targets that boot QEMU guests, split in two lanes of about equal length
                  (the trace suites in one: they share a Python venv); then they help with `rest`
  docker          the targets that build or run the fake-proxmox image or other containers (one
                  image tag: never two at once); then it helps with `rest`
  rest            everything else, doc tests included, longest first

The list of targets comes from cargo itself (`cargo test --workspace --no-run`), so a new target
runs without being named here; it lands in `rest` unless listed below.

  scripts/test-lanes.py              build, then run every target; exit 101 if any failed
  HARNESS_TEST_LANES=1 ...           one lane: every target one after the other
"""

import json
import os
import subprocess
import sys
import threading
import time

# (package, target) pairs by lane; a `lib` target is named by its crate name. Each QEMU lane holds
# about 15 min of the 30 measured on the 2-core machine.
QEMU_A = {
    ("provision-harness", "lab"),
    ("provision-harness", "harness_selftest_lab"),
    ("provision-harness", "trace_lab"),
    ("provision-harness", "trace"),
    ("vm-lab", "cloud_image"),
}
QEMU_B = {
    ("provision-harness", "stack"),
    ("provision-harness", "rehearse_lab"),
    ("provision-harness", "rehearse_stack"),
    ("fake-proxmox", "lab_backend"),
    ("fake-proxmox", "lab_executor"),
    ("fake-proxmox", "lab_faults"),
    ("fake-proxmox", "proxmoxer_lab"),
    ("vm-lab", "lab"),
    ("vm-lab", "guests"),
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
# Within a lane, the longest first (as measured on the 2-core machine), so the lanes end close
# together.
ORDER = [
    "lab", "stack", "crash_points", "python_package", "ansible_deployer", "harness_selftest",
    "harness_selftest_lab", "rollout", "real_target", "rehearse_stack", "rehearse_lab",
    "two_sites", "api", "lab_backend", "guests",
]

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


def lane_of(pkg: str, name: str) -> str:
    if (pkg, name) in QEMU_A:
        return "qemu-a"
    if (pkg, name) in QEMU_B:
        return "qemu-b"
    if (pkg, name) in DOCKER:
        return "docker"
    return "rest"


def run_lane(lane: str, own: list, shared: list, results: list) -> None:
    """Runs the lane's own targets, then takes from `shared` (the rest) until it is empty."""
    while True:
        with print_lock:
            if own:
                job = own.pop(0)
            elif shared:
                job = shared.pop(0)
            else:
                return
        run_one(lane, job, results)


def run_one(lane: str, job: tuple, results: list) -> None:
    pkg, kind, name, executable, package_dir = job
    label = f"{pkg} {kind} {name}" if kind != "doc" else "doc tests"
    say(f"== [{stamp()}] {lane}: {label} started\n")
    t = time.monotonic()
    if kind == "doc":
        cmd, cwd, env = ["cargo", "test", "--workspace", "--doc"], None, None
    else:
        # The test binary run as `cargo test` runs it (the way cargo-nextest does too): from
        # its package's directory, with the variables cargo sets. Not `cargo test -p PKG`,
        # which would rebuild with that package's features alone.
        cmd, cwd = [executable], package_dir
        env = dict(os.environ, CARGO_MANIFEST_DIR=package_dir, CARGO_PKG_NAME=pkg)
        env.setdefault("CARGO", "cargo")
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
    results.append((secs, lane, label, proc.returncode, cpu))


def main() -> None:
    targets = list_targets()
    built = time.monotonic() - started
    jobs = {"qemu-a": [], "qemu-b": [], "docker": [], "rest": []}
    for pkg, kind, name, executable, package_dir in targets:
        jobs[lane_of(pkg, name)].append((pkg, kind, name, executable, package_dir))
    jobs["rest"].append(("", "doc", "doc", "", ""))
    if os.environ.get("HARNESS_TEST_LANES") == "1":
        jobs = {"one": [j for lane in jobs.values() for j in lane]}
    rank = {n: i for i, n in enumerate(ORDER)}
    for lane in jobs.values():
        lane.sort(key=lambda j: rank.get(j[2], len(ORDER)))
    say(
        f"== [{stamp()}] built; {len(targets) + 1} test targets in {len(jobs)} lane(s): "
        + ", ".join(f"{k} {len(v)}" for k, v in jobs.items())
        + "\n"
    )
    results: list = []
    shared = jobs.get("rest", [])
    threads = [
        threading.Thread(
            target=run_lane,
            args=(lane, [] if lane == "rest" else lane_jobs, shared, results),
        )
        for lane, lane_jobs in jobs.items()
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    end = time.monotonic() - started
    print("\n== time per test target (longest first)")
    print("    wall       CPU")
    print(f"{built:8.1f} s            build, before the first target")
    for secs, lane, label, code, cpu in sorted(results, reverse=True):
        mark = "" if code == 0 else "  FAILED"
        print(f"{secs:8.1f} s  {cpu:7.1f} s  {lane:6}  {label}{mark}")
    for lane in jobs:
        busy = sum(r[0] for r in results if r[1] == lane)
        used = sum(r[4] for r in results if r[1] == lane)
        print(f"{busy:8.1f} s  {used:7.1f} s  lane {lane} in all")
    total_cpu = sum(r[4] for r in results)
    print(f"{end:8.1f} s  {total_cpu:7.1f} s  in all (the lanes at once)")
    failed = [r[2] for r in results if r[3] != 0]
    if failed:
        print(f"FAILED test targets ({len(failed)}): " + ", ".join(sorted(failed)))
        sys.exit(101)
    print(f"all {len(results)} test targets passed")


if __name__ == "__main__":
    main()
