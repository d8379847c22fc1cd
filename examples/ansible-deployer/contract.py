"""The external-deployer contract around site.yml (see ../../docs/src/external-deployer.md, HARNESS_DEPLOYER_CMD).

    contract.py ACTION        ACTION: deploy | status | destroy | plan

Reads the ProxmoxVM manifests in HARNESS_MANIFESTS_DIR and the sites and credentials from the
HARNESS_* environment, runs `ansible-playbook site.yml` once with them as extra vars, and turns
the per-VM results the playbook wrote into the status JSON the harness reads from
HARNESS_STATUS_FILE. Everything about Proxmox is in the playbook; this file only translates.
"""

import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.parse

import yaml

HERE = pathlib.Path(__file__).resolve().parent


def env(name, default=None):
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def load_manifests(root):
    """ProxmoxVM documents under `root` (recursive), and the files that could not be read."""
    vms, unreadable = [], []
    files = sorted(p for p in pathlib.Path(root).rglob("*") if p.suffix in (".yaml", ".yml"))
    for path in files:
        try:
            docs = list(yaml.safe_load_all(path.read_text()))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
            mark = getattr(e, "problem_mark", None)
            unreadable.append(
                {
                    "path": str(path),
                    "error": str(e).splitlines()[0] if str(e) else type(e).__name__,
                    "line": mark.line + 1 if mark is not None else None,
                }
            )
            continue
        for doc in docs:
            if not isinstance(doc, dict) or doc.get("kind") != "ProxmoxVM":
                continue
            fp = (doc.get("spec") or {}).get("forProvider") or {}
            name = fp.get("name") or (doc.get("metadata") or {}).get("name")
            if not name:
                unreadable.append({"path": str(path), "error": "a ProxmoxVM without a name", "line": None})
                continue
            vms.append(
                {
                    "name": str(name),
                    "node": str(fp.get("node", "")),
                    "site": str(fp.get("site", "")),
                    "cpu": str(fp.get("cpu", "")),
                    "memory": str(fp.get("memory", "")),
                    "disk": str(fp.get("disk", "")),
                    "storage": str(fp.get("storage", "")),
                    "network": str(fp.get("network", "")),
                    "image": str(fp.get("image", "")),
                    "user_data": str(fp["userData"]) if fp.get("userData") else "",
                    "manifest": str(path),
                }
            )
    return vms, unreadable


def sites():
    out = {}
    for s in json.loads(env("HARNESS_SITES", "[]")):
        url = urllib.parse.urlsplit(s["url"])
        share = s.get("snippets") or {}
        out[s["name"]] = {
            "api_host": url.hostname,
            "api_port": url.port or 8006,
            "node": s.get("node"),
            # The site's storage for snippets and where it is mounted here (userData goes there).
            "snippets_storage": share.get("storage", ""),
            "snippets_path": share.get("path", ""),
        }
    return out


def auth():
    token = env("HARNESS_PVE_TOKEN_ID")
    if token:
        user, _, name = token.partition("!")
        return {
            "api_user": user,
            "api_token_id": name,
            "api_token_secret": env("HARNESS_PVE_TOKEN_SECRET", ""),
        }
    return {"api_user": env("HARNESS_PVE_USERNAME", ""), "api_password": env("HARNESS_PVE_PASSWORD", "")}


def tail(path, n=15):
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def main(argv):
    action = argv[1] if len(argv) > 1 else env("HARNESS_ACTION", "")
    state = pathlib.Path(env("HARNESS_STATE_DIR", "."))
    work = state / "ansible" / f"{action}-{os.getpid()}-{time.monotonic_ns()}"
    results = work / "results"
    results.mkdir(parents=True)
    if action == "plan":
        # No plan in a playbook (check mode of proxmox_kvm would still create nothing, and
        # says nothing about capacity): an honest "not supported" the plan steps report.
        report = {"verdict": "unsupported", "unreadable": [], "nodes": [], "storages": [], "findings": []}
        return write(report)
    if action not in ("deploy", "status", "destroy"):
        print(f"contract.py: unknown action {action!r}", file=sys.stderr)
        return 2
    vms, unreadable = load_manifests(env("HARNESS_MANIFESTS_DIR", "."))
    known = sites()
    for vm in vms:
        site = known.get(vm["site"])
        vm["api_host"] = site["api_host"] if site else ""
        vm["api_port"] = site["api_port"] if site else 0
        vm["snippets_storage"] = site["snippets_storage"] if site else ""
        vm["snippets_path"] = site["snippets_path"] if site else ""
    extra = {
        "harness_action": action,
        "harness_vms": vms,
        "harness_results_dir": str(results),
        "harness_fast": env("HARNESS_FAST") == "1",
        "pve_auth": auth(),
    }
    # The extra vars hold the credentials: readable by this user only.
    fd = os.open(work / "vars.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(extra, f)
    log = work / "ansible.log"
    venv_bin = pathlib.Path(sys.executable).parent
    run_env = dict(os.environ)
    run_env.update(
        {
            "ANSIBLE_CONFIG": str(HERE / "ansible.cfg"),
            "ANSIBLE_LOCAL_TEMP": str(work / "tmp"),
            "ANSIBLE_HOME": str(state / "ansible" / "home"),
            "PATH": f"{venv_bin}{os.pathsep}{run_env.get('PATH', '')}",
        }
    )
    with open(log, "wb") as out:
        rc = subprocess.call(
            [str(venv_bin / "ansible-playbook"), str(HERE / "site.yml"), "-e", f"@{work / 'vars.json'}"],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=run_env,
        )
    status = {"vms": [], "unreadable": unreadable}
    for vm in vms:
        f = results / f"{vm['name']}.json"
        try:
            r = json.loads(f.read_text())
        except (OSError, ValueError):
            # The playbook stopped before this VM's result was written.
            r = {
                "outcome": "failed",
                "attempts": 1,
                "error": {
                    "reason": "PlaybookFailed",
                    "message": f"ansible-playbook exited {rc} without a result for {vm['name']}: {tail(log)}",
                    "retryable": False,
                },
            }
        entry = {"name": vm["name"], "site": vm["site"], "node": vm["node"], "manifest": vm["manifest"]}
        entry.update(r)
        status["vms"].append(entry)
    # The playbook's own output, for whoever reads the harness's report.
    sys.stderr.write(tail(log, 40) + "\n")
    return write(status)


def write(report):
    text = json.dumps(report)
    target = env("HARNESS_STATUS_FILE")
    if target:
        pathlib.Path(target).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
