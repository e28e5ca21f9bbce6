# The two entry points of the README. Everything they need is installed here, so a fresh
# machine (and CI, through .ci/run) gets the same result.

PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: simulate test install install-dev toolchain browser clean

# torch: the pinned release in the build TORCH names, installed first from PyTorch's index for that
# build: `cpu` (the default) or a CUDA build on a GPU host (`make simulate TORCH=cu128`; cu126,
# cu128, cu130 … as PyTorch publishes them for this release). The requirement names the build
# (`torch==2.13.0+cu128`), so a CUDA install never settles for the CPU wheel and a CPU install never
# pulls CUDA (tests/test_torch_install.py resolves both with `pip install --dry-run --report`).
# TORCH_INDEX may point at a mirror; pip's own configuration (find-links, extra indexes) also applies.
TORCH_VERSION = 2.13.0
TORCH        ?= cpu
TORCH_INDEX  ?= https://download.pytorch.org/whl/$(TORCH)
TORCH_REQ     = torch==$(TORCH_VERSION)+$(TORCH)
STAMP         = $(if $(filter cpu,$(TORCH)),,-$(TORCH))

# A stamp per extras set and torch build, so `make test` after `make simulate` still installs the
# dev extras and `make … TORCH=cu128` after a CPU install replaces torch.
$(VENV)/.installed-base$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --no-deps --retries 1 --extra-index-url $(TORCH_INDEX) '$(TORCH_REQ)'
	# `torch==2.13.0` in pyproject.toml is met by the build above; nothing else may pull another torch.
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev$(STAMP): pyproject.toml $(VENV)/.installed-base$(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,devnet]'
	touch $@

install: $(VENV)/.installed-base$(STAMP)
install-dev: $(VENV)/.installed-dev$(STAMP)

# The torch requirement and index `install` uses (for scripts and tests): `make -s torch-requirement`.
.PHONY: torch-requirement
torch-requirement:
	@echo '$(TORCH_REQ) $(TORCH_INDEX)'

# Debian's Rust toolchain for rebuilding the contract (the reproducibility test needs it). lld-14 is
# the wasm linker (/usr/bin/rust-lld), which libstd-rust-dev-wasm32 only recommends; binaryen's
# wasm-opt shrinks the linked wasm (contracts/build.sh); rustfmt and rust-clippy check the sources.
RUST_PKGS = cargo rustc libstd-rust-dev-wasm32 lld-14 binaryen rustfmt rust-clippy librust-serde-dev \
            librust-serde-derive-dev librust-serde-json-dev librust-sha2-dev librust-num-bigint-dev
toolchain:
	@missing=$$(for p in $(RUST_PKGS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null \
	    | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	    sudo=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# Debian's Chromium: the dashboard's tests drive it headless (tests/veriloco/headless_chromium.py).
BROWSER_PKGS = chromium
browser:
	@missing=$$(for p in $(BROWSER_PKGS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null \
	    | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	    sudo=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends $$missing; \
	fi

simulate: install
	$(BIN)/veriloco simulate

# Devnet tests must run, not skip, and 100 ms blocks keep the devnet suites short; passive OpenMP
# threads keep the many processes of the end-to-end tests from starving each other. The `ci`
# hypothesis profile is the thorough property run (tests/conftest.py); a bare pytest runs `dev`.
# Two pytest-xdist workers on two cores (`-n auto`), each module whole on one worker, handed out in
# tests/conftest.py's order (own-devnet modules, session-devnet modules, other slow modules, the
# rest; --no-loadscope-reorder keeps it); a worker that meets a devnet test starts its own session
# devnet and stops it once no later test can use it. The 20 slowest tests are listed at the
# end so the suite's length stays visible in CI.
test: install-dev toolchain browser
	OMP_WAIT_POLICY=PASSIVE VERILOCO_REQUIRE_DEVNET=1 VERILOCO_REQUIRE_BROWSER=1 VERILOCO_DEVNET_BLOCK_TIME=100ms $(BIN)/python -m pytest --hypothesis-profile=ci -n auto --dist loadfile --no-loadscope-reorder --durations=20

# Static checks of the Python code, configured in pyproject.toml: ruff (lint rules and import
# order) over every package, the benchmarks and the tests, and mypy over every package and the
# benchmarks. `make test` runs them first; a cold mypy takes about 15 s of CPU, a warm one under
# a second.
.PHONY: lint
lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/mypy
test: lint

# Static checks of the contract with Debian's toolchain: rustfmt, and clippy on the native target
# (the tests included) and on wasm32 (abi.rs). Cargo looks for its `fmt`/`clippy` subcommands in
# ~/.cargo/bin first, where a rustup toolchain may sit, so the Debian binaries are called by path.
.PHONY: lint-contract
CONTRACT_LINT_ENV = cd contracts && PATH=/usr/bin:/bin RUSTC=/usr/bin/rustc RUSTFMT=/usr/bin/rustfmt \
                    CARGO=/usr/bin/cargo CARGO_TARGET_DIR=target/lint
lint-contract: toolchain
	$(CONTRACT_LINT_ENV) /usr/bin/cargo-fmt fmt --check
	$(CONTRACT_LINT_ENV) /usr/bin/cargo-clippy clippy --offline --locked --all-targets -- -D warnings
	$(CONTRACT_LINT_ENV) /usr/bin/cargo-clippy clippy --offline --locked --target wasm32-unknown-unknown -- -D warnings
test: lint-contract

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache
