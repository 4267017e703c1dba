#!/usr/bin/env bash
# Runs every test Warden has, installing what it needs on a fresh Debian machine:
#  1. unit, property and golden-frame tests (cargo test --workspace),
#  2. clippy and rustfmt checks, and that only src/runtime/alloc.rs allows unsafe code,
#  3. the black-box compat suite: zkCli, kazoo, Curator, the C client and a differential
#     run against Apache ZooKeeper 3.8, all against a real Warden process (compat-tests/).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# Debian packages first: the `kerberos` feature builds against the system's MIT Kerberos
# (libkrb5-dev, libclang for bindgen), and the compat suite needs the rest.
if [[ $(id -u) -eq 0 ]]; then
    bash compat-tests/install.sh
fi
# Tests run the Kerberos build (GSSAPI for clients) with the nemesis suite's crash points
# (inert unless FAILPOINTS is set); the default build is checked too.
FEATURES=(--features warden/kerberos,warden/failpoints)
cargo build --workspace --all-targets "${FEATURES[@]}"
cargo test --workspace "${FEATURES[@]}"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy --workspace --all-targets "${FEATURES[@]}" -- -D warnings
# The lint is `deny`, not `forbid`, so that the global allocator (src/runtime/alloc.rs) may allow it;
# no other file may.
if grep -rln 'allow(unsafe_code)' --include='*.rs' src jute/src benches examples bench/warden-bench/src | grep -vx 'src/runtime/alloc.rs'; then
    echo "run-tests.sh: unsafe code allowed outside src/runtime/alloc.rs" >&2
    exit 1
fi
WARDEN_BIN="$PWD/target/debug/warden" COMPAT_SKIP_INSTALL=1 bash compat-tests/run.sh
