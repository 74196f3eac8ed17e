//! simplyblock-upgrade against a real kube-apiserver and etcd holding an installation as the
//! Go operator left it.

mod preflight;
mod record;
mod run;
mod upgrade;
