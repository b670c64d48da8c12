//! End-to-end tests of the conventions a command-line user expects of the
//! `agentmesh` binary: shell completions and manual pages generated from the
//! command line's definitions, `--version` naming the commit, an example in
//! every command's help, durations with units, errors that say what to do next,
//! and a worker that ends its command's process group by itself.
//!
//! Every test runs the real binary; the error tests run it against a real
//! daemon (`agentmesh serve`) on a loopback port of its own.

use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

use super::cli::Run;

/// How long any wait may take before the test gives up.
const DEADLINE: Duration = Duration::from_secs(60);

/// The binary under test, with an environment that cannot leak a developer's mesh.
fn agentmesh() -> Command {
    let mut cmd = super::agentmesh();
    cmd.stdin(Stdio::null());
    cmd
}

/// Runs `agentmesh --data-dir DIR ARGS`.
fn run(dir: &Path, args: &[&str]) -> Run {
    Run::of(agentmesh().arg("--data-dir").arg(dir).args(args))
}

/// A loopback port nothing listened on a moment ago.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

/// A daemon (`agentmesh serve`) on a loopback port of its own, over a temp data dir.
struct Daemon {
    dir: TempDir,
    child: Child,
    url: String,
}

impl Daemon {
    fn start() -> Daemon {
        let dir = tempfile::tempdir().expect("a temp dir");
        let addr = format!("127.0.0.1:{}", free_port());
        let child = agentmesh()
            .arg("--data-dir")
            .arg(dir.path())
            .args(["serve", "--listen", &addr])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve starts");
        let mut daemon = Daemon { dir, child, url: format!("http://{addr}") };
        // Up once it answers /healthz (the token file is written before it listens).
        let until = Instant::now() + DEADLINE;
        while !healthy(&addr) {
            if let Some(status) = daemon.child.try_wait().expect("try_wait") {
                panic!("the daemon exited before it answered: {status}");
            }
            assert!(Instant::now() < until, "the daemon never answered on {addr}");
            std::thread::sleep(Duration::from_millis(20));
        }
        daemon
    }

    fn token_file(&self) -> PathBuf {
        self.dir.path().join("daemon.token")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether an HTTP `GET /healthz` on `addr` is answered 200.
fn healthy(addr: &str) -> bool {
    use std::io::Read as _;
    let Ok(mut stream) = TcpStream::connect(addr) else { return false };
    let request = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let mut answer = String::new();
    stream.write_all(request.as_bytes()).is_ok()
        && stream.read_to_string(&mut answer).is_ok()
        && answer.starts_with("HTTP/1.1 200")
}

// The OpenAPI document.

#[test]
fn openapi_prints_without_a_daemon_the_document_a_daemon_serves() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let printed = run(&dir.path().join("no-such-data-dir"), &["openapi"]).code(0).json();
    assert_eq!(printed["openapi"], "3.1.0");
    assert!(!dir.path().join("no-such-data-dir").exists(), "openapi needs no data dir");
    let daemon = Daemon::start();
    let served: Value = reqwest::blocking::get(format!("{}/openapi.json", daemon.url))
        .and_then(|response| response.error_for_status())
        .and_then(|response| response.json())
        .expect("GET /openapi.json without a token");
    assert_eq!(printed, served);
    let help = run(dir.path(), &["openapi", "--help"]).code(0).stdout;
    assert!(help.contains("/openapi.json") && help.contains("Examples:"), "{help}");
}

// Completions and manual pages.

#[test]
fn completion_scripts_are_generated_for_each_shell_and_bash_accepts_its_own() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let bash = run(dir.path(), &["completions", "bash"]).code(0).stdout;
    let script = dir.path().join("agentmesh.bash");
    std::fs::write(&script, &bash).expect("write the script");
    let checked = Command::new("bash").arg("-n").arg(&script).output().expect("bash runs");
    assert!(checked.status.success(), "bash -n refuses it: {}", String::from_utf8_lossy(&checked.stderr));
    // Generated from the definitions: the commands and their flags are all there.
    for word in ["import-adhdev", "completions", "--not-before", "--claim-next", "powershell"] {
        assert!(bash.contains(word), "the bash script does not complete {word}");
    }
    for (shell, marker) in [
        ("zsh", "#compdef agentmesh"),
        ("fish", "complete -c agentmesh"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let script = run(dir.path(), &["completions", shell]).code(0).stdout;
        assert!(script.contains(marker), "the {shell} script lacks {marker:?}:\n{script}");
        assert!(script.contains("import-adhdev"), "the {shell} script does not complete import-adhdev");
    }
    let json = run(dir.path(), &["--json", "completions", "fish"]).code(0).json();
    assert_eq!(json["shell"], "fish");
    assert!(json["script"].as_str().is_some_and(|s| s.contains("complete -c agentmesh")), "{json}");
    run(dir.path(), &["completions", "tcsh"]).code(2).says(&["tcsh", "bash", "zsh", "fish", "powershell"]);
}

#[test]
fn manual_pages_render_for_agentmesh_and_each_command() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let root = run(dir.path(), &["man"]).code(0).stdout;
    assert!(root.contains(".TH agentmesh 1"), "{root}");
    assert!(
        root.contains("task") && root.contains("import\\-adhdev"),
        "the root page lists the commands:\n{root}"
    );
    let add = run(dir.path(), &["man", "task", "add"]).code(0).stdout;
    assert!(add.contains(".TH agentmesh-task-add 1"), "{add}");
    assert!(add.contains("\\-\\-not\\-before") && add.contains("Examples:"), "flags and examples:\n{add}");

    // groff renders it as man(1) would, with the synopsis of the full command.
    let groff = agentmesh_test_support::require!(agentmesh_test_support::Tool::Groff);
    let mut groff = Command::new(groff)
        .args(["-man", "-Tutf8"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("groff runs");
    groff.stdin.take().expect("stdin").write_all(add.as_bytes()).expect("write the page");
    let rendered = groff.wait_with_output().expect("groff finishes");
    assert!(rendered.status.success());
    // Bold and underline are overstruck (`a\x08a`): a backspace takes back the
    // character before it.
    let mut plain = String::new();
    for c in String::from_utf8_lossy(&rendered.stdout).chars() {
        match c {
            '\u{8}' => drop(plain.pop()),
            '\u{2010}' | '\u{2212}' => plain.push('-'),
            c => plain.push(c),
        }
    }
    assert!(plain.contains("SYNOPSIS") && plain.contains("agentmesh task add"), "{plain}");

    let pages = dir.path().join("man1");
    let written = run(dir.path(), &["--json", "man", "--out", pages.to_str().unwrap()]).code(0).json();
    let written = written["pages"].as_array().expect("the pages written").len();
    for name in ["agentmesh.1", "agentmesh-task-add.1", "agentmesh-events-watch.1", "agentmesh-man.1"] {
        let page = std::fs::read_to_string(pages.join(name)).unwrap_or_else(|err| panic!("{name}: {err}"));
        assert!(page.contains(".TH"), "{name}");
    }
    assert_eq!(std::fs::read_dir(&pages).expect("the directory").count(), written);
    run(dir.path(), &["man", "task", "nosuch"]).code(2).says(&["agentmesh task", "\"nosuch\""]);
}

// The version.

#[test]
fn version_names_the_commit_it_was_built_from() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let version = run(dir.path(), &["--version"]).code(0).stdout;
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned());
    let commit = head.unwrap_or_else(|| "unknown".to_owned());
    assert_eq!(version.trim(), format!("agentmesh {} ({commit})", env!("CARGO_PKG_VERSION")));
}

// Examples in the help.

/// The subcommands a help text lists under `Commands:` (`help` left out).
fn listed_commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| line.trim() != "Commands:")
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        // A command's line is indented by two; its wrapped description by more.
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_help_of_every_command_shows_an_example() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut pending = vec![Vec::<String>::new()];
    let mut walked = 0;
    while let Some(path) = pending.pop() {
        for flag in ["-h", "--help"] {
            let help = Run::of(agentmesh().args(&path).arg(flag).current_dir(dir.path())).code(0).stdout;
            let examples = help.lines().skip_while(|line| line.trim() != "Examples:").skip(1);
            assert!(
                examples.take_while(|l| !l.trim().is_empty()).any(|l| l.trim().starts_with("agentmesh ")),
                "`agentmesh {} {flag}` shows no example:\n{help}",
                path.join(" ")
            );
            if flag == "--help" {
                for name in listed_commands(&help) {
                    pending.push(path.iter().cloned().chain([name]).collect());
                }
            }
        }
        walked += 1;
    }
    assert!(walked >= 35, "only {walked} commands were walked");
}

// Durations.

#[test]
fn durations_take_units_and_bare_numbers_keep_their_unit() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let json = |args: &[&str]| {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        run(dir.path(), &all).code(0).json()
    };
    let millis = |task: &Value, field: &str| -> i64 {
        let text = task[field].as_str().unwrap_or_else(|| panic!("{field} in {task}"));
        let parsed = chrono_free_millis(text);
        parsed.unwrap_or_else(|| panic!("{field} is not an instant: {text}"))
    };

    // events watch --timeout 1s: an empty inbox, an empty answer after a second.
    let watched = json(&["events", "watch", "--daemon", "mach_A", "--run", "run-1", "--timeout", "1s"]);
    assert_eq!(watched["events"], Value::Array(vec![]), "{watched}");

    // --not-before 90s: ninety seconds after the enqueue.
    let later = json(&["task", "add", "later", "--id", "later", "--not-before", "90s"]);
    let offset = millis(&later, "notBefore") - millis(&later, "createdAt");
    assert!((89_000..=91_000).contains(&offset), "notBefore is {offset} ms after createdAt: {later}");
    // A bare number is milliseconds, as before.
    let soon = json(&["task", "add", "soon", "--id", "soon", "--not-before", "90000"]);
    let offset = millis(&soon, "notBefore") - millis(&soon, "createdAt");
    assert!((89_000..=91_000).contains(&offset), "notBefore is {offset} ms after createdAt: {soon}");

    // claim --lease 1h30m, and the old --lease-secs with a bare number of seconds.
    json(&["task", "add", "now", "--id", "now"]);
    json(&["task", "add", "next", "--id", "next"]);
    let lease = |task: &Value| millis(task, "leaseExpiresAt") - millis(task, "updatedAt");
    let claimed = json(&["claim", "--node", "n1", "--session", "w1", "--lease", "1h30m"]);
    assert!((5_399_000..=5_401_000).contains(&lease(&claimed)), "{claimed}");
    json(&["complete", "--session", "w1", "--summary", "done"]);
    let claimed = json(&["claim", "--node", "n1", "--session", "w1", "--lease-secs", "120"]);
    assert!((119_000..=121_000).contains(&lease(&claimed)), "{claimed}");

    // The records' ages and spans: units, or a bare number of seconds.
    assert_eq!(json(&["dispatches", "mark-stale", "--older-than", "1h30m"])["markedStale"], 0);
    assert_eq!(json(&["events", "held", "--older-than", "90"]), Value::Array(vec![]));
    assert_eq!(json(&["conflicts", "--within", "2d"]), Value::Array(vec![]));
    assert!(json(&["tool-calls", "--within", "30s"]).is_object());

    // Mistakes name the flag and change nothing.
    let before = json(&["task", "list"]).as_array().expect("tasks").len();
    for (args, flag, problem) in [
        (&["task", "add", "x", "--not-before", "5x"][..], "--not-before", "\"x\" is not a unit"),
        (&["task", "add", "x", "--not-before", "400d"][..], "--not-before", "outside the allowed range"),
        (&["claim", "--node", "n", "--session", "s", "--lease", "10 m"][..], "--lease", "is not a duration"),
        (
            &["events", "watch", "--daemon", "d", "--run", "r", "--timeout", "11m"][..],
            "--timeout",
            "1s to 10m",
        ),
        (
            &["events", "watch", "--daemon", "d", "--run", "r", "--timeout", "500ms"][..],
            "--timeout",
            "1s to 10m",
        ),
        (&["work", "--node", "n", "--session", "s", "--lease", "2s", "--", "true"][..], "--lease", "3s to"),
        (&["events", "held", "--older-than", "5x"][..], "--older-than", "\"x\" is not a unit"),
        (&["conflicts", "--within", "10 m"][..], "--within", "is not a duration"),
        (
            &["dispatches", "mark-stale", "--older-than", "500ms"][..],
            "--older-than",
            "outside the allowed range",
        ),
        (&["tool-calls", "--within", "0s"][..], "--within", "outside the allowed range"),
    ] {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let refused = run(dir.path(), &all).code(2);
        refused.says(&[flag, problem]);
        let error = &refused.json()["error"];
        assert_eq!(error["code"], "invalid_input", "{error}");
        assert!(error["message"].as_str().is_some_and(|m| m.contains(flag)), "{error}");
    }
    assert_eq!(json(&["task", "list"]).as_array().expect("tasks").len(), before);
}

/// Milliseconds since the epoch of an ISO-8601 UTC instant as the CLI prints it
/// (`2025-01-01T00:00:00.000Z`).
fn chrono_free_millis(text: &str) -> Option<i64> {
    let (date, time) = text.strip_suffix('Z')?.split_once('T')?;
    let mut ymd = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut hms = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (hms.next()??, hms.next()??, hms.next()??);
    let ms: i64 = format!("{frac:0<3}")[..3].parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hh) * 60 + mm) * 60_000 + ss * 1000 + ms)
}

// Errors that say what to do next.

#[test]
fn no_daemon_at_the_server_says_how_to_start_one() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let server = format!("http://127.0.0.1:{}", free_port());
    let down = Run::of(
        agentmesh()
            .arg("--data-dir")
            .arg(dir.path())
            .args(["--server", &server, "status"])
            .env("AGENTMESH_TOKEN", "t"),
    )
    .code(1);
    down.says(&[&server, "agentmesh serve", "--server"]);
}

#[test]
fn a_refused_token_names_the_token_source_that_was_used() {
    let daemon = Daemon::start();
    let client = tempfile::tempdir().expect("a temp dir");
    let wrong = client.path().join("wrong.token");
    std::fs::write(&wrong, "not-the-token\n").expect("write a token file");

    // --token-file, with its path.
    let refused =
        run(client.path(), &["--server", &daemon.url, "--token-file", wrong.to_str().unwrap(), "status"]);
    refused.code(2).says(&[
        "refused the token from --token-file",
        wrong.to_str().unwrap(),
        "AGENTMESH_TOKEN",
    ]);

    // $AGENTMESH_TOKEN.
    let refused = Run::of(
        agentmesh()
            .arg("--data-dir")
            .arg(client.path())
            .args(["--json", "--server", &daemon.url, "status"])
            .env("AGENTMESH_TOKEN", "not-the-token"),
    )
    .code(2);
    refused.says(&["refused the token from $AGENTMESH_TOKEN"]);
    assert_eq!(refused.json()["error"]["code"], "unauthorized", "{}", refused.stdout);

    // The data dir's daemon.token, with its path: another daemon's token.
    let stale = client.path().join("daemon.token");
    std::fs::write(&stale, "another-daemons-token\n").expect("write a token file");
    let refused = run(client.path(), &["--server", &daemon.url, "status"]).code(2);
    refused.says(&["refused the token from the data dir's token file", stale.to_str().unwrap()]);

    // The right one works.
    let token = daemon.token_file();
    run(client.path(), &["--server", &daemon.url, "--token-file", token.to_str().unwrap(), "status"]).code(0);
}

#[test]
fn a_server_url_with_a_path_is_told_to_use_the_root_url() {
    let daemon = Daemon::start();
    let dir = tempfile::tempdir().expect("a temp dir");
    let token = daemon.token_file();
    let token = token.to_str().unwrap();

    // A route of the daemon in the URL: refused before any request, naming the root.
    for path in ["/v1", "/v1/meshes/default", "/mcp"] {
        let url = format!("{}{path}", daemon.url);
        let refused =
            run(dir.path(), &["--json", "--server", &url, "--token-file", token, "task", "list"]).code(2);
        refused.says(&["invalid server", "use the daemon's root URL", &format!("{}/", daemon.url)]);
        assert_eq!(refused.json()["error"]["code"], "invalid_input");
    }
    // Any other path reaches the daemon, which has no route there.
    let url = format!("{}/agentmesh", daemon.url);
    let missing = run(dir.path(), &["--server", &url, "--token-file", token, "task", "list"]).code(2);
    missing.says(&["does not serve the agentmesh API", "the daemon's root URL"]);
}

#[test]
fn a_data_dir_that_is_a_file_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "x").expect("write a file");
    for args in [&["task", "list"][..], &["task", "add", "x"][..], &["serve", "--listen", "127.0.0.1:0"][..]]
    {
        let refused = run(&file, &[&["--json"][..], args].concat()).code(2);
        refused.says(&[
            "invalid dataDir",
            file.to_str().unwrap(),
            "is a file, not a directory",
            "--data-dir",
        ]);
        assert_eq!(refused.json()["error"]["code"], "invalid_input");
    }
    let home = Run::of(agentmesh().env("AGENTMESH_HOME", &file).args(["task", "list"])).code(2);
    home.says(&["is a file, not a directory", "AGENTMESH_HOME"]);
    assert_eq!(std::fs::read_to_string(&file).expect("the file"), "x", "the file is left as it was");
}

// Killing a command's process group.

#[test]
fn a_taken_away_command_and_its_children_are_killed_without_a_kill_program() {
    let dir = tempfile::tempdir().expect("a temp dir");
    run(dir.path(), &["task", "add", "long job", "--id", "t1"]).code(0);
    // A PATH with a shell and sleep but no `kill`: the worker must signal by itself.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("a bin dir");
    for tool in ["sh", "sleep"] {
        let found =
            Command::new("/bin/sh").args(["-c", &format!("command -v {tool}")]).output().expect("sh runs");
        let path = String::from_utf8(found.stdout).expect("UTF-8").trim().to_owned();
        std::os::unix::fs::symlink(&path, bin.join(tool)).expect("link the tool");
    }
    let pid_file = dir.path().join("child.pid");
    // The shell starts a sleep that holds the output pipes, records its pid and waits.
    let script = r#"sleep 300 & echo $! > "$0"; wait"#;
    let mut worker = agentmesh()
        .env("PATH", &bin)
        .arg("--data-dir")
        .arg(dir.path())
        .args(["work", "--node", "n1", "--session", "w1", "--lease", "3s", "--once", "--json", "--"])
        .args(["sh", "-c", script])
        .arg(&pid_file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("a worker starts");
    let until = Instant::now() + DEADLINE;
    while !pid_file.exists() || std::fs::read_to_string(&pid_file).map_or(true, |s| !s.ends_with('\n')) {
        assert!(Instant::now() < until, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = std::fs::read_to_string(&pid_file).expect("the pid").trim().to_owned();
    run(dir.path(), &["task", "cancel", "t1", "--reason", "changed my mind"]).code(0);

    let until = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(status) = worker.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > until {
            let _ = worker.kill();
            panic!("the worker did not exit");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = worker.wait_with_output().expect("worker output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(status.success(), "{status}\n{stderr}");
    let summary: Value = serde_json::from_slice(&output.stdout).expect("one JSON document");
    assert_eq!(summary["tasks"][0]["status"], "taken_away", "{summary}\n{stderr}");
    // The sleep is gone, or a zombie waiting for whoever adopted it to reap it.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
    let alive = stat.as_deref().is_some_and(|stat| {
        stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
    });
    if alive && let Ok(pid) = pid.parse() {
        let _ = agentmesh_test_support::signal(pid, "KILL");
    }
    assert!(!alive, "the command's child outlived the task: {stat:?}\n{stderr}");
}
