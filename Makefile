# soapgw developer tasks. `make test` is the command CI runs (via .ci/run).
GO ?= go
BIN := bin/soapgw

.PHONY: build test test-deps test-short demo bench bench-smoke bench-suite bench-targets bench-cpu pgo fuzz lint clean

# -buildvcs=auto records the commit (soapgw version prints it) even where the
# environment's GOFLAGS turns it off; outside a git checkout it records nothing.
build:
	$(GO) build -buildvcs=auto -o $(BIN) ./cmd/soapgw

# What the tests need from the system first (test-deps), then every package with the race
# detector, the end-to-end tests that run the built binary against real peers (Python
# zeep/spyne/suds from Debian, Prometheus, nginx), and the allocation tests without -race. The
# e2e package runs on its own so that its real processes do not share the 2 cores with
# the heaviest unit tests (xmltok's sync test, the tunnel stress tests) running beside it.
# With CI set (as .ci/run runs), a test whose dependency is missing fails instead of
# skipping (internal/testutil.Needs).
test: test-deps
	$(GO) test -race -count=1 -timeout 15m $$($(GO) list ./... | grep -v '/e2e$$')
	$(GO) test -race -count=1 -timeout 15m ./e2e/
	@# Allocation counts and memory held are checked without the race detector, which
	@# changes the first and takes minutes over the second.
	$(GO) test -count=1 -run 'Allocs|NoAlloc|StatePerConnection' ./internal/...

# What the tests need from the system (real SOAP stacks, Prometheus, nginx, iproute2):
# installed when run as root on Debian, else a list of what is missing and how to get it.
test-deps:
	@bash scripts/test-deps.sh

test-short:
	$(GO) test -count=1 ./internal/...

demo:
	$(GO) run ./cmd/soapgw demo

# Benchmarks report speed, bytes and allocations; they assert nothing.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 2s ./internal/...

# The link-emulator benchmark suite (issue #4; needs root for network namespaces, and
# Debian's nginx for the nginx-pair configuration). bench-smoke is what CI runs: one
# profile, one scenario, a few calls. bench-suite is the full run behind docs/benchmarks.md.
bench-smoke:
	$(GO) run ./cmd/soapgw bench --smoke --out bench-results/smoke

bench-suite:
	$(GO) run ./cmd/soapgw bench --out bench-results/full

# The issue #4 targets: sequential Stress calls on every profile, enough calls for a p99
# (gprs and 3g are bounded by the run timeout). ~15 min.
bench-targets:
	$(GO) run ./cmd/soapgw bench --profiles loopback,lan,wlan,routed-wlan,wifi-27,3g,gprs \
	  --scenarios stress --concurrency 1 --calls 300 --run-timeout 90s \
	  --configs direct,nginx-pair,soapgw/identity,soapgw/token,soapgw/auto --out bench-results/targets

# The issue #19 comparison: CPU per exchange of soapgw/auto against the nginx pair on
# loopback, HTTP/1.0 and keep-alive clients, 1 and 16 at once, interleaved. ~2 min.
bench-cpu:
	$(GO) run ./cmd/soapgw bench cpu --out bench-results/cpu

# Profile-guided optimisation. cmd/soapgw/default.pgo is a CPU profile of the gateway's
# hot paths (the token codec's models, the tunnel, the HTTP relay), merged from their
# benchmarks; `go build ./cmd/soapgw` compiles with it (inlining the range coder's steps,
# for one). Regenerate it after large changes there. Benchmarks compile the way the binary
# does with: go test -pgo=$(CURDIR)/cmd/soapgw/default.pgo ...
PGO_PKGS := ./internal/codec/xmltok ./internal/tunnel ./internal/httpwire ./internal/proxy
pgo:
	@rm -rf .pgo && mkdir -p .pgo
	@for pkg in $(PGO_PKGS); do \
	  n=$$(echo $${pkg#./} | tr / _); \
	  $(GO) test -pgo=off -run '^$$' -bench . -benchtime 300ms -cpuprofile .pgo/$$n.pprof -o .pgo/$$n.test $$pkg >/dev/null || exit 1; \
	done
	$(GO) tool pprof -proto .pgo/*.pprof > cmd/soapgw/default.pgo
	@rm -rf .pgo

# A short fuzzing pass over every fuzz target (seed corpora run in `make test` anyway).
fuzz:
	@for pkg in ./internal/tunnel/frame ./internal/tunnel ./internal/tunnel/quic ./internal/httpwire ./internal/proxy ./internal/codec ./internal/codec/xmltok; do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep ^Fuzz); do \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime 20s $$pkg || exit 1; \
	  done; \
	done

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...

clean:
	rm -rf bin
