# keygate: `make run` starts a working gateway on its embedded defaults;
# `make test` runs the whole suite with the race detector; `make check` is
# the quick inner loop.
GO      ?= go
BIN     := bin/keygate
# VERSION is the release this tree is (cli.Release, the newest release in
# CHANGELOG.md); `keygate version` adds the commit Go stamps into the build.
VERSION ?= $(shell sed -n 's/^const Release = "\(.*\)"$$/\1/p' cli/version.go)
# REVISION is the commit, which `keygate version` prints beside VERSION.
REVISION ?= $(shell git describe --always --dirty --abbrev=12 --exclude '*' 2>/dev/null)
LDFLAGS := -s -w -X github.com/keygate/keygate/cli.Version=$(VERSION) -X github.com/keygate/keygate/cli.Revision=$(REVISION)
FUZZTIME ?= 3m
# TEST_FUZZ_DIFFERENTIAL and TEST_FUZZ_TRACKER are how many inputs `make
# test` runs through each differential fuzz target (multipart against real
# parsers, the framing tracker against net/http): about 20 s each on a
# 2-core machine. A count, not a duration: with a duration Go's fuzz
# coordinator (before Go 1.27) can fail a target that found nothing with
# "context deadline exceeded" as the time runs out (go.dev/issue/75804).
# Nothing is minimized (-fuzzminimizetime 0x): with a count, Go's
# coordinator sets a minimization's runs aside from the count and sends no
# other input until it ends, and 2000 runs of a 1 MiB input the fuzzer grew
# (its largest) through keygate and three parsers take minutes, and the
# count can stand 2000 short of the end until stopped by hand. A crasher is still written to testdata, whole;
# `make fuzz` minimizes.
TEST_FUZZ_DIFFERENTIAL ?= 80000x
TEST_FUZZ_TRACKER ?= 400000x

.PHONY: all build run test check deps bench bench-peers bench-churn profile fuzz lint vuln clean

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/keygate

## run: build, then start keygate with stand-in backends and a demo key on https://localhost:8443
run: build
	./$(BIN) demo

## deps: install every program the tests and benches run, from the one list scripts/deps.txt
##       (redis, curl, jq, nodejs, python3 libraries, busboy, chromium, promtool, podman, runc,
##       nginx with Lua, HAProxy, Caddy, wrk, h2load), when missing
deps:
	@./scripts/install-deps.sh

## check: the quick inner loop: every package's tests in -short mode (no process-heavy
##        end-to-end, bench or browser runs), without the race detector, no fuzzing
check:
	$(GO) test -short -count=1 ./...

## test: the whole suite, race detector on
test: deps
	$(GO) test -race -count=1 -timeout 25m ./...
	# The HTTP/2 rapid-reset attack at full size (12 connections x 20,000
	# resets) and its RSS bound: the race run above sends a smaller one,
	# since the race detector's shadow memory makes RSS meaningless.
	$(GO) test -count=1 -run '^TestHTTP2RapidReset$$' ./server
	$(GO) test -run '^$$' -fuzz '^FuzzDifferential$$' -fuzztime $(TEST_FUZZ_DIFFERENTIAL) -fuzzminimizetime 0x ./differential
	$(GO) test -run '^$$' -fuzz '^FuzzTracker$$' -fuzztime $(TEST_FUZZ_TRACKER) -fuzzminimizetime 0x ./framing

## bench: hot-path benchmarks and the whole-gateway load comparison, with allocations
bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 30m ./...

## bench-peers: keygate against a bare httputil.ReverseProxy, nginx (also with a key check in
##              Lua), HAProxy and Caddy on loopback (installs them and wrk with apt-get when
##              missing: make deps); prints Markdown tables. BENCH_PEERS_FLAGS="-reps 5 -duration 10s" to
##              change the defaults.
##              BENCH_SMOKE=1 (or -smoke) is a one-second run that only proves it works.
##              BENCH_PEERS_FLAGS="-tls": every target terminates TLS 1.3 (one ECDSA P-256
##              cert the bench makes), loaded over HTTP/1.1 (wrk) and HTTP/2 (h2load -c32 -m10).
##              BENCH_PEERS_FLAGS="-refusals" also floods each target that checks keys
##              (keygate's, nginx-lua: nginx checking the key in Lua) with one made-up key.
##              BENCH_PEERS_FLAGS="-keys 100000" adds keygate-keys and keygate-redis-keys: the
##              keystore holds N keys, the load spreads evenly over them (each key sent once
##              before each rep), against keygate and keygate-redis with one key, in the same
##              run; prints the ratios, keygate's RSS, redis-server's used_memory per active
##              key and the Redis keys without TTL. Plain mode only (-tls refuses it, and
##              -refusals). With `make profile` (also -tls): keygate with N keys.
##              BENCH_PEERS_FLAGS="-keygate-base-rev origin/main -only-side-by-side -targets keygate"
##              loads this keygate and the one built at a git revision side by side.
##              BENCH_PEERS_FLAGS="-out TOPIC" also writes the tables to
##              bench/results/<YYYY-MM-DD>-<commit>-<TOPIC>.md, the one place for dated runs.
BENCH_PEERS_FLAGS ?=
bench-peers: deps
	$(GO) run ./bench/peers $(BENCH_PEERS_FLAGS)

## bench-churn: 100 admin key changes/s (issue, then revoke) through two replicas' admin APIs on
##              one Redis keystore of 100k keys while both replicas are under full load: rps and
##              open-loop p99 against a baseline without churn, and how soon each revocation is
##              refused on both replicas; prints Markdown tables (installs wrk when missing).
##              BENCH_CHURN_FLAGS="-duration 10s -limiter local -load 1 -profile bench/out" to change it;
##              BENCH_SMOKE=1 (or -smoke) is a short run that only proves it works.
BENCH_CHURN_FLAGS ?=
bench-churn: deps
	$(GO) run ./bench/churn $(BENCH_CHURN_FLAGS)

## profile: a CPU profile of keygate (local limiter) under wrk load at each size
##          (-sizes), written to bench/out/keygate-cpu.pprof, and its top entries
PROFILE ?= bench/out/keygate-cpu.pprof
profile: deps
	@mkdir -p $(dir $(PROFILE))
	$(GO) run ./bench/peers -profile $(PROFILE) $(BENCH_PEERS_FLAGS)
	$(GO) tool pprof -top -nodecount=40 $(PROFILE) | head -50

## fuzz: every fuzz target of every package (go test -list finds them), each for
##       FUZZTIME (default 3m)
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "== $$pkg $$f"; \
			$(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

## lint: go.mod and go.sum tidy (go mod tidy -diff prints what tidy would change and
##       fails), go vet, then golangci-lint (.golangci.yml gives the reason beside each choice)
##       install: go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@latest
GOLANGCI_LINT ?= $(shell command -v golangci-lint 2>/dev/null || echo $(shell $(GO) env GOPATH)/bin/golangci-lint)
lint:
	$(GO) mod tidy -diff
	$(GO) vet ./...
	@if [ -x "$(GOLANGCI_LINT)" ]; then "$(GOLANGCI_LINT)" run ./...; else echo "golangci-lint not installed (see above); ran go vet only"; fi

## vuln: known vulnerabilities in dependencies
vuln:
	$(GO) run golang.org/x/vuln/cmd/govulncheck@latest ./...

clean:
	rm -rf bin
