# The two commands of the README: `make demo` and `make test`. Both install what they need.
SHELL := /bin/bash
CARGO := PATH="$$HOME/.cargo/bin:$$PATH" cargo

.PHONY: setup build demo test lint fuzz install wheel klauspost

setup:
	@bash scripts/setup.sh

# The released build: the eckpt binary without fault injection (no `eckpt debug`, no
# `eckpt run --kill-at`, no pause points in the daemons), which is the default build.
build: setup
	$(CARGO) build --release --workspace
	@$(MAKE) --no-print-directory klauspost || echo "make: the klauspost harness did not build; eckpt bench codec runs without it"

# The klauspost/reedsolomon harness that `eckpt bench codec` compares the codec with
# (bench/klauspost), built to target/klauspost-bench where the benchmark finds it. Needs Go;
# skipped when there is none (make test does not need it).
GO ?= $(shell command -v go 2>/dev/null || { test -x /usr/local/go/bin/go && echo /usr/local/go/bin/go; })
klauspost:
	@if [ -z "$(GO)" ]; then echo "make klauspost: skipped, no Go toolchain (go) installed"; exit 0; fi; \
	  mkdir -p target; \
	  echo "cd bench/klauspost && $(GO) build -o ../../target/klauspost-bench ."; \
	  cd bench/klauspost && $(GO) build -o ../../target/klauspost-bench .

# The demo build has fault injection: the demo kills nodes with `eckpt run --kill-at`.
demo: setup
	$(CARGO) build --release --workspace --features eckpt/fault-injection
	bash scripts/demo.sh

# The eckpt command (the released build, as `make build` builds it: no fault injection; built
# by scripts/released-eckpt.sh, which leaves target/release/eckpt as it was), the C and Fortran
# library, its header, the Fortran module's source, pkg-config and CMake files, man pages and
# shell completions under $(DESTDIR)$(PREFIX), stripped (scripts/install.sh).
PREFIX ?= /usr/local
install: setup
	$(CARGO) build --release -p eckpt-client
	DESTDIR="$(DESTDIR)" bash scripts/install.sh "$(PREFIX)"

# The Python wheel, in target/wheels/ (scripts/wheel.sh): pip install target/wheels/eckpt-*.whl
wheel: setup
	bash scripts/wheel.sh

# Every test; the system ISA-L comparison must run, not skip. With fault injection, which the
# tests that pause daemons or kill nodes require (crates/cli/Cargo.toml: required-features): it
# also leaves target/release/eckpt built with it for the Python tests' `eckpt run --kill-at`.
# Clippy checks both builds: the test build (every target) and the product.
test: setup
	ECKPT_REQUIRE_SYSTEM_ISAL=1 $(CARGO) test --release --workspace --features eckpt/fault-injection
	bash scripts/python-test.sh
	bash scripts/install-test.sh
	$(CARGO) fmt --all --check
	$(CARGO) clippy --release --workspace --all-targets --features eckpt/fault-injection -- -D warnings
	$(CARGO) clippy --release -p eckpt -- -D warnings

# Coverage-guided fuzzing of the untrusted-input parsers (needs nightly and cargo-fuzz). Each
# target grows its corpus in fuzz/corpus/<target>/ (kept in git: `make test` replays it); an
# input that crashes a target is written to fuzz/artifacts/ — fix the parser, then copy the
# input into the target's corpus so that it stays a regression test.
FUZZ_SECONDS ?= 60
fuzz:
	command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	cd fuzz && for t in $$($(CARGO) +nightly fuzz list); do \
	  $(CARGO) +nightly fuzz run -O $$t -- -max_total_time=$(FUZZ_SECONDS) || exit 1; done
