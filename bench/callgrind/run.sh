#!/bin/bash
# bench/callgrind/run.sh KEYGATE_BINARY NAME: instructions per request of a
# keygate binary under valgrind's callgrind, which counts instructions,
# not seconds, so a busy machine does not move the figure (two runs of one
# binary agree within about 1%). Local limiter, file keystore, the bench's
# upstream (bench/peers -role upstream) on loopback; h2load sends N
# requests (default 800) after W unmeasured ones (default 200):
#   h1-256   HTTP/1.1, plain, a 256 B /sync upload
#   h1-100k  HTTP/1.1, plain, a 100 KiB /sync upload
#   h2-256   HTTP/2 over TLS 1.3, a 256 B /sync upload
#   h1-100k-tls  HTTP/1.1 over TLS 1.3, a 100 KiB /sync upload
# Compare two builds by running each (one line each on stdout); it is how
# the speed tricks of the request path were judged beside
# `bench/peers -keygate-base-rev` (docs/explanation/request-path.md).
# Needs valgrind, h2load, openssl, python3. Go's asynchronous preemption
# and RDTSCP are off under valgrind (GODEBUG), which cannot run either.
set -u
BIN=$1 OUT=$2 N=${N:-800} W=${W:-200}
for p in valgrind callgrind_control h2load openssl python3; do
  command -v $p >/dev/null || { echo "run.sh: $p is missing (make deps installs it: scripts/deps.txt)" >&2; exit 2; }
done
root=$(cd "$(dirname "$0")/../.." && pwd)
d=$(mktemp -d /tmp/keygate-callgrind.XXXXXX)/$OUT; mkdir -p $d/keys $d/spool
go build -C "$root" -o $d/peers ./bench/peers || exit 1
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $d/key.pem -out $d/cert.pem -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null
python3 - "$d" <<'PY'
import sys
d=sys.argv[1]
for n,size in (('256',256),('100k',102400)):
    b='----cgboundary'
    head=('--%s\r\nContent-Disposition: form-data; name="contextId"\r\n\r\n3f2b8c1e-6a4d-4e8b-9c2a-7d5e1f0a9b34\r\n--%s\r\nContent-Disposition: form-data; name="id"\r\n\r\n1\r\n--%s\r\nContent-Disposition: form-data; name="files"; filename="a.bin"\r\nContent-Type: application/octet-stream\r\n\r\n'%(b,b,b)).encode()
    open('%s/body-%s'%(d,n),'wb').write(head+b'x'*size+('\r\n--%s--\r\n'%b).encode())
PY
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
UP=$(port); $d/peers -role upstream -listen 127.0.0.1:$UP > $d/up.log 2>&1 & upid=$!
res=""
for mode in plain tls; do
  P=$(port); A=$(port)
  tls='tls:\n  mode: "off"\n'
  [ $mode = tls ] && tls="tls:\n  mode: files\n  cert_file: $d/cert.pem\n  key_file: $d/key.pem\n  min_version: \"1.3\"\n"
  printf "server:\n  listen: \"127.0.0.1:$P\"\n  admin_listen: \"127.0.0.1:$A\"\n  spool_dir: $d/spool\n  max_body_bytes: 104857600\n${tls}upstreams:\n  extraction: { targets: [\"http://127.0.0.1:$UP\"], max_idle_conns_per_host: 64 }\n  registry: { targets: [\"http://127.0.0.1:$UP\"], max_idle_conns_per_host: 64 }\nkeystore: { backend: file, file: $d/keys/keys.yaml }\nratelimit:\n  backend: local\n  max_concurrent: 0\n  limits:\n    live: { rate: 1000000, per: 1s, burst: 1000000000 }\n    test: { rate: 1000000, per: 1s, burst: 1000000000 }\nlog: { level: info, format: json }\n" > $d/$mode.yaml
  KEY=$($BIN keys issue --config $d/$mode.yaml --product extraction --env live --context 3f2b8c1e-6a4d-4e8b-9c2a-7d5e1f0a9b34 --name bench 2>/dev/null)
  HOME=$d GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$d/cg-$mode.%p $BIN serve --config $d/$mode.yaml > $d/kg-$mode.log 2>&1 & vpid=$!
  sch=http; [ $mode = tls ] && sch=https
  for i in $(seq 1 300); do grep -q "keygate serving" $d/kg-$mode.log && break; sleep 0.5; done; sleep 1
  k=0; loads="h1-256 h1-100k"; [ $mode = tls ] && loads="h2-256 h1-100k"
  for l in $loads; do
    proto=${l%%-*}; sz=${l#*-}
    args="-c4 -m1"; [ $proto = h1 ] && args="$args --h1"; [ $proto = h2 ] && args="-c4 -m10"
    hl() { h2load $args -n $1 -H "x-api-key: $KEY" -H 'content-type: multipart/form-data; boundary=----cgboundary' -d $d/body-$sz $sch://127.0.0.1:$P/sync > $d/h2load-$l-$2.txt 2>&1; }
    hl $W warm
    callgrind_control -z $vpid >/dev/null 2>&1
    callgrind_control -i on $vpid >/dev/null
    hl $N meas
    callgrind_control -i off $vpid >/dev/null
    callgrind_control -d $l $vpid >/dev/null
    sleep 1
    k=$((k+1)); f=$d/cg-$mode.$vpid.$k
    for i in $(seq 1 60); do [ -s $f ] && grep -q '^totals:' $f && break; sleep 1; done
    ir=$(grep -h '^totals:' $f | head -1 | awk '{print $2}')
    ok=$(grep -o '[0-9]* succeeded' $d/h2load-$l-meas.txt | head -1)
    st=$(grep -o '2xx: [0-9]*' $d/h2load-$l-meas.txt)
    name=$l; [ $mode = tls ] && [ $proto = h1 ] && name=$l-tls
    res="$res $name=$((ir / N)) ($ok, $st)"
  done
  kill $vpid; wait $vpid 2>/dev/null
done
kill $upid
echo "$OUT:$res"
