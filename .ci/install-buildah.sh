#!/usr/bin/env bash
# Prints the path of buildah: BUILDAH when set, else the one on PATH, else
# it installs Debian's buildah package. `make image` builds the container
# image with it and the image test (crashtest/image_test.go) runs the
# image's binary through it; in CI a missing buildah fails that step.
set -euo pipefail
. "$(dirname "$0")/tool.sh"
found BUILDAH buildah
apt-get update -qq >&2
# Recommends would add podman's network stack and fuse-overlayfs: the
# build and the test use chroot isolation, the host's network and vfs.
apt-get install -y -qq --no-install-recommends buildah >&2
command -v buildah
