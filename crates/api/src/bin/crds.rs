//! Writes every CRD to `deploy/charts/simplyblock-operator/crds/<plural>.yaml` (or to the
//! directory given), and, into the chart's checked-in helpers, the list of their names;
//! and the csi-addons CRDs into the chart's template that installs them with their
//! controller manager.

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
    let default_dir = std::env::args_os().nth(1).is_none();
    std::fs::create_dir_all(&dir)?;
    for crd in simplyblock_api::crds() {
        let path = dir.join(simplyblock_api::crd_file_name(&crd));
        std::fs::write(&path, simplyblock_api::crd_yaml(&crd)?)?;
        println!("wrote {}", path.display());
    }
    if default_dir {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(simplyblock_api::CHART_HELPERS);
        let helpers = std::fs::read_to_string(&path)?;
        let written = simplyblock_api::with_crd_names(&helpers)
            .ok_or("the chart's helpers have no simplyblock.crdNames")?;
        std::fs::write(&path, written)?;
        println!("wrote the CRD names into {}", path.display());
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(simplyblock_api::csi_addons::CHART_TEMPLATE);
        std::fs::write(&path, simplyblock_api::csi_addons::chart_template()?)?;
        println!("wrote the csi-addons CRDs into {}", path.display());
    }
    Ok(())
}
