//! The load cases' HTTP client: one keep-alive HTTP/1.1 connection that posts JSON
//! with the bearer token and reads each answer by its `Content-Length`.
//!
//! The clients share the machine with the daemon they measure, so what they cost
//! comes out of the daemon's share of the cores. A general client pays per request
//! for things a load generator never needs (reqwest parses the URL, checks a
//! connection out of its pool and sets up redirect and retry handling), and under
//! the `http` loads that was about half of the client side's CPU. This one writes
//! each request in one `write` and parses the answer's head with `httparse`; the
//! requests and answers are still real HTTP on a real loopback socket.

use std::net::SocketAddr;

use anyhow::Context as _;
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 16 * 1024;
/// Header lines an answer may have.
const MAX_HEADERS: usize = 32;

/// One keep-alive connection to a server.
pub(super) struct HttpConn {
    stream: TcpStream,
    /// The `Host` header's value.
    host: String,
    /// The token sent as `Authorization: Bearer`.
    token: String,
    /// Bytes read but not yet consumed.
    inbox: Vec<u8>,
    /// The request being written (kept to reuse its allocation).
    request: Vec<u8>,
}

impl HttpConn {
    /// Connects to `addr` (with `TCP_NODELAY`, as a worker's client would).
    pub(super) async fn connect(addr: SocketAddr, token: &str) -> anyhow::Result<HttpConn> {
        let stream =
            TcpStream::connect(addr).await.with_context(|| format!("failed to connect to {addr}"))?;
        stream.set_nodelay(true)?;
        Ok(HttpConn {
            stream,
            host: addr.to_string(),
            token: token.to_owned(),
            inbox: Vec::with_capacity(READ_CHUNK),
            request: Vec::with_capacity(1024),
        })
    }

    /// Posts `body` to `path`; the decoded JSON answer, or an error on any status
    /// but 200 and 201.
    pub(super) async fn post_json(&mut self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let body = serde_json::to_vec(body)?;
        self.request.clear();
        self.request.extend_from_slice(
            format!(
                "POST {path} HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {}\r\n\
                 content-type: application/json\r\ncontent-length: {}\r\n\r\n",
                self.host,
                self.token,
                body.len()
            )
            .as_bytes(),
        );
        self.request.extend_from_slice(&body);
        self.stream.write_all(&self.request).await.with_context(|| format!("failed to send to {path}"))?;
        let (status, answer) = self.read_answer().await.with_context(|| format!("no answer from {path}"))?;
        let answer: Value = serde_json::from_slice(&answer)
            .with_context(|| format!("{path} answered {status} without JSON"))?;
        anyhow::ensure!(status == 200 || status == 201, "{path} answered {status}: {answer}");
        Ok(answer)
    }

    /// Reads one answer: its status and body.
    async fn read_answer(&mut self) -> anyhow::Result<(u16, Vec<u8>)> {
        let (head, status, length) = loop {
            if let Some(parsed) = parse_head(&self.inbox)? {
                break parsed;
            }
            self.fill().await?;
        };
        while self.inbox.len() < head + length {
            self.fill().await?;
        }
        let body = self.inbox[head..head + length].to_vec();
        self.inbox.drain(..head + length);
        Ok((status, body))
    }

    /// Reads more bytes onto `inbox`; an error when the server closed the connection.
    async fn fill(&mut self) -> anyhow::Result<()> {
        self.inbox.reserve(READ_CHUNK);
        let read = self.stream.read_buf(&mut self.inbox).await?;
        anyhow::ensure!(read > 0, "the server closed the connection");
        Ok(())
    }
}

/// The length of a complete answer head in `bytes`, its status and its body's
/// `Content-Length`; `None` while the head is incomplete.
fn parse_head(bytes: &[u8]) -> anyhow::Result<Option<(usize, u16, usize)>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut answer = httparse::Response::new(&mut headers);
    let httparse::Status::Complete(head) = answer.parse(bytes).context("a malformed answer head")? else {
        return Ok(None);
    };
    let status = answer.code.context("an answer without a status")?;
    let length = answer
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .context("an answer without a Content-Length")?;
    let length = std::str::from_utf8(length.value)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .context("an answer with an unreadable Content-Length")?;
    Ok(Some((head, status, length)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_read_once_complete() {
        let answer =
            b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}";
        let head = answer.len() - 7;
        assert_eq!(parse_head(answer).unwrap(), Some((head, 201, 7)));
        assert_eq!(parse_head(&answer[..head - 2]).unwrap(), None);
        assert!(parse_head(b"HTTP/1.1 200 OK\r\n\r\n").is_err(), "no Content-Length");
        assert!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n").is_err());
    }
}
