#!/bin/busybox sh
# vm-lab guest init (PID 1 of the netboot initramfs). Reads vmlab.* from the kernel command line:
#   vmlab.hostname=NAME  vmlab.lan=MAC,IP/PREFIX  vmlab.mgmt=MAC,IP/PREFIX  vmlab.hosts=n1=ip1,n2=ip2
#   vmlab.clock_offset=SECONDS (wall clock ahead of the host; negative: behind)
# and prints VMLAB-* markers on the serial console for the driver.
/bin/busybox mkdir -p /usr/bin /usr/sbin /sbin /proc /sys /dev /run /tmp /var /mnt
/bin/busybox --install -s
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620 devpts /dev/pts
mount -t tmpfs -o mode=0755 tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
ln -sf /run /var/run
echo "VMLAB-INIT"

for m in $(cat /etc/vmlab/modules); do
  insmod "/lib/modules/$m.ko" 2>/dev/null || echo "vmlab: insmod $m failed"
done

HN=vmlab; LAN=; MGMT=; HOSTS=; CLOCK_OFF=
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    vmlab.hostname=*) HN="${arg#vmlab.hostname=}" ;;
    vmlab.lan=*) LAN="${arg#vmlab.lan=}" ;;
    vmlab.mgmt=*) MGMT="${arg#vmlab.mgmt=}" ;;
    vmlab.hosts=*) HOSTS="${arg#vmlab.hosts=}" ;;
    vmlab.clock_offset=*) CLOCK_OFF="${arg#vmlab.clock_offset=}" ;;
  esac
done
# A clock fault from boot on: shift the wall clock (read from the host-synced RTC) before any
# service starts.
[ -n "$CLOCK_OFF" ] && date -u -s "@$(( $(date +%s) + CLOCK_OFF ))" >/dev/null
hostname "$HN"
echo "$HN" > /etc/hostname
{
  echo "127.0.0.1 localhost"
  echo "::1 localhost"
  for h in $(echo "$HOSTS" | tr ',' ' '); do echo "${h#*=} ${h%%=*}"; done
} > /etc/hosts

# Find an interface by MAC (virtio-net may probe a little after insmod returns).
iface_by_mac() {
  want="$1"; tries=0
  while [ $tries -lt 100 ]; do
    for d in /sys/class/net/*; do
      [ "$(cat "$d/address" 2>/dev/null)" = "$want" ] && { echo "${d##*/}"; return 0; }
    done
    tries=$((tries + 1)); sleep 0.1
  done
  return 1
}

# Name the NICs by role: eth0 = lab network, mgmt0 = management (user-mode) network.
ip link set lo up
if [ -n "$MGMT" ]; then
  i=$(iface_by_mac "${MGMT%%,*}") && { ip link set "$i" name mgmt0; ip addr add "${MGMT#*,}" dev mgmt0; ip link set mgmt0 up; }
fi
if [ -n "$LAN" ]; then
  i=$(iface_by_mac "${LAN%%,*}") && { [ "$i" = eth0 ] || ip link set "$i" name eth0; ip addr add "${LAN#*,}" dev eth0; ip link set eth0 up; }
fi
echo "VMLAB-NET-UP $(ip -o -4 addr show dev eth0 2>/dev/null | awk '{print $4}')"

# Guest agent on its virtio-serial port (devtmpfs has no by-name links; look the port up).
QGA_DEV=
tries=0
while [ -z "$QGA_DEV" ] && [ $tries -lt 100 ]; do
  for p in /sys/class/virtio-ports/*; do
    [ "$(cat "$p/name" 2>/dev/null)" = "org.qemu.guest_agent.0" ] && QGA_DEV="/dev/${p##*/}"
  done
  [ -z "$QGA_DEV" ] && { tries=$((tries + 1)); sleep 0.1; }
done
if [ -n "$QGA_DEV" ]; then
  mkdir -p /run/qga
  qemu-ga -m virtio-serial -p "$QGA_DEV" -t /run/qga >/run/qemu-ga.log 2>&1 &
else
  echo "vmlab: no guest agent port"
fi

# SSH: key-only root login; host keys are generated on first use.
mkdir -p /etc/dropbear
chmod 700 /root /root/.ssh
chmod 600 /root/.ssh/authorized_keys
dropbear -R -s -E -p 22 >/run/dropbear.log 2>&1

[ -x /etc/vmlab/rc.local ] && /etc/vmlab/rc.local

echo "VMLAB-READY host=$HN"
exec /bin/busybox init
