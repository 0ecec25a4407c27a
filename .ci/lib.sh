# Sourced by the .ci scripts: the one way they install what they need.

# installed PKG: PKG is installed, whatever other architectures also have it.
installed() { dpkg-query -W -f='${db:Status-Abbrev}\n' "$1" 2>/dev/null | grep -q '^ii'; }

# need WHO [--update] [APT-OPTION...] PKG...: installs those of PKG not
# installed yet (after an apt-get update), saying so under WHO's name;
# --update runs the update even when nothing is missing (a new dpkg
# architecture). Waits up to 5 minutes for another apt to finish. Returns
# non-zero if the install failed.
need() {
  local who=$1 update=0 opts=() missing=() p
  shift
  while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do
    if [ "$1" = --update ]; then update=1; else opts+=("$1"); fi
    shift
  done
  for p in "$@"; do installed "$p" || missing+=("$p"); done
  [ ${#missing[@]} -gt 0 ] || [ "$update" = 1 ] || return 0
  echo "=== $who: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=300 update -qq || echo "apt-get update failed; trying the install anyway"
  [ ${#missing[@]} -eq 0 ] ||
    apt-get -o DPkg::Lock::Timeout=300 install -y -qq "${opts[@]}" "${missing[@]}" >/dev/null
}

# quiet CMD...: runs CMD, showing its output only if it fails.
quiet() {
  local out
  out=$("$@" 2>&1) || { printf '%s\n' "$out"; return 1; }
}
