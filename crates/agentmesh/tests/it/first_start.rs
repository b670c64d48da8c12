//! The data dir's first start and the files in it, with real processes: many
//! processes (CLI writes, `serve`, `mcp`) starting together on a new data dir, a
//! database from a newer agentmesh refused untouched by every kind of process,
//! and the modes of a new data dir and its database files.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};

use agentmesh_sqlite::SCHEMA_VERSION;
use serde_json::{Value, json};

/// The binary with a scrubbed environment on `data_dir`.
fn agentmesh(data_dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentmesh"));
    for var in [
        "AGENTMESH_HOME",
        "AGENTMESH_DATABASE_URL",
        "AGENTMESH_MESH",
        "AGENTMESH_SERVER",
        "AGENTMESH_TOKEN",
        "RUST_LOG",
    ] {
        cmd.env_remove(var);
    }
    cmd.arg("--data-dir").arg(data_dir);
    cmd
}

/// The binary on `data_dir` as `sh` runs it with umask 000, so that only the
/// modes agentmesh sets itself keep files private.
#[cfg(unix)]
fn agentmesh_umask_0(data_dir: &Path) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg("umask 000 && exec \"$0\" \"$@\"").arg(env!("CARGO_BIN_EXE_agentmesh"));
    for var in [
        "AGENTMESH_HOME",
        "AGENTMESH_DATABASE_URL",
        "AGENTMESH_MESH",
        "AGENTMESH_SERVER",
        "AGENTMESH_TOKEN",
        "RUST_LOG",
    ] {
        cmd.env_remove(var);
    }
    cmd.arg("--data-dir").arg(data_dir);
    cmd
}

/// A started process, with all its pipes.
fn spawn(cmd: &mut Command) -> Child {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts")
}

/// Waits for `child` to exit; its exit code, stdout and stderr.
fn finish(child: Child) -> (Option<i32>, String, String) {
    let out = child.wait_with_output().expect("the process is waited for");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Reads `serve`'s stderr until its `listening on http://ADDR` line: the address,
/// or everything it printed before it ended.
fn listening_address(stderr: ChildStderr) -> Result<String, String> {
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = String::new();
    for line in lines.by_ref() {
        let line = line.map_err(|err| format!("reading serve's stderr: {err}"))?;
        if let Some(rest) = line.strip_prefix("listening on http://") {
            let addr = rest.split_whitespace().next().unwrap_or_default().to_owned();
            // The rest of its log is not read again: a thread drains it.
            std::thread::spawn(move || lines.for_each(drop));
            return Ok(addr);
        }
        seen.push_str(&line);
        seen.push('\n');
    }
    Err(format!("serve ended before listening:\n{seen}"))
}

/// The three messages an MCP client sends to enqueue one task: `initialize`, the
/// `initialized` notification and a call of `enqueue_task` with `id`.
fn mcp_enqueue_script(id: &str) -> String {
    let messages = [
        json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "first-start", "version": "0" } } }),
        json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
        json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "enqueue_task", "arguments": { "message": format!("from {id}"), "id": id } } }),
    ];
    messages.iter().map(|m| format!("{m}\n")).collect()
}

/// Drives an `agentmesh mcp` process through [`mcp_enqueue_script`]: Ok once the
/// tool call was answered without an error and the process exited 0 after its
/// stdin closed.
fn run_mcp_enqueue(mut child: Child, id: &str) -> Result<(), String> {
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let stdout = child.stdout.take().expect("stdout is piped");
    // A process that already ended makes this write fail; its exit tells why.
    let _ = stdin.write_all(mcp_enqueue_script(id).as_bytes()).and_then(|()| stdin.flush());
    let mut answer = None;
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        let Ok(message) = serde_json::from_str::<Value>(&line) else { continue };
        if message["id"] == 2 {
            answer = Some(message);
            break;
        }
    }
    drop(stdin);
    let (code, _, stderr) = finish(child);
    match answer {
        Some(answer)
            if answer["result"]["isError"] != true && answer.get("error").is_none() && code == Some(0) =>
        {
            Ok(())
        }
        answer => Err(format!("mcp {id}: exit {code:?}, answer {answer:?}, stderr:\n{stderr}")),
    }
}

/// The ids of every task in the data dir's default mesh.
fn task_ids(data_dir: &Path) -> Result<Vec<String>, String> {
    let (code, stdout, stderr) =
        finish(spawn(agentmesh(data_dir).args(["--json", "task", "list"]).stdin(Stdio::null())));
    if code != Some(0) {
        return Err(format!("task list: exit {code:?}: {stderr}"));
    }
    let tasks: Value = serde_json::from_str(&stdout).map_err(|err| format!("task list: {err}: {stdout}"))?;
    let mut ids: Vec<String> =
        tasks.as_array().into_iter().flatten().filter_map(|t| t["id"].as_str().map(str::to_owned)).collect();
    ids.sort();
    Ok(ids)
}

/// One first start: five CLI writers, one `serve` (which then takes a write over
/// HTTP) and two `mcp` processes (each enqueueing through a tool call), started
/// together on a data dir that does not exist yet. Returns every process's
/// failure; afterwards every write must be in the database.
fn first_start_round(root: &Path) -> Vec<String> {
    let data_dir = root.join("data");
    let cli_ids: Vec<String> = (0..5).map(|i| format!("cli-{i}")).collect();
    let mcp_ids = ["mcp-0", "mcp-1"];
    let mut cli = Vec::new();
    let mut mcp = Vec::new();
    let mut serve = None;
    // Interleaved, so that every kind of process is among the first to start.
    for (i, id) in cli_ids.iter().enumerate() {
        cli.push(spawn(agentmesh(&data_dir).args(["task", "add", &format!("from {id}"), "--id", id])));
        match i {
            0 | 3 => mcp.push(spawn(agentmesh(&data_dir).arg("mcp"))),
            1 => serve = Some(spawn(agentmesh(&data_dir).args(["serve", "--listen", "127.0.0.1:0"]))),
            _ => {}
        }
    }
    let mut serve = serve.expect("serve was started");
    let mut failures = Vec::new();
    for (child, id) in mcp.into_iter().zip(mcp_ids) {
        if let Err(failure) = run_mcp_enqueue(child, id) {
            failures.push(failure);
        }
    }
    for (child, id) in cli.into_iter().zip(&cli_ids) {
        let (code, _, stderr) = finish(child);
        if code != Some(0) {
            failures.push(format!("task add {id}: exit {code:?}: {stderr}"));
        }
    }
    let mut expected: Vec<String> = cli_ids.iter().cloned().chain(mcp_ids.map(str::to_owned)).collect();
    match listening_address(serve.stderr.take().expect("stderr is piped")) {
        Ok(addr) => {
            let url = format!("http://{addr}");
            let args = ["--server", url.as_str(), "task", "add", "through serve", "--id", "serve-0"];
            let (code, _, stderr) = finish(spawn(agentmesh(&data_dir).args(args)));
            if code == Some(0) {
                expected.push("serve-0".to_owned());
            } else {
                failures.push(format!("task add through serve: exit {code:?}: {stderr}"));
            }
        }
        Err(failure) => failures.push(failure),
    }
    let _ = serve.kill();
    let _ = serve.wait();
    expected.sort();
    match task_ids(&data_dir) {
        Ok(ids) if ids == expected => {}
        Ok(ids) => failures.push(format!("tasks {ids:?}, expected {expected:?}")),
        Err(failure) => failures.push(failure),
    }
    failures
}

/// Eight processes of three kinds start together on a new data dir, fifty times:
/// every one succeeds and every write is there afterwards. (Before the version was
/// read inside the migration's lock, most of them failed with `duplicate column
/// name` or `no such column`.) No error message ever shows a migration's SQL.
#[test]
fn eight_processes_starting_together_on_a_new_data_dir_all_succeed() {
    const ROUNDS: usize = 50;
    let mut failed_rounds = 0;
    let mut failures = Vec::new();
    for round in 0..ROUNDS {
        let root = tempfile::tempdir().expect("a temp dir");
        let found = first_start_round(root.path());
        if !found.is_empty() {
            failed_rounds += 1;
            failures.extend(found.into_iter().map(|f| format!("round {round}: {f}")));
        }
    }
    let showing_sql = failures.iter().filter(|f| f.contains("CREATE ") || f.contains("ALTER ")).count();
    assert!(
        failures.is_empty(),
        "{failed_rounds} of {ROUNDS} rounds failed, {} process failures ({showing_sql} showing SQL); the first:\n{}",
        failures.len(),
        failures.iter().take(5).cloned().collect::<Vec<_>>().join("\n")
    );
}

/// Every file in `dir` with its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("the data dir lists")
        .map(|entry| entry.expect("an entry").path())
        .map(|path| {
            let bytes = std::fs::read(&path).expect("the file reads");
            (path, bytes)
        })
        .collect();
    files.sort();
    files
}

/// Writes a database into `data_dir` as a newer agentmesh would leave it: this
/// build's schema, one task, and a schema version one past this build's. The
/// connection is returned open when `keep_open`, with the version change still
/// only in its WAL; otherwise it is closed (and its WAL folded in).
fn newer_database(data_dir: &Path, keep_open: bool) -> Option<rusqlite::Connection> {
    let (code, _, stderr) = finish(spawn(agentmesh(data_dir).args(["task", "add", "old", "--id", "old"])));
    assert_eq!(code, Some(0), "{stderr}");
    let conn = rusqlite::Connection::open(data_dir.join("mesh-runtime.db")).expect("the database opens");
    conn.pragma_update(None, "wal_autocheckpoint", 0).expect("the pragma is set");
    if !keep_open {
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())).expect("the WAL checkpoints");
    }
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1).expect("the version is set");
    if keep_open {
        return Some(conn);
    }
    drop(conn);
    None
}

/// Every process refuses the database the same way: exit 1, a message naming
/// both versions and the way out.
#[track_caller]
fn assert_refused(what: &str, code: Option<i32>, stderr: &str) {
    assert_eq!(code, Some(1), "{what} exits 1; stderr:\n{stderr}");
    let found = format!("schema version {}", SCHEMA_VERSION + 1);
    let supported = format!("version {}", SCHEMA_VERSION);
    for words in [found.as_str(), supported.as_str(), "newer agentmesh", "upgrade agentmesh"] {
        assert!(stderr.contains(words), "{what}: the message names {words:?}:\n{stderr}");
    }
}

/// Runs commands, `serve` and `mcp` on `data_dir`, each of which must refuse the
/// newer database.
fn run_everything_on_a_newer_database(data_dir: &Path) {
    let commands: &[&[&str]] = &[
        &["task", "add", "new work", "--id", "new"],
        &["task", "list"],
        &["--json", "task", "show", "old"],
        &["status"],
        &["claim", "--node", "n1", "--session", "s1"],
        &["ledger", "tail"],
        &["events", "drain", "--daemon", "mach_A", "--run", "run-1"],
        &["mission", "add", "m1", "--title", "plan"],
        &["sessions"],
    ];
    for args in commands {
        let (code, stdout, stderr) = finish(spawn(agentmesh(data_dir).args(*args)));
        assert_refused(&args.join(" "), code, &stderr);
        if args[0] == "--json" {
            let doc: Value = serde_json::from_str(&stdout).expect("a JSON error document");
            assert_eq!(doc["error"]["code"], "schema_too_new");
        }
    }
    let (code, _, stderr) = finish(spawn(agentmesh(data_dir).args(["serve", "--listen", "127.0.0.1:0"])));
    assert_refused("serve", code, &stderr);
    let mut mcp = spawn(agentmesh(data_dir).arg("mcp"));
    let mut stdin = mcp.stdin.take().expect("stdin is piped");
    let _ = stdin.write_all(mcp_enqueue_script("new").as_bytes());
    drop(stdin);
    let (code, stdout, stderr) = finish(mcp);
    assert_refused("mcp", code, &stderr);
    assert!(!stdout.contains("\"result\""), "mcp answered nothing: {stdout}");
}

/// A database a newer agentmesh wrote and closed is refused by every command,
/// `serve` and `mcp` (exit 1, both versions named, "upgrade agentmesh"), and the
/// data dir is left byte for byte as it was: no WAL or shared-memory file is
/// created, and no token or daemon id either.
#[test]
fn a_database_from_a_newer_agentmesh_is_refused_and_left_untouched() {
    let root = tempfile::tempdir().expect("a temp dir");
    let data_dir = root.path().join("data");
    newer_database(&data_dir, false);
    let before = snapshot(&data_dir);
    run_everything_on_a_newer_database(&data_dir);
    let after = snapshot(&data_dir);
    let names = |files: &[(PathBuf, Vec<u8>)]| files.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>();
    assert_eq!(names(&after), names(&before), "no file was created or removed");
    for ((path, old), (_, new)) in before.iter().zip(&after) {
        assert!(old == new, "{} changed", path.display());
    }
}

/// The same while the newer agentmesh still runs, its version change only in the
/// WAL: the database file and the WAL are left byte for byte as they were.
#[test]
fn a_newer_schema_version_still_in_the_wal_is_refused_too() {
    let root = tempfile::tempdir().expect("a temp dir");
    let data_dir = root.path().join("data");
    let newer = newer_database(&data_dir, true);
    let db = data_dir.join("mesh-runtime.db");
    let wal = data_dir.join("mesh-runtime.db-wal");
    let (db_before, wal_before) = (std::fs::read(&db).unwrap(), std::fs::read(&wal).unwrap());
    assert!(!wal_before.is_empty(), "the version change is in the WAL");
    run_everything_on_a_newer_database(&data_dir);
    assert!(std::fs::read(&db).unwrap() == db_before, "the database file changed");
    assert!(std::fs::read(&wal).unwrap() == wal_before, "the WAL changed");
    drop(newer);
}

/// With umask 000, a new data dir (and the missing directories above it) is 0700
/// and the database, its WAL and its shared-memory file are 0600, as is the token;
/// an existing data dir that other users can read gets one warning per process.
#[cfg(unix)]
#[test]
fn a_new_data_dir_is_private_and_a_shared_one_gets_a_warning() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().expect("a temp dir");
    let data_dir = root.path().join("nested/data");
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;

    let mut serve = spawn(agentmesh_umask_0(&data_dir).args(["serve", "--listen", "127.0.0.1:0"]));
    let addr = listening_address(serve.stderr.take().unwrap());
    let (code, _, stderr) = finish(spawn(agentmesh_umask_0(&data_dir).args(["task", "add", "private"])));
    // Looked at while the daemon holds the database open, WAL and all.
    let modes: Vec<(String, String)> = [
        root.path().join("nested"),
        data_dir.clone(),
        data_dir.join("mesh-runtime.db"),
        data_dir.join("mesh-runtime.db-wal"),
        data_dir.join("mesh-runtime.db-shm"),
        data_dir.join("daemon.token"),
    ]
    .iter()
    .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), format!("{:o}", mode(p))))
    .collect();
    let _ = serve.kill();
    let _ = serve.wait();
    addr.expect("serve starts");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.contains("WARN"), "a private data dir gets no warning: {stderr}");
    let expected: Vec<(String, String)> = [
        ("nested", "700"),
        ("data", "700"),
        ("mesh-runtime.db", "600"),
        ("mesh-runtime.db-wal", "600"),
        ("mesh-runtime.db-shm", "600"),
        ("daemon.token", "600"),
    ]
    .iter()
    .map(|(name, mode)| (name.to_string(), mode.to_string()))
    .collect();
    assert_eq!(modes, expected);

    std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, _, stderr) = finish(spawn(agentmesh(&data_dir).args(["task", "list"])));
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stderr.matches("open to other users").count(), 1, "one warning:\n{stderr}");
    assert!(stderr.contains("chmod 700") && stderr.contains(&data_dir.display().to_string()), "{stderr}");
    assert_eq!(mode(&data_dir), 0o755, "an existing data dir keeps its mode");
}
