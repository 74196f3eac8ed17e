#!/usr/bin/env bash
# Captures a host fixture for crates/discovery: the files the probe reads, copied by the
# probe's own capture tool (crates/discovery/examples/capture.rs), so the fixture reads
# back to the report the machine gave.
#
#   scripts/capture-host.sh local NAME   this machine, into fixtures/hosts/NAME
#   scripts/capture-host.sh guest NAME   a qemu guest, into fixtures/hosts/NAME, laid out
#                                        as CAPTURE_LAYOUT says:
#     full  (default) two NUMA nodes, NVMe controllers on both (one on vfio-pci and held,
#           one on vfio-pci and idle, one unbound), a partitioned disk, a mounted disk, a
#           bond, a bridge, a VLAN, a veth pair and a dummy;
#     small one NUMA node, one NVMe controller with two namespaces, one whose namespace
#           carries a GPT, a single NIC: the kind of worker that is easy to get wrong;
#     held  one NUMA node, two NVMe controllers both on vfio-pci and held open by one
#           process (a guest's passthrough disks, or another SPDK), a single NIC.
#
# The guest needs qemu-system-x86 and fetches a Debian kernel and busybox-static with
# apt-get download. It runs under software emulation (CAPTURE_KVM=1 for KVM). An emulated
# Intel IOMMU lets vfio-pci bind: Debian kernels do not build vfio's no-IOMMU mode.
set -euo pipefail
mode=${1:?usage: capture-host.sh local|guest NAME}
name=${2:?usage: capture-host.sh local|guest NAME}
repo=$(cd "$(dirname "$0")/.." && pwd)
dest="$repo/fixtures/hosts/$name"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target/discovery}
cargo build -q -p simplyblock-discovery --example capture
capture="$CARGO_TARGET_DIR/debug/examples/capture"

install_capture() { # $1 = capture output folder
    rm -rf "$dest"
    mkdir -p "$dest"
    cp -a "$1/root" "$dest/root"
    cp "$1/live-report.json" "$dest/live-report.json"
    # git keeps no empty directory, and an empty /sys/block is not a missing one: a dot
    # file keeps each (the probe skips dot names, which the kernel never writes).
    find "$dest/root" -type d -empty -exec touch {}/.gitkeep \;
}

case "$mode" in
local)
    out=$(mktemp -d)
    "$capture" "$out" "$name"
    install_capture "$out"
    rm -rf "$out"
    ;;
guest)
    for tool in qemu-system-x86_64 sfdisk mkfs.ext4 apt-get; do
        command -v "$tool" >/dev/null || {
            echo "capture-host.sh guest needs $tool (Debian: apt-get install qemu-system-x86 fdisk e2fsprogs)" >&2
            exit 2
        }
    done
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    cd "$work"
    kernel_pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')
    apt-get download -q "$kernel_pkg" busybox-static >/dev/null
    mkdir k bb initrd
    dpkg-deb -x linux-image-*.deb k
    dpkg-deb -x busybox-static_*.deb bb
    kver=$(ls k/lib/modules)
    bbx=bb/bin/busybox
    # The modules the guest loads, with everything they depend on.
    want="virtio_pci virtio_net virtio_blk e1000 nvme ahci sd_mod crc32c_generic ext4 bonding bridge 8021q dummy veth vfio vfio-pci vfio_iommu_type1 uio_pci_generic"
    declare -A seen
    resolve() {
        local m=$1 f dep
        m=${m//-/_}
        [[ -n ${seen[$m]:-} ]] && return
        f=$(find "k/lib/modules/$kver/kernel" \( -name "$m.ko" -o -name "${m//_/-}.ko" \) | head -1)
        [[ -z $f ]] && return # built in
        seen[$m]=$f
        for dep in $(strings "$f" | sed -n 's/^depends=//p' | tr ',' ' '); do resolve "$dep"; done
    }
    for m in $want; do resolve "$m"; done
    for f in "${seen[@]}"; do
        mkdir -p "initrd/$(dirname "${f#k/}")"
        cp "$f" "initrd/${f#k/}"
    done
    cp k/lib/modules/"$kver"/modules.{order,builtin} "initrd/lib/modules/$kver/" 2>/dev/null || true
    mkdir -p initrd/bin initrd/lib64 initrd/lib/x86_64-linux-gnu
    cp "$bbx" initrd/bin/busybox
    # busybox's ip cannot make a veth pair; the host's iproute2 can.
    mkdir -p initrd/sbin && cp "$(command -v ip)" initrd/sbin/ip
    cp "$capture" initrd/capture && strip initrd/capture
    for lib in $(ldd "$capture" "$(command -v ip)" | awk '/=>/ {print $3} /ld-linux/ {print $1}' | sort -u); do
        mkdir -p "initrd$(dirname "$lib")" && cp -L "$lib" "initrd$lib"
    done
    cp "$repo/scripts/capture-host-guest.sh" initrd/init
    (cd initrd && find . | "$OLDPWD/$bbx" cpio -o -H newc 2>/dev/null | gzip) > initrd.gz
    # Software emulation by default: nested KVM is often present and broken in CI
    # machines. CAPTURE_KVM=1 uses KVM.
    machine=q35,accel=tcg cpu=max
    [[ ${CAPTURE_KVM:-0} = 1 ]] && machine=q35,accel=kvm,kernel-irqchip=split cpu=host
    layout=${CAPTURE_LAYOUT:-full}
    case "$layout" in
    full)
        # NVMe controllers on both memory nodes, a virtio disk, a SATA disk.
        for d in n0 n1 n2 n3 n4 n5 vda sda; do truncate -s 64M "$d.img"; done
        mkfs.ext4 -q -F sda.img
        hardware=(
            -smp 4,sockets=2,cores=2,threads=1
            -object memory-backend-ram,id=m0,size=512M -object memory-backend-ram,id=m1,size=512M
            -numa node,nodeid=0,cpus=0-1,memdev=m0 -numa node,nodeid=1,cpus=2-3,memdev=m1
            -device pxb-pcie,id=pxb1,bus_nr=128,numa_node=1,bus=pcie.0
            -device pcie-root-port,id=rp10,bus=pxb1,chassis=10
            -device pcie-root-port,id=rp11,bus=pxb1,chassis=11
            -device pcie-root-port,id=rp12,bus=pxb1,chassis=12
            -drive file=n0.img,if=none,id=d0,format=raw -device nvme,serial=SBNODE0A,drive=d0,bus=pcie.0
            -drive file=n1.img,if=none,id=d1,format=raw -device nvme,serial=SBNODE0B,drive=d1,bus=pcie.0
            -drive file=n2.img,if=none,id=d2,format=raw -device nvme,serial=SBNODE1A,drive=d2,bus=rp10
            -drive file=n3.img,if=none,id=d3,format=raw -device nvme,serial=SBHELD,drive=d3,bus=rp11
            -drive file=n4.img,if=none,id=d4,format=raw -device nvme,serial=SBIDLE,drive=d4,bus=rp12
            -drive file=n5.img,if=none,id=d5,format=raw -device nvme,serial=SBUNBOUND,drive=d5,bus=pcie.0
            -drive file=vda.img,if=none,id=v0,format=raw -device virtio-blk-pci,drive=v0,bus=pcie.0
            -drive file=sda.img,if=none,id=s0,format=raw -device ide-hd,drive=s0,bus=ide.0
            -netdev user,id=u0,restrict=on -device virtio-net-pci,bus=pcie.0,netdev=u0,speed=10000,duplex=full
            -netdev user,id=u1,restrict=on -device virtio-net-pci,bus=pcie.0,netdev=u1,speed=25000,duplex=full
            -netdev user,id=u2,restrict=on -device virtio-net-pci,bus=pcie.0,netdev=u2,speed=25000,duplex=full
            -netdev user,id=u3,restrict=on -device e1000,bus=pcie.0,netdev=u3
        )
        ;;
    small)
        for d in m1 m2 p0; do truncate -s 96M "$d.img"; done
        printf 'label: gpt\n,\n' | sfdisk -q p0.img
        hardware=(
            -smp 2
            -device nvme,id=multi,serial=SBMULTI
            -drive file=m1.img,if=none,id=m1,format=raw -device nvme-ns,drive=m1,bus=multi,nsid=1
            -drive file=m2.img,if=none,id=m2,format=raw -device nvme-ns,drive=m2,bus=multi,nsid=2
            -drive file=p0.img,if=none,id=p0,format=raw -device nvme,serial=SBGPT,drive=p0
            -netdev user,id=u0,restrict=on -device virtio-net-pci,netdev=u0,speed=25000,duplex=full
        )
        ;;
    held)
        for d in h0 h1; do truncate -s 64M "$d.img"; done
        hardware=(
            -smp 2
            -drive file=h0.img,if=none,id=h0,format=raw -device nvme,serial=SBHELD0,drive=h0
            -drive file=h1.img,if=none,id=h1,format=raw -device nvme,serial=SBHELD1,drive=h1
            -netdev user,id=u0,restrict=on -device virtio-net-pci,netdev=u0,speed=25000,duplex=full
        )
        ;;
    *)
        echo "CAPTURE_LAYOUT is full, small or held, not $layout" >&2
        exit 2
        ;;
    esac
    nice -n 19 timeout 900 qemu-system-x86_64 \
        -machine "$machine" -cpu $cpu -m 1024 \
        -device intel-iommu,intremap=on \
        "${hardware[@]}" \
        -kernel k/boot/vmlinuz-"$kver" -initrd initrd.gz \
        -append "console=ttyS0 quiet hugepages=64 panic=-1 intel_iommu=on iommu=pt sb_layout=$layout" \
        -display none -no-reboot \
        -serial file:console.log -serial file:capture.txt
    if ! grep -q -- '-----END CAPTURE-----' capture.txt; then
        echo "the guest sent no capture; its console:" >&2
        tail -40 console.log >&2
        exit 1
    fi
    mkdir out
    sed -n '/-----BEGIN CAPTURE-----/,/-----END CAPTURE-----/p' capture.txt | sed '1d;$d' |
        tr -d '\r' | base64 -d | tar xzf - -C out
    install_capture out
    ;;
*)
    echo "usage: capture-host.sh local|guest NAME" >&2
    exit 2
    ;;
esac
echo "captured $name into $dest"
