//! The generated messages, clients and servers: the CSI spec (`csi.v1`, spec v1.12.0) and
//! the csi-addons identity, replication and volume group services.

pub mod csi {
    pub mod v1 {
        #![allow(clippy::all, clippy::pedantic, missing_docs)]
        tonic::include_proto!("csi.v1");
    }
}

/// The csi-addons spec's identity, replication and volume group services (package names as the
/// spec writes them).
pub mod csiaddons {
    /// The CSI messages the volume group service embeds (`csi.v1.Volume`), where its
    /// generated code looks for them.
    pub use super::csi;
    pub mod identity {
        #![allow(clippy::all, clippy::pedantic, missing_docs)]
        tonic::include_proto!("identity");
    }
    pub mod replication {
        #![allow(clippy::all, clippy::pedantic, missing_docs)]
        tonic::include_proto!("replication");
    }
    pub mod volumegroup {
        #![allow(clippy::all, clippy::pedantic, missing_docs)]
        tonic::include_proto!("volumegroup");
    }
}
