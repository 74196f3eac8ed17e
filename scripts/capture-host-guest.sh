#!/bin/busybox sh
# Runs as /init inside the capture guest that scripts/capture-host.sh boots: sets up the
# storage and network layout the fixture is meant to show, captures the machine with the
# probe's own capture tool, and sends the result out on the second serial port.
/bin/busybox mkdir -p /proc /sys /dev /tmp /mnt/data
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /tmp /mnt/data && mount -t tmpfs tmp /tmp
depmod
for m in virtio_pci virtio_net virtio_blk e1000 nvme ahci sd_mod crc32c_generic ext4 \
         bonding bridge 8021q dummy veth vfio vfio-pci uio_pci_generic; do
    modprobe "$m" || echo "capture-guest: no module $m"
done
sleep 3
hostname capture-guest
# The host's iproute2 (busybox's ip cannot make a veth pair).
ip() { /sbin/ip "$@"; }
layout=full
for word in $(cat /proc/cmdline); do
    case "$word" in sb_layout=*) layout=${word#sb_layout=} ;; esac
done

# The controllers are found by serial, which the host set.
by_serial() {
    for c in /sys/class/nvme/*; do
        [ "$(cat "$c/serial" | tr -d ' ')" = "$1" ] && basename "$(readlink -f "$c/device")"
    done
}
bind_vfio() {
    echo vfio-pci > "/sys/bus/pci/devices/$1/driver_override"
    echo "$1" > /sys/bus/pci/drivers/nvme/unbind
    echo "$1" > /sys/bus/pci/drivers_probe
}
group_of() { basename "$(readlink "/sys/bus/pci/devices/$1/iommu_group")"; }

full_layout() {
    # A disk with a partition table and nothing mounted: an MBR with two partitions.
    printf 'o\nn\np\n1\n\n+16M\nn\np\n2\n\n\nw\n' | fdisk /dev/vda >/dev/null 2>&1
    # A disk with a filesystem (made by the host) mounted.
    mount -t ext4 /dev/sda /mnt/data
    # One controller on vfio-pci and held open by a process, one on vfio-pci and idle, one
    # bound to nothing (what a failed node add leaves behind).
    held=$(by_serial SBHELD)
    idle=$(by_serial SBIDLE)
    unbound=$(by_serial SBUNBOUND)
    [ -n "$held" ] && bind_vfio "$held"
    [ -n "$idle" ] && bind_vfio "$idle"
    [ -n "$unbound" ] && echo "$unbound" > /sys/bus/pci/drivers/nvme/unbind
    if [ -n "$held" ]; then
        sh -c "exec 3<>/dev/vfio/$(group_of "$held"); exec sleep 100000" &
    fi

    # Network: eth0 holds the node address; eth1 and eth2 are bonded for data; eth3 is a
    # bridge port; a VLAN, a veth pair and a dummy are the plumbing that must never win.
    ip link set lo up
    ip addr add 192.0.2.10/24 dev eth0 && ip link set eth0 up
    ip link add bond0 type bond mode active-backup 2>/dev/null || echo +bond0 > /sys/class/net/bonding_masters
    ip link set eth1 down; ip link set eth1 master bond0
    ip link set eth2 down; ip link set eth2 master bond0
    ip link set bond0 mtu 9000 && ip link set bond0 up
    ip addr add 203.0.113.10/24 dev bond0
    ip link add br0 type bridge && ip link set eth3 master br0
    ip link set eth3 up && ip link set br0 up && ip addr add 198.51.100.10/24 dev br0
    ip link add link eth0 name eth0.100 type vlan id 100 && ip link set eth0.100 up
    ip link add veth0 type veth peer name veth1 && ip link set veth0 up
    ip link add dummy0 type dummy && ip link set dummy0 up
    sleep 3
}

small_layout() {
    # One controller with two namespaces, untouched; one whose namespace carries the GPT
    # the host wrote. One NIC holds the address.
    ip link set lo up
    ip addr add 192.0.2.20/24 dev eth0 && ip link set eth0 up
    sleep 3
}

held_layout() {
    # Both controllers on vfio-pci, held open by one process, as a guest's passthrough
    # disks would be.
    a=$(by_serial SBHELD0)
    b=$(by_serial SBHELD1)
    bind_vfio "$a"
    bind_vfio "$b"
    ga=$(group_of "$a")
    gb=$(group_of "$b")
    # A vfio group opens once; two controllers may share one.
    if [ "$ga" = "$gb" ]; then
        sh -c "exec 3<>/dev/vfio/$ga; exec sleep 100000" &
    else
        sh -c "exec 3<>/dev/vfio/$ga 4<>/dev/vfio/$gb; exec sleep 100000" &
    fi
    ip link set lo up
    ip addr add 192.0.2.30/24 dev eth0 && ip link set eth0 up
    sleep 3
}

case "$layout" in
small) small_layout ;;
held) held_layout ;;
*) full_layout ;;
esac

/capture /tmp/out capture-guest
cd /tmp/out && tar cf - . | gzip | base64 > /tmp/out.b64
{ echo "-----BEGIN CAPTURE-----"; cat /tmp/out.b64; echo "-----END CAPTURE-----"; } > /dev/ttyS1
sync
poweroff -f
