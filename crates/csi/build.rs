//! Generates the CSI and csi-addons (identity, replication, volume group) gRPC code from the vendored
//! protos with protox (pure Rust, so no `protoc` is needed). The include root mirrors the
//! Go import paths, so the replication proto imports
//! `github.com/container-storage-interface/spec/lib/go/csi/csi.proto` as written.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let csi = "proto/github.com/container-storage-interface/spec/lib/go/csi/csi.proto";
    let addons = "proto/github.com/csi-addons/spec";
    let identity = format!("{addons}/identity/identity.proto");
    let replication = format!("{addons}/replication/replication.proto");
    let volumegroup = format!("{addons}/volumegroup/volumegroup.proto");
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(
        [
            csi,
            identity.as_str(),
            replication.as_str(),
            volumegroup.as_str(),
        ],
        ["proto"],
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
