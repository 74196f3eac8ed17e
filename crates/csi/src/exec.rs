//! Host commands as plain data (built and unit-tested without running them) and the one
//! place that runs them.

use std::fmt;
use std::time::Duration;

use crate::error::{CsiError, Result};

/// A program and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cmd {
    pub program: String,
    pub args: Vec<String>,
}

impl Cmd {
    pub fn new(program: &str, args: &[&str]) -> Self {
        Self {
            program: program.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }

    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }
}

impl fmt::Display for Cmd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.program)?;
        for a in &self.args {
            write!(f, " {a}")?;
        }
        Ok(())
    }
}

/// What a finished command reported.
#[derive(Debug, Clone)]
pub struct Output {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Run `cmd` with a deadline; a non-zero exit is returned, not turned into an error, so
/// callers can branch on exit codes (blkid's 2 means "nothing found").
pub async fn run_status(cmd: &Cmd, timeout: Duration) -> Result<Output> {
    let child = tokio::process::Command::new(&cmd.program)
        .args(&cmd.args)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(timeout, child)
        .await
        .map_err(|_| CsiError::Command {
            command: cmd.to_string(),
            detail: format!("no answer within {timeout:?}"),
        })?
        .map_err(|e| CsiError::Command {
            command: cmd.to_string(),
            detail: format!("could not be started: {e}; is it installed on the node?"),
        })?;
    Ok(Output {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// Run `cmd` and require exit 0.
pub async fn run(cmd: &Cmd, timeout: Duration) -> Result<Output> {
    let out = run_status(cmd, timeout).await?;
    if out.code == Some(0) {
        Ok(out)
    } else {
        Err(CsiError::Command {
            command: cmd.to_string(),
            detail: format!(
                "exit {}: {}",
                out.code.map_or("by signal".to_string(), |c| c.to_string()),
                out.stderr.trim()
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn exit_codes_are_reported() {
        let ok = run(&Cmd::new("true", &[]), Duration::from_secs(5)).await;
        assert!(ok.is_ok());
        let e = run(&Cmd::new("false", &[]), Duration::from_secs(5))
            .await
            .expect_err("false fails");
        assert!(e.to_string().contains("`false` failed: exit 1"), "{e}");
        let e = run(
            &Cmd::new("no-such-binary-here", &[]),
            Duration::from_secs(5),
        )
        .await
        .expect_err("missing");
        assert!(e.to_string().contains("installed"), "{e}");
    }
}
