//! Server-sent events as the control plane's `?watch=true` routes send them: a small
//! parser of the `text/event-stream` format (any of `\r\n`, `\n`, `\r` ends a line) and
//! the stream of frames read from one answer.

use std::collections::VecDeque;

use crate::error::{Error, Result};

/// The most one event (its lines not yet dispatched: event name, data, the line being
/// read) may hold. The control plane's largest event, a list snapshot, is far smaller; a
/// stream that sends more is broken off rather than buffered without end.
pub const MAX_EVENT: usize = 1 << 20;

/// An event grew past the parser's cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge {
    pub cap: usize,
}

/// One item of an event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// An event: its name (`message` when none was given) and its data lines joined by `\n`.
    Event { event: String, data: String },
    /// A comment line (the server's keepalive `: ping - …`).
    Comment(String),
}

/// Incremental parser: feed bytes as they arrive, take complete frames out.
#[derive(Debug)]
pub struct Parser {
    /// The most one event may hold ([`MAX_EVENT`] unless set with [`Parser::with_cap`]).
    cap: usize,
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    /// The previous byte was `\r`, so a `\n` right after it ends nothing more.
    after_cr: bool,
    event: Option<String>,
    data: Option<String>,
    /// The last `retry:` the server asked for, in milliseconds.
    pub retry_ms: Option<u64>,
}

impl Default for Parser {
    fn default() -> Self {
        Self::with_cap(MAX_EVENT)
    }
}

impl Parser {
    /// A parser refusing an event that holds more than `cap` bytes.
    pub fn with_cap(cap: usize) -> Self {
        Self {
            cap,
            line: Vec::new(),
            after_cr: false,
            event: None,
            data: None,
            retry_ms: None,
        }
    }

    /// Parses `bytes`, appending the frames they complete to `out`. Refuses, once, an
    /// event holding more than the cap; the stream is of no further use then.
    pub fn push(
        &mut self,
        bytes: &[u8],
        out: &mut VecDeque<Frame>,
    ) -> std::result::Result<(), TooLarge> {
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
            if self.held() > self.cap {
                return Err(TooLarge { cap: self.cap });
            }
        }
        Ok(())
    }

    /// The bytes held for the event being read.
    fn held(&self) -> usize {
        self.line.len()
            + self.event.as_ref().map_or(0, String::len)
            + self.data.as_ref().map_or(0, String::len)
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
    /// Why the stream broke, told once the frames completed before are taken.
    broken: Option<Error>,
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
    pub(crate) fn new(response: reqwest::Response, path: String, max_event: usize) -> Self {
        Self {
            response,
            parser: Parser::with_cap(max_event),
            ready: VecDeque::new(),
            broken: None,
            path,
        }
    }

    /// The next frame; `None` when the server ended the stream.
    pub async fn next(&mut self) -> Result<Option<Frame>> {
        loop {
            if let Some(f) = self.ready.pop_front() {
                return Ok(Some(f));
            }
            if let Some(e) = self.broken.take() {
                return Err(e);
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
                Some(bytes) => {
                    if let Err(TooLarge { cap }) = self.parser.push(&bytes, &mut self.ready) {
                        self.broken = Some(Error::Protocol {
                            method: "GET".into(),
                            path: self.path.clone(),
                            status: 200,
                            message: format!(
                                "an event of the stream is larger than {}, the most this client buffers for one event",
                                crate::response::size(cap)
                            ),
                        });
                    }
                }
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
            p.push(c, &mut out).expect("within the cap");
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

    /// Neither one endless line nor many lines of one event are held past the cap.
    #[test]
    fn an_event_past_the_cap_is_refused_however_it_grows() {
        let cases: [&[u8]; 3] = [
            &[b'a'; 200],
            &b"data: 0123456789\n".repeat(6),
            b"event: 0123456789012345678901234567890123456789\ndata: 0123456789\n",
        ];
        for bytes in cases {
            let mut p = Parser::with_cap(50);
            let mut out = VecDeque::new();
            assert_eq!(p.push(bytes, &mut out), Err(TooLarge { cap: 50 }));
        }
        // Events dispatched free their bytes: many small ones pass a small cap.
        let mut p = Parser::with_cap(50);
        let mut out = VecDeque::new();
        for _ in 0..100 {
            p.push(b"data: 0123456789\n\n", &mut out)
                .expect("within the cap");
        }
        assert_eq!(out.len(), 100);
    }

    #[test]
    fn an_event_without_data_is_dropped_and_unknown_fields_ignored() {
        let (frames, _) = parse(&[b"event: lonely\r\n\r\nid: 7\rdata\r\r"]);
        assert_eq!(frames, vec![ev("message", "")]);
    }
}
