//! The generated messages, clients and servers: the CSI spec (`csi.v1`, spec v1.12.0) and
//! the csi-addons identity and replication services.

pub mod csi {
    pub mod v1 {
        #![allow(clippy::all, clippy::pedantic, missing_docs)]
        tonic::include_proto!("csi.v1");
    }
}

/// The csi-addons spec's identity and replication services (package names as the
/// spec writes them).
pub mod csiaddons {
    pub mod identity {
        #![allow(clippy::all, clippy::pedantic, missing_docs)]
        tonic::include_proto!("identity");
    }
    pub mod replication {
        #![allow(clippy::all, clippy::pedantic, missing_docs)]
        tonic::include_proto!("replication");
    }
}
