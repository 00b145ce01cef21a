#!/usr/bin/env bash
# mmdebstrap customize hook of the computer image: the workspace user and the directories the
# guest agent expects. Runs on the build host with the finished rootfs at $1 (called by
# rootfs.sh). Binaries added later by other code (rakazo-guest) are not baked in here.
set -euo pipefail
root="$1"

# The workspace user. The control plane mounts or restores the persistent home at /home/rakazo,
# so uid/gid are fixed at 1000 and the home is private to the user.
chroot "$root" groupadd --gid 1000 rakazo
chroot "$root" useradd --uid 1000 --gid 1000 --home-dir /home/rakazo --create-home \
  --shell /bin/bash rakazo
chown 1000:1000 "$root/home/rakazo"
chmod 0700 "$root/home/rakazo"

# /tmp/.X11-unix (root, 1777) is appended to the tar by rootfs.sh: mmdebstrap empties /tmp after
# the hooks, and its own apt config lives there until then.

# The enrollment token is uploaded here at provision time: readable by root only.
install -d -m 0700 -o 0 -g 0 "$root/etc/rakazo"

# rakazo-guest, uv and uvx live here.
install -d -m 0755 -o 0 -g 0 "$root/usr/local/bin"
