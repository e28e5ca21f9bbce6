#!/usr/bin/env bash
# Build the veriloco contract reproducibly with Debian's Rust toolchain.
#
#   contracts/build.sh           build, then copy to contracts/artifacts/veriloco.wasm (+ .sha256)
#   contracts/build.sh --check   rebuild from a copy of the sources in a temporary directory and
#                                fail unless the bytes equal the committed artifact
#
# No crates.io and no rustup: Debian's rustc 1.63 / cargo 1.65 and the crates Debian packages in
# /usr/share/cargo/registry (see contracts/.cargo/config.toml). The bytes must not depend on where
# the repository is checked out, so every absolute path the compiler could embed (panic locations)
# is remapped to a fixed name, and Cargo.lock is used as committed (--locked).
#
# The linked wasm then goes through binaryen's wasm-opt (Debian's binaryen 108) with pinned flags:
# -Oz, MVP features only. rustc 1.63 emits no post-MVP feature and cosmwasm-vm refuses several
# (bulk memory, ...), so wasm-opt may not introduce one either. It saves ~14 % of the bytes, which
# is what keeps the contract under wasmd's 800 KiB upload limit.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"    # the contracts/ directory
artifact_dir="$here/artifacts"
artifact="$artifact_dir/veriloco.wasm"
wasm_rel="wasm32-unknown-unknown/release/veriloco.wasm"
registry=/usr/share/cargo/registry
wasm_opt=/usr/bin/wasm-opt
# Another binaryen version optimizes differently, so the bytes would not reproduce: refuse it.
wasm_opt_version="wasm-opt version 108"
wasm_opt_flags=(-Oz --mvp-features)

mode=build
case "${1:-}" in
    "") ;;
    --check) mode=check ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

ensure_toolchain() {
    # lld-14 provides /usr/bin/rust-lld, the wasm linker; libstd-rust-dev-wasm32 only recommends it,
    # and --no-install-recommends would leave a dangling link.
    local pkgs=(cargo rustc libstd-rust-dev-wasm32 lld-14 librust-serde-dev librust-serde-derive-dev
                librust-serde-json-dev librust-sha2-dev librust-num-bigint-dev binaryen)
    local missing=() p
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
        echo "build.sh: installing Debian packages: ${missing[*]}" >&2
        local sudo=""
        [[ $(id -u) -eq 0 ]] || sudo=sudo
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
    fi
}

# build_in SRC TARGET: build the workspace at SRC (a contracts/ directory) into TARGET.
build_in() {
    local src="$1" target="$2"
    local cargo_home="${CARGO_HOME:-$HOME/.cargo}"
    # Only our flags: a RUSTFLAGS from the caller's environment would change the bytes.
    unset CARGO_ENCODED_RUSTFLAGS CARGO_BUILD_RUSTFLAGS \
          CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS CARGO_BUILD_TARGET_DIR
    local flags=(
        "--remap-path-prefix=$src=/veriloco/contracts"
        "--remap-path-prefix=$target=/veriloco/target"
        "--remap-path-prefix=$registry=/cargo/registry"
        "--remap-path-prefix=$cargo_home=/cargo/home"
    )
    # .cargo/config.toml is found from the working directory, so build from inside SRC.
    (cd "$src" && RUSTC=/usr/bin/rustc RUSTFLAGS="${flags[*]}" CARGO_TARGET_DIR="$target" \
        /usr/bin/cargo build --release --target wasm32-unknown-unknown --offline --locked --quiet)
}

# check_wasm_opt: refuse another binaryen version before minutes of cargo, not after.
check_wasm_opt() {
    local version
    version="$("$wasm_opt" --version)"
    if [[ $version != "$wasm_opt_version" ]]; then
        echo "build.sh: $wasm_opt reports '$version', the build needs '$wasm_opt_version'" \
             "(Debian bookworm's binaryen 108-1)" >&2
        exit 1
    fi
}

# optimize IN OUT: binaryen's post-link size optimization, flags and version pinned.
optimize() {
    check_wasm_opt
    # BINARYEN_PASS_DEBUG would add validation passes (and slow it down); keep the environment out.
    env -u BINARYEN_PASS_DEBUG "$wasm_opt" "${wasm_opt_flags[@]}" "$1" -o "$2"
}

ensure_toolchain
check_wasm_opt

if [[ $mode == build ]]; then
    build_in "$here" "$here/target"
    mkdir -p "$artifact_dir"
    optimize "$here/target/$wasm_rel" "$artifact"
    (cd "$artifact_dir" && sha256sum veriloco.wasm > veriloco.wasm.sha256)
    echo "built $artifact ($(stat -c %s "$artifact") bytes, sha256 $(cut -d' ' -f1 "$artifact.sha256"))"
    exit 0
fi

# --check: a fresh build from a copy elsewhere must reproduce the committed bytes exactly.
[[ -f "$artifact" ]] || { echo "build.sh --check: no committed artifact at $artifact" >&2; exit 1; }
(cd "$artifact_dir" && sha256sum --check --quiet veriloco.wasm.sha256) \
    || { echo "build.sh --check: veriloco.wasm.sha256 does not match veriloco.wasm" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/contracts"
# The sources only: no target/, no artifacts/.
tar -C "$here" --exclude=./target --exclude=./artifacts -cf - . | tar -C "$tmp/contracts" -xf -
build_in "$tmp/contracts" "$tmp/target"
rebuilt="$tmp/veriloco.wasm"
optimize "$tmp/target/$wasm_rel" "$rebuilt"
if cmp -s "$rebuilt" "$artifact"; then
    echo "reproducible: rebuilt veriloco.wasm is identical to the committed artifact ($(cut -d' ' -f1 "$artifact.sha256"))"
else
    echo "build.sh --check: rebuilt wasm differs from contracts/artifacts/veriloco.wasm" >&2
    echo "  committed: $(sha256sum < "$artifact" | cut -d' ' -f1)" >&2
    echo "  rebuilt:   $(sha256sum < "$rebuilt" | cut -d' ' -f1)" >&2
    echo "  run contracts/build.sh and commit the artifact together with the source change" >&2
    exit 1
fi
