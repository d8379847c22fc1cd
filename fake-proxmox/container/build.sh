#!/usr/bin/env bash
# Builds the fake-proxmox container image from this repository alone: no base image is pulled.
# The image is FROM scratch and holds the fake-proxmox binary plus the exact shared libraries it
# links (found with ldd), at their own paths.
#
#   fake-proxmox/container/build.sh [--tag fake-proxmox:dev] [--release] [--binary PATH]
#
# Without --binary, the binary is built with `cargo build -p fake-proxmox` (debug unless --release)
# in $CARGO_TARGET_DIR or the workspace's target/. Prints the image's size at the end.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
tag="fake-proxmox:dev"
profile="debug"
binary=""

while [ $# -gt 0 ]; do
  case "$1" in
    --tag) tag="${2:?--tag needs a value}"; shift 2 ;;
    --tag=*) tag="${1#--tag=}"; shift ;;
    --release) profile="release"; shift ;;
    --binary) binary="${2:?--binary needs a path}"; shift 2 ;;
    --binary=*) binary="${1#--binary=}"; shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

command -v docker >/dev/null || { echo "build.sh: docker is not installed" >&2; exit 1; }
command -v ldd >/dev/null || { echo "build.sh: ldd is not installed (libc-bin)" >&2; exit 1; }

if [ -z "$binary" ]; then
  flags=()
  [ "$profile" = "release" ] && flags+=(--release)
  (cd "$repo" && cargo build -q -p fake-proxmox --bin fake-proxmox "${flags[@]}")
  target_dir="${CARGO_TARGET_DIR:-$repo/target}"
  binary="$target_dir/$profile/fake-proxmox"
fi
[ -x "$binary" ] || { echo "build.sh: no executable at $binary" >&2; exit 1; }

ctx="$(mktemp -d "${TMPDIR:-/tmp}/fake-proxmox-image.XXXXXX")"
trap 'rm -rf "$ctx"' EXIT
root="$ctx/rootfs"
# /var/tmp: uploads are spooled there (`/var/tmp/pveupload-*`, as pveproxy spools them).
mkdir -p "$root/usr/local/bin" "$root/var/lib/fake-proxmox" "$root/tmp" "$root/var/tmp" "$root/etc"
cp "$binary" "$root/usr/local/bin/fake-proxmox"
# Debug info is most of a debug build's size and is not needed to run.
if command -v strip >/dev/null; then strip "$root/usr/local/bin/fake-proxmox" 2>/dev/null || true; fi

# Every library the dynamic linker will load, and the linker itself, at their real paths.
# ldd prints "name => /path (0x…)" or "/path (0x…)"; vdso has no file.
libs="$(ldd "$binary" | awk '/=>/ { if ($3 ~ /^\//) print $3; next } $1 ~ /^\// { print $1 }')"
for lib in $libs; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
# glibc's resolver reads these even for numeric addresses; keep them minimal and local.
printf 'hosts: files\n' > "$root/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n::1 localhost\n' > "$root/etc/hosts"
printf 'root:x:0:0:root:/:/nonexistent\n' > "$root/etc/passwd"
chmod 1777 "$root/tmp" "$root/var/tmp"

cp "$here/Dockerfile" "$ctx/Dockerfile"
# The classic builder needs no buildx plugin; BuildKit would add nothing for a two-line file.
if ! out="$(DOCKER_BUILDKIT=0 docker build -q -t "$tag" "$ctx" 2>&1)"; then
  echo "$out" >&2
  echo "build.sh: docker build failed" >&2
  exit 1
fi
size="$(docker image inspect --format '{{.Size}}' "$tag")"
echo "built $tag from $binary ($(echo "$libs" | wc -w) shared libraries): $size bytes ($((size / 1024 / 1024)) MiB)"
