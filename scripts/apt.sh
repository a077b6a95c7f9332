# shellcheck shell=bash
# apt_install installs the Debian packages named, with sudo when not root,
# non-interactively and without recommends. Sourced by install-deps.sh.
apt_install() {
  [ "$#" -eq 0 ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
  fi
  echo "installing: $*"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "$@"
}
