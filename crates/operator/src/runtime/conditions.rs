//! An entity's standard conditions (Ready, Progressing, Degraded) as its controller
//! writes them: [`simplyblock_api::conditions::of_phase`], stamped with this moment.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use simplyblock_api::conditions::{Standing, of_phase};

/// The conditions for `phase`, keeping the transition times of `stored` (the object's
/// status as read; `None` before its first status).
pub fn for_phase<P: Into<Standing> + std::fmt::Debug + Copy>(
    stored: Option<&[Condition]>,
    phase: P,
    message: Option<&str>,
    generation: Option<i64>,
) -> Vec<Condition> {
    let now = Time(jiff::Timestamp::now());
    of_phase(stored.unwrap_or_default(), phase, message, generation, &now)
}
