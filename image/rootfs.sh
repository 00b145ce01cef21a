#!/usr/bin/env bash
# Builds the computer image's root filesystem as a tar, content-addressed by its recipe.
#
#   bash image/rootfs.sh build   build <cache>/rootfs-<hash>.tar unless it exists; print its path
#   bash image/rootfs.sh path    print the tar path; exit 1 if it is not built
#   bash image/rootfs.sh hash    print <hash>
#
# <hash> is the first 16 hex digits of
#   (cd image && sha256sum packages.txt rootfs.sh customize.sh | sha256sum)
# so any change to a recipe file (add new ones to recipe_files) gives a new tar. The guest binary
# is not part of it: other code layers it on top through the Engine API. The cache is
# $RAKAZO_IMAGE_CACHE, else ${XDG_CACHE_HOME:-$HOME/.cache}/rakazo/image, outside the checkout
# so that CI and other worktrees reuse it. Debian amd64 (bookworm) hosts only.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
recipe_files=(packages.txt rootfs.sh customize.sh)
cache="${RAKAZO_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rakazo/image}"

# uv and uvx come from the static musl wheel on PyPI; the digest pins the exact file.
uv_version=0.13.9
uv_wheel="uv-$uv_version-py3-none-musllinux_1_1_x86_64.whl"
uv_sha256=2c45530751517d6c3bbc69a19473f6effe47cce047bede01ffd8af7ea7b36b25

mirror=http://deb.debian.org/debian
security=http://deb.debian.org/debian-security

die() { echo "rootfs.sh: $*" >&2; exit 1; }

recipe_hash() {
  (cd "$here" && sha256sum "${recipe_files[@]}" | sha256sum | cut -c1-16)
}

tar_path() { echo "$cache/rootfs-$(recipe_hash).tar"; }

packages() {
  # Strip comments and blank lines; join with commas for --include.
  sed -e 's/#.*//' -e 's/[[:space:]]//g' "$here/packages.txt" | grep -v '^$' | paste -sd, -
}

sudo_if_needed() { if [ "$(id -u)" -ne 0 ]; then sudo "$@"; else "$@"; fi; }

ensure_mmdebstrap() {
  command -v mmdebstrap >/dev/null && return 0
  export DEBIAN_FRONTEND=noninteractive
  sudo_if_needed apt-get -o DPkg::Lock::Timeout=300 update -qq
  sudo_if_needed apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends \
    mmdebstrap >/dev/null
}

fetch_uv() {
  local dest="$1" py
  py="$(command -v python3)" || die "python3 with pip is needed to fetch uv from PyPI"
  "$py" -m pip download "uv==$uv_version" --only-binary=:all: \
    --platform musllinux_1_1_x86_64 --no-deps --quiet -d "$dest/wheel" \
    || die "could not download $uv_wheel from PyPI"
  echo "$uv_sha256  $dest/wheel/$uv_wheel" | sha256sum --check --quiet \
    || die "$uv_wheel does not match the pinned sha256"
  unzip -q -j "$dest/wheel/$uv_wheel" "uv-$uv_version.data/scripts/uv" \
    "uv-$uv_version.data/scripts/uvx" -d "$dest/bin"
  chmod 0755 "$dest/bin/uv" "$dest/bin/uvx"
}

build() {
  local out tmp work
  out="$(tar_path)"
  if [ -f "$out" ]; then
    echo "$out"
    return 0
  fi
  ensure_mmdebstrap
  mkdir -p "$cache"
  work="$(mktemp -d)"
  tmp="$cache/.rootfs-$(recipe_hash).tar.$$"
  # shellcheck disable=SC2064 # expand now: the paths are fixed for this run
  trap "rm -rf '$work' '$tmp'" EXIT
  fetch_uv "$work"
  # Recommends are off (mmdebstrap's default). Docs, man pages and translations are dropped but
  # the copyright files stay. The security suite brings the maintained Chromium.
  mmdebstrap --variant=minbase --format=tar --quiet \
    --include="$(packages)" \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook="copy-in $work/bin/uv $work/bin/uvx /usr/local/bin" \
    --customize-hook="bash '$here/customize.sh' \"\$1\"" \
    bookworm "$tmp" \
    "deb $mirror bookworm main" \
    "deb $mirror bookworm-updates main" \
    "deb $security bookworm-security main" >&2
  # X servers put their sockets in /tmp/.X11-unix; it must exist, root-owned and 1777, before
  # Xvnc runs as rakazo. mmdebstrap empties /tmp after the customize hooks (its apt config is
  # there until then), so the directory is appended to the finished tar.
  mkdir -p "$work/x/tmp/.X11-unix"
  chmod 1777 "$work/x/tmp/.X11-unix"
  tar --append --file="$tmp" --no-recursion --owner=0 --group=0 --numeric-owner \
    -C "$work/x" ./tmp/.X11-unix
  mv -f "$tmp" "$out"
  echo "$out"
}

case "${1:-}" in
  build) build ;;
  path)
    out="$(tar_path)"
    [ -f "$out" ] || { echo "rootfs.sh: $out is not built: run 'bash image/rootfs.sh build'" >&2; exit 1; }
    echo "$out"
    ;;
  hash) recipe_hash ;;
  *) die "usage: $0 build|path|hash" ;;
esac
