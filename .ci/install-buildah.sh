#!/usr/bin/env bash
# Prints the path of buildah: BUILDAH when set, else the one on PATH, else
# it installs Debian's buildah package. `make image` builds the container
# image with it and the image test (crashtest/image_test.go) runs the
# image's binary through it; in CI a missing buildah fails that step.
set -euo pipefail
if [ -n "${BUILDAH:-}" ]; then
  if [ ! -x "$BUILDAH" ]; then echo "BUILDAH=$BUILDAH is not an executable" >&2; exit 1; fi
  echo "$BUILDAH"
  exit 0
fi
if command -v buildah >/dev/null 2>&1; then
  command -v buildah
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
# Recommends would add podman's network stack and fuse-overlayfs: the
# build and the test use chroot isolation, the host's network and vfs.
apt-get install -y -qq --no-install-recommends buildah >&2
command -v buildah
