//! A newcomer's first hour: the command line says what to do. Each test is one
//! stumble of someone trying the CLI from the README, run against the real
//! binary: the claim's epoch under the name `complete --epoch` asks for, the
//! `blocked` status a listing shows and its filter takes, the task list's
//! filters (the HTTP API's, on a data dir and through a daemon), a taken port,
//! a `--server` without a scheme, the `listening on` line written once, command
//! names instead of MCP tools and counters, usage lines under an environment
//! that sets the global options, the README's Quickstart pasted as written, and
//! errors that end with the fix.

use std::io::{BufRead as _, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

use super::cli::Run;

/// How long any wait may take before the test gives up.
const DEADLINE: Duration = Duration::from_secs(60);

/// The binary under test, scrubbed of the developer's environment, stdin closed.
fn agentmesh() -> Command {
    let mut cmd = super::agentmesh();
    cmd.stdin(Stdio::null());
    cmd
}

/// A data dir of its own, readable by the owner only (as agentmesh makes one).
fn data_dir() -> TempDir {
    let mut builder = tempfile::Builder::new();
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700));
    builder.tempdir().expect("a temp dir")
}

/// Runs `agentmesh --data-dir DIR ARGS`.
fn run(dir: &Path, args: &[&str]) -> Run {
    Run::of(agentmesh().arg("--data-dir").arg(dir).args(args))
}

/// Runs `agentmesh --data-dir DIR --json ARGS`, requires exit 0 and returns the document.
#[track_caller]
fn json(dir: &Path, args: &[&str]) -> Value {
    run(dir, &[&["--json"], args].concat()).code(0).json()
}

/// The `id`s of a JSON array of tasks.
#[track_caller]
fn ids(tasks: &Value) -> Vec<String> {
    tasks
        .as_array()
        .unwrap_or_else(|| panic!("an array of tasks: {tasks}"))
        .iter()
        .map(|task| task["id"].as_str().expect("a task id").to_owned())
        .collect()
}

/// A daemon (`agentmesh serve --listen 127.0.0.1:0`) over a data dir of its own.
struct Daemon {
    dir: TempDir,
    child: Child,
    /// `127.0.0.1:PORT`, as its `listening on` line names it.
    addr: String,
}

impl Daemon {
    fn start() -> Daemon {
        let dir = data_dir();
        let mut child = agentmesh()
            .arg("--data-dir")
            .arg(dir.path())
            .args(["serve", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("serve's stdout is read");
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("serve printed {line:?}"))
            .to_owned();
        Daemon { dir, child, addr }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn token_file(&self) -> PathBuf {
        self.dir.path().join("daemon.token")
    }

    /// Runs `agentmesh --server URL --token-file FILE ARGS` from a client dir.
    fn run(&self, client: &Path, server: &str, args: &[&str]) -> Run {
        let token = self.token_file();
        let mut all = vec!["--server", server, "--token-file", token.to_str().expect("a UTF-8 path")];
        all.extend_from_slice(args);
        run(client, &all)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// 1. The claim's epoch, under the name `complete --epoch` asks for.

#[test]
fn a_claim_shows_its_epoch_as_complete_asks_for_it() {
    let dir = data_dir();
    let dir = dir.path();
    json(dir, &["task", "add", "write the parser", "--id", "parse"]);
    let claimed = json(dir, &["claim", "--node", "laptop", "--session", "w1"]);
    assert_eq!(claimed["id"], "parse");
    let epoch = claimed["epoch"].as_u64().expect("the claim's JSON carries `epoch`");
    assert_eq!(claimed["dispatchNonce"], epoch, "the original's name stays, with the same value");
    let done =
        json(dir, &["complete", "--session", "w1", "--epoch", &epoch.to_string(), "--summary", "done"]);
    assert_eq!(done["status"], "completed");
    let shown = run(dir, &["task", "show", "parse"]).code(0).stdout;
    let line = shown.lines().find(|line| line.starts_with("epoch ")).expect("`task show` names the epoch");
    assert_eq!(line.split_whitespace().nth(1), Some(epoch.to_string().as_str()), "{shown}");

    // The text names the epoch and the command to run with it, which works as printed.
    json(dir, &["task", "add", "test the parser", "--id", "test"]);
    let human = run(dir, &["claim", "--node", "laptop", "--session", "w1"]).code(0);
    let epoch = json(dir, &["task", "show", "test"])["dispatchNonce"].as_u64().expect("an epoch");
    assert!(
        human.stdout.starts_with(&format!("claimed test (epoch {epoch}): test the parser\n")),
        "{}",
        human.stdout
    );
    let command = human
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("when it is done: "))
        .unwrap_or_else(|| panic!("no `when it is done` line:\n{}", human.stdout));
    let printed = format!("agentmesh complete --session w1 --task test --epoch {epoch} --summary '...'");
    assert!(command.starts_with(&printed), "{command}");
    run(
        dir,
        &["complete", "--session", "w1", "--task", "test", "--epoch", &epoch.to_string(), "--summary", "..."],
    )
    .code(0);

    // `complete --help` says which field of the claim to pass.
    let help = Run::of(agentmesh().args(["complete", "--help"])).code(0).stdout;
    assert!(help.contains("`epoch` field of `claim --json`"), "{help}");
    assert!(help.contains("(epoch N)"), "{help}");

    // The next task of `complete --claim-next` carries it too.
    json(dir, &["task", "add", "one", "--id", "one"]);
    json(dir, &["task", "add", "two", "--id", "two"]);
    json(dir, &["claim", "--node", "laptop", "--session", "w2"]);
    let chained = json(dir, &["complete", "--session", "w2", "--summary", "ok", "--claim-next", "laptop"]);
    let next = &chained["next"]["task"];
    assert_eq!(next["id"], "two", "{chained}");
    assert_eq!(next["epoch"], next["dispatchNonce"], "{chained}");
    assert!(next["epoch"].as_u64().is_some(), "{chained}");
}

// 2. `blocked`, as the listing shows it, is a status the filter takes.

#[test]
fn task_list_takes_the_blocked_status_it_shows() {
    let dir = data_dir();
    let dir = dir.path();
    json(dir, &["task", "add", "write the parser", "--id", "a"]);
    json(dir, &["task", "add", "test the parser", "--id", "b", "--depends-on", "a"]);
    json(dir, &["task", "add", "unrelated", "--id", "c"]);
    json(dir, &["claim", "--node", "n1", "--session", "s1"]);
    json(dir, &["complete", "--session", "s1", "--failed", "--reason", "broken"]);

    let table = run(dir, &["task", "list"]).code(0).stdout;
    let row = table.lines().find(|line| line.starts_with("b ")).expect("b is listed");
    assert!(row.contains("blocked"), "{table}");

    let blocked = json(dir, &["task", "list", "--status", "blocked"]);
    assert_eq!(ids(&blocked), ["b"]);
    assert_eq!(blocked[0]["status"], "pending", "JSON keeps the stored status");
    assert!(blocked[0]["blockedReason"].is_string(), "{blocked}");
    assert_eq!(
        ids(&json(dir, &["task", "list", "--status", "pending"])),
        ["b", "c"],
        "pending includes blocked"
    );
    assert_eq!(ids(&json(dir, &["task", "list", "--status", "blocked", "--status", "failed"])), ["a", "b"]);
    let human = run(dir, &["task", "list", "--status", "blocked"]).code(0).stdout;
    assert!(human.ends_with("1 task in mesh \"default\"\n"), "{human}");

    // An unknown status is still bad input naming the field, and lists blocked.
    let refused = run(dir, &["task", "list", "--status", "done"]).code(2);
    assert!(
        refused.error().starts_with("invalid status: ") && refused.error().contains("blocked"),
        "{}",
        refused.stderr
    );
}

// 3. The task list's filters: the HTTP API's, on a data dir and through a daemon.

/// Enqueues the same tasks in `run`'s mesh: one per filter, and fails the
/// first so the one depending on it is blocked.
fn seed_filtered_tasks(run: &dyn Fn(&[&str]) -> Run) {
    let steps: [&[&str]; 7] = [
        &["task", "add", "fix LOGIN on linux", "--id", "t-linux", "--tag", "os=linux"],
        &[
            "task",
            "add",
            "pinned work",
            "--id",
            "t-pinned",
            "--target-node",
            "laptop",
            "--target-session",
            "w9",
        ],
        &["mission", "add", "auth", "--title", "Login rework"],
        &["task", "add", "mission work", "--id", "t-mission", "--mission", "auth"],
        &["task", "add", "after linux", "--id", "t-dep", "--depends-on", "t-linux"],
        &["claim", "--node", "n1", "--session", "s1", "--tag", "os=linux"],
        &["complete", "--session", "s1", "--failed", "--reason", "no runner"],
    ];
    for step in steps {
        run(step).code(0);
    }
}

/// The filters of `task list` and the ids each must list.
const FILTERS: [(&[&str], &[&str]); 12] = [
    (&["--tag", "os=linux"], &["t-linux"]),
    (&["--node", "laptop"], &["t-pinned"]),
    (&["--node", "n1"], &["t-linux"]),
    (&["--session", "w9"], &["t-pinned"]),
    (&["--session", "s1"], &["t-linux"]),
    (&["--mission", "auth"], &["t-mission"]),
    (&["--depends-on", "t-linux"], &["t-dep"]),
    (&["--text", "login"], &["t-linux"]),
    (&["--status", "blocked"], &["t-dep"]),
    (&["--status", "pending", "--limit", "2"], &["t-pinned", "t-mission"]),
    (&["--status", "pending", "--offset", "1", "--limit", "2"], &["t-mission", "t-dep"]),
    (&["--status", "failed", "--tag", "os=linux", "--node", "n1"], &["t-linux"]),
];

#[test]
fn task_list_filters_as_the_api_does_on_a_data_dir_and_through_a_daemon() {
    let local = data_dir();
    let local_run = |args: &[&str]| run(local.path(), args);
    seed_filtered_tasks(&local_run);

    let daemon = Daemon::start();
    let client = data_dir();
    let url = daemon.url();
    let remote_run = |args: &[&str]| daemon.run(client.path(), &url, args);
    seed_filtered_tasks(&remote_run);

    for (name, runner) in [("data dir", &local_run as &dyn Fn(&[&str]) -> Run), ("daemon", &remote_run)] {
        for (filter, expected) in FILTERS {
            let args = [&["--json", "task", "list"][..], filter].concat();
            let listed = runner(&args).code(0).json();
            assert_eq!(ids(&listed), expected, "{name}: task list {filter:?}");
        }
        let none = runner(&["task", "list", "--tag", "os=plan9"]).code(0);
        assert_eq!(none.stdout, "no tasks in mesh \"default\" match --tag os=plan9\n", "{name}");
    }

    // Bad filters are bad input naming the field, before a database is made.
    let empty = data_dir();
    let typo = empty.path().join("typo");
    for (args, field) in [
        (&["task", "list", "--limit", "0"][..], "limit"),
        (&["task", "list", "--limit", "1001"], "limit"),
        (&["task", "list", "--node", " "], "node"),
        (&["task", "list", "--session", "a\nb"], "session"),
        (&["task", "list", "--text", ""], "text"),
    ] {
        let refused = run(&typo, args).code(2);
        assert!(refused.error().starts_with(&format!("invalid {field}: ")), "{args:?}: {}", refused.stderr);
        let refused = run(&typo, &[&["--json"], args].concat()).code(2);
        assert_eq!(refused.json()["error"]["code"], "invalid_input", "{args:?}");
    }
    assert!(!typo.exists(), "a refused listing created the data dir");
}

// 4. A taken port.

#[test]
fn a_taken_port_names_the_address_and_says_what_to_do() {
    let daemon = Daemon::start();
    let other = data_dir();
    let refused = run(other.path(), &["serve", "--listen", &daemon.addr]).code(1);
    let error = refused.error();
    assert!(error.contains(&daemon.addr) && error.contains("already in use"), "{error}");
    assert!(error.contains("an agentmesh daemon already answers there"), "{error}");
    assert!(error.contains("pick another address with --listen"), "{error}");
    let refused = refused.ends_with_fix("or stop the daemon already running there");
    assert!(!refused.stderr.contains("os error"), "the reason in words: {}", refused.stderr);

    // Something that is not an agentmesh daemon holds the port.
    let squatter = TcpListener::bind("127.0.0.1:0").expect("a port of its own");
    let addr = squatter.local_addr().expect("its address").to_string();
    let refused = run(other.path(), &["serve", "--listen", &addr]).code(1);
    assert!(refused.error().contains(&format!("cannot listen on {addr}: the address is already in use")));
    assert!(refused.error().contains("does not answer as an agentmesh daemon"), "{}", refused.stderr);
    refused.ends_with_fix("or stop the program holding it");
}

// 5. `--server HOST:PORT`, and what to write instead of a malformed one.

#[test]
fn a_bare_server_address_is_http_and_a_malformed_one_says_what_to_write() {
    let daemon = Daemon::start();
    let client = data_dir();
    json(daemon.dir.path(), &["task", "add", "served", "--id", "served"]);

    let bare = daemon.run(client.path(), &daemon.addr, &["--json", "task", "list"]).code(0);
    assert_eq!(ids(&bare.json()), ["served"]);
    let from_env = Run::of(
        agentmesh()
            .arg("--data-dir")
            .arg(client.path())
            .args(["--json", "task", "list"])
            .env("AGENTMESH_SERVER", &daemon.addr)
            .env("AGENTMESH_TOKEN", std::fs::read_to_string(daemon.token_file()).expect("the token")),
    )
    .code(0);
    assert_eq!(ids(&from_env.json()), ["served"]);

    for bad in ["ftp://127.0.0.1:7433", "localhost", "7433", "http://", "two words:1"] {
        let refused = run(client.path(), &["--server", bad, "task", "list"]).code(2);
        assert!(refused.error().starts_with("invalid server: "), "{bad}: {}", refused.stderr);
        assert!(!refused.stderr.contains("relative URL without a base"), "{bad}: {}", refused.stderr);
        refused.ends_with_fix("write --server http://HOST:PORT (https:// for a daemon serving TLS), such as --server http://127.0.0.1:7433");
        let refused = run(client.path(), &["--json", "--server", bad, "task", "list"]).code(2);
        assert_eq!(refused.json()["error"]["code"], "invalid_input", "{bad}");
    }
}

// 6. `serve`'s `listening on` line, once where stdout and stderr are one.

#[cfg(unix)]
#[test]
fn serve_writes_its_listening_line_once_where_stdout_and_stderr_meet() {
    let dir = data_dir();
    let log_path = dir.path().join("serve.log");
    let log = std::fs::File::create(&log_path).expect("a log file");
    let data = dir.path().join("data");
    let mut child = agentmesh()
        .arg("--data-dir")
        .arg(&data)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::from(log.try_clone().expect("a second handle")))
        .stderr(Stdio::from(log))
        .spawn()
        .expect("serve starts");
    let until = Instant::now() + DEADLINE;
    while !std::fs::read_to_string(&log_path).unwrap_or_default().contains("listening on") {
        assert!(child.try_wait().expect("try_wait").is_none(), "serve ended early");
        assert!(Instant::now() < until, "serve never said where it listens");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM is sent");
    assert!(child.wait().expect("serve exits").success());
    let written = std::fs::read_to_string(&log_path).expect("the log is read");
    assert_eq!(written.matches("listening on http://").count(), 1, "{written}");
    assert!(written.contains("shutting down"), "stderr still reaches the file: {written}");

    // Apart, stderr gets its copy, as a log line.
    let mut child = agentmesh()
        .arg("--data-dir")
        .arg(&data)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve starts");
    let stderr = child.stderr.take().expect("stderr is piped");
    let mut lines = BufReader::new(stderr).lines();
    let seen = lines.by_ref().map_while(Result::ok).find(|line| line.starts_with("listening on http://"));
    let _ = child.kill();
    let _ = child.wait();
    assert!(seen.is_some(), "stderr did not repeat the line");
}

// 7. Human output speaks in commands and words.

#[test]
fn human_output_names_commands_not_mcp_tools_or_counters() {
    let dir = data_dir();
    let dir = dir.path();
    let to_a = ["--to-daemon", "mach_A", "--to-run", "run-1"];
    run(
        dir,
        &[&["events", "push", "--event", "agent:stopped", "--task", "t1", "--node", "n1"][..], &to_a]
            .concat(),
    )
    .code(0);
    let peeked = run(dir, &["events", "peek", "--daemon", "mach_A", "--run", "run-1"]).code(0).stdout;
    assert!(
        peeked.contains("`agentmesh task show t1`") && peeked.contains("`agentmesh task requeue t1`"),
        "{peeked}"
    );
    for tool in ["show_task", "requeue_task", "cancel_task"] {
        assert!(!peeked.contains(tool), "{tool} in the text:\n{peeked}");
    }

    let drained = run(dir, &["events", "drain", "--daemon", "mach_A", "--run", "run-1"]).code(0).stdout;
    assert!(drained.contains("`agentmesh task show t1`"), "{drained}");
    let last = drained.lines().last().expect("a summary line");
    assert_eq!(last, "delivered 1, held back 0; 1 routed here by address or scope");
    assert!(!drained.contains("v2Delivered") && !last.contains('='), "{drained}");

    // JSON keeps the machine names.
    run(
        dir,
        &[&["events", "push", "--event", "agent:stopped", "--task", "t2", "--node", "n1"][..], &to_a]
            .concat(),
    )
    .code(0);
    let drain = json(dir, &["events", "drain", "--daemon", "mach_A", "--run", "run-1"]);
    assert_eq!(drain["counters"]["v2Delivered"], 1, "{drain}");
    let text = drain["events"][0]["payload"]["coordinatorMessage"].as_str().expect("the stored text");
    assert!(text.contains("show_task"), "the stored text is the agent's: {text}");

    // A refusal to claim reads as words, its code kept after them.
    let nothing = run(dir, &["claim", "--node", "n1", "--session", "s1"]).code(0).stdout;
    assert_eq!(nothing, "nothing to claim: no pending task this session may take (no_pending_candidates)\n");
}

// 8. Usage lines under an environment that sets the global options.

#[test]
fn usage_shows_options_the_environment_sets_as_optional() {
    let dir = data_dir();
    let refused = Run::of(
        agentmesh()
            .args(["claim", "--node", "n1"])
            .env("AGENTMESH_HOME", dir.path())
            .env("AGENTMESH_SERVER", "http://127.0.0.1:7433")
            .env("AGENTMESH_MESH", "team"),
    )
    .code(2);
    let usage = refused.stderr.lines().find(|line| line.starts_with("Usage: ")).expect("a usage line");
    assert!(usage.starts_with("Usage: agentmesh claim --node <NODE> --session <SESSION>"), "{usage}");
    for option in ["--data-dir <DIR>", "--server <URL>", "--mesh <ID>"] {
        assert!(usage.contains(&format!("[{option}]")), "{option} not shown optional: {usage}");
        assert!(!usage.contains(&format!(" {option}")), "{option} shown as required: {usage}");
    }

    let help = Run::of(agentmesh().args(["claim", "--help"])).code(0).stdout;
    assert!(help.contains("Usage: agentmesh claim [OPTIONS] --node <NODE> --session <SESSION>"), "{help}");
    for env in ["AGENTMESH_HOME", "AGENTMESH_SERVER", "AGENTMESH_MESH"] {
        assert!(help.contains(&format!("[env: {env}=")), "{env} is not named:\n{help}");
    }
}

// 9. The README's Quickstart, pasted as written.

/// The words of one shell command line: quotes group and are removed, an
/// unquoted `#` after a space starts a comment.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote = None;
    for c in line.chars() {
        match (quote, c) {
            (None, '#') if word.is_none() => break,
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (Some(q), c) if c == q => quote = None,
            (_, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// The Quickstart's command lines: each `agentmesh ...` line, and whether it is
/// an alternative (commented out, `#   agentmesh ...`).
fn quickstart() -> Vec<(bool, String)> {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let text = std::fs::read_to_string(&readme).expect("the README is read");
    let section = &text[text.find("## Quickstart").expect("a Quickstart section")..];
    let block =
        section.split("```sh").nth(1).and_then(|rest| rest.split("```").next()).expect("its code block");
    block
        .lines()
        .map(str::trim)
        .filter_map(|line| match line.strip_prefix('#') {
            Some(rest) => {
                rest.trim_start().starts_with("agentmesh ").then(|| (true, rest.trim_start().to_owned()))
            }
            None => line.starts_with("agentmesh ").then(|| (false, line.to_owned())),
        })
        .collect()
}

/// Runs a Quickstart line against `dir`, in the git repository `repo` (the
/// scope of its path reservation); `None` for a line that needs a shell
/// (redirection, a pipe, `&&`) or holds a placeholder (`<id>`).
fn run_quickstart_line(dir: &Path, repo: &Path, line: &str) -> Option<Run> {
    let words = shell_words(line);
    if words.iter().any(|w| w.contains(['<', '>', '|']) || w == "&&") {
        return None;
    }
    Some(Run::of(agentmesh().current_dir(repo).arg("--data-dir").arg(dir).args(&words[1..])))
}

/// A git repository of its own in a temp dir, where a user would paste the
/// Quickstart.
fn git_repository() -> tempfile::TempDir {
    let repo = tempfile::tempdir().expect("a temp dir");
    let init = std::process::Command::new("git").arg("init").arg("-q").arg(repo.path()).output();
    assert!(init.as_ref().is_ok_and(|out| out.status.success()), "git init: {init:?}");
    repo
}

#[test]
fn the_quickstart_runs_as_written_and_its_alternative_instead() {
    // Its `reserve` line takes the git repository it runs in as the scope.
    agentmesh_test_support::require!(agentmesh_test_support::Tool::Git);
    let repo = git_repository();
    let lines = quickstart();
    assert!(lines.iter().any(|(alternative, _)| *alternative), "the failure is shown as an alternative");

    // Pasted in order, every line that is not an alternative succeeds.
    let dir = data_dir();
    let mut ran = 0;
    for (_, line) in lines.iter().filter(|(alternative, _)| !alternative) {
        if let Some(done) = run_quickstart_line(dir.path(), repo.path(), line) {
            assert_eq!(done.code, 0, "`{line}` failed:\n{}{}", done.stdout, done.stderr);
            ran += 1;
        }
    }
    assert!(ran >= 20, "only {ran} Quickstart lines ran");
    let login = json(dir.path(), &["task", "show", "login"]);
    assert_eq!(login["status"], "completed", "{login}");
    assert_eq!(login["finalSummary"], "fixed; added a regression test");

    // The alternative replaces the success report: the failure, then the requeue.
    let dir = data_dir();
    let first_complete = lines
        .iter()
        .position(|(alternative, line)| !alternative && line.starts_with("agentmesh complete "))
        .expect("a complete line");
    let before = lines[..first_complete].iter().filter(|(alternative, _)| !alternative);
    let instead = lines.iter().filter(|(alternative, _)| *alternative);
    for (_, line) in before.chain(instead) {
        let done =
            run_quickstart_line(dir.path(), repo.path(), line).expect("a line that runs without a shell");
        assert_eq!(done.code, 0, "`{line}` failed:\n{}{}", done.stdout, done.stderr);
    }
    let login = json(dir.path(), &["task", "show", "login"]);
    assert_eq!(login["status"], "pending", "failed, then requeued: {login}");
    assert_eq!(login["requeueCount"], 1, "{login}");
    let failed = json(dir.path(), &["ledger", "tail", "--kind", "task_failed"]);
    assert_eq!(failed.as_array().map(Vec::len), Some(1), "{failed}");
}

// Errors for the common mistakes end with the fix.

#[test]
fn errors_for_common_mistakes_end_with_the_fix() {
    let dir = data_dir();
    let dir = dir.path();

    // A read on a data dir without a database: the flags that name one.
    let none = dir.join("nothing-here");
    let refused = run(&none, &["task", "list"]).code(1);
    assert!(refused.error().contains("--server http://HOST:PORT"), "{}", refused.stderr);
    refused.ends_with_fix(&format!("`agentmesh --data-dir {} serve`", none.display()));

    json(dir, &["task", "add", "work", "--id", "t1"]);

    // An unknown task id: the listing that shows the ids.
    let fix = "`agentmesh task list` shows the ids mesh \"default\" holds; --mesh ID reads another mesh";
    for args in [
        &["task", "show", "nope"][..],
        &["task", "cancel", "nope"],
        &["complete", "--session", "s1", "--task", "nope"],
    ] {
        let refused = run(dir, args).code(2).ends_with_fix(fix);
        assert!(refused.error().starts_with("task nope not found in mesh default"), "{}", refused.stderr);
        let refused = run(dir, &[&["--json"], args].concat()).code(2);
        assert_eq!(refused.json()["error"]["code"], "task_not_found");
        assert!(refused.json()["error"]["message"].as_str().unwrap().ends_with(fix));
    }

    // A report by a session that holds nothing, and one for another session's task.
    run(dir, &["complete", "--session", "s1"])
        .code(2)
        .ends_with_fix("(`agentmesh task list --session s1` lists the session's tasks)");
    json(dir, &["claim", "--node", "n1", "--session", "s1"]);
    run(dir, &["complete", "--session", "s2", "--task", "t1"])
        .code(2)
        .ends_with_fix("or leave out --task to report this session's own task");

    // A wrong epoch: what --epoch takes, and where to look.
    let refused = run(dir, &["complete", "--session", "s1", "--epoch", "7"]).code(2);
    assert!(refused.error().contains("pass --epoch the epoch your claim printed"), "{}", refused.stderr);
    refused.ends_with_fix("see `agentmesh task show t1`");
    let refused = run(dir, &["--json", "complete", "--session", "s1", "--epoch", "7"]).code(2);
    assert_eq!(refused.json()["error"]["code"], "stale_epoch");
    assert_eq!(json(dir, &["task", "show", "t1"])["status"], "assigned", "a refused report changes nothing");

    // A daemon without a token, and no daemon at all.
    let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
    let server = format!("http://127.0.0.1:{port}");
    run(dir, &["--server", &server, "task", "list"])
        .code(2)
        .ends_with_fix("pass that file with --token-file FILE, or set AGENTMESH_TOKEN to its contents");
    let down = Run::of(
        agentmesh()
            .arg("--data-dir")
            .arg(dir)
            .args(["--server", &server, "status"])
            .env("AGENTMESH_TOKEN", "t"),
    )
    .code(1);
    assert!(
        down.error().starts_with(&format!("cannot connect to the daemon at {server}")),
        "{}",
        down.stderr
    );
    down.ends_with_fix("or point --server or $AGENTMESH_SERVER at the daemon's address");
}

#[test]
fn errors_through_a_daemon_end_with_the_same_fix() {
    let daemon = Daemon::start();
    let client = data_dir();
    let url = daemon.url();
    daemon.run(client.path(), &url, &["task", "add", "work", "--id", "t1"]).code(0);
    let refused = daemon.run(client.path(), &url, &["task", "show", "nope"]).code(2);
    refused.ends_with_fix(
        "`agentmesh task list` shows the ids mesh \"default\" holds; --mesh ID reads another mesh",
    );
    daemon.run(client.path(), &url, &["claim", "--node", "n1", "--session", "s1"]).code(0);
    daemon
        .run(client.path(), &url, &["complete", "--session", "s1", "--epoch", "9"])
        .code(2)
        .ends_with_fix("see `agentmesh task show t1`");
    daemon
        .run(client.path(), &url, &["complete", "--session", "s9"])
        .code(2)
        .ends_with_fix("(`agentmesh task list --session s9` lists the session's tasks)");
}

#[test]
fn a_heartbeat_reports_progress_that_task_show_prints_and_bad_progress_changes_nothing() {
    let dir = data_dir();
    run(dir.path(), &["task", "add", "fix the login bug", "--id", "login"]).code(0);
    let claimed = json(dir.path(), &["claim", "--node", "laptop", "--session", "w1"]);
    let epoch = claimed["epoch"].as_u64().expect("the claim's epoch").to_string();
    let beat = |extra: &[&str]| {
        let base = ["heartbeat", "--session", "w1", "--task", "login", "--epoch", epoch.as_str()];
        run(dir.path(), &[&base[..], extra].concat())
    };

    let said = beat(&["--percent", "40", "--note", "running the tests"]).code(0);
    assert!(said.stdout.contains("login (epoch 1): lease until "), "{}", said.stdout);
    assert!(said.stdout.contains("progress: 40% running the tests (at "), "{}", said.stdout);
    let shown = run(dir.path(), &["task", "show", "login"]).code(0);
    let line = shown.stdout.lines().find(|l| l.starts_with("progress")).unwrap_or_default();
    assert!(
        line.contains("40% running the tests (at "),
        "task show prints the report in words:\n{}",
        shown.stdout
    );
    let task = json(dir.path(), &["task", "show", "login"]);
    assert_eq!(task["progress"]["note"], "running the tests", "{task}");
    let trail = json(dir.path(), &["ledger", "tail"]);
    let kept = trail.as_array().expect("entries").iter().filter(|e| e["kind"] == "task_progress").count();
    assert_eq!(kept, 1, "the report is kept in the ledger: {trail}");

    let refused = beat(&["--percent", "140"]).code(2);
    assert!(refused.error().contains("progress.percent"), "{}", refused.stderr);
    let refused = beat(&["--note", ""]).code(2);
    assert!(refused.error().contains("progress.note"), "{}", refused.stderr);
    assert_eq!(json(dir.path(), &["task", "show", "login"]), task, "a refused beat changes nothing");

    let stale = run(dir.path(), &["heartbeat", "--session", "w1", "--task", "login", "--epoch", "7"]);
    stale.code(2).ends_with_fix("and claim again with `agentmesh claim --node NODE --session w1`");
}
