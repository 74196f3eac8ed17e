//! The device rules: which of a worker's devices a run would hand over. First refusal wins.

use simplyblock_api::operator_ops::DeviceFilter;

use crate::parse;
use crate::report::{Controller, ControllerDriver, Device, DeviceKind, InUse, Reason, Transport};
use crate::size::SizeRange;

/// The device class a run scans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Nvme,
    Block,
}

impl Class {
    pub fn from_filter(filter: &DeviceFilter) -> Self {
        if filter.enable_logical_block_devices.unwrap_or(false) {
            Class::Block
        } else {
            Class::Nvme
        }
    }
    pub fn word(self) -> &'static str {
        match self {
            Class::Nvme => "nvme",
            Class::Block => "block",
        }
    }
}

/// Which rule refused a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    WholeDisk,
    SimplyblockVolume,
    Class,
    Available,
    Iscsi,
    AllowDeny,
    Model,
    Size,
    Placement,
}

impl Rule {
    /// A pre-filter's refusal says nothing about the fleet's storage (a loop device is
    /// not a disk), so it is an event but stays out of the per-worker explanation.
    pub fn is_pre_filter(self) -> bool {
        matches!(self, Rule::WholeDisk | Rule::Class)
    }
}

/// A device the rules admitted, with the address the draft names it by.
#[derive(Debug, Clone, PartialEq)]
pub struct Admitted {
    pub device: Device,
    /// PCI address (NVMe) or path (block).
    pub address: String,
    /// Synthesized for a userspace-bound or unbound controller: no size, no content.
    pub synthesized: bool,
}

pub struct Rules<'a> {
    pub class: Class,
    pub filter: &'a DeviceFilter,
    pub size: Option<&'a SizeRange>,
}

fn fold(list: &Option<Vec<String>>) -> Vec<String> {
    list.iter()
        .flatten()
        .map(|s| s.to_ascii_lowercase())
        .collect()
}

/// Devices for the controllers no block device stands for: bound to a userspace driver
/// and idle, or bound to nothing. A held controller is left alone whoever holds it, and
/// one whose holders could not be read is not known to be idle.
pub fn synthesize(controllers: &[Controller], devices: &[Device]) -> Vec<Device> {
    controllers
        .iter()
        .filter(|c| {
            (c.driver.is_userspace() && c.in_use == InUse::Idle)
                || c.driver == ControllerDriver::None
        })
        .filter(|c| !devices.iter().any(|d| d.pci_address == c.address))
        .map(|c| Device {
            name: c.address.clone(),
            path: String::new(),
            pci_address: c.address.clone(),
            kind: DeviceKind::Disk,
            transport: Transport::NVMe,
            numa_node: c.numa_node,
            available: true,
            ..Device::default()
        })
        .collect()
}

impl Rules<'_> {
    /// Admits a device or names the rule and the reason that refused it.
    pub fn apply(&self, d: &Device, synthesized: bool) -> Result<Admitted, (Rule, String)> {
        if d.kind != DeviceKind::Disk {
            return Err((
                Rule::WholeDisk,
                format!("it is a {:?}, not a whole disk", d.kind),
            ));
        }
        // Ahead of the class rule, which would refuse a fabric namespace as a pre-filter
        // and so hide from the explanation that these are the fleet's own volumes.
        if let Some(v) = d.subsystem_nqn.as_deref().and_then(parse::volume_nqn) {
            return Err((
                Rule::SimplyblockVolume,
                format!(
                    "it is simplyblock volume {} of cluster {}, attached to this worker; a volume's bytes are not free space",
                    v.volume, v.cluster
                ),
            ));
        }
        let address = match self.class {
            Class::Nvme => {
                if d.transport != Transport::NVMe {
                    return Err((
                        Rule::Class,
                        format!("this run scans NVMe devices and it is on {:?}", d.transport),
                    ));
                }
                if d.pci_address.is_empty() {
                    return Err((
                        Rule::Class,
                        "it has no PCI address, which an NVMe device is named by".into(),
                    ));
                }
                d.pci_address.clone()
            }
            Class::Block => {
                if d.transport == Transport::NVMeFabric {
                    return Err((
                        Rule::Class,
                        "it is an NVMe-over-fabrics namespace, another machine's disk".into(),
                    ));
                }
                if d.removable || d.kind == DeviceKind::Rom {
                    return Err((Rule::Class, "it is removable or optical media".into()));
                }
                if d.path.is_empty() {
                    return Err((
                        Rule::Class,
                        "it has no device path, which a block device is named by".into(),
                    ));
                }
                preferred_path(d)
            }
        };
        let waived = self.filter.enable_partitioned_devices.unwrap_or(false)
            && d.only_rejected_for(&[Reason::Partitioned]);
        if !d.available && !waived {
            let mut grounds: Vec<&str> = Vec::new();
            for r in &d.rejections {
                if !grounds.contains(&r.reason.as_str()) {
                    grounds.push(r.reason.as_str());
                }
            }
            return Err((
                Rule::Available,
                if grounds.is_empty() {
                    "the probe did not report it as available and gave no reason".into()
                } else {
                    format!("the probe reported it unavailable: {}", grounds.join(", "))
                },
            ));
        }
        let (allow, deny, list_name) = match self.class {
            Class::Nvme => (
                fold(&self.filter.pcie_allow_list),
                fold(&self.filter.pcie_deny_list),
                "pcie",
            ),
            Class::Block => (
                fold(&self.filter.block_allow_list),
                fold(&self.filter.block_deny_list),
                "block",
            ),
        };
        let names: Vec<String> = std::iter::once(address.clone())
            .chain(std::iter::once(d.path.clone()))
            .chain(d.stable_paths.iter().cloned())
            .filter(|s| !s.is_empty())
            .map(|s| s.to_ascii_lowercase())
            .collect();
        let named = |list: &[String]| names.iter().any(|n| list.contains(n));
        if d.transport == Transport::Iscsi && !named(&allow) {
            return Err((
                Rule::Iscsi,
                format!(
                    "it is an iSCSI LUN, a disk across the network; name it in {list_name}AllowList to use it"
                ),
            ));
        }
        if named(&deny) {
            return Err((Rule::AllowDeny, format!("it is on {list_name}DenyList")));
        }
        if !allow.is_empty() && !named(&allow) {
            return Err((
                Rule::AllowDeny,
                format!("it is not on {list_name}AllowList"),
            ));
        }
        if self.class == Class::Nvme
            && let Some(model) = self.filter.pcie_model.as_deref().filter(|m| !m.is_empty())
            && !d
                .model
                .to_ascii_lowercase()
                .contains(&model.to_ascii_lowercase())
        {
            return Err((
                Rule::Model,
                if d.model.is_empty() {
                    format!("pcieModel is {model:?} and it reports no model")
                } else {
                    format!(
                        "its model {:?} does not contain pcieModel {model:?}",
                        d.model
                    )
                },
            ));
        }
        if let Some(range) = self.size
            && !range.contains(d.size_bytes)
        {
            return Err((
                Rule::Size,
                if synthesized {
                    format!(
                        "its size is unknown (its controller is not on the kernel driver), so it cannot be shown to be within driveSizeRange {}",
                        range.text
                    )
                } else {
                    format!(
                        "its size {} is outside driveSizeRange {}",
                        crate::size::format_binary(d.size_bytes),
                        range.text
                    )
                },
            ));
        }
        Ok(Admitted {
            device: d.clone(),
            address,
            synthesized,
        })
    }
}

/// A block device by its `nvme-eui.*` link when it has one: it names the namespace, not
/// the order the kernel enumerated it in.
fn preferred_path(d: &Device) -> String {
    d.stable_paths
        .iter()
        .find(|p| p.contains("/nvme-eui.") && is_block_path(p))
        .cloned()
        .unwrap_or_else(|| d.path.clone())
}

/// The pattern DeviceSelection.block accepts.
fn is_block_path(p: &str) -> bool {
    p.strip_prefix("/dev/").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'/' | b'-'))
    })
}
