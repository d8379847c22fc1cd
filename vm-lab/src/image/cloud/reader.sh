# reader.sh: the cloud image's cloud-init reader (busybox sh), sourced by /init; tests source it
# on the host with busybox. It reads a cloud-init drive in two steps:
#   ci_plan KIND DIR  prints a plan, one action a line (KIND: nocloud or configdrive);
#   ci_apply PLAN     applies it (hostname, users and keys, network).
# Plan lines: datasource KIND | instance-id ID | hostname H | fqdn F | user NAME |
#   password NAME VALUE | key NAME KEY | nic ID MAC|- NAME|- | mtu ID N |
#   addr ID A/P | addrmask ID A MASK | addr6 ID A/P | gw ID IP | gw6 ID IP | route ID NET VIA |
#   dhcp4 ID | dns IP | search DOMAIN | script PATH | note TEXT | error TEXT
CI_LIB=${CI_LIB:-/lib/cloudimg}

ci_flat_yaml() { awk -f "$CI_LIB/yaml.awk" "$1"; }
ci_flat_json() { awk -f "$CI_LIB/json.awk" "$1"; }
# fget FLAT KEY: the value at KEY.
fget() { awk -v k="$2" 'index($0, k "=") == 1 { print substr($0, length(k) + 2); exit }' "$1"; }
# fhas FLAT KEY: KEY has a value or children.
fhas() { awk -v k="$2" 'index($0, k "=") == 1 || index($0, k ".") == 1 { f = 1; exit } END { exit !f }' "$1"; }
# fcount FLAT LIST: the number of items in LIST.
fcount() {
  awk -v k="$2." 'index($0, k) == 1 { r = substr($0, length(k) + 1); sub(/[.=].*/, "", r)
    if (r ~ /^[0-9]+$/ && r + 1 > n) n = r + 1 } END { print n + 0 }' "$1"
}
# fkeys FLAT MAP: the keys of MAP, in document order.
fkeys() {
  awk -v k="$2." 'index($0, k) == 1 { r = substr($0, length(k) + 1); sub(/[.=].*/, "", r)
    if (!(r in seen)) { seen[r] = 1; print r } }' "$1"
}
ci_flat_error() { sed -n 's/^!error=//p' "$1" | head -n 1; }
ci_true() { case "$1" in true|True|TRUE|yes|Yes|on|1) return 0 ;; esac; return 1; }

ci_is_ip4() {
  echo "$1" | grep -Eq '^([0-9]{1,3}\.){3}[0-9]{1,3}$' || return 1
  for o in $(echo "$1" | tr . ' '); do [ "$o" -le 255 ] || return 1; done
}
ci_is_mac() { echo "$1" | grep -Eq '^([0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}$'; }
ci_is_name() { echo "$1" | grep -Eq '^[A-Za-z0-9]([A-Za-z0-9-]{0,62})$'; }
# ci_prefix MASK: the prefix length of a dotted netmask (or of "/N", or N itself).
ci_prefix() {
  case "$1" in
    /*) set -- "${1#/}" ;;
  esac
  if echo "$1" | grep -Eq '^[0-9]{1,2}$'; then [ "$1" -le 32 ] && { echo "$1"; return 0; }; return 1; fi
  ci_is_ip4 "$1" || return 1
  set -- $(echo "$1" | tr . ' ')
  m=$(( ($1 << 24) | ($2 << 16) | ($3 << 8) | $4 )); p=0
  while [ $p -lt 32 ] && [ $(( (m >> (31 - p)) & 1 )) -eq 1 ]; do p=$((p + 1)); done
  [ $(( (m << p) & 0xffffffff )) -eq 0 ] || return 1
  echo $p
}

# ci_plan KIND DIR
ci_plan() {
  _t=${CI_TMP:-/tmp}/ci-plan.$$
  rm -rf "$_t"; mkdir -p "$_t"
  case "$1" in
    nocloud) ci_plan_nocloud "$2" "$_t" ;;
    configdrive) ci_plan_configdrive "$2" "$_t" ;;
    *) echo "error unknown cloud-init drive kind $1" ;;
  esac | ci_normalize
  rm -rf "$_t"
}

ci_plan_nocloud() {
  echo "datasource nocloud"
  : > "$2/meta"
  if [ ! -f "$1/meta-data" ]; then
    echo "error NoCloud drive has no meta-data file"
  elif ! ci_flat_yaml "$1/meta-data" > "$2/meta"; then
    echo "error meta-data is not valid YAML: $(ci_flat_error "$2/meta")"; : > "$2/meta"
  fi
  _iid=$(fget "$2/meta" instance-id)
  if [ -n "$_iid" ]; then echo "instance-id $_iid"; else echo "error meta-data has no instance-id"; fi
  ci_userdata "$1/user-data" "$2"
  : > "$2/keys"
  for _k in $(fkeys "$2/meta" public-keys); do fget "$2/meta" "public-keys.$_k" >> "$2/keys"; done
  ci_identity "$2/user" "$(fget "$2/meta" local-hostname)" "$2/keys"
  if [ -s "$1/network-config" ]; then
    ci_network_yaml "$1/network-config" "$2"
  else
    echo "note no network-config: DHCP on the first NIC"; echo "nic n0 - -"; echo "dhcp4 n0"
  fi
}

ci_plan_configdrive() {
  echo "datasource configdrive"
  _md=$1/openstack/latest/meta_data.json
  : > "$2/meta"
  if [ ! -f "$_md" ]; then
    echo "error config-drive has no openstack/latest/meta_data.json"
  elif ! ci_flat_json "$_md" > "$2/meta"; then
    echo "error meta_data.json is not valid JSON: $(ci_flat_error "$2/meta")"; : > "$2/meta"
  fi
  _iid=$(fget "$2/meta" uuid)
  if [ -n "$_iid" ]; then echo "instance-id $_iid"; else echo "error meta_data.json has no uuid"; fi
  ci_userdata "$1/openstack/latest/user_data" "$2"
  : > "$2/keys"
  for _k in $(fkeys "$2/meta" public_keys); do fget "$2/meta" "public_keys.$_k" >> "$2/keys"; done
  ci_identity "$2/user" "$(fget "$2/meta" hostname)" "$2/keys"
  _cp=$(fget "$2/meta" network_config.content_path)
  if [ -f "$1/openstack/latest/network_data.json" ]; then
    ci_net_openstack "$1/openstack/latest/network_data.json" "$2"
  elif [ -n "$_cp" ] && [ -f "$1/openstack/${_cp#/}" ]; then
    ci_net_eni "$1/openstack/${_cp#/}"
  elif [ -n "$_cp" ]; then
    echo "error meta_data.json names network_config $_cp, which the drive does not have"
  else
    echo "note no network configuration: DHCP on the first NIC"; echo "nic n0 - -"; echo "dhcp4 n0"
  fi
}

# ci_userdata FILE TMP: cloud-config flattened to TMP/user; a script is run last.
ci_userdata() {
  : > "$2/user"
  [ -s "$1" ] || return 0
  _first=$(head -n 1 "$1")
  case "$_first" in
    "#cloud-config"*)
      if ! ci_flat_yaml "$1" > "$2/user"; then
        echo "error user-data is not valid YAML: $(ci_flat_error "$2/user")"; : > "$2/user"; return 0
      fi
      _ignored=$(sed 's/[.=].*//' "$2/user" | sort -u | grep -vxE 'hostname|fqdn|prefer_fqdn_over_hostname|manage_etc_hosts|user|users|password|chpasswd|ssh_authorized_keys|disable_root|ssh_pwauth|package_upgrade' | tr '\n' ' ')
      [ -z "$_ignored" ] || echo "note user-data keys not supported by this image, ignored: $_ignored"
      ;;
    "#!"*) echo "script $1" ;;
    *) echo "note user-data of an unsupported kind ignored (it starts with: $_first)" ;;
  esac
}

# ci_identity USERFLAT META_HOSTNAME KEYSFILE: hostname, fqdn, users, keys.
ci_identity() {
  _hn=$(fget "$1" hostname); _fq=$(fget "$1" fqdn)
  [ -n "$_hn" ] || _hn=$2
  [ -n "$_hn" ] || _hn=${_fq%%.*}
  if [ -z "$_hn" ]; then
    echo "error no hostname: user-data has no hostname or fqdn and meta-data no local-hostname"
  else
    case "$_hn" in *.*) [ -n "$_fq" ] || _fq=$_hn; _hn=${_hn%%.*} ;; esac
    if ci_is_name "$_hn"; then echo "hostname $_hn"; echo "fqdn ${_fq:-$_hn}"
    else echo "error hostname '$_hn' is not a valid host name"; fi
  fi
  ci_users "$1" "$3"
}

ci_users() {
  _dn=$(fget "$1" user); [ -n "$_dn" ] || _dn=$(fget "$1" user.name)
  _def=0
  fhas "$1" users || _def=1
  _n=$(fcount "$1" users); _i=0
  while [ $_i -lt "$_n" ]; do [ "$(fget "$1" "users.$_i")" = default ] && _def=1; _i=$((_i + 1)); done
  if [ $_def = 1 ]; then
    _dn=${_dn:-ubuntu}
    echo "user $_dn"
    _pw=$(fget "$1" password); [ -n "$_pw" ] || _pw=$(fget "$1" user.passwd)
    [ -z "$_pw" ] || echo "password $_dn $_pw"
    { _c=$(fcount "$1" ssh_authorized_keys); _j=0
      while [ $_j -lt "$_c" ]; do fget "$1" "ssh_authorized_keys.$_j"; _j=$((_j + 1)); done
      _c=$(fcount "$1" user.ssh_authorized_keys); _j=0
      while [ $_j -lt "$_c" ]; do fget "$1" "user.ssh_authorized_keys.$_j"; _j=$((_j + 1)); done
      cat "$2" 2>/dev/null
    } | grep -v '^[[:space:]]*$' | while IFS= read -r _key; do
      echo "key $_dn $_key"
      # Deviation: cloud-init gives root these keys behind a "log in as $_dn" refusal; this
      # image has no sudo, so root takes them as they are.
      [ "$_dn" = root ] || echo "key root $_key"
    done
  fi
  _i=0
  while [ $_i -lt "$_n" ]; do
    _p=users.$_i
    if [ "$(fget "$1" "$_p")" = default ]; then _i=$((_i + 1)); continue; fi
    _un=$(fget "$1" "$_p.name")
    if [ -z "$_un" ]; then echo "error user-data users[$_i] has no name"; _i=$((_i + 1)); continue; fi
    echo "user $_un"
    _pw=$(fget "$1" "$_p.passwd"); [ -n "$_pw" ] || _pw=$(fget "$1" "$_p.plain_text_passwd")
    [ -z "$_pw" ] || echo "password $_un $_pw"
    _c=$(fcount "$1" "$_p.ssh_authorized_keys"); _j=0
    while [ $_j -lt "$_c" ]; do echo "key $_un $(fget "$1" "$_p.ssh_authorized_keys.$_j")"; _j=$((_j + 1)); done
    _i=$((_i + 1))
  done
}

ci_network_yaml() {
  if ! ci_flat_yaml "$1" > "$2/net"; then
    echo "error network-config is not valid YAML: $(ci_flat_error "$2/net")"; return 0
  fi
  if fhas "$2/net" network.version; then
    sed -n 's/^network\.//p' "$2/net" > "$2/net.inner"; mv "$2/net.inner" "$2/net"
  fi
  _v=$(fget "$2/net" version)
  case "$_v" in
    1) ci_net_v1 "$2/net" ;;
    2) ci_net_v2 "$2/net" ;;
    *) echo "error network-config has version '$_v', not 1 or 2" ;;
  esac
}

ci_net_v1() {
  _n=$(fcount "$1" config)
  [ "$_n" -gt 0 ] || { echo "error network-config (version 1) has no config entries"; return 0; }
  _i=0; _k=0
  while [ $_i -lt "$_n" ]; do
    _p=config.$_i; _ty=$(fget "$1" "$_p.type")
    case "$_ty" in
      physical)
        _mac=$(fget "$1" "$_p.mac_address"); _nm=$(fget "$1" "$_p.name")
        [ -n "$_mac$_nm" ] || echo "error network-config config[$_i] (physical) has neither mac_address nor name"
        _id=n$_k; _k=$((_k + 1))
        echo "nic $_id ${_mac:--} ${_nm:--}"
        _mtu=$(fget "$1" "$_p.mtu"); [ -z "$_mtu" ] || echo "mtu $_id $_mtu"
        _m=$(fcount "$1" "$_p.subnets"); _j=0
        while [ $_j -lt "$_m" ]; do
          _s=$_p.subnets.$_j; _st=$(fget "$1" "$_s.type")
          case "$_st" in
            static|static6)
              _a=$(fget "$1" "$_s.address"); _nmk=$(fget "$1" "$_s.netmask"); _gw=$(fget "$1" "$_s.gateway")
              case "$_a" in
                *:*) case "$_a" in */*) echo "addr6 $_id $_a" ;; *) echo "addr6 $_id $_a/${_nmk:-64}" ;; esac
                     [ -z "$_gw" ] || echo "gw6 $_id $_gw" ;;
                */*) echo "addr $_id $_a"; [ -z "$_gw" ] || echo "gw $_id $_gw" ;;
                "") echo "error network-config config[$_i].subnets[$_j] (static) has no address" ;;
                *) echo "addrmask $_id $_a ${_nmk:-missing}"; [ -z "$_gw" ] || echo "gw $_id $_gw" ;;
              esac ;;
            dhcp|dhcp4) echo "dhcp4 $_id" ;;
            dhcp6|ipv6_slaac|ipv6_dhcpv6-stateless|ipv6_dhcpv6-stateful)
              echo "note $_st on $_id: left to the kernel's IPv6 autoconfiguration" ;;
            manual) ;;
            *) echo "error network-config config[$_i].subnets[$_j] has type '$_st'" ;;
          esac
          for _d in $(fkeys "$1" "$_s.dns_nameservers"); do echo "dns $(fget "$1" "$_s.dns_nameservers.$_d")"; done
          for _d in $(fkeys "$1" "$_s.dns_search"); do echo "search $(fget "$1" "$_s.dns_search.$_d")"; done
          _j=$((_j + 1))
        done ;;
      nameserver)
        for _d in $(fkeys "$1" "$_p.address"); do echo "dns $(fget "$1" "$_p.address.$_d")"; done
        for _d in $(fkeys "$1" "$_p.search"); do echo "search $(fget "$1" "$_p.search.$_d")"; done ;;
      bond|bridge|vlan|route) echo "note network-config $_ty entries are not supported: config[$_i] ignored" ;;
      *) echo "error network-config config[$_i] has type '$_ty'" ;;
    esac
    _i=$((_i + 1))
  done
}

ci_net_v2() {
  for _sec in bonds bridges vlans wifis; do
    fhas "$1" "$_sec" && echo "note network-config $_sec are not supported, ignored"
  done
  _k=0
  for _e in $(fkeys "$1" ethernets); do
    _p=ethernets.$_e; _id=n$_k; _k=$((_k + 1))
    _mac=$(fget "$1" "$_p.match.macaddress"); _nm=$(fget "$1" "$_p.set-name")
    [ -n "$_nm" ] || [ -n "$_mac" ] || _nm=$_e
    echo "nic $_id ${_mac:--} ${_nm:--}"
    _mtu=$(fget "$1" "$_p.mtu"); [ -z "$_mtu" ] || echo "mtu $_id $_mtu"
    ci_true "$(fget "$1" "$_p.dhcp4")" && echo "dhcp4 $_id"
    for _a in $(fkeys "$1" "$_p.addresses"); do
      _a=$(fget "$1" "$_p.addresses.$_a")
      case "$_a" in *:*) echo "addr6 $_id $_a" ;; */*) echo "addr $_id $_a" ;;
        *) echo "error network-config ethernets.$_e address '$_a' has no prefix length" ;; esac
    done
    _gw=$(fget "$1" "$_p.gateway4"); [ -z "$_gw" ] || echo "gw $_id $_gw"
    _gw=$(fget "$1" "$_p.gateway6"); [ -z "$_gw" ] || echo "gw6 $_id $_gw"
    for _r in $(fkeys "$1" "$_p.routes"); do
      _to=$(fget "$1" "$_p.routes.$_r.to"); _via=$(fget "$1" "$_p.routes.$_r.via")
      case "$_to" in
        default|0.0.0.0/0) echo "gw $_id $_via" ;;
        ::/0) echo "gw6 $_id $_via" ;;
        *) echo "route $_id $_to $_via" ;;
      esac
    done
    for _d in $(fkeys "$1" "$_p.nameservers.addresses"); do echo "dns $(fget "$1" "$_p.nameservers.addresses.$_d")"; done
    for _d in $(fkeys "$1" "$_p.nameservers.search"); do echo "search $(fget "$1" "$_p.nameservers.search.$_d")"; done
  done
  [ $_k -gt 0 ] || echo "error network-config (version 2) has no ethernets"
}

# ci_net_eni FILE: the interfaces(5) text PVE's config-drive carries (names, no MACs).
ci_net_eni() {
  awk '
    function id(n) { if (!(n in ids)) { ids[n] = "n" k++; print "nic " ids[n] " - " n }; return ids[n] }
    $1 == "iface" && $2 == "lo" { cur = ""; next }
    $1 == "iface" && $3 == "inet" { cur = id($2); fam = 4; if ($4 == "dhcp") print "dhcp4 " cur; next }
    $1 == "iface" && $3 == "inet6" { cur = id($2); fam = 6
      if ($4 != "static") print "note inet6 " $4 " on " $2 ": left to the kernel"; next }
    $1 == "address" && cur != "" { if (fam == 4) a4[cur] = $2; else a6[cur] = $2; next }
    $1 == "netmask" && cur != "" { if (fam == 4) m4[cur] = $2; else m6[cur] = $2; next }
    $1 == "gateway" && cur != "" { print (fam == 4 ? "gw " : "gw6 ") cur " " $2; next }
    $1 == "dns_nameservers" { for (i = 2; i <= NF; i++) print "dns " $i; next }
    $1 == "dns_search" { for (i = 2; i <= NF; i++) print "search " $i; next }
    END {
      for (c in a4) print "addrmask " c " " a4[c] " " (c in m4 ? m4[c] : "missing")
      for (c in a6) print "addr6 " c " " a6[c] "/" (c in m6 ? m6[c] : "64")
    }' "$1"
}

# ci_net_openstack FILE TMP: OpenStack's network_data.json (links, networks, services).
ci_net_openstack() {
  if ! ci_flat_json "$1" > "$2/nd"; then
    echo "error network_data.json is not valid JSON: $(ci_flat_error "$2/nd")"; return 0
  fi
  _n=$(fcount "$2/nd" links); _i=0
  while [ $_i -lt "$_n" ]; do
    _mac=$(fget "$2/nd" "links.$_i.ethernet_mac_address")
    echo "nic l$_i ${_mac:--} -"
    _mtu=$(fget "$2/nd" "links.$_i.mtu"); [ -z "$_mtu" ] || echo "mtu l$_i $_mtu"
    _i=$((_i + 1))
  done
  _m=$(fcount "$2/nd" networks); _j=0
  while [ $_j -lt "$_m" ]; do
    _p=networks.$_j; _lk=$(fget "$2/nd" "$_p.link"); _id=
    _i=0
    while [ $_i -lt "$_n" ]; do [ "$(fget "$2/nd" "links.$_i.id")" = "$_lk" ] && _id=l$_i; _i=$((_i + 1)); done
    if [ -z "$_id" ]; then echo "error network_data.json networks[$_j] names link '$_lk', which links does not have"; _j=$((_j + 1)); continue; fi
    case "$(fget "$2/nd" "$_p.type")" in
      ipv4)
        _a=$(fget "$2/nd" "$_p.ip_address")
        case "$_a" in */*) echo "addr $_id $_a" ;; *) echo "addrmask $_id $_a $(fget "$2/nd" "$_p.netmask")" ;; esac
        for _r in $(fkeys "$2/nd" "$_p.routes"); do
          _net=$(fget "$2/nd" "$_p.routes.$_r.network"); _gw=$(fget "$2/nd" "$_p.routes.$_r.gateway")
          if [ "$_net" = 0.0.0.0 ]; then echo "gw $_id $_gw"
          else echo "route $_id $_net/$(ci_prefix "$(fget "$2/nd" "$_p.routes.$_r.netmask")") $_gw"; fi
        done ;;
      ipv4_dhcp|dhcp4) echo "dhcp4 $_id" ;;
      ipv6)
        _a=$(fget "$2/nd" "$_p.ip_address")
        case "$_a" in */*) echo "addr6 $_id $_a" ;; *) echo "addr6 $_id $_a/$(fget "$2/nd" "$_p.netmask")" ;; esac ;;
      *) echo "note network_data.json networks[$_j] of type $(fget "$2/nd" "$_p.type") ignored" ;;
    esac
    _j=$((_j + 1))
  done
  for _s in $(fkeys "$2/nd" services); do
    [ "$(fget "$2/nd" "services.$_s.type")" = dns ] && echo "dns $(fget "$2/nd" "services.$_s.address")"
  done
}

# Check what needs checking once: addresses, masks, gateways, MACs; addrmask becomes addr.
ci_normalize() {
  set -f
  while IFS= read -r _l; do
    set -- $_l
    case "$1" in
      addrmask)
        if ! ci_is_ip4 "$3"; then echo "error network: '$3' is not an IPv4 address"
        elif ! _pf=$(ci_prefix "$4"); then echo "error network: '$4' is not a netmask (address $3)"
        else echo "addr $2 $3/$_pf"; fi ;;
      addr)
        if ci_is_ip4 "${3%/*}" && ci_prefix "${3#*/}" >/dev/null; then echo "$_l"
        else echo "error network: '$3' is not an IPv4 address/prefix"; fi ;;
      gw|dns)
        _v=$3; [ "$1" = dns ] && _v=$2
        if ci_is_ip4 "$_v" || { [ "$1" = dns ] && case "$_v" in *:*) true ;; *) false ;; esac; }; then echo "$_l"
        else echo "error network: $1 '$_v' is not an IPv4 address"; fi ;;
      nic)
        if [ "$3" != - ] && ! ci_is_mac "$3"; then echo "error network: '$3' is not a MAC address"
        else echo "$_l"; fi ;;
      *) echo "$_l" ;;
    esac
  done
}
