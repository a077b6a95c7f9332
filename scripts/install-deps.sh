#!/usr/bin/env bash
# Installs the system packages keygate's tests use, only when missing:
# redis-server and redis-cli (real Redis in tests), curl and nodejs (real
# clients in the end-to-end tests). Uses apt-get, with sudo when not root.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli    >/dev/null 2>&1 || need+=(redis-tools)
command -v curl         >/dev/null 2>&1 || need+=(curl)
command -v node         >/dev/null 2>&1 || need+=(nodejs)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
echo "installing: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
