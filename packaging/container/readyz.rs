//! The container's health check: `readyz http://127.0.0.1:7433/readyz` exits 0
//! when the daemon answers 200 (its store can write) and 1 otherwise, saying
//! why on stderr. A scratch image has no curl or wget; this needs only std and
//! builds with rustc alone, statically linked:
//!
//!     rustc --edition 2021 -O -C target-feature=+crt-static -C strip=symbols \
//!         packaging/container/readyz.rs -o target/container/readyz
//!
//! It speaks plain HTTP/1.1 to an IP address and port; no name lookup, no TLS
//! (a daemon serving HTTPS is checked from outside the container instead).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

/// How long the connection, the request and the answer may each take.
const TIMEOUT: Duration = Duration::from_secs(5);

fn main() -> ExitCode {
    let url = std::env::args().nth(1).unwrap_or_else(|| "http://127.0.0.1:7433/readyz".to_owned());
    match check(&url) {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("readyz: {url}: {why}");
            ExitCode::FAILURE
        }
    }
}

fn check(url: &str) -> Result<(), String> {
    let rest = url.strip_prefix("http://").ok_or("not an http:// URL")?;
    let (authority, path) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, "/"),
    };
    let addr: SocketAddr =
        authority.parse().map_err(|_| format!("{authority:?} is not an IP address and port"))?;
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT).map_err(|e| format!("connect: {e}"))?;
    stream.set_read_timeout(Some(TIMEOUT)).map_err(|e| e.to_string())?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(|e| e.to_string())?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).map_err(|e| format!("send: {e}"))?;
    // The status line is all this needs; read until its end or the close.
    let mut head = Vec::new();
    let mut buf = [0u8; 512];
    while !head.contains(&b'\n') && head.len() < 4096 {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("receive: {e}")),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let status_line = head.lines().next().unwrap_or("").trim();
    let mut parts = status_line.split(' ');
    match (parts.next(), parts.next()) {
        (Some(version), Some("200")) if version.starts_with("HTTP/1.") => Ok(()),
        _ if status_line.is_empty() => Err("no answer".to_owned()),
        _ => Err(format!("answered {status_line:?}")),
    }
}
