#!/bin/sh
# Makes the Python venv the playbook runs in: ./setup-venv.sh DIR (default ./.venv).
# Installs ansible (the full package: it bundles the community.proxmox collection), proxmoxer
# and requests from PyPI, then checks that the modules the playbook uses are there.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
venv=${1:-$here/.venv}
python=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
# The release line expected-outcomes.md was recorded with; ANSIBLE_DEPLOYER_ANSIBLE overrides it
# (e.g. 'ansible>=13' on Python 3.12+), and a different line may change outcomes.
ansible_spec=${ANSIBLE_DEPLOYER_ANSIBLE:-ansible>=12,<13}
# --no-compile: the full ansible package is 17,000 Python files, and byte-compiling them all at
# install took 36 s of CPU on a 2-core machine; Python compiles the few the playbook imports on
# first use instead.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile \
  "$ansible_spec" 'proxmoxer>=2.0,<3' 'requests>=2.28'
"$venv/bin/ansible-doc" -t module community.proxmox.proxmox_kvm >/dev/null
"$venv/bin/ansible-doc" -t module community.proxmox.proxmox_disk >/dev/null
"$venv/bin/ansible-doc" -t module community.proxmox.proxmox_vm_info >/dev/null
"$venv/bin/ansible-doc" -t module community.proxmox.proxmox_storage_contents_info >/dev/null
"$venv/bin/ansible-doc" -t module community.proxmox.proxmox_node_info >/dev/null
"$venv/bin/python" -c 'import proxmoxer, requests'
"$venv/bin/ansible" --version | head -1
"$venv/bin/ansible-galaxy" collection list community.proxmox 2>/dev/null | grep 'community.proxmox' || true
