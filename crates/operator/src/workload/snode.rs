//! A client of one worker's storage-node API, speaking mutual TLS from its cluster's CA.

use kube::ResourceExt;
use simplyblock_api::StorageCluster;
use simplyblock_controlplane::{SnodeClient, SnodeConfig};

use crate::runtime::context::Context;
use crate::runtime::kit::Error;

/// A client of `worker`'s storage-node API, speaking mutual TLS from `cluster`'s CA.
pub async fn snode(
    ctx: &Context,
    cluster: &StorageCluster,
    worker: &str,
) -> Result<SnodeClient, Error> {
    let namespace = cluster.namespace().unwrap_or_default();
    let tls = ctx
        .snode
        .certificates
        .tls(&ctx.kube, &namespace, &cluster.name_any())
        .await?;
    let mut config = SnodeConfig::new(ctx.snode.address(worker, &namespace)?);
    config.tls = Some(tls);
    config.timeout = std::time::Duration::from_secs(5);
    config.connect_to = ctx.snode.proxy;
    Ok(SnodeClient::new(config)?)
}
