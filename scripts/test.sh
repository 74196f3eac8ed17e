#!/usr/bin/env bash
# Every check CI runs: formatting, lints, and all tests, the integration tests against a
# real kube-apiserver and etcd built from source on first use (several minutes, once).
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for tool in cargo go; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "scripts/test.sh needs: ${missing[*]}." >&2
    echo "Install Rust (https://rustup.rs) and Go 1.26 or newer (https://go.dev/doc/install)." >&2
    exit 2
fi
for component in rustfmt clippy; do
    if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
        echo "scripts/test.sh needs the Rust component $component: rustup component add $component" >&2
        exit 2
    fi
done

step() { printf '\n==> %s\n' "$*"; }

step "formatting (cargo fmt --check)"
cargo fmt --all -- --check
cargo fmt --manifest-path fuzz/Cargo.toml -- --check

step "test binaries: kube-apiserver, etcd, csi-sanity and helm (built into ~/.cache/simplyblock-testenv on first use)"
cargo run --quiet -p simplyblock-testenv --bin testenv -- build

step "CSI driver test tools: mkfs.xfs"
if ! command -v mkfs.xfs >/dev/null 2>&1; then
    echo "The CSI driver tests format xfs volumes; installing xfsprogs (apt-get, needs root)." >&2
    { apt-get install -y xfsprogs >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y xfsprogs >/dev/null; }; } || {
        echo "Could not install xfsprogs; install it (it provides mkfs.xfs) and rerun." >&2
        exit 2
    }
fi

step "a node's programs: containerd, runc, CNI plugins, iptables, conntrack; image tools: mmdebstrap, buildah"
# testenv's one-node cluster runs them as root; scripts/build-images.sh builds the images
# it imports (no registry is reached).
node_packages=()
for pair in containerd:containerd runc:runc iptables:iptables conntrack:conntrack \
    mmdebstrap:mmdebstrap buildah:buildah; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || node_packages+=("${pair#*:}")
done
[ -x /usr/lib/cni/bridge ] || node_packages+=(containernetworking-plugins)
if [ ${#node_packages[@]} -gt 0 ]; then
    echo "installing ${node_packages[*]} (apt-get, needs root)" >&2
    { apt-get install -y "${node_packages[@]}" >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y "${node_packages[@]}" >/dev/null; }; } || {
        echo "Could not install ${node_packages[*]}; install them and rerun." >&2
        exit 2
    }
fi

step "images for the node: operator, CSI driver, pause, CoreDNS, CSI sidecars (scripts/build-images.sh)"
# The real-node tests install the chart with these, imported into the node's containerd.
scripts/build-images.sh --only operator,csi,pause,coredns,sidecars --reuse-rootfs

step "lints (cargo clippy -D warnings)"
cargo clippy --workspace --all-targets -- -D warnings

step "fuzz targets (fuzz/, its own workspace: built on stable, linted)"
if ! command -v c++ >/dev/null 2>&1; then
    echo "libFuzzer is C++; installing a C++ compiler (apt-get, needs root)." >&2
    { apt-get install -y g++ >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y g++ >/dev/null; }; } || {
        echo "Could not install g++; install a C++ compiler and rerun." >&2
        exit 2
    }
fi
# The workspace's target directory: no second copy of every dependency on disk.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo clippy --manifest-path fuzz/Cargo.toml --all-targets -- -D warnings
cargo build --manifest-path fuzz/Cargo.toml --bins

step "tests (cargo test)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --workspace --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
# The fuzz targets' properties, over generated inputs (their proptest mirrors).
cargo test --manifest-path fuzz/Cargo.toml 2>&1 | tee -a "$log"
fuzz_status=${PIPESTATUS[0]}
[ "$status" -ne 0 ] || status=$fuzz_status
set -e

step "time per test binary (seconds, slowest first)"
awk '
    # "Running unittests src/lib.rs (target/debug/deps/<crate>-<hash>)" comes before
    # the integration binaries of that crate ("Running tests/it/main.rs (.../it-<hash>)").
    /^ *Running / {
        name = $NF
        gsub(/[()]/, "", name)
        sub(/.*\//, "", name)
        sub(/-[0-9a-f]+$/, "", name)
        if ($2 == "unittests" && ($3 == "src/lib.rs" || name ~ /^simplyblock_/)) crate = name
        if ($2 == "unittests") binary = name " (unit tests)"
        else binary = crate " " name
    }
    /^ *Doc-tests / { binary = "doc-tests " $2 }
    /^test result:/ {
        for (i = 1; i <= NF; i++) {
            if ($i == "passed;") passed += $(i - 1)
            if ($i == "failed;") failed += $(i - 1)
            if ($i == "in") { t = $(i + 1); sub(/s$/, "", t) }
        }
        printf "%8.1f  %s\n", t, binary
    }
    END { printf "tests: %d passed, %d failed\n", passed, failed > "/dev/stderr" }
' "$log" 2> "$log.total" | sort -rn
cat "$log.total"
rm -f "$log.total"
exit "$status"
