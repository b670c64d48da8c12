//! The packaging files, run as they are written: the systemd unit
//! (`packaging/agentmesh.service`: its `ExecStart=` and `Environment=` lines) and
//! the container image (`packaging/Containerfile`: its `ENTRYPOINT`, `CMD` and
//! `ENV`) each start the binary under test, and `/readyz` answers 200 over
//! HTTP; the container's `HEALTHCHECK` probe (`packaging/container/readyz.rs`,
//! compiled here with rustc) says the same, and says otherwise once the daemon
//! is gone; SIGTERM stops the daemon with exit status 0, which systemd's
//! `Restart=on-failure` takes as a clean stop.
//!
//! What a test cannot share with an installation is substituted, and nothing else:
//!
//! - the program, `/usr/local/bin/agentmesh` in both files, by the binary under test;
//! - the data dir, the unit's `${STATE_DIRECTORY}` (which systemd sets from
//!   `StateDirectory=`) and the image's `AGENTMESH_HOME`, by a temp dir;
//! - the port of `--listen` (and of the health check's URL) by a free loopback
//!   port, and the image's `0.0.0.0` by `127.0.0.1`.
//!
//! The process gets exactly the environment the file declares (systemd's
//! `STATE_DIRECTORY` included for the unit), nothing inherited.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Where both files install the program (`cargo install --root /usr/local`).
const PROGRAM: &str = "/usr/local/bin/agentmesh";
/// How long the daemon gets to answer `/readyz` with 200, and to stop.
const DEADLINE: Duration = Duration::from_secs(30);

fn packaging(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging").join(file)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The logical lines of a file: comments and blank lines dropped, a line that
/// ends with `\` joined to the next.
fn logical_lines(text: &str, comment: &[char]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if pending.is_empty() && (trimmed.is_empty() || trimmed.starts_with(comment)) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head);
                pending.push(' ');
            }
            None => {
                pending.push_str(trimmed);
                lines.push(std::mem::take(&mut pending));
            }
        }
    }
    assert!(pending.is_empty(), "the last line ends with a backslash");
    lines
}

/// Words as systemd splits a command line or an `Environment=` value: on white
/// space, with double quotes holding a word together.
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    // The word being read, if any.
    let mut word: Option<String> = None;
    let mut quoted = false;
    for c in line.chars() {
        if c == '"' {
            quoted = !quoted;
            word.get_or_insert_default();
        } else if c.is_whitespace() && !quoted {
            words.extend(word.take());
        } else {
            word.get_or_insert_default().push(c);
        }
    }
    assert!(!quoted, "unbalanced quotes in {line:?}");
    words.extend(word);
    words
}

/// `KEY=VALUE` words as a map.
fn assignments(words: &[String], what: &str) -> BTreeMap<String, String> {
    words
        .iter()
        .map(|word| {
            let (key, value) =
                word.split_once('=').unwrap_or_else(|| panic!("{what}: {word:?} is not KEY=VALUE"));
            (key.to_owned(), value.to_owned())
        })
        .collect()
}

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0)).expect("a free port").local_addr().expect("its address").port()
}

/// The arguments with `--listen`'s address moved to 127.0.0.1:`port`; the port
/// the file gave.
fn listen_on(args: &mut [String], port: u16) -> u16 {
    let at = args.iter().position(|a| a == "--listen").expect("the arguments give --listen") + 1;
    let (host, given) = args[at].rsplit_once(':').expect("--listen HOST:PORT");
    assert!(
        ["127.0.0.1", "0.0.0.0"].contains(&host),
        "--listen {}: a loopback or any-address host",
        args[at]
    );
    let given = given.parse().expect("--listen's port");
    args[at] = format!("127.0.0.1:{port}");
    given
}

/// The unit's `[Service]` settings: every value of every key, in order.
fn service_section(unit: &str) -> BTreeMap<String, Vec<String>> {
    let mut section = String::new();
    let mut settings: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in logical_lines(unit, &['#', ';']) {
        if line.starts_with('[') {
            section = line;
            continue;
        }
        let (key, value) = line.split_once('=').unwrap_or_else(|| panic!("not KEY=VALUE: {line:?}"));
        if section == "[Service]" {
            settings.entry(key.trim().to_owned()).or_default().push(value.trim().to_owned());
        }
    }
    settings
}

/// `agentmesh` with `args` and exactly `env`, its output kept in files of `dir`.
struct Daemon {
    child: Child,
    dir: PathBuf,
}

impl Daemon {
    fn start(args: &[String], env: &BTreeMap<String, String>, dir: &Path) -> Daemon {
        let child = Command::new(env!("CARGO_BIN_EXE_agentmesh"))
            .args(args)
            .env_clear()
            .envs(env)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(File::create(dir.join("stdout.txt")).expect("the stdout file"))
            .stderr(File::create(dir.join("stderr.txt")).expect("the stderr file"))
            .spawn()
            .expect("agentmesh starts");
        Daemon { child, dir: dir.to_owned() }
    }

    fn output(&self) -> String {
        let (out, err) = (read(&self.dir.join("stdout.txt")), read(&self.dir.join("stderr.txt")));
        format!("stdout:\n{out}\nstderr:\n{err}")
    }

    /// Waits until `GET /readyz` answers 200 over HTTP.
    fn wait_ready(&mut self, port: u16) {
        let http = reqwest::blocking::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
        let url = format!("http://127.0.0.1:{port}/readyz");
        let until = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!("the daemon exited ({status}) before it was ready\n{}", self.output());
            }
            let answer = http.get(&url).send().map(|r| r.status());
            if answer.as_ref().is_ok_and(|status| *status == reqwest::StatusCode::OK) {
                return;
            }
            assert!(Instant::now() < until, "{url} did not answer 200 ({answer:?})\n{}", self.output());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, as `systemctl stop` and `podman stop` send it; the exit status.
    fn terminate(mut self) -> (ExitStatus, String) {
        agentmesh_test_support::signal(self.child.id(), "TERM").expect("kill -TERM");
        let until = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return (status, self.output());
            }
            assert!(Instant::now() < until, "SIGTERM did not stop the daemon\n{}", self.output());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_systemd_unit_starts_a_daemon_that_is_ready() {
    let unit = read(&packaging("agentmesh.service"));
    let service = service_section(&unit);
    let one = |key: &str| match service.get(key).map(Vec::as_slice) {
        Some([value]) => value.clone(),
        other => panic!("{key}= once in [Service], found {other:?}"),
    };
    assert_eq!(one("DynamicUser"), "yes", "the daemon runs as a user of its own");
    assert_eq!(one("StateDirectory"), "agentmesh");
    assert_eq!(one("Restart"), "on-failure");

    let dir = tempfile::tempdir().expect("a temp dir");
    let state = dir.path().join("state");
    let state_str = state.to_str().expect("a UTF-8 path");
    let mut args = words(&one("ExecStart"));
    assert_eq!(args.remove(0), PROGRAM, "ExecStart runs the installed program");
    for arg in &mut args {
        *arg = arg.replace("${STATE_DIRECTORY}", state_str);
    }
    assert!(args.iter().any(|a| a == state_str), "the data dir is systemd's state directory: {args:?}");
    let port = free_port();
    let unit_port = listen_on(&mut args, port);
    assert_eq!(unit_port, 7433, "the unit listens on the daemon's default port");

    let mut env = BTreeMap::new();
    for line in service.get("Environment").into_iter().flatten() {
        env.extend(assignments(&words(line), "Environment="));
    }
    // systemd creates the state directory (mode StateDirectoryMode=) and names it.
    std::fs::create_dir(&state).expect("the state directory");
    env.insert("STATE_DIRECTORY".to_owned(), state_str.to_owned());

    let mut daemon = Daemon::start(&args, &env, dir.path());
    daemon.wait_ready(port);
    assert!(state.join("mesh-runtime.db").is_file(), "the database is in the state directory");
    assert!(state.join("daemon.token").is_file(), "the token is in the state directory");
    let (status, output) = daemon.terminate();
    assert!(status.success(), "SIGTERM is a clean stop, not a failure to restart on ({status})\n{output}");
}

/// The Containerfile's instructions: each keyword with its arguments, in order.
fn instructions(text: &str) -> Vec<(String, String)> {
    logical_lines(text, &['#'])
        .into_iter()
        .map(|line| {
            let (keyword, rest) = line.split_once(char::is_whitespace).unwrap_or((&line, ""));
            (keyword.to_ascii_uppercase(), rest.trim().to_owned())
        })
        .collect()
}

/// A JSON array of strings (the exec form of `ENTRYPOINT`, `CMD`, `VOLUME`).
fn exec_form(what: &str, json: &str) -> Vec<String> {
    let value: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{what} {json}: not JSON ({e})"));
    value
        .as_array()
        .and_then(|items| items.iter().map(|v| v.as_str().map(str::to_owned)).collect())
        .unwrap_or_else(|| panic!("{what} {json}: not an array of strings"))
}

/// The health probe, compiled once from `packaging/container/readyz.rs` with the
/// toolchain's rustc (`$RUSTC`, else `rustc` on PATH), to a file of this process
/// renamed into place, so two test runs at once never run a half-written one.
fn readyz_probe() -> &'static Path {
    static PROBE: OnceLock<PathBuf> = OnceLock::new();
    PROBE.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let out = dir.join(format!("readyz-{}", std::process::id()));
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        let built = Command::new(&rustc)
            .args(["--edition", "2021", "-O"])
            .arg(packaging("container/readyz.rs"))
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap_or_else(|e| panic!("{} did not run: {e}", rustc.to_string_lossy()));
        assert!(
            built.status.success(),
            "rustc readyz.rs failed:\n{}",
            String::from_utf8_lossy(&built.stderr)
        );
        let probe = dir.join("readyz");
        std::fs::rename(&out, &probe).unwrap_or_else(|e| panic!("renaming {}: {e}", out.display()));
        probe
    })
}

#[test]
fn the_container_image_starts_a_daemon_that_is_ready_and_healthy() {
    let containerfile = read(&packaging("Containerfile"));
    let instructions = instructions(&containerfile);
    let all = |keyword: &str| -> Vec<&str> {
        instructions.iter().filter(|(k, _)| k == keyword).map(|(_, rest)| rest.as_str()).collect()
    };
    let last = |keyword: &str| -> String {
        all(keyword).last().unwrap_or_else(|| panic!("no {keyword} in the Containerfile")).to_string()
    };
    assert_eq!(instructions.first().map(|(k, _)| k.as_str()), Some("FROM"), "{containerfile}");
    let user = last("USER");
    assert!(!["root", "0", "0:0"].contains(&user.as_str()), "USER {user}: not root");

    let mut env = BTreeMap::new();
    for rest in all("ENV") {
        let words = words(rest);
        match words.as_slice() {
            // The old form: ENV KEY VALUE.
            [key, value] if !key.contains('=') => {
                env.insert(key.clone(), value.clone());
            }
            _ => env.extend(assignments(&words, "ENV")),
        }
    }
    let home = env.get("AGENTMESH_HOME").cloned().expect("ENV AGENTMESH_HOME names the data dir");
    let volumes: Vec<String> = all("VOLUME").iter().flat_map(|rest| exec_form("VOLUME", rest)).collect();
    assert!(volumes.contains(&home), "the data dir {home} is a VOLUME ({volumes:?})");

    let mut args = exec_form("ENTRYPOINT", &last("ENTRYPOINT"));
    args.extend(exec_form("CMD", &last("CMD")));
    assert_eq!(args.remove(0), PROGRAM, "the entry point is the installed program");
    let port = free_port();
    let image_port = listen_on(&mut args, port);
    assert_eq!(last("EXPOSE"), image_port.to_string(), "EXPOSE is the port the daemon listens on");

    // The health check: options, then CMD and the probe's exec form.
    let healthcheck = last("HEALTHCHECK");
    let (_, probe_cmd) = healthcheck.split_once(" CMD ").expect("HEALTHCHECK [OPTIONS] CMD [...]");
    let probe_args = exec_form("HEALTHCHECK CMD", probe_cmd.trim());
    let probe_url = format!("http://127.0.0.1:{image_port}/readyz");
    assert_eq!(
        probe_args,
        ["/usr/local/bin/readyz".to_owned(), probe_url],
        "the health check asks the daemon's /readyz: {healthcheck}"
    );

    // The build script lays out what the COPY lines take.
    let build = read(&packaging("container/build.sh"));
    for staged in ["rootfs/usr/local/bin/agentmesh", "rootfs/usr/local/bin/readyz", "state/agentmesh"] {
        assert!(build.contains(staged), "build.sh stages {staged}");
    }
    let copies = all("COPY");
    assert!(copies.contains(&"rootfs/ /"), "{copies:?}");
    assert!(
        copies.iter().any(|c| c.starts_with(&format!("--chown={user}")) && c.ends_with("state/ /var/lib/")),
        "the data dir is copied in owned by USER {user}: {copies:?}"
    );
    assert_eq!(home, "/var/lib/agentmesh");

    let dir = tempfile::tempdir().expect("a temp dir");
    let data = dir.path().join("data");
    env.insert("AGENTMESH_HOME".to_owned(), data.to_str().expect("a UTF-8 path").to_owned());
    let mut daemon = Daemon::start(&args, &env, dir.path());
    daemon.wait_ready(port);
    assert!(data.join("mesh-runtime.db").is_file(), "the database is in AGENTMESH_HOME");

    let probe = readyz_probe();
    let url = format!("http://127.0.0.1:{port}/readyz");
    let healthy = Command::new(probe).arg(&url).output().expect("the probe runs");
    assert!(
        healthy.status.success(),
        "the health check failed: {}",
        String::from_utf8_lossy(&healthy.stderr)
    );

    let (status, output) = daemon.terminate();
    assert!(status.success(), "SIGTERM is a clean stop ({status})\n{output}");
    let gone = Command::new(probe).arg(&url).output().expect("the probe runs");
    assert!(!gone.status.success(), "the health check fails once the daemon is gone");
    let said = String::from_utf8_lossy(&gone.stderr);
    assert!(said.contains(&url), "the probe names what it asked: {said}");
}
