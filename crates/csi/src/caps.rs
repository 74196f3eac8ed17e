//! Volume capabilities: which access modes and types the driver serves (pure).

use crate::error::{CsiError, Result};
use crate::fs;
use crate::proto::csi::v1::VolumeCapability;
use crate::proto::csi::v1::volume_capability::access_mode::Mode;
use crate::proto::csi::v1::volume_capability::{AccessType, MountVolume};

/// A capability as the node layer uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    Block,
    Mount { fs_type: String, flags: Vec<String> },
}

/// Check one capability: single-node writer or reader access, a known fsType. The
/// single-writer and multi-writer modes are for drivers that advertise the
/// `SINGLE_NODE_MULTI_WRITER` capability, which this one does not: a CO that honours the
/// spec sends SINGLE_NODE_WRITER for ReadWriteOnce and ReadWriteOncePod alike.
pub fn check(cap: &VolumeCapability) -> Result<(Access, bool)> {
    let mode = cap
        .access_mode
        .as_ref()
        .map(|m| Mode::try_from(m.mode).unwrap_or(Mode::Unknown))
        .unwrap_or(Mode::Unknown);
    let read_only = match mode {
        Mode::SingleNodeWriter => false,
        Mode::SingleNodeReaderOnly => true,
        Mode::SingleNodeSingleWriter | Mode::SingleNodeMultiWriter => {
            return Err(CsiError::InvalidArgument(format!(
                "access mode {} is not supported: the driver does not advertise SINGLE_NODE_MULTI_WRITER; use SINGLE_NODE_WRITER (ReadWriteOnce)",
                mode.as_str_name()
            )));
        }
        Mode::Unknown => {
            return Err(CsiError::InvalidArgument(
                "volume_capability has no access_mode".into(),
            ));
        }
        other => {
            return Err(CsiError::InvalidArgument(format!(
                "access mode {} is not supported: simplyblock volumes attach to one node at a time",
                other.as_str_name()
            )));
        }
    };
    let access = match &cap.access_type {
        Some(AccessType::Block(_)) => Access::Block,
        Some(AccessType::Mount(MountVolume {
            fs_type,
            mount_flags,
            ..
        })) => {
            fs::check_fs_type(fs_type)?;
            Access::Mount {
                fs_type: fs_type.clone(),
                flags: mount_flags.clone(),
            }
        }
        None => {
            return Err(CsiError::InvalidArgument(
                "volume_capability has neither block nor mount access type".into(),
            ));
        }
    };
    Ok((access, read_only))
}

/// Check every capability of a request; at least one is required.
pub fn check_all(caps: &[VolumeCapability]) -> Result<()> {
    if caps.is_empty() {
        return Err(CsiError::InvalidArgument(
            "volume_capabilities must not be empty".into(),
        ));
    }
    caps.iter().try_for_each(|c| check(c).map(|_| ()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::csi::v1::volume_capability::{AccessMode, BlockVolume};

    fn cap(mode: Mode, access: Option<AccessType>) -> VolumeCapability {
        VolumeCapability {
            access_mode: Some(AccessMode { mode: mode as i32 }),
            access_type: access,
        }
    }

    fn mount(fs: &str) -> Option<AccessType> {
        Some(AccessType::Mount(MountVolume {
            fs_type: fs.into(),
            ..Default::default()
        }))
    }

    #[test]
    fn single_node_modes_pass_multi_node_fail() {
        assert_eq!(
            check(&cap(Mode::SingleNodeWriter, mount("xfs"))).expect("ok"),
            (
                Access::Mount {
                    fs_type: "xfs".into(),
                    flags: vec![]
                },
                false
            )
        );
        assert_eq!(
            check(&cap(
                Mode::SingleNodeReaderOnly,
                Some(AccessType::Block(BlockVolume {}))
            ))
            .expect("ro block"),
            (Access::Block, true)
        );
        for m in [Mode::SingleNodeMultiWriter, Mode::SingleNodeSingleWriter] {
            let e = check(&cap(m, mount(""))).expect_err("not advertised");
            assert!(
                e.to_string().contains("SINGLE_NODE_WRITER"),
                "says what to use: {e}"
            );
        }
        let e = check(&cap(Mode::MultiNodeMultiWriter, mount(""))).expect_err("multi");
        assert!(e.to_string().contains("MULTI_NODE_MULTI_WRITER"), "{e}");
        assert!(check(&cap(Mode::SingleNodeWriter, None)).is_err());
        assert!(check(&cap(Mode::SingleNodeWriter, mount("ntfs"))).is_err());
        assert!(check_all(&[]).is_err());
    }
}
