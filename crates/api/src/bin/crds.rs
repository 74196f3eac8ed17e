//! Writes every CRD to `deploy/charts/simplyblock-operator/crds/<plural>.yaml` (or to the
//! directory given).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(simplyblock_api::CHART_CRDS_DIR)
        });
    std::fs::create_dir_all(&dir)?;
    for crd in simplyblock_api::crds() {
        let path = dir.join(simplyblock_api::crd_file_name(&crd));
        std::fs::write(&path, simplyblock_api::crd_yaml(&crd)?)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
