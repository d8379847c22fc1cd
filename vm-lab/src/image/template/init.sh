#!/bin/sh
# /sbin/init of vm-lab's container template (busybox sh as PID 1 of the container's PID
# namespace). It reads the files PVE writes into a Debian container (/etc/hostname,
# /etc/hosts, /etc/network/interfaces, /root/.ssh/authorized_keys), configures the network with
# busybox ip and udhcpc, starts dropbear (host keys made on first connection, keys only), runs
# /etc/rc.local if it is executable, and prints one `CT-READY hostname=... addrs=...` line, or `CT-ERROR: ...` lines when a file it
# needs is malformed (dropbear still starts then, so the container can be looked into).
# SIGPWR (what lxc-stop sends) and SIGTERM stop every process and exit 0; so does SIGINT,
# whose reboot is the caller's business (PVE's reboot is a stop and a start).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
umask 022
cd /

SLEEPER=
ERRORS=0
fail() {
  echo "CT-ERROR: $*"
  ERRORS=$((ERRORS + 1))
}

# Signals from outside reach PID 1 only once it has a handler: install them first.
stop() {
  trap '' PWR TERM INT
  echo "CT-STOPPING signal=$1"
  [ -z "$SLEEPER" ] || kill "$SLEEPER" 2>/dev/null
  kill -TERM -1 2>/dev/null
  _n=0
  while [ $_n -lt 30 ]; do
    set -- /proc/[0-9]*
    [ $# -le 1 ] && break
    sleep 0.1
    _n=$((_n + 1))
  done
  kill -KILL -1 2>/dev/null
  sync
  echo "CT-STOPPED"
  exit 0
}
trap 'stop PWR' PWR
trap 'stop TERM' TERM
trap 'stop INT' INT

mkdir -p /run /tmp /dev/shm /var/log /var/lib
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run 2>/dev/null
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm 2>/dev/null
chmod 1777 /tmp
echo "CT-INIT"

# --- host name: /etc/hostname when it is there, else what the container was started with.
if [ -f /etc/hostname ]; then
  read -r HN < /etc/hostname
  HN=$(echo "$HN" | tr -d ' \t\r')
  case "$HN" in
    "" | -* | .* | *[!A-Za-z0-9.-]*)
      fail "/etc/hostname: '$HN' is not a host name" ;;
    *)
      if [ ${#HN} -gt 64 ]; then
        fail "/etc/hostname: '$HN' is longer than 64 characters"
      else
        hostname "$HN" || fail "cannot set the host name to '$HN'"
      fi ;;
  esac
fi
HN=$(hostname)
if [ ! -s /etc/hosts ]; then
  printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' "$HN" > /etc/hosts
fi

# --- network: /etc/network/interfaces as ifupdown reads it, turned into a plan by awk:
#   AUTO IF | V4 IF METHOD ADDR PREFIX GATEWAY | V6 IF METHOD ADDR PREFIX GATEWAY |
#   MTU IF N | POSTUP IF COMMAND... | ERR MESSAGE   ("-" where a field is empty)
PARSE_INTERFACES='
function ipv4(a,   n, p, i) {
  n = split(a, p, ".")
  if (n != 4) return 0
  for (i = 1; i <= 4; i++) if (p[i] !~ /^[0-9]+$/ || p[i] + 0 > 255) return 0
  return 1
}
function maskbits(m,   p, i, v, b, bits, ended) {
  if (!ipv4(m)) return -1
  split(m, p, ".")
  bits = 0; ended = 0
  for (i = 1; i <= 4; i++) {
    v = p[i] + 0
    if (ended && v != 0) return -1
    if (v == 255) { bits += 8; continue }
    b = -1
    if (v == 0) b = 0; else if (v == 128) b = 1; else if (v == 192) b = 2
    else if (v == 224) b = 3; else if (v == 240) b = 4; else if (v == 248) b = 5
    else if (v == 252) b = 6; else if (v == 254) b = 7
    if (b < 0) return -1
    bits += b; ended = 1
  }
  return bits
}
function err(msg) { print "ERR " FILENAME " line " NR ": " msg }
function flush(   a, p, n, parts) {
  if (cur == "") return
  if (meth == "static") {
    a = addr; p = ""
    if (a == "") { print "ERR " FILENAME ": iface " cur " " fam " static has no address"; cur = ""; return }
    n = split(a, parts, "/")
    if (n == 2) { a = parts[1]; p = parts[2] } else if (n > 2) a = ""
    if (fam == "inet") {
      if (p == "" && mask != "") p = maskbits(mask)
      if (p == "") p = 24
      if (!ipv4(a)) { print "ERR " FILENAME ": iface " cur ": address " addr " is not an IPv4 address"; cur = ""; return }
      if (p !~ /^[0-9]+$/ || p + 0 > 32) { print "ERR " FILENAME ": iface " cur ": bad prefix or netmask for " addr; cur = ""; return }
      if (gw != "" && !ipv4(gw)) { print "ERR " FILENAME ": iface " cur ": gateway " gw " is not an IPv4 address"; cur = ""; return }
    } else {
      if (p == "" && mask ~ /^[0-9]+$/) p = mask
      if (p == "") p = 64
      if (a !~ /:/ || a !~ /^[0-9A-Fa-f:.]+$/) { print "ERR " FILENAME ": iface " cur ": address " addr " is not an IPv6 address"; cur = ""; return }
      if (p !~ /^[0-9]+$/ || p + 0 > 128) { print "ERR " FILENAME ": iface " cur ": bad prefix for " addr; cur = ""; return }
      if (gw != "" && gw !~ /:/) { print "ERR " FILENAME ": iface " cur ": gateway " gw " is not an IPv6 address"; cur = ""; return }
    }
    print (fam == "inet" ? "V4" : "V6"), cur, meth, a, p, (gw == "" ? "-" : gw)
  } else {
    print (fam == "inet" ? "V4" : "V6"), cur, meth, "-", "-", "-"
  }
  if (mtu != "") print "MTU", cur, mtu
  for (i = 1; i <= nposts; i++) print "POSTUP", cur, posts[i]
  cur = ""
}
BEGIN { cur = ""; skipping = 0 }
/^[ \t]*#/ || NF == 0 { next }
$1 == "auto" || $1 ~ /^allow-/ { flush(); skipping = 0; for (i = 2; i <= NF; i++) print "AUTO", $i; next }
$1 == "source" || $1 == "source-directory" { flush(); skipping = 0; next }
$1 == "mapping" { flush(); skipping = 1; next }
$1 == "iface" {
  flush(); skipping = 0
  if (NF < 4) { err("iface needs a name, an address family and a method"); next }
  fam = $3; meth = $4
  if (fam == "inet") {
    if (meth !~ /^(static|dhcp|manual|loopback)$/) { err("unknown inet method " meth); next }
  } else if (fam == "inet6") {
    if (meth !~ /^(static|dhcp|manual|auto|loopback)$/) { err("unknown inet6 method " meth); next }
  } else { err("unknown address family " fam); next }
  cur = $2; addr = ""; mask = ""; gw = ""; mtu = ""; nposts = 0
  next
}
skipping { next }
cur == "" { err("\"" $1 "\" outside of an iface stanza"); next }
$1 == "address" { if (NF != 2) err("address takes one value"); else addr = $2; next }
$1 == "netmask" { mask = $2; next }
$1 == "gateway" { if (NF != 2) err("gateway takes one value"); else gw = $2; next }
$1 == "mtu" { if ($2 !~ /^[0-9]+$/) err("mtu " $2 " is not a number"); else mtu = $2; next }
$1 == "post-up" || $1 == "up" { line = $0; sub(/^[ \t]*[a-z-]+[ \t]+/, "", line); posts[++nposts] = line; next }
{ next }
END { flush() }
'
PLAN=
if [ -f /etc/network/interfaces ]; then
  PLAN=$(awk "$PARSE_INTERFACES" /etc/network/interfaces) || fail "/etc/network/interfaces: cannot be read"
fi
AUTO=" lo "
while read -r kind rest; do
  case "$kind" in
    AUTO) AUTO="$AUTO$rest " ;;
    ERR) fail "$rest" ;;
  esac
done <<EOF
$PLAN
EOF
ip link set lo up

is_auto() { case "$AUTO" in *" $1 "*) return 0 ;; esac; return 1; }
have_dev() { [ -e "/sys/class/net/$1" ]; }

set -f
while read -r kind ifc method addr prefix gw; do
  case "$kind" in V4 | V6 | MTU) ;; *) continue ;; esac
  is_auto "$ifc" || continue
  if ! have_dev "$ifc"; then
    [ "$kind" = V6 ] || fail "/etc/network/interfaces: $ifc: no such network device"
    continue
  fi
  case "$kind" in
    MTU) ip link set "$ifc" mtu "$method" || fail "$ifc: cannot set mtu $method" ;;
    V4)
      ip link set "$ifc" up
      case "$method" in
        static)
          ip addr add "$addr/$prefix" dev "$ifc" || fail "$ifc: cannot add $addr/$prefix"
          if [ "$gw" != - ]; then
            ip route add default via "$gw" dev "$ifc" || fail "$ifc: cannot route via gateway $gw"
          fi ;;
        dhcp)
          udhcpc -i "$ifc" -p "/run/udhcpc.$ifc.pid" -s /usr/share/udhcpc/default.script \
            -t 10 -T 1 -A 3 -b -x "hostname:$HN" >/dev/null 2>&1
          ip -4 addr show dev "$ifc" | grep -q 'inet ' || echo "CT-WARN: $ifc: no DHCP lease yet (udhcpc keeps asking)" ;;
      esac ;;
    V6)
      ip link set "$ifc" up
      if [ "$method" = static ]; then
        ip -6 addr add "$addr/$prefix" dev "$ifc" || fail "$ifc: cannot add $addr/$prefix"
        if [ "$gw" != - ]; then
          ip -6 route add default via "$gw" dev "$ifc" || fail "$ifc: cannot route via gateway $gw"
        fi
      fi ;;
  esac
done <<EOF
$PLAN
EOF
set +f
while read -r kind ifc cmd; do
  [ "$kind" = POSTUP ] && is_auto "$ifc" && have_dev "$ifc" || continue
  sh -c "$cmd" || fail "$ifc: post-up '$cmd' failed"
done <<EOF
$PLAN
EOF

# --- SSH: the keys PVE wrote at create; dropbear makes its host keys on the first connection.
if [ -f /root/.ssh/authorized_keys ]; then
  chown -R 0:0 /root/.ssh
  chmod 700 /root /root/.ssh
  chmod 600 /root/.ssh/authorized_keys
  BAD=$(awk '
    /^[ \t]*(#|$)/ { next }
    $0 !~ /(^|[ \t])(ssh-(rsa|dss|ed25519)|ecdsa-sha2-nistp(256|384|521)|sk-[a-z0-9@.-]+)[ \t]+[A-Za-z0-9+\/]+=*([ \t]|$)/ { printf "%d ", NR }
  ' /root/.ssh/authorized_keys)
  [ -z "$BAD" ] || fail "/root/.ssh/authorized_keys: not a public key on line(s) $BAD"
fi
mkdir -p /etc/dropbear
dropbear -F -E -R -s -p 22 -P /run/dropbear.pid &
_n=0
until grep -qE ':0016 0+:0000 0A' /proc/net/tcp /proc/net/tcp6 2>/dev/null; do
  _n=$((_n + 1))
  if [ $_n -gt 100 ]; then
    fail "dropbear is not listening on port 22"
    break
  fi
  sleep 0.05
done

# --- The boot hook: /etc/rc.local, as Debian's rc-local.service runs it (when executable, with
# `start`, once the network is up), in the foreground, its output on the console.
if [ -x /etc/rc.local ]; then
  /etc/rc.local start </dev/null
  _rc=$?
  [ $_rc -eq 0 ] || fail "/etc/rc.local exited with $_rc"
fi

ADDRS=$(ip addr show | awk '($1 == "inet" || $1 == "inet6") && / scope global/ { printf "%s%s", sep, $2; sep = "," }')
if [ $ERRORS -eq 0 ]; then
  echo "CT-READY hostname=$HN addrs=$ADDRS"
fi

# PID 1 stays, reaping orphans while it waits; the traps end it.
while :; do
  sleep 2147483647 &
  SLEEPER=$!
  wait $SLEEPER
done
