#!/usr/bin/env bash
# Installs what keygate's tests and benches run, only when missing, from one
# list: scripts/deps.txt (its header gives the format; scripts/deps_test.go
# checks that every program the Go code looks up is in it). Debian packages
# with apt-get (sudo when not root), Node modules with npm ci. Packages that
# start a system service on install (nginx, haproxy, caddy) have it stopped:
# the bench runs its own instances on loopback, and the service would hold
# port 80.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
list="$root/scripts/deps.txt"

# present NAME CHECK...: whether every check holds (default cmd:NAME).
present() {
  local name="$1"
  shift
  [ "$#" -eq 0 ] && set -- "cmd:$name"
  local c
  for c in "$@"; do
    case "$c" in
      cmd:*)  command -v "${c#cmd:}" >/dev/null 2>&1 || [ -x "/usr/sbin/${c#cmd:}" ] || return 1 ;;
      file:/*) [ -e "${c#file:}" ] || return 1 ;;
      file:*) [ -e "$root/${c#file:}" ] || return 1 ;;
      py:*)   /usr/bin/python3 -c "import ${c#py:}" >/dev/null 2>&1 || return 1 ;;
      *) echo "scripts/deps.txt: $name: unknown check $c" >&2; exit 2 ;;
    esac
  done
}

apt=()
npm=()
missing_prereq=()
while read -r name source checks; do
  case "$name" in ''|'#'*) continue ;; esac
  # shellcheck disable=SC2086 # checks are space-separated words
  if present "$name" $checks; then
    continue
  fi
  case "$source" in
    apt:*) apt+=("${source#apt:}") ;;
    npm:*) npm+=("${source#npm:}") ;;
    prerequisite) missing_prereq+=("$name") ;;
    *) echo "scripts/deps.txt: $name: unknown source $source" >&2; exit 2 ;;
  esac
done <"$list"

if [ ${#missing_prereq[@]} -gt 0 ]; then
  echo "install these first: ${missing_prereq[*]}" >&2
  exit 1
fi

# shellcheck source=scripts/apt.sh
. "$root/scripts/apt.sh"
if [ ${#apt[@]} -gt 0 ]; then
  # One package may serve two entries.
  mapfile -t apt < <(printf '%s\n' "${apt[@]}" | sort -u)
  apt_install "${apt[@]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
  fi
  for s in nginx haproxy caddy; do
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$s" 2>/dev/null; then
      $sudo systemctl stop "$s" || true
    fi
  done
fi
for dir in ${npm[@]+"${npm[@]}"}; do
  echo "installing $dir's Node modules (npm ci)"
  (cd "$root/$dir" && npm ci --no-audit --no-fund --loglevel=error)
done

# Every entry must now be there.
bad=0
while read -r name source checks; do
  case "$name" in ''|'#'*) continue ;; esac
  # shellcheck disable=SC2086
  if ! present "$name" $checks; then
    echo "still missing after install: $name ($source)" >&2
    bad=1
  fi
done <"$list"
exit "$bad"
