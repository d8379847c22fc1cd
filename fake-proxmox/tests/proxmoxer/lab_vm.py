#!/usr/bin/env python3
"""Drives a PVE API with proxmoxer's documented calls only: make a VM from an imported cloud
image with a cloud-init drive, start it, wait for its guest agent to report an address; then
(second phase) stop it and delete it with purge.

    lab_vm.py up   --host H --port P --token-value T --node N --vmid ID --image VOLID \
                   --ciuser U --sshkey-file F --ipconfig0 IPCONFIG [--timeout S]
    lab_vm.py down --host H --port P --token-value T --node N --vmid ID [--timeout S]

Prints one JSON object on stdout; exits non-zero (with the reason on stderr) on any failure.
"""
import argparse
import json
import sys
import time
import urllib.parse

import urllib3
from proxmoxer import ProxmoxAPI

urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)


def wait_task(node, upid, deadline):
    """Polls the task's status until it stops; fails unless its exit status is OK."""
    while time.monotonic() < deadline:
        st = node.tasks(upid).status.get()
        if st.get("status") == "stopped":
            if st.get("exitstatus") != "OK":
                raise SystemExit(f"task {upid} failed: {st.get('exitstatus')}")
            return st
        time.sleep(0.5)
    raise SystemExit(f"task {upid} did not finish in time")


def agent_ipv4(ifaces):
    """(address, MAC) pairs of every non-loopback IPv4 address the agent reports."""
    out = []
    for iface in ifaces.get("result", []):
        for ip in iface.get("ip-addresses", []):
            addr = ip.get("ip-address", "")
            if ip.get("ip-address-type") == "ipv4" and not addr.startswith("127."):
                out.append((addr, iface.get("hardware-address", "").lower()))
    return out


def up(api, args, deadline):
    node = api.nodes(args.node)
    with open(args.sshkey_file, encoding="utf-8") as f:
        key = f.read().strip()
    upid = node.qemu.create(
        vmid=args.vmid,
        name=args.name,
        memory=args.memory,
        cores=args.cores,
        scsihw="virtio-scsi-pci",
        scsi0=f"local-lvm:0,import-from={args.image}",
        ide2="local-lvm:cloudinit",
        boot="order=scsi0",
        net0="virtio,bridge=vmbr0",
        agent=1,
        ipconfig0=args.ipconfig0,
        ciuser=args.ciuser,
        sshkeys=urllib.parse.quote(key, safe=""),
    )
    wait_task(node, upid, deadline)
    vm = node.qemu(args.vmid)
    wait_task(node, vm.status.start.post(), deadline)
    last = None
    while time.monotonic() < deadline:
        try:
            found = agent_ipv4(vm.agent("network-get-interfaces").get())
            if found:
                address, mac = found[0]
                status = vm.status.current.get()
                return {
                    "address": address,
                    "mac": mac,
                    "status": status.get("status"),
                    "pid": status.get("pid"),
                    "net0": vm.config.get().get("net0"),
                }
        except Exception as e:  # "QEMU guest agent is not running" until it answers
            last = str(e)
        time.sleep(2)
    raise SystemExit(f"the agent reported no address in time; last answer: {last}")


def down(api, args, deadline):
    node = api.nodes(args.node)
    vm = node.qemu(args.vmid)
    wait_task(node, vm.status.stop.post(), deadline)
    status = vm.status.current.get().get("status")
    wait_task(node, vm.delete(purge=1), deadline)
    remaining = [v["vmid"] for v in node.qemu.get() if int(v["vmid"]) == args.vmid]
    return {"status": status, "listed_after_delete": remaining}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("phase", choices=["up", "down"])
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--token-value", required=True)
    p.add_argument("--node", required=True)
    p.add_argument("--vmid", type=int, required=True)
    p.add_argument("--name", default="px-01")
    p.add_argument("--memory", type=int, default=512)
    p.add_argument("--cores", type=int, default=1)
    p.add_argument("--image")
    p.add_argument("--ciuser", default="harness")
    p.add_argument("--sshkey-file")
    p.add_argument("--ipconfig0")
    p.add_argument("--timeout", type=float, default=600)
    args = p.parse_args()
    if args.phase == "up" and not (args.image and args.sshkey_file and args.ipconfig0):
        p.error("up needs --image, --sshkey-file and --ipconfig0")
    api = ProxmoxAPI(
        args.host,
        port=args.port,
        user="root@pam",
        token_name="harness",
        token_value=args.token_value,
        verify_ssl=False,
    )
    deadline = time.monotonic() + args.timeout
    result = up(api, args, deadline) if args.phase == "up" else down(api, args, deadline)
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
