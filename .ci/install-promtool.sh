#!/usr/bin/env bash
# Prints the path of promtool (Prometheus's rule checker), installing
# Debian's prometheus package when it is missing. The alert rules' tests
# (metrics/alerts_test.go) run it; in CI a missing promtool fails them.
set -euo pipefail
if command -v promtool >/dev/null 2>&1; then
  command -v promtool
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
# The package's service must not start here: only its promtool is wanted.
if [ -d /usr/sbin ] && [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends prometheus >&2
command -v promtool
