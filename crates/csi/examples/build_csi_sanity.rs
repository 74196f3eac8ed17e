//! Build csi-sanity into the test cache (what the sanity test would do on first use), so
//! the slow part happens before the test run. Prints the binary's path.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let bin = simplyblock_csi::sanity::ensure(&simplyblock_testenv::assets::cache_dir())?;
    println!("{}", bin.display());
    Ok(())
}
