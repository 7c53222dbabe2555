# make run   — build the module and start redis-server on 127.0.0.1:6379 with it (foreground)
# make test  — every test: unit, property and integration (real redis-server on loopback)
# make lint  — rustfmt and clippy, warnings are errors
# make bench — performance against INCR and Lua limiters (see README); ARGS="--url rediss://user:pass@host:port/?ca=ca.pem"
#              runs the throughput table alone against a store of yours with the module (keys bench:* only;
#              the parts that need a server of ours are named and not run; docs/performance.md)
# make bench-functions — the Functions library (FCALL, and EVALSHA as the scripts backend) against
#                        go-redis/redis_rate's allowN script, on a server without the module (docs/functions.md);
#                        ARGS="--url URL": the throughput against a store of yours (no callgrind)
# make bench-client — the gateway client's added latency: healthy, leased, stalled, in flight at a freeze, OOM, the billing journal, a token gateway (docs/client.md); then TLS against plaintext side by side (ARGS="--url URL": a store of yours)
# make bench-regions — the budget controller on three regions: utilization, over-issue, convergence,
#                      CPU at 100,000 keys; writes docs/regions.svg (docs/regions.md). No --url: it runs
#                      three servers of its own, with proxies on the links and the module's debug clock
# make bench-rls — the Envoy Rate Limit Service against a raw RL.ALL, over TLS beside plaintext, and
#                  frozen (docs/envoy.md); ARGS="--url rediss://user:pass@host:port/?ca=ca.pem" against a store of yours
# make bench-login — the login guard under stuffing, spraying, a targeted lockout and a slow brute
#                    force beside legitimate users, on the debug clock (docs/login.md; ARGS="--scale 10");
#                    no --url: the debug clock is not a store's, so it starts its own server
# make dist  — a .deb and a tarball for x86_64 Linux in target/dist (module, Functions library, RLS,
#              regions controller, systemd units; docs/operating.md "The package")
# make test-dist — builds the package from the debug build and checks it: contents, control,
#                  conffiles; the module and both services run from an extracted root
# make bench-shed — the load shedder against none and tower's static limits under Poisson load
#                   (~2 minutes); prints docs/performance.md's table and writes docs/shed.svg
# make test-servers — the integration tests against each server built from ../shared/servers
#                     (SERVERS="redis-7.2.6 ..." picks some; TESTS="--test NAME" some tests)
.PHONY: deps build release run test lint bench bench-functions bench-client bench-regions bench-rls bench-login test-servers dist test-dist bench-shed

deps:
	@scripts/install-deps

build: deps
	cargo build

release: deps
	cargo build --release

run: release
	scripts/dev-server $(ARGS)

# The integration tests load target/debug/libredis_ratelimit.so, which `cargo test` alone does
# not rebuild: build it first. --workspace runs the client's tests (client/) too; a TESTS="--test
# NAME" runs that suite of whichever package has it.
test: build
	cargo test --workspace $(TESTS)

lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings

bench: release
	scripts/bench $(ARGS)

bench-functions: deps
	scripts/bench functions $(ARGS)

bench-client: release
	cargo run --release -p redis-ratelimit-client --example bench
	cargo run --release -p redis-ratelimit-client --example tls_bench -- $(ARGS)

# Refused before anything is built: nothing in this bench could use the URL.
ifneq ($(and $(filter bench-regions,$(MAKECMDGOALS)),$(findstring --url,$(ARGS))),)
$(error bench-regions: --url: the bench runs three regions of its own (a redis-server each with the module's debug clock, proxies adding 20 ms on the controller's links); it cannot measure a store of yours)
endif
bench-regions: release
	RL_MODULE=$(CURDIR)/target/release/libredis_ratelimit.so cargo test --release -p redis-ratelimit-regions --test bench -- --ignored --nocapture

bench-rls: release
	cargo run --release -p redis-ratelimit-rls --example rls_bench $(ARGS)

bench-login: release
	cargo run --release -p redis-ratelimit-client --example login_bench -- $(ARGS)

bench-shed:
	cargo run --release -p redis-ratelimit-shed --example bench_shed

# Builds each server source once (cached in ~/.cache/redis-ratelimit/servers) and runs the
# integration tests with it first on PATH; see scripts/test-servers.
test-servers: build
	scripts/test-servers $(SERVERS)

dist: deps
	scripts/dist

test-dist: build
	scripts/test-dist
