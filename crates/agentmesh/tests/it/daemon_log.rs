//! A daemon's stderr, read by the tests that start `agentmesh serve` as a
//! process: every line kept with the instant it was read, and the address of
//! `listening on http://ADDR (token file: PATH)` handed over once printed.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// The lines a daemon wrote to stderr so far, read on a thread of its own for
/// the daemon's whole life, so the daemon never blocks on a full pipe.
pub(crate) struct DaemonLog {
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
    address: mpsc::Receiver<String>,
}

impl DaemonLog {
    /// Starts `command` (a daemon) with no stdin or stdout, and reads its
    /// stderr.
    pub(crate) fn spawn(command: &mut Command) -> (Child, DaemonLog) {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the daemon starts");
        let log = DaemonLog::watch(child.stderr.take().expect("piped stderr"));
        (child, log)
    }

    /// Starts reading `stderr`.
    pub(crate) fn watch(stderr: ChildStderr) -> DaemonLog {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, address) = mpsc::channel();
        let kept = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.trim().strip_prefix("listening on ") {
                    let _ = tx.send(rest.split_whitespace().next().unwrap_or_default().to_owned());
                }
                kept.lock().unwrap().push((Instant::now(), line));
            }
        });
        DaemonLog { lines, address }
    }

    /// The URL the daemon listens on, once it printed it; panics with the log
    /// when it did not within `deadline`.
    pub(crate) fn address(&self, deadline: Duration) -> String {
        self.address
            .recv_timeout(deadline)
            .unwrap_or_else(|_| panic!("the daemon printed no address:\n{}", self.text()))
    }

    /// The instant of the first line that contains every one of `needles`.
    pub(crate) fn logged(&self, needles: &[&str]) -> Option<Instant> {
        let lines = self.lines.lock().unwrap();
        lines.iter().find(|(_, line)| needles.iter().all(|n| line.contains(n))).map(|(at, _)| *at)
    }

    /// Every line so far, for a failure message.
    pub(crate) fn text(&self) -> String {
        self.lines.lock().unwrap().iter().map(|(_, l)| l.as_str()).collect::<Vec<_>>().join("\n")
    }
}
