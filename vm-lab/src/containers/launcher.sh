# The container's first process, run by a static busybox sh as PID 1 of the container's new
# mount, UTS, IPC, PID and network namespaces (made by `unshare` inside the lab's namespaces).
# Arguments: ROOTFS GO_FIFO STATUS_FILE HOSTNAME "NIC..." then SOURCE TARGET RO triples.
# It builds the container's file system view (all mounts live and die in its own mount
# namespace), waits on GO_FIFO until the driver has moved the NICs in, switches root with
# pivot_root, and execs the rootfs's /sbin/init. Its stderr is the console log.
set -e
exec 1>&2 </dev/null
R=$1
GO=$2
STATUS=$3
HN=$4
NICS=$5
shift 5
die() {
  echo "vm-lab container launcher: $*"
  exit 111
}

mount -o bind "$R" "$R" || die "cannot bind $R"
mount -t proc -o nosuid,nodev,noexec proc "$R/proc" || die "cannot mount /proc"
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$R/sys" || die "cannot mount /sys"
mount -t tmpfs -o mode=0755,size=4m,nosuid tmpfs "$R/dev" || die "cannot mount /dev"
for d in null zero full random urandom tty; do
  touch "$R/dev/$d"
  mount -o bind "/dev/$d" "$R/dev/$d" || die "cannot bind /dev/$d"
done
mkdir -p "$R/dev/pts" "$R/dev/shm" "$R/dev/.oldroot" "$R/dev/.mounts"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$R/dev/pts" || die "cannot mount /dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"
ln -s /proc/self/fd "$R/dev/fd"
ln -s /proc/self/fd/0 "$R/dev/stdin"
ln -s /proc/self/fd/1 "$R/dev/stdout"
ln -s /proc/self/fd/2 "$R/dev/stderr"

# Bind mounts are staged under the container's /dev (its own tmpfs) and moved to their targets
# after pivot_root, so a target's path is resolved inside the container's root.
stage() {
  i=0
  while [ $# -ge 3 ]; do
    i=$((i + 1))
    if [ -d "$1" ]; then mkdir "$R/dev/.mounts/$i"; else touch "$R/dev/.mounts/$i"; fi
    mount -o bind "$1" "$R/dev/.mounts/$i" || die "cannot bind $1"
    if [ "$3" = 1 ]; then
      # A bind keeps its source's locked flags; remounting read-only must repeat them.
      mount -o remount,bind,ro "$R/dev/.mounts/$i" 2>/dev/null ||
        mount -o remount,bind,ro,nosuid,nodev "$R/dev/.mounts/$i" 2>/dev/null ||
        mount -o remount,bind,ro,nosuid,nodev,noexec "$R/dev/.mounts/$i" ||
        die "cannot make $1 read-only"
    fi
    shift 3
  done
}
place() {
  i=0
  while [ $# -ge 3 ]; do
    i=$((i + 1))
    if [ -d "/dev/.mounts/$i" ]; then
      mkdir -p "$2"
    else
      mkdir -p "${2%/*}/"
      [ -e "$2" ] || touch "$2"
    fi
    mount -o move "/dev/.mounts/$i" "$2" || die "cannot mount $1 at $2"
    shift 3
  done
}
stage "$@"

hostname "$HN" || die "cannot set the host name"
ip link set lo up
read -r go < "$GO" || die "the driver went away"
[ "$go" = go ] || die "start cancelled"
for n in $NICS; do
  ip link set "$n" up || die "no NIC $n"
done

exec 9> "$STATUS"
cd "$R"
pivot_root . dev/.oldroot || die "pivot_root failed"
cd /
place "$@"
umount -l /dev/.oldroot || die "cannot detach the old root"
rm -rf /dev/.mounts
rmdir /dev/.oldroot
[ -x /sbin/init ] || die "no executable /sbin/init in the root file system"
echo exec >&9
exec /sbin/init 9>&-
