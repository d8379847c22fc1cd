#!/bin/sh
# An example of a user's own provisioner for the lab features (LAB_PROVISIONER_CMD), in plain
# shell over SSH, as a nixos-anywhere-style script would do it: it formats each node's whole
# disk (no partition table, unlike the built-in provisioner), installs the cluster service, the
# staged config, hosts mapping, certificates and first-boot script onto it, and leaves the rest
# to the next boot. The contract (environment, exit code) is in docs/src/cluster.md ("Plugging in your own provisioner").
set -eu

for node in $LAB_NODES; do
  var=$(echo "$node" | tr 'a-z-' 'A-Z_')
  eval "ssh_node=\$LAB_NODE_${var}_SSH"
  dir="$LAB_CONFIG_DIR/$node"
  echo "== $node: format the disk and install etcd"
  $ssh_node sh -s <<SCRIPT
set -eu
mkfs.ext4 -q -F -L "$LAB_DISK_LABEL" -J size=16 -E lazy_itable_init=1,lazy_journal_init=1 /dev/vda
mkdir -p "$LAB_GUEST_MOUNT"
mount /dev/vda "$LAB_GUEST_MOUNT"
mkdir -p "$LAB_GUEST_MOUNT/bin" "$LAB_GUEST_MOUNT/etc" "$LAB_GUEST_MOUNT/secrets"
chmod 700 "$LAB_GUEST_MOUNT/secrets"
cp "\$(command -v etcd)" "\$(command -v etcdctl)" "$LAB_GUEST_MOUNT/bin/"
SCRIPT
  echo "== $node: install config, hosts, certificates, first-boot script"
  tar -C "$dir" -cf - cluster-config.json hosts secrets boot.sh |
    $ssh_node "set -e; cd $LAB_GUEST_MOUNT; tar -xf -; mv cluster-config.json hosts etc/; ls -l secrets; sync"
  $ssh_node "test -x $LAB_BOOT_SCRIPT && umount $LAB_GUEST_MOUNT"
done
echo "== all nodes provisioned"
