#!/usr/bin/env bash
# Installs the peers `make bench-peers` compares keygate with (nginx, nginx
# with its Lua module, HAProxy, Caddy) and the load generators (wrk;
# h2load, for -tls's HTTP/2 runs), only when missing, from the
# distribution's packages (Debian bookworm: nginx 1.22,
# libnginx-mod-http-lua 0.10.23, HAProxy 2.6, Caddy 2.6, wrk 4.1,
# nghttp2-client 1.52). The bench never uses the system services these
# packages may start: it runs its own instances, with its own configs, on
# free loopback ports and temp dirs.
set -euo pipefail

need=()
command -v nginx   >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]   || need+=(nginx)
# nginx-lua: nginx's Lua module (lua-nginx-module on LuaJIT, with
# lua-resty-core); its files, not a command, say whether it is there.
[ -f /usr/lib/nginx/modules/ngx_http_lua_module.so ] && [ -f /usr/share/lua/5.1/resty/core.lua ] || need+=(libnginx-mod-http-lua)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need+=(haproxy)
command -v caddy   >/dev/null 2>&1 || need+=(caddy)
command -v wrk     >/dev/null 2>&1 || need+=(wrk)
command -v h2load  >/dev/null 2>&1 || need+=(nghttp2-client)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
# shellcheck source=scripts/apt.sh
. "$(dirname "$0")/../scripts/apt.sh"
apt_install "${need[@]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
# Some packages start a system service on install; the bench does not need
# it, and it would hold port 80.
for s in nginx haproxy caddy; do
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$s" 2>/dev/null; then
    $sudo systemctl stop "$s" || true
  fi
done
