#!/bin/busybox sh
# The cloud image's init (PID 1 of its initramfs): loads the drivers the VM needs, starts the
# guest agent and acpid, finds its own disk and mounts the data partition at /data, reads the
# cloud-init drive (NoCloud "cidata" or config-drive "config-2") with /lib/cloudimg/reader.sh,
# applies it, starts dropbear, and prints CLOUDIMG-READY on the console — after CLOUDINIT-ERROR lines when the drive is missing
# or malformed (the agent and SSH server start regardless, so the failure can be looked at).
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
echo "CLOUDIMG-INIT"

# Coldplug, as udev does at boot: the modules whose device aliases (kernel globs, from their
# .modinfo) match a device present on any bus (PCI, virtio, ACPI, ...), each after the modules
# it needs, round after round while loading makes new devices appear; then the disk and CD-ROM
# drivers and the file systems every boot uses. Loading only what the VM has keeps the boot
# short under TCG (a module costs a process and its init).
# Both tables are read once into memory: busybox's `read` takes a system call per byte, which
# under TCG costs more than every module load together.
NL='
'
MODDEPS="$NL$(cat /etc/vmlab/modules.dep)$NL"
MODALIASES=$(cat /etc/vmlab/modules.alias)
LOADED=" "
insmod_once() {
  case "$LOADED" in *" $1 "*) return 0 ;; esac
  LOADED="$LOADED$1 "
  insmod "/lib/modules/$1.ko" 2>/dev/null
  return 0
}
load() {
  case "$LOADED" in *" $1 "*) return 0 ;; esac
  [ -f "/lib/modules/$1.ko" ] || return 0
  case "$MODDEPS" in
    *"$NL$1: "*)
      _rest=${MODDEPS#*"$NL$1: "}
      for _d in ${_rest%%"$NL"*}; do insmod_once "$_d"; done ;;
  esac
  insmod_once "$1"
}
SEEN=" "
coldplug() {
  _more=1; _round=0
  while [ $_more = 1 ] && [ $_round -lt 6 ]; do
    _more=0; _round=$((_round + 1))
    for _f in /sys/bus/*/devices/*/modalias; do
      read -r _a < "$_f" 2>/dev/null || continue
      case "$SEEN" in *" $_a "*) continue ;; esac
      SEEN="$SEEN$_a "; _more=1
      # No pathname expansion of the patterns (case still matches them as globs).
      _ifs=$IFS; IFS=$NL; set -f
      for _l in $MODALIASES; do
        case "$_a" in ${_l% *}) IFS=$_ifs; load "${_l##* }"; IFS=$NL ;; esac
      done
      IFS=$_ifs; set +f
    done
  done
}
# --- early services ---------------------------------------------------------------------------
# As on a real cloud image, the guest agent does not wait for cloud-init or for the other
# drivers: systemd starts qemu-guest-agent as soon as its port appears. So the virtio-serial
# controller (1af4:1003, or 1af4:1043 when modern) gets its driver first, and the agent starts
# on its port (the port appears a moment after the driver: waited for, at most 3 s); it answers
# while the rest boots, and reports the addresses once cloud-init applied them.
QGA_DEV=
start_agent() {
  [ -n "$QGA_DEV" ] && return 0
  _tries=0
  while [ $_tries -lt "$1" ]; do
    for _p in /sys/class/virtio-ports/*; do
      # The port's name appears a moment after the port (and the glob may match nothing yet).
      { read -r _n < "$_p/name"; } 2>/dev/null || continue
      [ "$_n" = org.qemu.guest_agent.0 ] && QGA_DEV="/dev/${_p##*/}"
    done
    [ -n "$QGA_DEV" ] && break
    _tries=$((_tries + 1)); sleep 0.1
  done
  [ -n "$QGA_DEV" ] || return 0
  mkdir -p /run/qga
  qemu-ga -m virtio-serial -p "$QGA_DEV" -t /run/qga >/run/qemu-ga.log 2>&1 &
}
for _d in /sys/bus/pci/devices/*; do
  read -r _v < "$_d/vendor"; read -r _i < "$_d/device"
  case "$_v:$_i" in
    0x1af4:0x1003|0x1af4:0x1043) load virtio_pci; load virtio_console; start_agent 30 ;;
  esac
done

coldplug
for _m in sd_mod sr_mod isofs button evdev; do load "$_m"; done
coldplug
# A port that only the full coldplug brought (a non-virtio-serial agent channel, say).
start_agent 1
[ -n "$QGA_DEV" ] || echo "cloudimg: no guest agent port (the VM has no agent channel)"
# ACPI power button (PVE's shutdown without the agent, QMP system_powerdown): power off.
# acpid reads the button's input device, so it starts once evdev and button are loaded.
acpid -c /etc/acpi >/dev/null 2>&1

# Disk controllers and NICs this image has no driver for (the kernel flavour decides): say so.
for _d in /sys/bus/pci/devices/*; do
  [ -e "$_d/driver" ] && continue
  read -r _c < "$_d/class"
  case "$_c" in
    0x01*) _k="disk controller" ;;
    0x02*) _k="network controller" ;;
    *) continue ;;
  esac
  read -r _v < "$_d/vendor"; read -r _i < "$_d/device"
  echo "CLOUDIMG-UNSUPPORTED: $_k ${_v#0x}:${_i#0x} (PCI ${_d##*/}) has no driver in this image ($(uname -r))"
done

. /lib/cloudimg/reader.sh
CI=/run/cloudinit
mkdir -p "$CI"
: > "$CI/errors"
ci_error() { echo "CLOUDINIT-ERROR: $*"; echo "$*" >> "$CI/errors"; }

# rd DEV OFFSET COUNT: raw bytes (NULs dropped).
rd() { dd if="$1" bs=1 skip="$2" count="$3" 2>/dev/null | tr -d '\000'; }
# fs_info DEV: "TYPE LABEL" of the file system on DEV (iso9660, vfat, ext4; busybox-static
# has no blkid), nothing when it holds none of these.
fs_info() {
  if [ "$(rd "$1" 32769 5)" = CD001 ]; then echo "iso9660 $(rd "$1" 32808 32 | sed 's/ *$//')"; return 0; fi
  if [ "$(dd if="$1" bs=1 skip=1080 count=2 2>/dev/null | od -An -tx1 | tr -d ' \n')" = 53ef ]; then
    echo "ext4 $(rd "$1" 1144 16)"; return 0
  fi
  case "$(rd "$1" 54 5)" in FAT12|FAT16) echo "vfat $(rd "$1" 43 11 | sed 's/ *$//')"; return 0 ;; esac
  [ "$(rd "$1" 82 5)" = FAT32 ] && echo "vfat $(rd "$1" 71 11 | sed 's/ *$//')"
  return 0
}
# wait_label SECONDS LABEL...: the first block device carrying one of the labels (any case).
# busybox's findfs (one process per label) first; the slower scan below catches what it does
# not know.
wait_label() {
  _end=$(( $(date +%s) + $1 )); shift
  _want=" $(echo "$*" | tr A-Z a-z) "
  while :; do
    for _l in "$@"; do
      _dev=$(findfs "LABEL=$_l" 2>/dev/null) && [ -b "$_dev" ] && { echo "$_dev"; return 0; }
    done
    for _b in /sys/class/block/*; do
      _dev=/dev/${_b##*/}
      [ -b "$_dev" ] || continue
      _l=$(fs_info "$_dev" | cut -d' ' -f2- | tr A-Z a-z)
      [ -n "$_l" ] && case "$_want" in *" $_l "*) echo "$_dev"; return 0 ;; esac
    done
    [ "$(date +%s)" -ge "$_end" ] && return 1
    sleep 0.2
  done
}

# le32 N: four bytes, little-endian, as printf escapes.
le32() { printf '\\%03o\\%03o\\%03o\\%03o' $(($1 & 255)) $((($1 >> 8) & 255)) $((($1 >> 16) & 255)) $((($1 >> 24) & 255)); }

# The data partition (partition 2 of the disk this image booted from): grown to the disk's
# end when the disk grew (PVE's resize), made ext4 on first boot, mounted at /data.
DATA=none
setup_data() {
  _boot=${1#/dev/}
  _disk=$(basename "$(readlink -f "/sys/class/block/$_boot/..")")
  _part=
  for _p in /sys/class/block/"$_disk"/"$_disk"*; do
    [ "$(cat "$_p/partition" 2>/dev/null)" = 2 ] && _part=${_p##*/}
  done
  [ -n "$_part" ] || { echo "cloudimg: $_disk has no second partition, no /data"; return 0; }
  _dsz=$(cat "/sys/block/$_disk/size"); _st=$(cat "/sys/class/block/$_part/start")
  _sz=$(cat "/sys/class/block/$_part/size"); _new=$(( (_dsz - _st) / 2048 * 2048 ))
  _grown=0
  if [ "$_new" -gt $((_sz + 2048)) ] && [ "$_new" -le 4294967295 ]; then
    printf "$(le32 "$_new")" | dd of="/dev/$_disk" bs=1 seek=474 conv=notrunc 2>/dev/null
    printf '\376\377\377' | dd of="/dev/$_disk" bs=1 seek=467 conv=notrunc 2>/dev/null
    sync
    blockdev --rereadpt "/dev/$_disk" && _grown=1
    echo "cloudimg: data partition /dev/$_part grown to $((_new / 2048)) MiB"
  fi
  _type=$(fs_info "/dev/$_part" | cut -d' ' -f1)
  # ext4 is a module in the generic kernel (built in the cloud one); crc32c is its soft
  # dependency, so the alias tables do not bring it.
  for _m in crc32c_generic crc32c_intel ext4; do load "$_m"; done
  if [ -z "$_type" ]; then
    # The image ships it as ext4; an empty one (wiped by hand, say) is made again.
    echo "cloudimg: /dev/$_part holds no file system: making it ext4"
    mkfs.ext4 -q -F -L cloudimg-data -E lazy_itable_init=1,lazy_journal_init=1 "/dev/$_part" || return 0
  elif [ "$_type" != ext4 ]; then
    echo "cloudimg: /dev/$_part holds $_type, not ext4: left alone, no /data"; return 0
  fi
  mount -t ext4 -o noinit_itable "/dev/$_part" /data || return 0
  # Grown online, beside the boot (cloud-init's resizefs blocks; this need not).
  [ $_grown = 1 ] && { resize2fs "/dev/$_part" >/run/resize2fs.log 2>&1 & }
  DATA=/dev/$_part
}

BOOT_PART=$(wait_label 60 CLOUDIMG)
if [ -n "$BOOT_PART" ]; then setup_data "$BOOT_PART"
else echo "cloudimg: the boot disk (label CLOUDIMG) did not appear: its bus may lack a driver"; fi

# SSH host keys live on /data, so they stay the same across reboots; so does cloud-init's
# /var/lib/cloud (its per-boot scripts, below), which a real image keeps on its root disk.
if [ "$DATA" != none ]; then
  mkdir -p /data/.cloudimg/dropbear /data/.cloudimg/cloud
  chmod 700 /data/.cloudimg/dropbear
  rm -rf /etc/dropbear
  ln -s /data/.cloudimg/dropbear /etc/dropbear
  mkdir -p /var/lib
  ln -s /data/.cloudimg/cloud /var/lib/cloud
fi

# --- the cloud-init drive ----------------------------------------------------------------
ci_add_user() {
  grep -q "^$1:" /etc/passwd && return 0
  _uid=1000
  while awk -F: -v u="$_uid" '$3 == u { f = 1 } END { exit !f }' /etc/passwd; do _uid=$((_uid + 1)); done
  echo "$1:x:$_uid:$_uid:$1:/home/$1:/bin/sh" >> /etc/passwd
  echo "$1:x:$_uid:" >> /etc/group
  echo "$1:*:19000:0:99999:7:::" >> /etc/shadow
  mkdir -p "/home/$1"; chown "$_uid:$_uid" "/home/$1"; chmod 755 "/home/$1"
}
ci_set_password() {
  case "$2" in
    \$[0-9a-z]*\$*) _h=$2 ;;
    *) _h=$(cryptpw -m sha512 "$2") ;;
  esac
  awk -F: -v OFS=: -v u="$1" -v h="$_h" '$1 == u { $2 = h } { print }' /etc/shadow > /etc/shadow.new
  mv /etc/shadow.new /etc/shadow; chmod 600 /etc/shadow
}
ci_add_key() {
  _home=$(awk -F: -v u="$1" '$1 == u { print $6 }' /etc/passwd)
  _ids=$(awk -F: -v u="$1" '$1 == u { print $3 ":" $4 }' /etc/passwd)
  [ -n "$_home" ] || { ci_error "key for unknown user $1"; return 0; }
  mkdir -p "$_home/.ssh"
  echo "$2" >> "$_home/.ssh/authorized_keys"
  chmod 700 "$_home/.ssh"; chmod 600 "$_home/.ssh/authorized_keys"
  chown -R "$_ids" "$_home/.ssh"
}
iface_by_mac() {
  _want=$(echo "$1" | tr A-F a-f); _tries=0
  while [ $_tries -lt 100 ]; do
    for _d in /sys/class/net/*; do
      [ "$(cat "$_d/address" 2>/dev/null)" = "$_want" ] && { echo "${_d##*/}"; return 0; }
    done
    _tries=$((_tries + 1)); sleep 0.1
  done
  return 1
}
first_nic() {
  for _d in /sys/class/net/*; do
    [ "${_d##*/}" = lo ] || { echo "${_d##*/}"; return 0; }
  done
  return 1
}

# ci_apply_net FILE: the plan's network lines, after every NIC was found and named.
ci_apply_net() {
  : > "$CI/nics"
  while read -r _a _id _mac _name; do
    [ "$_a" = nic ] || continue
    if [ "$_mac" != - ]; then _if=$(iface_by_mac "$_mac") || { ci_error "network: no NIC has the MAC $_mac"; continue; }
    elif [ "$_name" != - ]; then
      _tries=0; while [ ! -e "/sys/class/net/$_name" ] && [ $_tries -lt 100 ]; do _tries=$((_tries + 1)); sleep 0.1; done
      [ -e "/sys/class/net/$_name" ] || { ci_error "network: no NIC named $_name"; continue; }
      _if=$_name
    else _if=$(first_nic) || { ci_error "network: the VM has no NIC"; continue; }; fi
    echo "$_id $_if ${_name}" >> "$CI/nics"
  done < "$1"
  # Rename in two steps, so swapped names (eth0 <-> eth1) cannot collide.
  _n=0
  while read -r _id _if _name; do
    [ "$_name" = - ] || [ "$_name" = "$_if" ] && continue
    ip link set "$_if" down; ip link set "$_if" name "cirename$_n"; _n=$((_n + 1))
  done < "$CI/nics"
  _n=0
  : > "$CI/nics.final"
  while read -r _id _if _name; do
    if [ "$_name" != - ] && [ "$_name" != "$_if" ]; then
      ip link set "cirename$_n" name "$_name" || ci_error "network: cannot name $_if $_name"
      _n=$((_n + 1)); _if=$_name
    fi
    echo "$_id $_if" >> "$CI/nics.final"
    ip link set "$_if" up
  done < "$CI/nics"
  while read -r _a _id _v _via; do
    _if=$(awk -v i="$_id" '$1 == i { print $2 }' "$CI/nics.final")
    [ -n "$_if" ] || continue
    case "$_a" in
      mtu) ip link set "$_if" mtu "$_v" ;;
      # IPv4 address conflict detection (RFC 5227 probe and announce), as NetworkManager and
      # networkd's IPv4ACD do: an address another host already answers for is not configured.
      # One probe: busybox's arping waits a whole second after it, which is already the
      # longest step of a boot's network set-up; an owner on the same L2 answers in far less.
      addr)
        _ip=${_v%/*}
        _owner=$(arping -D -c 1 -w 1 -I "$_if" "$_ip" 2>/dev/null | sed -n 's/.*reply from [^[]*\[\([^]]*\)\].*/\1/p' | head -n 1)
        if [ -n "$_owner" ]; then
          ci_error "network: address $_ip is already in use by $_owner on $_if: not configured"
        else
          ip addr add "$_v" dev "$_if" || ci_error "network: cannot add $_v to $_if"
          # Then announce it (RFC 5227's ANNOUNCE): neighbours that knew another MAC for this
          # address (a VM destroyed and made again) learn the new one at once.
          arping -U -c 2 -I "$_if" "$_ip" >/dev/null 2>&1 &
        fi ;;
      addr6) ip addr add "$_v" dev "$_if" || ci_error "network: cannot add $_v to $_if" ;;
      gw) ip route add default via "$_v" dev "$_if" 2>/dev/null || ip route add default via "$_v" dev "$_if" onlink || ci_error "network: cannot route via $_v" ;;
      gw6) ip -6 route add default via "$_v" dev "$_if" 2>/dev/null ;;
      route) ip route add "$_v" via "$_via" dev "$_if" || ci_error "network: cannot route $_v via $_via" ;;
      # -s: busybox-static's built-in default is Debian's /etc/udhcpc/default.script.
      dhcp4) udhcpc -i "$_if" -s /usr/share/udhcpc/default.script -b -t 5 -T 2 -A 5 -S -p "/run/udhcpc.$_if.pid" -x "hostname:$(hostname)" >/dev/null 2>&1 ;;
    esac
  done < "$1"
}

ci_apply() {
  : > "$CI/net.plan"; : > /etc/resolv.conf
  _search=
  set -f
  while IFS= read -r _l; do
    set -- $_l
    case "$1" in
      datasource) DS=$2 ;;
      instance-id) IID=$2 ;;
      hostname) HN=$2; hostname "$2"; echo "$2" > /etc/hostname ;;
      fqdn) FQDN=$2 ;;
      user) ci_add_user "$2"; USERS="${USERS:+$USERS,}$2" ;;
      password) ci_set_password "$2" "$3" ;;
      key) ci_add_key "$2" "${_l#key $2 }" ;;
      nic|mtu|addr|addr6|gw|gw6|route|dhcp4) echo "$_l" >> "$CI/net.plan" ;;
      dns) echo "nameserver $2" >> /etc/resolv.conf ;;
      search) _search="$_search $2" ;;
      script) cp "$2" "$CI/user-script"; chmod 755 "$CI/user-script" ;;
      note) echo "cloudinit: ${_l#note }" ;;
    esac
  done < "$1"
  set +f
  [ -z "$_search" ] || echo "search$_search" >> /etc/resolv.conf
  {
    echo "127.0.0.1 localhost"
    [ -z "$HN" ] || echo "127.0.1.1 ${FQDN:-$HN} $HN"
    echo "::1 localhost ip6-localhost ip6-loopback"
  } > /etc/hosts
  ci_apply_net "$CI/net.plan"
}

DS=none; IID=; HN=; FQDN=; USERS=
hostname localhost
ip link set lo up
CIDEV=$(wait_label 8 cidata CIDATA config-2 CONFIG-2)
if [ -z "$CIDEV" ]; then
  ci_error "no cloud-init drive: no device labelled cidata (NoCloud) or config-2 (config-drive) appeared"
else
  case "$(fs_info "$CIDEV" | cut -d' ' -f2- | tr A-Z a-z)" in
    cidata) KIND=nocloud ;;
    *) KIND=configdrive ;;
  esac
  mkdir -p "$CI/drive" "$CI/data"
  case "$(fs_info "$CIDEV" | cut -d' ' -f1)" in
    vfat) for _m in vfat nls_cp437 nls_ascii nls_utf8 nls_iso8859_1; do load "$_m"; done ;;
  esac
  if mount -o ro "$CIDEV" "$CI/drive"; then
    cp -r "$CI/drive/." "$CI/data/"
    umount "$CI/drive"
    CI_TMP=$CI ci_plan "$KIND" "$CI/data" > "$CI/plan"
    sed -n 's/^error //p' "$CI/plan" | while IFS= read -r _e; do ci_error "$_e"; done
    ci_apply "$CI/plan"
  else
    ci_error "cannot mount the cloud-init drive $CIDEV"
  fi
fi
[ -n "$IID" ] && [ "$DATA" != none ] && echo "$IID" > /data/.cloudimg/instance-id

# --- services -------------------------------------------------------------------------------
# Traffic shaping for network faults (tc, run over SSH): loaded before the SSH server starts.
for _m in sch_prio cls_u32 sch_netem; do load "$_m"; done
mkdir -p /etc/dropbear
dropbear -R -s -E -p 22 >/run/dropbear.log 2>&1

if [ -s "$CI/user-script" ]; then
  "$CI/user-script" >"$CI/user-script.log" 2>&1 || ci_error "the user-data script exited with $?"
fi
# cloud-init's scripts-per-boot: every executable file in /var/lib/cloud/scripts/per-boot, in
# name order, on every boot, after the network and SSH are up (where a provisioner installs what
# must start with the machine, as it would on a real cloud image).
for _s in /var/lib/cloud/scripts/per-boot/*; do
  [ -f "$_s" ] && [ -x "$_s" ] || continue
  echo "cloudimg: per-boot script $_s"
  "$_s" </dev/null >>/run/per-boot.log 2>&1 || ci_error "the per-boot script $_s exited with $?"
done
if [ -s "$CI/errors" ]; then echo error > "$CI/status"; else echo done > "$CI/status"; fi

ADDRS=$(ip -o addr show | awk '$2 != "lo" && ($3 == "inet" || $3 == "inet6") && $4 !~ /^fe80/ { printf "%s%s=%s", s, $2, $4; s = "," }')
echo "CLOUDIMG-READY host=$(hostname) fqdn=${FQDN:-$(hostname)} users=${USERS:-none} datasource=$DS cloudinit=$(cat "$CI/status") addrs=${ADDRS:-none} data=$DATA"
exec /bin/busybox init
