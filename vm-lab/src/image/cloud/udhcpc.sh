#!/bin/sh
# udhcpc's event script in the cloud image: address, routers and DNS from the lease.
case "$1" in
  deconfig)
    ip -4 addr flush dev "$interface"
    ip link set "$interface" up
    ;;
  bound|renew)
    ip -4 addr flush dev "$interface"
    ip addr add "$ip/${mask:-24}" dev "$interface"
    for r in $router; do ip route add default via "$r" dev "$interface" 2>/dev/null; break; done
    if [ -n "$dns" ]; then
      grep -v '^nameserver' /etc/resolv.conf > /etc/resolv.conf.new 2>/dev/null
      for d in $dns; do echo "nameserver $d" >> /etc/resolv.conf.new; done
      [ -z "$domain" ] || echo "search $domain" >> /etc/resolv.conf.new
      mv /etc/resolv.conf.new /etc/resolv.conf
    fi
    ;;
esac
exit 0
