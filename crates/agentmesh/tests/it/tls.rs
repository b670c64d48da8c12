//! HTTPS end to end: the real binary's `serve --tls-cert/--tls-key` with a CA and
//! server certificate made here, the CLI trusting that CA through `--ca-cert`,
//! a client without it refused with the certificate problem named, and the
//! warning a daemon logs when it listens beyond loopback without TLS.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use serde_json::json;

use super::agentmesh;

/// Writes a CA certificate (`ca.pem`) and a server certificate it signed for
/// `localhost` and `127.0.0.1` (`server.pem`, `server-key.pem`) into `dir`;
/// returns the server certificate and key in DER.
fn write_certificates(dir: &Path) -> (Vec<u8>, Vec<u8>) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let server_params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    let server = server_params.signed_by(&server_key, &issuer).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("server.pem"), server.pem()).unwrap();
    std::fs::write(dir.join("server-key.pem"), server_key.serialize_pem()).unwrap();
    (server.der().to_vec(), server_key.serialize_der())
}

/// A daemon run by the test, killed when dropped.
struct Daemon {
    child: Child,
    url: String,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `serve` on `data_dir` with `extra` arguments and waits for its
/// `listening on` line.
fn start(data_dir: &Path, extra: &[&str]) -> (Daemon, std::process::ChildStderr) {
    let mut child = agentmesh()
        .arg("--data-dir")
        .arg(data_dir)
        .arg("serve")
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let url = line
        .strip_prefix("listening on ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_owned();
    (Daemon { child, url }, stderr)
}

/// Runs the CLI against `url` with the data dir's token, returning its output.
fn client(data_dir: &Path, url: &str, ca: Option<&Path>, args: &[&str]) -> std::process::Output {
    let mut command = agentmesh();
    command.arg("--server").arg(url).arg("--token-file").arg(data_dir.join("daemon.token"));
    if let Some(ca) = ca {
        command.arg("--ca-cert").arg(ca);
    }
    command.args(args).output().unwrap()
}

#[test]
fn the_cli_adds_and_lists_a_task_over_https_trusting_the_ca_and_is_refused_without_it() {
    let dir = tempfile::tempdir().unwrap();
    write_certificates(dir.path());
    let data_dir = dir.path().join("data");
    let cert = dir.path().join("server.pem");
    let key = dir.path().join("server-key.pem");
    let (daemon, _stderr) = start(
        &data_dir,
        &[
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    assert!(daemon.url.starts_with("https://127.0.0.1:"), "{}", daemon.url);
    let ca = dir.path().join("ca.pem");

    let added = client(&data_dir, &daemon.url, Some(&ca), &["--json", "task", "add", "ship over tls"]);
    assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
    let listed = client(&data_dir, &daemon.url, Some(&ca), &["--json", "task", "list"]);
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    assert!(String::from_utf8_lossy(&listed.stdout).contains("ship over tls"));

    let worked = client(
        &data_dir,
        &daemon.url,
        Some(&ca),
        &["work", "--node", "n1", "--session", "w1", "--once", "--", "true"],
    );
    assert!(worked.status.success(), "{}", String::from_utf8_lossy(&worked.stderr));
    let shown =
        client(&data_dir, &daemon.url, Some(&ca), &["--json", "task", "list", "--status", "completed"]);
    assert!(
        String::from_utf8_lossy(&shown.stdout).contains("ship over tls"),
        "{}",
        String::from_utf8_lossy(&shown.stdout)
    );

    let script = dir.path().join("mcp.jsonl");
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "agentmesh-test", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "enqueue_task", "arguments": {"message": "from mcp over tls", "id": "t-mcp"}}}),
    ];
    std::fs::write(&script, lines.iter().map(|line| format!("{line}\n")).collect::<String>()).unwrap();
    let mut mcp = agentmesh();
    mcp.arg("--server").arg(&daemon.url).arg("--token-file").arg(data_dir.join("daemon.token"));
    mcp.arg("--ca-cert").arg(&ca).arg("mcp").stdin(std::fs::File::open(&script).unwrap());
    let answered = mcp.output().unwrap();
    assert!(answered.status.success(), "{}", String::from_utf8_lossy(&answered.stderr));
    let listed = client(&data_dir, &daemon.url, Some(&ca), &["--json", "task", "list"]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains("from mcp over tls"));

    let refused = client(&data_dir, &daemon.url, None, &["task", "list"]);
    assert!(!refused.status.success());
    let text = String::from_utf8_lossy(&refused.stderr).to_lowercase();
    assert!(text.contains("tls handshake failed") && text.contains("invalid peer certificate"), "{text}");
    assert!(text.contains("--ca-cert") && !text.contains("start one"), "{text}");
}

#[test]
fn a_daemon_on_every_address_without_tls_warns_that_the_token_crosses_in_clear() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, stderr) = start(&dir.path().join("data"), &["--listen", "0.0.0.0:0"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        let Some(Ok(line)) = lines.next() else { break };
        if line.contains("without TLS") {
            assert!(line.contains("--tls-cert") && line.contains("reverse proxy"), "{line}");
            drop(daemon);
            return;
        }
        seen.push(line);
        if seen.iter().any(|l| l.starts_with("listening on")) {
            break;
        }
    }
    panic!("no warning among {seen:?}");
}

/// A TLS listener that is not agentmesh: it answers every connection with one
/// fixed HTTP response (an empty JSON list). Returns its port.
fn fixed_tls_server(cert: Vec<u8>, key: Vec<u8>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert)],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                    let mut head = Vec::new();
                    let mut buf = [0_u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n[]";
                    let _ = tls.write_all(answer.as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
    });
    port
}

#[test]
fn the_client_speaks_tls_to_a_server_that_is_not_agentmesh() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = write_certificates(dir.path());
    let port = fixed_tls_server(cert, key);
    let token = dir.path().join("token");
    std::fs::write(&token, "any-token\n").unwrap();
    let url = format!("https://127.0.0.1:{port}");
    let mut command = agentmesh();
    command.arg("--server").arg(&url).arg("--token-file").arg(&token);
    command.arg("--ca-cert").arg(dir.path().join("ca.pem"));
    let listed = command.args(["--json", "task", "list"]).output().unwrap();
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    assert_eq!(String::from_utf8_lossy(&listed.stdout).trim(), "[]");
}

#[test]
fn a_connection_that_never_sends_a_client_hello_is_closed_at_the_header_timeout() {
    use std::io::Read;

    let dir = tempfile::tempdir().unwrap();
    write_certificates(dir.path());
    let cert = dir.path().join("server.pem");
    let key = dir.path().join("server-key.pem");
    let (daemon, _stderr) = start(
        &dir.path().join("data"),
        &[
            "--listen",
            "127.0.0.1:0",
            "--header-timeout",
            "1s",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let addr = daemon.url.strip_prefix("https://").unwrap();
    let mut silent = std::net::TcpStream::connect(addr).unwrap();
    silent.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = [0_u8; 64];
    // The daemon closes the connection: the read ends (0 bytes or a reset)
    // instead of timing out on our side.
    match silent.read(&mut buf) {
        Ok(n) => assert_eq!(n, 0, "the daemon sent {n} bytes to a client that said nothing"),
        Err(err) => assert!(
            !matches!(err.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
            "the daemon kept the silent connection open: {err}"
        ),
    }
}

#[test]
fn an_unreadable_or_empty_ca_file_is_an_invalid_ca_cert() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "any-token\n").unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    for ca in [dir.path().join("missing.pem"), empty] {
        let mut command = agentmesh();
        command
            .args(["--server", "https://127.0.0.1:9", "--token-file"])
            .arg(&token)
            .arg("--ca-cert")
            .arg(&ca);
        let out = command.args(["--json", "task", "list"]).output().unwrap();
        assert!(!out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("invalid_input") && text.contains("caCert"), "{text}");
    }
}

#[test]
fn serve_refuses_a_certificate_file_without_a_certificate_naming_tls_cert() {
    let dir = tempfile::tempdir().unwrap();
    write_certificates(dir.path());
    let not_a_cert = dir.path().join("not-a-cert.pem");
    std::fs::write(&not_a_cert, "hello\n").unwrap();
    let key = dir.path().join("server-key.pem");
    let out = agentmesh()
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["serve", "--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&not_a_cert)
        .arg("--tls-key")
        .arg(&key)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("tlsCert") && text.contains("not-a-cert.pem"), "{text}");
    assert!(String::from_utf8_lossy(&out.stdout).is_empty(), "it must not start listening");
    assert!(!dir.path().join("data").exists(), "it must not create the data dir");
}
