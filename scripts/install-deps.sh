#!/usr/bin/env bash
# Installs what keygate's tests and benches run, only when missing, from one
# list: scripts/deps.txt (its header gives the format; scripts/deps_test.go
# checks that every program the Go code looks up is in it). Debian packages
# with apt-get (sudo when not root), Node modules with npm ci, Go programs
# built from their module (go_build below). Packages that
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

# gobin: Go's bin directory, where `go install` puts programs.
gobin() {
  local d
  d="$(go env GOBIN)"
  [ -n "$d" ] || d="$(go env GOPATH | cut -d: -f1)/bin"
  echo "$d"
}

# go_present NAME MODULE@VERSION: whether Go's bin directory has NAME of
# that version (`NAME version` prints a line "Version: VERSION"). The
# output is read whole, not piped to grep -q: under pipefail the program's
# SIGPIPE, when grep stops reading at the match, would count as absent.
go_present() {
  local bin out key value
  bin="$(gobin)/$1"
  [ -x "$bin" ] || return 1
  out="$("$bin" version 2>/dev/null)" || return 1
  while read -r key value; do
    [ "$key" = "Version:" ] && [ "$value" = "${2##*@}" ] && return 0
  done <<<"$out"
  return 1
}

# go_build NAME MODULE@VERSION: builds MODULE's ./cmd/NAME at VERSION into
# Go's bin directory the way its release is built (CGO off, stripped, the
# version stamped into MODULE/pkg/version.Version, as Traefik's Makefile
# does). Not `go install MODULE/cmd/NAME@VERSION`: Go refuses that for a
# module whose go.mod has replace directives, as Traefik's has; so it
# builds in the module's downloaded copy (read-only in the module cache;
# the build writes only the binary and Go's build cache).
go_build() {
  local name="$1" mod="${2%@*}" version="${2##*@}" dir out
  echo "building $name from $mod@$version (go build; minutes the first time)"
  dir="$(go mod download -json "$mod@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [ -d "$dir" ] || { echo "go mod download $mod@$version: no directory" >&2; return 1; }
  out="$(gobin)"
  mkdir -p "$out"
  (cd "$dir" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X $mod/pkg/version.Version=$version" \
    -o "$out/$name.tmp" "./cmd/$name") && mv "$out/$name.tmp" "$out/$name"
}

apt=()
npm=()
gomod=()
missing_prereq=()
while read -r name source checks; do
  case "$name" in ''|'#'*) continue ;; esac
  case "$source" in
    go:*)
      go_present "$name" "${source#go:}" || gomod+=("$name ${source#go:}")
      continue
      ;;
  esac
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
for entry in ${gomod[@]+"${gomod[@]}"}; do
  # shellcheck disable=SC2086 # "NAME MODULE@VERSION"
  go_build $entry
done

# Every entry must now be there.
bad=0
while read -r name source checks; do
  case "$name" in ''|'#'*) continue ;; esac
  case "$source" in
    go:*)
      if ! go_present "$name" "${source#go:}"; then
        echo "still missing after install: $name ($source) in $(gobin)" >&2
        bad=1
      fi
      continue
      ;;
  esac
  # shellcheck disable=SC2086
  if ! present "$name" $checks; then
    echo "still missing after install: $name ($source)" >&2
    bad=1
  fi
done <"$list"
exit "$bad"
