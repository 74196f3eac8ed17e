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

step "test binaries: kube-apiserver, etcd, csi-sanity, helm, promtool and kubectl (built into ~/.cache/simplyblock-testenv on first use)"
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

step "tests: every test binary, the longest first"
# SIMPLYBLOCK_TEST_JOBS binaries at once (one by default: on two cores, binaries side by
# side saturate the CPU and the crash and stream tests' timing with it); each runs
# RUST_TEST_THREADS tests at once, four unless set: an integration test spends most of its
# time waiting on an API server or the simulated control plane, and twice the cores of
# tests at once take about two thirds of the time that one a core takes. The real-node
# tests take turns on their own (a machine-wide lock).
jobs=${SIMPLYBLOCK_TEST_JOBS:-1}
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-4}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
cargo test --workspace --no-run --message-format=json-render-diagnostics > "$logs/build.json"
# One line a test binary: its crate directory, a name a person reads, its path.
# A test harness's profile says `"test":true` (a binary built for the integration tests
# to run is an artifact too, and is not run here).
sed -n '/"reason":"compiler-artifact"/{/"overflow_checks":[a-z]*,"test":true}/p}' "$logs/build.json" | while read -r line; do
    exe=$(sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' <<< "$line")
    [ -n "$exe" ] || continue
    dir=$(dirname "$(sed -n 's/.*"manifest_path":"\([^"]*\)".*/\1/p' <<< "$line")")
    kind=$(sed -n 's/.*"target":{"kind":\["\([^"]*\)".*/\1/p' <<< "$line")
    target=$(sed -n 's/.*"target":{[^}]*"name":"\([^"]*\)".*/\1/p' <<< "$line")
    case $kind in
        test) label="$(basename "$dir") $target" ;;
        *) label="$(basename "$dir") ($kind $target)" ;;
    esac
    printf '%s\t%s\t%s\n' "$dir" "$label" "$exe"
done > "$logs/binaries"
# The longest first, by the times of the last run (kept in the target directory); on a
# first run, by what they took on two cores, then integration binaries before unit tests.
times=target/test-times.tsv
while IFS=$'\t' read -r dir label exe; do
    last=$( (awk -F'\t' -v l="$label" '$2 == l { print $1; exit }' "$times" 2>/dev/null) || true)
    case $label in
        "operator it") guess=500 ;;
        "demo it") guess=120 ;;
        "upgrade it") guess=70 ;;
        "testenv it" | "operator node") guess=50 ;;
        *" ("*) guess=1 ;;
        *) guess=10 ;;
    esac
    printf '%s\t%s\t%s\t%s\n' "${last:-$guess}" "$dir" "$label" "$exe"
done < "$logs/binaries" | sort -t$'\t' -k1,1 -rn > "$logs/queue"

set +e
status=0
declare -A running=()
report() { # the finished binary $1: its output, its time, its status
    local id=$1
    printf '\n==> %s (%s s)\n' "$(cut -f3 "$logs/$id.what")" "$(cat "$logs/$id.seconds")"
    cat "$logs/$id.log"
    [ "$(cat "$logs/$id.rc")" = 0 ] || status=1
}
n=0
while IFS=$'\t' read -r _ dir label exe; do
    while [ ${#running[@]} -ge "$jobs" ]; do
        wait -n
        for id in "${!running[@]}"; do
            if [ -e "$logs/$id.rc" ]; then report "$id"; unset "running[$id]"; fi
        done
    done
    n=$((n + 1))
    printf '%s\t%s\t%s\n' "$dir" "$exe" "$label" > "$logs/$n.what"
    (
        start=$(date +%s.%N)
        cd "$dir" && CARGO_MANIFEST_DIR="$dir" "$exe" > "$logs/$n.log" 2>&1
        rc=$?
        awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }' > "$logs/$n.seconds"
        echo "$rc" > "$logs/$n.rc"
    ) &
    running[$n]=1
done < "$logs/queue"
while [ ${#running[@]} -gt 0 ]; do
    wait -n
    for id in "${!running[@]}"; do
        if [ -e "$logs/$id.rc" ]; then report "$id"; unset "running[$id]"; fi
    done
done
# Doc tests and the fuzz targets' properties (their proptest mirrors, own workspace).
cargo test --workspace --doc 2>&1 | tail -n 3
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
cargo test --manifest-path fuzz/Cargo.toml 2>&1 | tee "$logs/fuzz.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
set -e

step "time per test binary (seconds, slowest first)"
for id in $(seq 1 "$n"); do
    printf '%s\t%s\n' "$(cat "$logs/$id.seconds")" "$(cut -f3 "$logs/$id.what")"
done | sort -t$'\t' -k1,1 -rn | tee "$times.new" | awk -F'\t' '{ printf "%8.1f  %s\n", $1, $2 }'
mv "$times.new" "$times"
cat "$logs"/*.log "$logs/fuzz.log" | awk '
    /^test result:/ {
        for (i = 1; i <= NF; i++) {
            if ($i == "passed;") passed += $(i - 1)
            if ($i == "failed;") failed += $(i - 1)
        }
    }
    END { printf "tests: %d passed, %d failed\n", passed, failed }
'
exit "$status"
