# Sourced by the install scripts. found VAR NAME prints the tool NAME and
# exits the script when it is there: $VAR when set (failing when it is not
# an executable), else NAME on PATH; otherwise it returns, and the script
# installs the tool.
found() {
  local var=$1 name=$2
  local given=${!var:-}
  if [ -n "$given" ]; then
    if [ ! -x "$given" ]; then echo "$var=$given is not an executable" >&2; exit 1; fi
    echo "$given"
    exit 0
  fi
  if command -v "$name" >/dev/null 2>&1; then
    command -v "$name"
    exit 0
  fi
  export DEBIAN_FRONTEND=noninteractive
}
