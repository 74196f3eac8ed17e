//! How every simplyblock binary writes its logs: to stderr, as text for a person at a
//! terminal or as JSON (one object a line, with the fields of the spans a line was logged
//! in) for a log pipeline. `--log-format` chooses, or `SIMPLYBLOCK_LOG_FORMAT`, which the
//! chart's `logFormat` sets; `RUST_LOG` overrides the binary's default filter.

use std::fmt;
use std::str::FromStr;

use tracing_subscriber::EnvFilter;

/// The environment variable read when `--log-format` is not given.
pub const LOG_FORMAT_ENV: &str = "SIMPLYBLOCK_LOG_FORMAT";

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `fields`, `target`, and `span`
    /// and `spans` with the fields of the spans the event was logged in.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(text: &str) -> Result<LogFormat, String> {
        match text {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!(
                "{other:?} is not a log format: use text (for reading) or json (for a log pipeline)"
            )),
        }
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// The `--log-format` flag every binary takes (before or after its subcommand).
#[derive(Debug, Clone, clap::Args)]
pub struct LogArgs {
    /// How logs are written to stderr: text (for reading) or json (one object a line, for
    /// a log pipeline).
    #[arg(long, global = true, env = LOG_FORMAT_ENV, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Sends this process's logs to stderr in `format`, filtered by `RUST_LOG` or else by
/// `default_filter` (an `EnvFilter` directive such as `info` or `warn,kube_client=off`).
pub fn init(format: LogFormat, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_format_reads_back_as_it_is_written_and_a_wrong_one_says_what_to_use() {
        for format in [LogFormat::Text, LogFormat::Json] {
            assert_eq!(format.to_string().parse(), Ok(format));
        }
        let wrong = "yaml"
            .parse::<LogFormat>()
            .expect_err("yaml is no log format");
        assert!(
            wrong.contains("\"yaml\"") && wrong.contains("text") && wrong.contains("json"),
            "{wrong}"
        );
    }
}
