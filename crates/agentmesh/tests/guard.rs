//! `agentmesh guard` end to end: a real git repository in a temp dir, the hook
//! installed by `agentmesh guard install`, and `git commit` run as an agent
//! would, with `AGENTMESH_SESSION` naming the committing session.
//!
//! What is checked: another session's exclusive reservation refuses the commit
//! and the refusal names the holder and the pattern; both sides of a rename
//! count; the holder and unreserved paths commit; `AGENTMESH_GUARD=warn` lets
//! the commit through with the warning; the pre-commit hook that was there
//! before still runs first and still stops the commit when it fails; installing
//! twice changes nothing; `core.hooksPath` is honoured; and the guard fails open,
//! quickly, when the reservations cannot be read (a killed daemon, nothing at
//! the address, a daemon that never answers, a data dir without a database,
//! which it does not create).

#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use agentmesh_test_support::{Tool, require};
use serde_json::Value;
use tempfile::TempDir;

/// A commit that fails open must be this quick: a hanging guard fails the test.
const FAIL_OPEN_WITHIN: Duration = Duration::from_secs(20);

/// The environment variables of agentmesh a test sets itself, removed from
/// whatever the test runner inherited.
const AGENTMESH_ENV: [&str; 8] = [
    "AGENTMESH_SERVER",
    "AGENTMESH_SESSION",
    "AGENTMESH_GUARD",
    "AGENTMESH_TOKEN",
    "AGENTMESH_MESH",
    "AGENTMESH_DATABASE_URL",
    "AGENTMESH_REQUEST_TIMEOUT",
    "AGENTMESH_HOME",
];

/// A command with the agentmesh settings of the runner removed and git kept
/// away from the machine's own configuration (a global core.hooksPath).
fn hermetic(program: &str) -> Command {
    let mut command = Command::new(program);
    for name in AGENTMESH_ENV {
        command.env_remove(name);
    }
    command.env("GIT_CONFIG_GLOBAL", "/dev/null").env("GIT_CONFIG_NOSYSTEM", "1").stdin(Stdio::null());
    command
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// A temp repository with src/a.rs, src/b.rs and docs/x.md committed, a data
/// dir beside it, and a pre-commit hook of its own that appends a line to
/// `chain.log` (and fails while `chain.fail` exists).
struct Repo {
    dir: TempDir,
}

impl Repo {
    fn new() -> Repo {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repo { dir };
        std::fs::create_dir_all(repo.path().join("src")).unwrap();
        std::fs::create_dir_all(repo.path().join("docs")).unwrap();
        repo.git(&["init", "-q"]);
        repo.git(&["config", "user.name", "Guard Test"]);
        repo.git(&["config", "user.email", "guard@example.invalid"]);
        repo.git(&["config", "commit.gpgsign", "false"]);
        repo.write("src/a.rs", "fn a() {}\n");
        repo.write("src/b.rs", "fn b() {}\n");
        repo.write("docs/x.md", "# x\n");
        repo.git(&["add", "."]);
        repo.git(&["commit", "-q", "-m", "start"]);
        repo
    }

    /// The working tree.
    fn path(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    /// The data dir (not created here).
    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn chain_log(&self) -> PathBuf {
        self.dir.path().join("chain.log")
    }

    fn chain_fail(&self) -> PathBuf {
        self.dir.path().join("chain.fail")
    }

    /// How many times the pre-commit hook that was there before ran.
    fn chained_runs(&self) -> usize {
        std::fs::read_to_string(self.chain_log()).map_or(0, |log| log.lines().count())
    }

    /// Writes the repository's own pre-commit hook into `hooks`.
    fn write_own_hook(&self, hooks: &Path) {
        std::fs::create_dir_all(hooks).unwrap();
        let hook = hooks.join("pre-commit");
        std::fs::write(
            &hook,
            format!(
                "#!/bin/sh\necho ran >> '{}'\nif [ -e '{}' ]; then echo 'own hook says no' >&2; exit 3; fi\n",
                self.chain_log().display(),
                self.chain_fail().display()
            ),
        )
        .unwrap();
        make_executable(&hook);
    }

    fn write(&self, path: &str, contents: &str) {
        let full = self.path().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, contents).unwrap();
    }

    fn git(&self, args: &[&str]) -> String {
        std::fs::create_dir_all(self.path()).unwrap();
        let output = hermetic("git").arg("-C").arg(self.path()).args(args).output().unwrap();
        assert!(output.status.success(), "git {args:?} failed: {}", text(&output));
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    fn head(&self) -> String {
        self.git(&["rev-parse", "HEAD"])
    }

    /// `agentmesh args` in the working tree, on the data dir, with `env`.
    fn agentmesh(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        hermetic(env!("CARGO_BIN_EXE_agentmesh"))
            .current_dir(self.path())
            .env("AGENTMESH_HOME", self.data_dir())
            .envs(env.iter().copied())
            .args(args)
            .output()
            .unwrap()
    }

    /// `git commit` of what is staged, as the session `env` names.
    fn commit(&self, message: &str, env: &[(&str, &str)]) -> Commit {
        let started = Instant::now();
        let output = hermetic("git")
            .current_dir(self.path())
            .env("AGENTMESH_HOME", self.data_dir())
            .envs(env.iter().copied())
            .args(["commit", "-q", "-m", message])
            .output()
            .unwrap();
        Commit { ok: output.status.success(), said: text(&output), took: started.elapsed() }
    }

    /// Installs the guard, checks that it says so, and returns its JSON answer.
    fn install_guard(&self) -> Value {
        let output = self.agentmesh(&["guard", "install", "--json"], &[]);
        assert!(output.status.success(), "guard install failed: {}", text(&output));
        let view: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(view["installed"], true, "{view}");
        view
    }
}

/// What one `git commit` did.
#[derive(Debug)]
struct Commit {
    ok: bool,
    said: String,
    took: Duration,
}

impl Commit {
    #[track_caller]
    fn refused(&self, naming: &[&str]) {
        assert!(!self.ok, "the commit went through: {}", self.said);
        for word in naming {
            assert!(self.said.contains(word), "the refusal does not name {word:?}: {}", self.said);
        }
    }

    #[track_caller]
    fn went_through(&self) {
        assert!(self.ok, "the commit was refused: {}", self.said);
    }
}

#[cfg(unix)]
fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|meta| meta.permissions().mode() & 0o111 != 0)
}

/// `agentmesh serve` on a free loopback port; killed when dropped.
struct Daemon {
    child: Child,
    url: String,
}

impl Daemon {
    fn start(data_dir: &Path) -> Daemon {
        let mut child = hermetic(env!("CARGO_BIN_EXE_agentmesh"))
            .arg("--data-dir")
            .arg(data_dir)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve starts");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).expect("the listening line");
        // Keep reading stdout so the daemon never blocks on a full pipe.
        std::thread::spawn(move || for _ in stdout.lines().map_while(Result::ok) {});
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("not a listening line: {line:?}"))
            .to_owned();
        Daemon { child, url }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

#[test]
fn a_commit_over_another_sessions_reservation_is_refused_through_a_daemon() {
    require!(Tool::Git);
    let repo = Repo::new();
    let hooks = repo.path().join(".git/hooks");
    repo.write_own_hook(&hooks);
    let mut daemon = Daemon::start(&repo.data_dir());
    let server = daemon.url.clone();
    let w1 = [("AGENTMESH_SERVER", server.as_str()), ("AGENTMESH_SESSION", "w1")];
    let w2 = [("AGENTMESH_SERVER", server.as_str()), ("AGENTMESH_SESSION", "w2")];
    let w2_warn = [w2[0], w2[1], ("AGENTMESH_GUARD", "warn")];

    let reserved = repo.agentmesh(&["reserve", "src/**", "--session", "w1", "--node", "n1"], &w1[..1]);
    assert!(reserved.status.success(), "reserve failed: {}", text(&reserved));

    let installed = repo.install_guard();
    let chained = hooks.join("pre-commit.agentmesh-chained");
    assert_eq!(installed["chained"].as_str().map(PathBuf::from), Some(chained.clone()), "{installed}");
    assert!(is_executable(&chained), "the chained hook lost its mode");
    assert!(
        std::fs::read_to_string(&chained).unwrap().contains("chain.log"),
        "not the repository's own hook"
    );
    let hook = std::fs::read_to_string(hooks.join("pre-commit")).unwrap();
    assert!(hook.starts_with("#!/bin/sh") && hook.contains("guard check"), "{hook}");

    // Installing again is a no-op that says so.
    let again = repo.agentmesh(&["guard", "install"], &[]);
    assert!(again.status.success(), "{}", text(&again));
    assert!(text(&again).contains("already installed"), "{}", text(&again));
    assert_eq!(std::fs::read_to_string(hooks.join("pre-commit")).unwrap(), hook);
    assert!(std::fs::read_to_string(&chained).unwrap().contains("chain.log"));
    assert!(!hooks.join("pre-commit.agentmesh-chained.agentmesh-chained").exists());
    let again: Value =
        serde_json::from_slice(&repo.agentmesh(&["guard", "install", "--json"], &[]).stdout).unwrap();
    assert_eq!(again["installed"], false, "{again}");

    let start = repo.head();

    // A rename out of src: the old side is reserved.
    std::fs::create_dir_all(repo.path().join("other")).unwrap();
    repo.git(&["mv", "src/b.rs", "other/b.rs"]);
    repo.commit("move b", &w2).refused(&["src/b.rs", "w1", "n1", "src/**"]);
    assert_eq!(repo.head(), start);
    repo.git(&["reset", "-q", "--hard"]);

    // w2 edits a reserved file: refused, after the repository's own hook ran.
    let runs = repo.chained_runs();
    repo.write("src/a.rs", "fn a() { /* w2 */ }\n");
    repo.git(&["add", "src/a.rs"]);
    repo.commit("w2 edits a", &w2).refused(&["src/a.rs", "w1", "n1", "src/**", "refused"]);
    assert_eq!(repo.head(), start);
    assert_eq!(repo.chained_runs(), runs + 1, "the repository's own hook did not run");

    // Only an unreserved path: it goes through.
    repo.git(&["reset", "-q"]);
    repo.write("docs/x.md", "# x, by w2\n");
    repo.git(&["add", "docs/x.md"]);
    repo.commit("w2 edits docs", &w2).went_through();
    assert_ne!(repo.head(), start);

    // The repository's own hook still stops a commit when it fails.
    std::fs::write(repo.chain_fail(), "").unwrap();
    repo.write("docs/x.md", "# x, again\n");
    repo.git(&["add", "docs/x.md"]);
    let before = repo.head();
    let stopped = repo.commit("stopped by the own hook", &w2);
    stopped.refused(&["own hook says no"]);
    assert!(!stopped.said.contains("agentmesh guard"), "the guard ran after a failed hook: {}", stopped.said);
    assert_eq!(repo.head(), before);
    std::fs::remove_file(repo.chain_fail()).unwrap();
    repo.git(&["reset", "-q", "--hard"]);

    // The holder commits its own reserved file.
    repo.write("src/a.rs", "fn a() { /* w1 */ }\n");
    repo.git(&["add", "src/a.rs"]);
    repo.commit("w1 edits a", &w1).went_through();

    // With AGENTMESH_GUARD=warn, w2 gets through with the warning.
    repo.write("src/a.rs", "fn a() { /* w2, warned */ }\n");
    repo.git(&["add", "src/a.rs"]);
    let before = repo.head();
    let warned = repo.commit("w2 edits a, warned", &w2_warn);
    warned.went_through();
    for word in ["warning", "src/a.rs", "w1", "src/**"] {
        assert!(warned.said.contains(word), "the warning does not name {word:?}: {}", warned.said);
    }
    assert_ne!(repo.head(), before);

    // The daemon gone: the commit goes through, quickly, saying why.
    daemon.kill();
    repo.write("src/a.rs", "fn a() { /* w2, unchecked */ }\n");
    repo.git(&["add", "src/a.rs"]);
    let unchecked = repo.commit("w2 edits a, unchecked", &w2);
    unchecked.went_through();
    assert!(unchecked.said.contains("could not check reservations"), "{}", unchecked.said);
    assert!(unchecked.said.contains("commit allowed"), "{}", unchecked.said);
    assert!(unchecked.took < FAIL_OPEN_WITHIN, "the commit took {:?}", unchecked.took);
}

#[test]
fn without_a_daemon_the_guard_reads_the_data_dir_and_honours_core_hooks_path() {
    require!(Tool::Git);
    let repo = Repo::new();
    repo.git(&["config", "core.hooksPath", ".githooks"]);
    let hooks = repo.path().join(".githooks");

    // No database yet: the commit goes through and none is created.
    let installed = repo.install_guard();
    assert_eq!(installed["hook"].as_str().map(PathBuf::from), Some(hooks.join("pre-commit")), "{installed}");
    assert!(installed["chained"].is_null(), "{installed}");
    assert!(!repo.path().join(".git/hooks/pre-commit").exists(), "the hook went to .git/hooks");
    repo.write("src/a.rs", "fn a() { 1 }\n");
    repo.git(&["add", "src/a.rs"]);
    let unchecked = repo.commit("no database", &[("AGENTMESH_SESSION", "w2")]);
    unchecked.went_through();
    assert!(unchecked.said.contains("could not check reservations"), "{}", unchecked.said);
    assert!(!repo.data_dir().exists(), "the check created the data dir");

    // w1's reservation, in the data dir: w2 is refused, w1 is not.
    let reserved = repo.agentmesh(&["reserve", "src", "--session", "w1", "--node", "n1"], &[]);
    assert!(reserved.status.success(), "reserve failed: {}", text(&reserved));
    repo.write("src/a.rs", "fn a() { 2 }\n");
    repo.git(&["add", "src/a.rs"]);
    repo.commit("w2 edits a", &[("AGENTMESH_SESSION", "w2")]).refused(&["src/a.rs", "w1", "n1"]);
    repo.commit("w1 edits a", &[("AGENTMESH_SESSION", "w1")]).went_through();

    // The check by hand, as JSON: the blocked path and its holder, found
    // after more paths than one request may ask about (git lists docs/ first).
    for i in 0..70 {
        repo.write(&format!("docs/many/{i:02}.md"), "more\n");
    }
    repo.write("src/a.rs", "fn a() { 3 }\n");
    repo.git(&["add", "docs/many", "src/a.rs"]);
    let checked = repo.agentmesh(&["guard", "check", "--session", "w2", "--json"], &[]);
    assert_eq!(checked.status.code(), Some(1), "{}", text(&checked));
    let view: Value = serde_json::from_slice(&checked.stdout).unwrap();
    assert_eq!(view["allowed"], false, "{view}");
    assert_eq!(view["blocked"][0]["path"], "src/a.rs", "{view}");
    assert_eq!(view["blocked"][0]["heldBy"][0]["sessionId"], "w1", "{view}");
    assert_eq!(view["staged"].as_array().map(Vec::len), Some(71), "{view}");
    assert_eq!(view["blocked"].as_array().map(Vec::len), Some(1), "{view}");

    // Nothing staged: clear, silently.
    repo.git(&["reset", "-q", "--hard"]);
    let nothing = repo.agentmesh(&["guard", "check", "--session", "w2"], &[]);
    assert!(nothing.status.success(), "{}", text(&nothing));
    assert!(text(&nothing).is_empty(), "{}", text(&nothing));
}

#[test]
fn an_unreachable_or_silent_daemon_lets_the_commit_through_quickly() {
    require!(Tool::Git);
    let repo = Repo::new();
    repo.install_guard();
    // A reservation in the data dir that a working check would find.
    let reserved = repo.agentmesh(&["reserve", "src", "--session", "w1", "--node", "n1"], &[]);
    assert!(reserved.status.success(), "reserve failed: {}", text(&reserved));
    std::fs::write(repo.data_dir().join("daemon.token"), "not-checked\n").unwrap();

    // Nothing listens at port 9.
    repo.write("src/a.rs", "fn a() { 1 }\n");
    repo.git(&["add", "src/a.rs"]);
    let refused = repo
        .commit("nobody there", &[("AGENTMESH_SESSION", "w2"), ("AGENTMESH_SERVER", "http://127.0.0.1:9")]);
    refused.went_through();
    assert!(refused.said.contains("could not check reservations"), "{}", refused.said);
    assert!(refused.took < FAIL_OPEN_WITHIN, "the commit took {:?}", refused.took);

    // A listener that takes connections and never answers: the watchdog ends
    // the check after the request timeout.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    repo.write("src/a.rs", "fn a() { 2 }\n");
    repo.git(&["add", "src/a.rs"]);
    let hung = repo.commit(
        "nobody answers",
        &[("AGENTMESH_SESSION", "w2"), ("AGENTMESH_SERVER", &url), ("AGENTMESH_REQUEST_TIMEOUT", "1s")],
    );
    hung.went_through();
    assert!(hung.said.contains("could not check reservations"), "{}", hung.said);
    assert!(hung.took < FAIL_OPEN_WITHIN, "the commit took {:?}", hung.took);
    drop(silent);

    // The same data dir read directly still refuses: the reservation was there all along.
    repo.write("src/a.rs", "fn a() { 3 }\n");
    repo.git(&["add", "src/a.rs"]);
    repo.commit("read directly", &[("AGENTMESH_SESSION", "w2")]).refused(&["src/a.rs", "w1"]);
}

/// Two worker sessions and two tasks that declare overlapping paths, in a real
/// repository: the first claim reserves its task's paths, the second claim
/// steps over the other task (`paths_reserved`), the guard refuses the second
/// worker's commit over the first's paths, naming the holder and its task, and
/// lets the first commit; once the first task is completed, the second worker
/// claims its task and commits.
#[test]
fn tasks_over_one_path_go_to_one_worker_at_a_time_and_the_guard_holds_the_other() {
    require!(Tool::Git);
    let repo = Repo::new();
    let w1 = [("AGENTMESH_SESSION", "w1")];
    let w2 = [("AGENTMESH_SESSION", "w2")];
    let json = |args: &[&str]| -> Value {
        let output = repo.agentmesh(args, &[]);
        assert!(output.status.success(), "{args:?}: {}", text(&output));
        serde_json::from_slice(&output.stdout).unwrap()
    };
    json(&["--json", "task", "add", "rewrite module a", "--id", "t-a", "--path", "src"]);
    json(&["--json", "task", "add", "fix b", "--id", "t-b", "--path", "src/b.rs"]);
    repo.install_guard();

    let first = json(&["--json", "claim", "--node", "n1", "--session", "w1"]);
    assert_eq!(first["id"], "t-a");
    let skipped = repo.agentmesh(&["claim", "--node", "n2", "--session", "w2"], &[]);
    assert!(skipped.status.success(), "{}", text(&skipped));
    assert!(text(&skipped).contains("paths_reserved"), "{}", text(&skipped));

    // w2 edits src/b.rs anyway: its commit is refused, naming w1 and t-a.
    repo.write("src/b.rs", "fn b() { /* w2 */ }\n");
    repo.git(&["add", "src/b.rs"]);
    repo.commit("w2 over w1's paths", &w2).refused(&["w1", "n1", "t-a"]);
    // The holder commits the same change.
    repo.commit("w1's own work", &w1).went_through();

    let epoch = first["epoch"].to_string();
    json(&["--json", "complete", "--session", "w1", "--task", "t-a", "--epoch", &epoch, "--summary", "done"]);
    let second = json(&["--json", "claim", "--node", "n2", "--session", "w2"]);
    assert_eq!(second["id"], "t-b");
    repo.write("src/b.rs", "fn b() { /* w2, now its own */ }\n");
    repo.git(&["add", "src/b.rs"]);
    repo.commit("w2 on its own task", &w2).went_through();
    // And now w1 is the one held off src/b.rs.
    repo.write("src/b.rs", "fn b() { /* w1 again */ }\n");
    repo.git(&["add", "src/b.rs"]);
    repo.commit("w1 over w2's paths", &w1).refused(&["w2", "t-b"]);
}

/// A repository that names its scope (`git config agentmesh.scope`) is checked
/// against the reservations of that scope, whichever clone or path made them.
#[test]
fn the_guard_checks_the_scope_the_repository_names() {
    require!(Tool::Git);
    let repo = Repo::new();
    let reserved = repo.agentmesh(
        &["reserve", "src", "--scope", "github.com/acme/app", "--session", "w1", "--node", "n1"],
        &[],
    );
    assert!(reserved.status.success(), "{}", text(&reserved));
    repo.install_guard();
    repo.write("src/a.rs", "fn a() { /* w2 */ }\n");
    repo.git(&["add", "src/a.rs"]);
    // Its top level is not the scope the reservation names: nothing in the way.
    repo.commit("before the scope is named", &[("AGENTMESH_SESSION", "w2")]).went_through();
    repo.git(&["config", "agentmesh.scope", "github.com/acme/app"]);
    repo.write("src/a.rs", "fn a() { /* w2 again */ }\n");
    repo.git(&["add", "src/a.rs"]);
    repo.commit("after", &[("AGENTMESH_SESSION", "w2")]).refused(&["w1", "src"]);
    let listed = repo.agentmesh(&["--json", "reservations"], &[]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(
        listed[0]["scope"], "github.com/acme/app",
        "the listing defaults to the named scope too: {listed}"
    );
}
