#!/usr/bin/env bash
# Prints the path of promtool (Prometheus's rule checker): PROMTOOL when
# set, else the one on PATH, else it installs Debian's prometheus package. The alert rules' tests
# (metrics/alerts_test.go) run it; in CI a missing promtool fails them.
set -euo pipefail
. "$(dirname "$0")/tool.sh"
found PROMTOOL promtool
# The package's service must not start here: only its promtool is wanted.
if [ -d /usr/sbin ] && [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends prometheus >&2
command -v promtool
