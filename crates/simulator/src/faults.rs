//! Scripted faults, deterministic for a seed.
//!
//! Grammar (`--faults` or `PUT /_sim/faults` with `{"spec": …}`):
//!
//! ```text
//! SPEC := RULE { ";" RULE }
//! RULE := KIND [ ":" OPT { "," OPT } ]
//! KIND := error | commiterror | latency | drop | conflict | unready | taskfail | backupfail
//! OPT  := method=GET|POST|PUT|DELETE   only requests with this method
//!       | path=GLOB                    request path; `*` = one segment, `**` = any number
//!       | rate=FLOAT                   probability per matching request, default 1
//!       | after=N                      let the first N matching requests through
//!       | count=N                      fire at most N times
//!       | status=CODE                  error, commiterror: the status (default 500, plain-text body)
//!       | ms=N                         latency: added milliseconds (real time)
//!       | for=DURATION                 unready: how long (`500ms`, `5s`, `2m`), from now
//!       | name=FUNCTION                taskfail: the task's function_name (e.g. node_add)
//!       | volume=NAME|ID               backupfail: only backups of this volume
//! ```
//!
//! `error` and `conflict` answer before the request touches state; `commiterror` lets the
//! request commit and then answers `status` as if it had failed; `drop` lets the
//! request commit and then closes the connection without an answer; `latency` delays
//! the answer; `unready` makes `/_meta/ready` answer 503 `FDB not ready`; `taskfail`
//! makes attempts of matching tasks fail (charged as a retry), so retries up to
//! `max_retry` can be scripted; `backupfail` makes backup uploads break off midway, after
//! `in_progress` (`backupfail:volume=v,count=1` fails the next backup of `v`).

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::SimError;
use crate::rng::SimRng;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FaultKind {
    Error {
        status: u16,
    },
    /// The request commits; its answer is replaced by this status.
    Commiterror {
        status: u16,
    },
    Latency {
        ms: u64,
    },
    Drop,
    Conflict,
    Unready {
        seconds: f64,
    },
    Taskfail {
        name: String,
    },
    /// Backup uploads (of one volume, by name or id, or of any) break off midway.
    Backupfail {
        volume: Option<String>,
    },
}

#[derive(Debug, Clone, Serialize)]
pub struct FaultRule {
    #[serde(flatten)]
    pub kind: FaultKind,
    pub method: Option<String>,
    pub path: Option<String>,
    pub rate: f64,
    pub after: u64,
    pub count: Option<u64>,
    /// Requests (or task attempts) that matched so far.
    pub matched: u64,
    /// Times it fired.
    pub fired: u64,
    #[serde(skip)]
    pub until: Option<Instant>,
    /// The rule as written.
    pub text: String,
}

fn bad(rule: &str, reason: impl Into<String>) -> SimError {
    SimError::Faults {
        rule: rule.to_string(),
        reason: reason.into(),
    }
}

fn parse_duration(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    num.trim().parse::<f64>().ok().map(|v| v * mult)
}

/// Parse a whole spec.
pub fn parse(spec: &str) -> Result<Vec<FaultRule>, SimError> {
    spec.split(';')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(parse_rule)
        .collect()
}

fn parse_rule(text: &str) -> Result<FaultRule, SimError> {
    let (kind, opts) = text.split_once(':').unwrap_or((text, ""));
    let mut method = None;
    let mut path = None;
    let mut rate = 1.0;
    let mut after = 0;
    let mut count = None;
    let mut status = 500u16;
    let mut ms = None;
    let mut seconds = None;
    let mut name = None;
    let mut volume = None;
    for opt in opts.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        let (k, v) = opt
            .split_once('=')
            .ok_or_else(|| bad(text, format!("option {opt:?} is not key=value")))?;
        let num = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| bad(text, format!("{k}={v} is not a whole number")))
        };
        match k.trim() {
            "method" => method = Some(v.trim().to_ascii_uppercase()),
            "path" => path = Some(v.trim().to_string()),
            "rate" => {
                rate = v
                    .parse::<f64>()
                    .ok()
                    .filter(|r| (0.0..=1.0).contains(r))
                    .ok_or_else(|| bad(text, format!("rate={v} is not within 0..1")))?
            }
            "after" => after = num(v)?,
            "count" => count = Some(num(v)?),
            "status" => {
                status = v
                    .parse::<u16>()
                    .ok()
                    .filter(|s| (100..600).contains(s))
                    .ok_or_else(|| bad(text, format!("status={v} is not an HTTP status")))?
            }
            "ms" => ms = Some(num(v)?),
            "for" => {
                seconds = Some(
                    parse_duration(v)
                        .ok_or_else(|| bad(text, format!("for={v} is no duration")))?,
                )
            }
            "name" => name = Some(v.trim().to_string()),
            "volume" => volume = Some(v.trim().to_string()),
            other => return Err(bad(text, format!("unknown option {other:?}"))),
        }
    }
    let kind = match kind.trim() {
        "error" => FaultKind::Error { status },
        "commiterror" => FaultKind::Commiterror { status },
        "latency" => FaultKind::Latency {
            ms: ms.ok_or_else(|| bad(text, "latency needs ms=N"))?,
        },
        "drop" => FaultKind::Drop,
        "conflict" => FaultKind::Conflict,
        "unready" => FaultKind::Unready {
            seconds: seconds.ok_or_else(|| bad(text, "unready needs for=DURATION"))?,
        },
        "taskfail" => FaultKind::Taskfail {
            name: name.ok_or_else(|| bad(text, "taskfail needs name=FUNCTION"))?,
        },
        "backupfail" => FaultKind::Backupfail { volume },
        other => return Err(bad(text, format!("unknown kind {other:?}"))),
    };
    let until = match &kind {
        FaultKind::Unready { seconds } => Some(Instant::now() + Duration::from_secs_f64(*seconds)),
        _ => None,
    };
    Ok(FaultRule {
        kind,
        method,
        path,
        rate,
        after,
        count,
        matched: 0,
        fired: 0,
        until,
        text: text.to_string(),
    })
}

/// Match `path` against a glob where `*` is one segment and `**` any number.
pub fn glob_match(pattern: &str, path: &str) -> bool {
    let p: Vec<&str> = pattern.trim_matches('/').split('/').collect();
    let s: Vec<&str> = path.trim_matches('/').split('/').collect();
    fn go(p: &[&str], s: &[&str]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some(&"**"), _) => go(&p[1..], s) || (!s.is_empty() && go(p, &s[1..])),
            (Some(a), Some(b)) => (*a == "*" || a == b) && go(&p[1..], &s[1..]),
            _ => false,
        }
    }
    go(&p, &s)
}

/// What the faults decide for one request.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Verdict {
    pub latency_ms: u64,
    pub error: Option<u16>,
    pub conflict: bool,
    pub drop: bool,
    /// Answer this status once the request has committed.
    pub commit_error: Option<u16>,
    /// The rules that fired, for the call log.
    pub fired: Vec<String>,
}

/// The active rules and the generator that decides rates.
#[derive(Debug)]
pub struct Faults {
    pub rules: Vec<FaultRule>,
    rng: SimRng,
}

impl Faults {
    pub fn new(rules: Vec<FaultRule>, seed: u64) -> Self {
        Self {
            rules,
            // Its own stream, so faults do not shift the ids the state generator hands out.
            rng: SimRng::new(seed ^ 0xFA17_5EED),
        }
    }

    pub fn set(&mut self, rules: Vec<FaultRule>) {
        self.rules = rules;
    }

    fn fire(rng: &mut SimRng, r: &mut FaultRule) -> bool {
        r.matched += 1;
        if r.matched <= r.after {
            return false;
        }
        if r.count.is_some_and(|c| r.fired >= c) {
            return false;
        }
        if r.rate < 1.0 && rng.unit() >= r.rate {
            return false;
        }
        r.fired += 1;
        true
    }

    /// Decide for an API or storage-node request.
    pub fn on_request(&mut self, method: &str, path: &str) -> Verdict {
        let mut v = Verdict::default();
        for r in self.rules.iter_mut() {
            if matches!(
                r.kind,
                FaultKind::Unready { .. }
                    | FaultKind::Taskfail { .. }
                    | FaultKind::Backupfail { .. }
            ) {
                continue;
            }
            if r.method.as_deref().is_some_and(|m| m != method) {
                continue;
            }
            if r.path.as_deref().is_some_and(|p| !glob_match(p, path)) {
                continue;
            }
            if !Self::fire(&mut self.rng, r) {
                continue;
            }
            v.fired.push(r.text.clone());
            match r.kind {
                FaultKind::Latency { ms } => v.latency_ms += ms,
                FaultKind::Error { status } if v.error.is_none() && !v.conflict => {
                    v.error = Some(status)
                }
                FaultKind::Conflict if v.error.is_none() => v.conflict = true,
                FaultKind::Drop => v.drop = true,
                FaultKind::Commiterror { status } if v.commit_error.is_none() => {
                    v.commit_error = Some(status)
                }
                _ => {}
            }
        }
        v
    }

    /// Whether the control plane is scripted to be unready now.
    pub fn unready(&mut self) -> bool {
        let now = Instant::now();
        self.rules.iter_mut().any(|r| {
            let live = r.until.is_some_and(|u| now < u);
            if live {
                r.matched += 1;
                r.fired += 1;
            }
            live
        })
    }

    /// Whether this attempt of a task with `function_name` is scripted to fail.
    pub fn task_attempt_fails(&mut self, function_name: &str) -> bool {
        let mut fail = false;
        for r in self.rules.iter_mut() {
            if let FaultKind::Taskfail { name } = &r.kind
                && name == function_name
                && Self::fire(&mut self.rng, r)
            {
                fail = true;
            }
        }
        fail
    }
}

impl Faults {
    /// Whether this upload of a backup of volume `id` (named `name`) is scripted to break
    /// off.
    pub fn backup_fails(&mut self, id: &str, name: &str) -> bool {
        let mut fail = false;
        for r in self.rules.iter_mut() {
            if let FaultKind::Backupfail { volume } = &r.kind
                && volume.as_deref().is_none_or(|v| v == id || v == name)
                && Self::fire(&mut self.rng, r)
            {
                fail = true;
            }
        }
        fail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar_round_trip() {
        let rules = parse(
            "error:method=POST,path=/api/v2/clusters/*/storage-nodes/,rate=0.5,status=503; latency:ms=20 ;drop:count=1;unready:for=2s;taskfail:name=node_add,count=2",
        )
        .expect("parse");
        assert_eq!(rules.len(), 5);
        assert_eq!(rules[0].kind, FaultKind::Error { status: 503 });
        assert_eq!(rules[0].method.as_deref(), Some("POST"));
        assert_eq!(rules[1].kind, FaultKind::Latency { ms: 20 });
        assert_eq!(rules[2].count, Some(1));
        assert!(matches!(rules[3].kind, FaultKind::Unready { seconds } if seconds == 2.0));
        let late = parse("commiterror:method=POST,count=1;commiterror:status=503").expect("parse");
        assert_eq!(late[0].kind, FaultKind::Commiterror { status: 500 });
        assert_eq!(late[1].kind, FaultKind::Commiterror { status: 503 });
    }

    #[test]
    fn a_commit_error_lets_the_request_through_and_answers_after() {
        let mut f = Faults::new(parse("commiterror:method=POST,count=1").expect("parse"), 1);
        let first = f.on_request("POST", "/x");
        assert_eq!((first.error, first.commit_error), (None, Some(500)));
        assert_eq!(f.on_request("POST", "/x").commit_error, None);
    }

    #[test]
    fn a_backup_fault_picks_its_volume() {
        let mut f = Faults::new(parse("backupfail:volume=v,count=1").expect("parse"), 1);
        assert!(!f.backup_fails("id-w", "w"), "another volume");
        assert!(f.backup_fails("id-v", "v"));
        assert!(!f.backup_fails("id-v", "v"), "only the next one");
    }

    #[test]
    fn bad_specs_are_refused() {
        assert!(parse("explode").is_err());
        assert!(parse("error:rate=2").is_err());
        assert!(parse("latency").is_err());
        assert!(parse("error:colour=red").is_err());
    }

    #[test]
    fn globs() {
        assert!(glob_match("/api/v2/clusters/*/", "/api/v2/clusters/abc/"));
        assert!(!glob_match(
            "/api/v2/clusters/*/",
            "/api/v2/clusters/abc/tasks/"
        ));
        assert!(glob_match("/api/v2/**", "/api/v2/clusters/abc/tasks/"));
        assert!(glob_match(
            "/**/volumes/",
            "/api/v2/clusters/a/storage-pools/b/volumes/"
        ));
    }

    #[test]
    fn rates_are_deterministic_for_a_seed() {
        let run = |seed| {
            let mut f = Faults::new(parse("error:rate=0.5").expect("parse"), seed);
            (0..64)
                .map(|_| f.on_request("GET", "/x").error.is_some())
                .collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
        let hits = run(3).iter().filter(|h| **h).count();
        assert!((16..=48).contains(&hits), "{hits}");
    }

    #[test]
    fn after_and_count_bound_a_rule() {
        let mut f = Faults::new(parse("conflict:after=2,count=1").expect("parse"), 1);
        let got: Vec<bool> = (0..5)
            .map(|_| f.on_request("POST", "/x").conflict)
            .collect();
        assert_eq!(got, vec![false, false, true, false, false]);
    }
}
