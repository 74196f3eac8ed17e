//! Generates the CSI gRPC code from the vendored `csi.proto` with protox (pure Rust, so
//! no `protoc` is needed). The include root mirrors the Go import paths, so the
//! csi-addons protos can import `github.com/container-storage-interface/spec/lib/go/csi/csi.proto`
//! as written.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let csi = "proto/github.com/container-storage-interface/spec/lib/go/csi/csi.proto";
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile([csi], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
