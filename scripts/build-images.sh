#!/usr/bin/env bash
# Builds the operator and CSI driver container images without a container engine or a
# registry: the base filesystems come from Debian bookworm's packages (mmdebstrap), buildah
# (vfs storage, chroot isolation) assembles and commits them, and each image is checked by
# running its binaries inside it before it is written out as an OCI archive. For a cluster
# with no registry (testenv's node), it builds the same way the CSI sidecars the
# SimplyblockDriver renders, from their Go modules, and the pods' sandbox (pause) image.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
    cat <<'EOF'
Usage: scripts/build-images.sh [--out DIR] [--only NAME[,NAME...]] [--skip-build] [--reuse-rootfs]

Builds quay.io/simplyblock-io/simplyblock-operator:<version> and
quay.io/simplyblock-io/simplyblock-csi:<version> (<version> is the workspace version) and
writes each as an OCI archive, <name>-<version>.oci.tar, into the output directory.
With --only, also the images a cluster without a registry needs: pause (the pods' sandbox,
registry.k8s.io/pause, a static busybox that sleeps), coredns (the cluster's DNS, built by
testenv from its Go module) and sidecars (the CSI sidecars this
machine's Go module proxy serves at the versions the SimplyblockDriver renders, built by
testenv into its cache; `cargo run -p simplyblock-testenv --bin testenv -- sidecars` lists
them).

  --out DIR        output directory (default: $IMAGES_OUT, else target/images)
  --only NAMES     build these images only: operator, csi, pause, coredns, sidecars
                   (comma-separated)
  --skip-build     use the release binaries already built (no cargo build)
  --reuse-rootfs   reuse the base filesystems of an earlier run in DIR/rootfs
  -h, --help       this text

Needs root, buildah and mmdebstrap (installed with apt-get when missing), and a Debian
mirror. The binaries come from `cargo build --release --locked` (CARGO_TARGET_DIR is
honoured). DEBIAN_MIRROR and DEBIAN_SECURITY_MIRROR override the package mirrors;
SOURCE_DATE_EPOCH (default: the commit time of HEAD) sets the images' timestamps.
Load an archive elsewhere with `skopeo copy oci-archive:FILE docker://REF` or
`podman load -i FILE`.
EOF
}

die() {
    echo "build-images: $*" >&2
    exit 1
}

out=${IMAGES_OUT:-target/images}
only=""
skip_build=false
reuse_rootfs=false
while [ $# -gt 0 ]; do
    case "$1" in
        --out) [ $# -ge 2 ] || die "--out needs a directory"; out=$2; shift 2 ;;
        --out=*) out=${1#--out=}; shift ;;
        --only) [ $# -ge 2 ] || die "--only needs image names"; only=$2; shift 2 ;;
        --only=*) only=${1#--only=}; shift ;;
        --skip-build) skip_build=true; shift ;;
        --reuse-rootfs) reuse_rootfs=true; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done
images=()
IFS=, read -r -a requested <<<"${only:-operator,csi}"
for image in "${requested[@]}"; do
    case "$image" in
        operator | csi | pause | coredns | sidecars) images+=("$image") ;;
        *) die "--only takes operator, csi, pause, coredns or sidecars, not '$image'" ;;
    esac
done
rust_images=()
for image in "${images[@]}"; do
    case "$image" in operator | csi) rust_images+=("$image") ;; esac
done
# The OCI archive transport splits its argument at the first colon.
case "$out" in *:*) die "the output directory may not contain ':' ($out)" ;; esac

[ "$(id -u)" -eq 0 ] || die "needs root: mmdebstrap and buildah mount file systems and set file owners"

missing=()
for tool in buildah mmdebstrap; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "build-images: installing ${missing[*]} (apt-get)" >&2
    { apt-get install -y "${missing[@]}" >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y "${missing[@]}" >/dev/null; }; } \
        || die "could not install ${missing[*]}; install them (Debian bookworm or newer) and rerun"
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
work="$out/work"
mkdir -p "$work" "$out/rootfs"

revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
debian_mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

# buildah's storage lives in the output directory, so no system configuration is read or
# changed, and vfs and chroot need neither overlayfs nor user namespaces.
export BUILDAH_ISOLATION=chroot STORAGE_DRIVER=vfs
bah() {
    buildah --root "$out/storage" --runroot "$work/run" --storage-driver vfs "$@"
}

# `cargo pkgid` ends in `#<version>` or `#<name>@<version>`.
crate_version() {
    local id
    id=$(cargo pkgid -p "$1")
    echo "${id##*[@#]}"
}

# The pattern the storage.simplyblock.io API enforces on image references.
image_pattern='^(quay\.io/simplyblock-io|docker\.io/simplyblock|public\.ecr\.aws/simply-block)/[a-z0-9][a-z0-9._-]*:[a-zA-Z0-9][a-zA-Z0-9._-]*(@sha256:[a-f0-9]{64})?$'
repository="https://github.com/simplyblock/simplyblock-rs"

target_dir=${CARGO_TARGET_DIR:-target}
if ! $skip_build && [ ${#rust_images[@]} -gt 0 ]; then
    build_args=()
    for image in "${rust_images[@]}"; do
        build_args+=(-p "simplyblock-$image" --bin "simplyblock-$image")
        # The operator image also carries the upgrade from the Go operator.
        if [ "$image" = operator ]; then
            build_args+=(-p simplyblock-upgrade --bin simplyblock-upgrade)
        fi
    done
    echo "==> cargo build --release --locked ${build_args[*]}"
    cargo build --release --locked "${build_args[@]}"
fi
for binary in "${rust_images[@]/#/simplyblock-}"; do
    [ -x "$target_dir/release/$binary" ] \
        || die "no $target_dir/release/$binary; build it or drop --skip-build"
done
case " ${rust_images[*]} " in
    *" operator "*) [ -x "$target_dir/release/simplyblock-upgrade" ] \
        || die "no $target_dir/release/simplyblock-upgrade; build it or drop --skip-build" ;;
esac

# Exported only now: the cc crate's build scripts rerun when it changes, so cargo would
# rebuild them (ring among others) here and again in the next ordinary build.
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}"

# Left-over containers of an interrupted run would hold their names; ours go on exit too.
containers=()
cleanup() {
    local c
    for c in "${containers[@]}"; do
        bah rm "$c" >/dev/null 2>&1 || true
    done
}
trap cleanup EXIT
new_container() { # name, image
    bah rm "$1" >/dev/null 2>&1 || true
    containers+=("$1")
    bah from --quiet --pull=never --name "$1" "$2" >/dev/null
}

mirrors=(
    "deb $debian_mirror bookworm main"
    "deb $debian_mirror bookworm-updates main"
    "deb $security_mirror bookworm-security main"
)
# Documentation, manuals and translations are not read in a container; copyrights stay.
trim=(
    --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/man/*'
    --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/locale/*'
    --dpkgopt='path-exclude=/usr/share/lintian/*'
)

# The operator image: the packages are only unpacked (no shell, no dpkg, no apt), so their
# dpkg records are written from the downloaded packages, for image scanners. gconv (iconv
# modules) is glibc's largest part and a Rust program never loads it.
rootfs_operator() {
    # shellcheck disable=SC2016 # "$1" is the hook's argument, expanded by mmdebstrap's shell
    mmdebstrap --quiet --variant=extract \
        --include=base-files,libc6,libgcc-s1,ca-certificates \
        "${trim[@]}" --dpkgopt='path-exclude=/usr/lib/*/gconv/*' \
        --extract-hook='for deb in "$1"/var/cache/apt/archives/*.deb; do
                dpkg-deb --field "$deb"; printf "Status: install ok unpacked\n\n"
            done > "$1/var/lib/dpkg/status"' \
        --format=tar bookworm "$1" "${mirrors[@]}"
}

# The CSI image: what the node plugin executes (mkfs, blkid, mount, resize2fs, xfs_growfs,
# losetup, nvme), installed and configured on the Essential set; no apt.
rootfs_csi() {
    mmdebstrap --quiet --variant=essential \
        --include=ca-certificates,e2fsprogs,xfsprogs,util-linux,mount,nvme-cli \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        "${trim[@]}" \
        --format=tar bookworm "$1" "${mirrors[@]}"
}

# What an unpacked-only tree lacks: the CA bundle (update-ca-certificates makes it on
# configure, and concatenates the same files), users, and a name-service order.
customize_operator() {
    local root=$1 crt
    mkdir -p "$root/etc/ssl/certs"
    find "$root/usr/share/ca-certificates" -name '*.crt' | LC_ALL=C sort | while read -r crt; do
        awk 1 "$crt"
    done >"$root/etc/ssl/certs/ca-certificates.crt"
    [ -s "$root/etc/ssl/certs/ca-certificates.crt" ] || die "empty CA bundle"
    printf '%s\n' 'root:x:0:0:root:/root:/usr/sbin/nologin' \
        'nonroot:x:65532:65532:nonroot:/home/nonroot:/usr/sbin/nologin' >"$root/etc/passwd"
    printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' >"$root/etc/group"
    printf '%s\n' 'hosts: files dns' >"$root/etc/nsswitch.conf"
    install -d -m 0700 -o 65532 -g 65532 "$root/home/nonroot"
    install -d -m 0700 "$root/root"
    # Nothing in this image installs packages.
    rm -rf "$root/etc/apt" "$root/var/cache/apt" "$root/var/lib/apt" "$root/var/log/apt"
}
customize_csi() { :; }

# The static images' base: what a static Go program or busybox needs (CA bundle, users,
# time zones), unpacked only, like the operator's.
rootfs_static() {
    # shellcheck disable=SC2016 # "$1" is the hook's argument, expanded by mmdebstrap's shell
    mmdebstrap --quiet --variant=extract \
        --include=base-files,ca-certificates,tzdata,busybox-static \
        "${trim[@]}" \
        --extract-hook='for deb in "$1"/var/cache/apt/archives/*.deb; do
                dpkg-deb --field "$deb"; printf "Status: install ok unpacked\n\n"
            done > "$1/var/lib/dpkg/status"' \
        --format=tar bookworm "$1" "${mirrors[@]}"
}
customize_static() { customize_operator "$1"; }

# Runs a command in the check container (as the image's user), showing its output on failure.
run_in() {
    local output
    if ! output=$(bah run "$check" -- "$@" 2>&1); then
        echo "$output" >&2
        die "$name: '$*' failed inside the image"
    fi
}

# The base filesystem of a kind (operator, csi, static), made once per run.
base_rootfs() {
    local kind=$1 rootfs="$out/rootfs/$1.tar"
    if { $reuse_rootfs || [ -n "${made_rootfs[$kind]:-}" ]; } && [ -s "$rootfs" ]; then
        echo "==> reusing the $kind base filesystem ($rootfs)" >&2
    else
        echo "==> the $kind base filesystem (mmdebstrap, bookworm)" >&2
        rm -f "$rootfs"
        if ! "rootfs_$kind" "$rootfs.part" >"$work/$kind-mmdebstrap.log" 2>&1; then
            tail -n 40 "$work/$kind-mmdebstrap.log" >&2
            die "the $kind base filesystem: mmdebstrap failed (log: $work/$kind-mmdebstrap.log)"
        fi
        mv "$rootfs.part" "$rootfs"
    fi
    made_rootfs[$kind]=1
    echo "$rootfs"
}
declare -A made_rootfs=()

summary=()
# build_image NAME REF KIND TITLE USER ENTRYPOINT-JSON [SOURCE DEST]...: the base
# filesystem of KIND, each SOURCE file installed at DEST, committed as REF and written out
# as <name>-<tag>.oci.tar.
build_image() {
    local name=$1 ref=$2 kind=$3 image_title=$4 user=$5 entrypoint=$6
    shift 6
    local rootfs ctr mnt version=${ref##*:}
    rootfs=$(base_rootfs "$kind")

    echo "==> $name: assembling $ref"
    ctr="$name-build"
    new_container "$ctr" scratch
    mnt=$(bah mount "$ctr")
    # Device nodes belong to the runtime's /dev, not to a layer.
    tar -C "$mnt" --numeric-owner --xattrs --xattrs-include='*' --exclude='./dev/*' \
        -xpf "$rootfs"
    # mmdebstrap copies the build host's; the runtime provides both.
    : >"$mnt/etc/resolv.conf"
    : >"$mnt/etc/hostname"
    chmod 0644 "$mnt/etc/resolv.conf" "$mnt/etc/hostname"
    "customize_$kind" "$mnt"
    while [ $# -ge 2 ]; do
        install -D -m 0755 "$1" "$mnt$2"
        shift 2
    done
    bah umount "$ctr" >/dev/null

    bah config \
        --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --entrypoint "$entrypoint" \
        --user "$user" \
        --label "org.opencontainers.image.title=$image_title" \
        --label "org.opencontainers.image.version=$version" \
        --label "org.opencontainers.image.source=$repository" \
        --label "org.opencontainers.image.revision=$revision" \
        "${extra_config[@]}" \
        "$ctr"
    bah rmi --force "$ref" >/dev/null 2>&1 || true
    bah commit --quiet --format oci --timestamp "$SOURCE_DATE_EPOCH" "$ctr" "$ref" >/dev/null
    bah rm "$ctr" >/dev/null

    check="$name-check"
    new_container "$check" "$ref"
}

# Writes the image checked last out as an OCI archive.
write_archive() {
    local name=$1 ref=$2 archive digest size
    bah rm "$check" >/dev/null
    archive="$out/$name-${ref##*:}.oci.tar"
    rm -f "$archive"
    bah push --quiet --format oci --digestfile "$work/$name.digest" "$ref" \
        "oci-archive:$archive:$ref"
    digest=$(cat "$work/$name.digest")
    size=$(bah images --noheading --format '{{.Size}}' "$ref")
    summary+=("$ref $digest $size (archive $(du -h "$archive" | cut -f1): $archive)")
}

declare -A title=(
    [operator]="simplyblock operator"
    [csi]="simplyblock CSI driver"
)

for image in "${images[@]}"; do
    case "$image" in
    operator | csi)
        name="simplyblock-$image"
        version=$(crate_version "$name")
        ref="quay.io/simplyblock-io/$name:$version"
        [[ $ref =~ $image_pattern ]] || die "$ref does not match the API's image pattern"
        extra_config=(--label "org.opencontainers.image.licenses=Apache-2.0")
        if [ "$image" = operator ]; then
            extra_config+=(--cmd run)
            # The operator runs as nobody in particular.
            user=65532:65532
        else
            # The node plugin mounts and formats: root.
            user=0:0
        fi
        binaries=("$target_dir/release/$name" "/usr/local/bin/$name")
        if [ "$image" = operator ]; then
            binaries+=("$target_dir/release/simplyblock-upgrade" /usr/local/bin/simplyblock-upgrade)
        fi
        build_image "$name" "$ref" "$image" "${title[$image]}" "$user" \
            "[\"/usr/local/bin/$name\"]" "${binaries[@]}"
        echo "==> $name: checking the image"
        run_in "/usr/local/bin/$name" --help
        [ "$image" != operator ] || run_in /usr/local/bin/simplyblock-upgrade --help
        if [ "$image" = operator ]; then
            user=$(bah inspect --type image --format '{{.OCIv1.Config.User}}' "$ref")
            case "${user%%:*}" in
                "" | 0 | root) die "$name runs as '$user'; it must not run as root" ;;
            esac
        else
            # Every program the node plugin executes, found through PATH as the driver finds it.
            # shellcheck disable=SC2016 # expanded by the image's shell
            run_in sh -c 'for tool in mkfs.ext4 mkfs.xfs blkid mount umount losetup tune2fs \
                    resize2fs xfs_growfs nvme; do
                command -v "$tool" >/dev/null || { echo "missing: $tool"; exit 1; }
            done'
            run_in mkfs.ext4 -V
            run_in mkfs.xfs -V
            run_in blkid -V
            run_in mount -V
            run_in nvme version
        fi
        write_archive "$name" "$ref"
        ;;
    pause)
        # The sandbox process only holds the pod's namespaces; the runtime kills it.
        ref=registry.k8s.io/pause:3.10
        extra_config=()
        build_image pause "$ref" static "pod sandbox (busybox sleep)" 65535:65535 \
            '["/bin/busybox", "sleep", "2147483647"]'
        echo "==> pause: checking the image"
        run_in /bin/busybox true
        write_archive pause "$ref"
        ;;
    sidecars | coredns)
        listing=$(cargo run --quiet --locked -p simplyblock-testenv --bin testenv -- "$image") \
            || die "testenv could not build $image"
        # On its own descriptor: buildah run reads standard input.
        while read -r ref binary <&3; do
            [ -n "$ref" ] || continue
            name=${ref##*/}
            name=${name%%:*}
            extra_config=()
            # As upstream's (distroless static, root): the sidecars open the driver's
            # socket, which the plugin (root) creates; CoreDNS binds port 53.
            build_image "$name" "$ref" static "$name (built from its Go module)" \
                0:0 "[\"/$name\"]" "$binary" "/$name"
            echo "==> $name: checking the image"
            if [ "$name" = coredns ]; then run_in /coredns -version; else run_in "/$name" --version; fi
            write_archive "$name" "$ref"
        done 3<<<"$listing"
        ;;
    esac
done
# Images replaced by this run's commits.
bah rmi --prune >/dev/null 2>&1 || true

echo
echo "Images (reference, manifest digest in the archive, unpacked size, archive):"
printf '  %s\n' "${summary[@]}"
