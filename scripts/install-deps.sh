#!/usr/bin/env bash
# Installs the system packages keygate's tests use, only when missing:
# redis-server and redis-cli (real Redis in tests), curl and nodejs (real
# clients in the end-to-end tests), jq (the README's examples, which the
# README test runs, read JSON with it), python3-werkzeug and busboy (the real
# multipart parsers of the differential tests), python3-authlib,
# python3-jwt and python3-requests (a non-Go OAuth 2.0 client and an
# independent JOSE library against the token endpoint), python3-cryptography
# (signs secret-scanning alerts as GitHub does, independently of Go), chromium (the portal's
# browser tests drive it headless), promtool (package prometheus: the alert
# rules' unit tests), podman and runc (the image test runs the OCI image;
# runc because crun refuses hybrid cgroup hierarchies). Uses apt-get, with sudo when not root,
# and npm for busboy.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli    >/dev/null 2>&1 || need+=(redis-tools)
command -v curl         >/dev/null 2>&1 || need+=(curl)
command -v jq           >/dev/null 2>&1 || need+=(jq)
command -v node         >/dev/null 2>&1 || need+=(nodejs)
command -v npm          >/dev/null 2>&1 || need+=(npm)
/usr/bin/python3 -c 'import werkzeug' >/dev/null 2>&1 || need+=(python3-werkzeug)
/usr/bin/python3 -c 'import authlib' >/dev/null 2>&1 || need+=(python3-authlib)
/usr/bin/python3 -c 'import jwt' >/dev/null 2>&1 || need+=(python3-jwt)
/usr/bin/python3 -c 'import requests' >/dev/null 2>&1 || need+=(python3-requests)
/usr/bin/python3 -c 'import cryptography' >/dev/null 2>&1 || need+=(python3-cryptography)
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v promtool     >/dev/null 2>&1 || need+=(prometheus)
command -v podman       >/dev/null 2>&1 || need+=(podman)
command -v runc         >/dev/null 2>&1 || need+=(runc)

busboy() {
  # busboy for the differential tests, at the version package-lock.json pins.
  local dir
  dir="$(cd "$(dirname "$0")/.." && pwd)/differential/parsers/busboy"
  if [ ! -d "$dir/node_modules/busboy" ]; then
    echo "installing busboy (npm ci in $dir)"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}

# shellcheck source=scripts/apt.sh
. "$(dirname "$0")/apt.sh"
apt_install "${need[@]}"
busboy
