//! Server-sent events as the control plane's `?watch=true` routes send them: a small
//! parser of the `text/event-stream` format (any of `\r\n`, `\n`, `\r` ends a line) and
//! the stream of frames read from one answer.

use std::collections::VecDeque;

use crate::error::{Error, Result};

/// One item of an event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// An event: its name (`message` when none was given) and its data lines joined by `\n`.
    Event { event: String, data: String },
    /// A comment line (the server's keepalive `: ping - …`).
    Comment(String),
}

/// Incremental parser: feed bytes as they arrive, take complete frames out.
#[derive(Debug, Default)]
pub struct Parser {
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    /// The previous byte was `\r`, so a `\n` right after it ends nothing more.
    after_cr: bool,
    event: Option<String>,
    data: Option<String>,
    /// The last `retry:` the server asked for, in milliseconds.
    pub retry_ms: Option<u64>,
}

impl Parser {
    pub fn push(&mut self, bytes: &[u8], out: &mut VecDeque<Frame>) {
        for &b in bytes {
            match b {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.line);
                    self.line_done(&String::from_utf8_lossy(&line), out);
                }
                _ => {
                    self.after_cr = false;
                    self.line.push(b);
                }
            }
        }
    }

    fn line_done(&mut self, line: &str, out: &mut VecDeque<Frame>) {
        if line.is_empty() {
            // A blank line dispatches the event; one without data is dropped.
            let event = self.event.take();
            if let Some(data) = self.data.take() {
                out.push_back(Frame::Event {
                    event: event.unwrap_or_else(|| "message".into()),
                    data,
                });
            }
            return;
        }
        if let Some(comment) = line.strip_prefix(':') {
            out.push_back(Frame::Comment(comment.trim_start().to_string()));
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            "retry" => {
                if let Ok(ms) = value.parse() {
                    self.retry_ms = Some(ms);
                }
            }
            // `id` is never sent by the control plane and nothing replays; unknown
            // fields are ignored, as the format requires.
            _ => {}
        }
    }
}

/// The frames of one `?watch=true` answer.
pub struct EventStream {
    response: reqwest::Response,
    parser: Parser,
    ready: VecDeque<Frame>,
    path: String,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("path", &self.path)
            .finish()
    }
}

impl EventStream {
    pub(crate) fn new(response: reqwest::Response, path: String) -> Self {
        Self {
            response,
            parser: Parser::default(),
            ready: VecDeque::new(),
            path,
        }
    }

    /// The next frame; `None` when the server ended the stream.
    pub async fn next(&mut self) -> Result<Option<Frame>> {
        loop {
            if let Some(f) = self.ready.pop_front() {
                return Ok(Some(f));
            }
            let chunk = self
                .response
                .chunk()
                .await
                .map_err(|e| Error::Unavailable {
                    method: "GET".into(),
                    path: self.path.clone(),
                    message: format!("the event stream broke: {e}"),
                })?;
            match chunk {
                Some(bytes) => self.parser.push(&bytes, &mut self.ready),
                None => return Ok(None),
            }
        }
    }

    /// The reconnection delay the server asked for, once it did.
    pub fn retry_ms(&self) -> Option<u64> {
        self.parser.retry_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(chunks: &[&[u8]]) -> (Vec<Frame>, Option<u64>) {
        let mut p = Parser::default();
        let mut out = VecDeque::new();
        for c in chunks {
            p.push(c, &mut out);
        }
        (out.into_iter().collect(), p.retry_ms)
    }

    fn ev(event: &str, data: &str) -> Frame {
        Frame::Event {
            event: event.into(),
            data: data.into(),
        }
    }

    #[test]
    fn crlf_frames_with_retry_and_ping() {
        let (frames, retry) = parse(&[
            b"event: snapshot\r\ndata: [{\"id\":1}]\r\nretry: 3000\r\n\r\n",
            b": ping - 2026-01-01 00:00:00.000000+00:00\r\n\r\n",
            b"event: deleted\r\ndata: {}\r\n\r\n",
        ]);
        assert_eq!(
            frames,
            vec![
                ev("snapshot", "[{\"id\":1}]"),
                Frame::Comment("ping - 2026-01-01 00:00:00.000000+00:00".into()),
                ev("deleted", "{}"),
            ]
        );
        assert_eq!(retry, Some(3000));
    }

    /// A chunk may end anywhere, even between the `\r` and the `\n` of one line end.
    #[test]
    fn frames_split_across_chunks_at_every_byte() {
        let text = b"event: updated\r\ndata: {\"a\":1}\r\n\r\nevent: created\ndata: x\ndata: y\n\n";
        for cut in 0..text.len() {
            let (frames, _) = parse(&[&text[..cut], &text[cut..]]);
            assert_eq!(
                frames,
                vec![ev("updated", "{\"a\":1}"), ev("created", "x\ny")],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn an_event_without_data_is_dropped_and_unknown_fields_ignored() {
        let (frames, _) = parse(&[b"event: lonely\r\n\r\nid: 7\rdata\r\r"]);
        assert_eq!(frames, vec![ev("message", "")]);
    }
}
