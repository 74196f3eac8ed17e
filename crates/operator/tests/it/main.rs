//! The operator's integration tests, one binary: each module an area, all against a real
//! kube-apiserver and etcd and sbsim, sharing [`support`].

mod cluster;
mod cluster_ops;
mod controlplane;
mod controlplane_ops;
mod conversion;
mod crash;
mod crash_day2;
mod deployment;
mod devices;
mod discovery;
mod driver;
mod driver_tls;
mod enrollment;
mod events;
mod hub;
mod leader;
mod lock;
mod maintenance;
mod metrics;
mod migrate;
mod node_ops;
mod node_remove;
mod pools;
mod preflight;
mod provisioning;
mod pvops;
mod rbac;
mod rolling_refresh;
mod site_deployment;
mod spoke_writes;
mod streams;
mod support;
mod tenancy;
mod test_failover;
mod webhooks;
