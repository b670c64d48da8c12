//! `agentmesh mcp` over every kind of stdin and stdout a host hands it: pipes,
//! Unix socketpairs (what Node.js gives a child process) and files, and the
//! official TypeScript SDK's stdio client, run with Node (skipped, one line,
//! on a machine without Node.js and npm).

use crate::mcp_support;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use agentmesh_test_support::Tool;
use rmcp::ServiceExt;
use serde_json::{Value, json};

/// How long a server gets to answer a scripted exchange and exit.
const DEADLINE: Duration = Duration::from_secs(30);
/// How long the Node client gets: past the SDK's own 60 s request timeout, so a
/// server that never answers fails with the SDK's message.
const NODE_DEADLINE: Duration = Duration::from_secs(90);

/// What a standard stream of the server is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Pipe,
    Socketpair,
    File,
}

const KINDS: [Kind; 3] = [Kind::Pipe, Kind::Socketpair, Kind::File];

/// The exchange a host opens with: initialize, the initialized notification, a
/// tool list and one call, then the end of stdin.
fn script(task_id: &str) -> String {
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "agentmesh-test", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "enqueue_task", "arguments": {"message": "scripted", "id": task_id}}}),
    ];
    lines.iter().map(|line| format!("{line}\n")).collect()
}

/// `agentmesh --data-dir DIR mcp`, with stderr kept for the failure message.
fn mcp_command(data_dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentmesh"));
    cmd.arg("--data-dir").arg(data_dir).arg("mcp");
    cmd.env_remove("AGENTMESH_SERVER").env_remove("AGENTMESH_MESH").env_remove("AGENTMESH_TOKEN");
    cmd.env("RUST_LOG", "warn").stderr(Stdio::piped());
    cmd
}

/// Waits for `child` to exit; kills it and fails the test after `deadline`.
pub(crate) fn wait_exit(child: &mut Child, what: &str, deadline: Duration) -> ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let mut stderr = String::new();
            if let Some(mut err) = child.stderr.take() {
                let _ = err.read_to_string(&mut stderr);
            }
            panic!("{what}: it did not exit within {deadline:?}; stderr:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The answers by request id, from the server's output.
fn answers(output: &str) -> std::collections::HashMap<u64, Value> {
    output
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .filter_map(|message| Some((message["id"].as_u64()?, message)))
        .collect()
}

/// Runs the scripted exchange with stdin of kind `input` and stdout of kind
/// `output`; the server must answer all three requests and exit by itself.
fn scripted_exchange(data_dir: &Path, scratch: &Path, input: Kind, output: Kind) {
    let what = format!("stdin {input:?}, stdout {output:?}");
    let task_id = format!("t-{input:?}-{output:?}").to_lowercase();
    let script = script(&task_id);
    let mut cmd = mcp_command(data_dir);

    let mut stdin_writer = None;
    match input {
        Kind::Pipe => {
            cmd.stdin(Stdio::piped());
        }
        Kind::Socketpair => {
            let (ours, theirs) = UnixStream::pair().unwrap();
            cmd.stdin(Stdio::from(OwnedFd::from(theirs)));
            stdin_writer = Some(ours);
        }
        Kind::File => {
            let path = scratch.join(format!("{task_id}.in.jsonl"));
            std::fs::write(&path, &script).unwrap();
            cmd.stdin(File::open(&path).unwrap());
        }
    }
    let out_path = scratch.join(format!("{task_id}.out.jsonl"));
    let mut stdout_reader: Option<Box<dyn Read + Send>> = None;
    match output {
        Kind::Pipe => {
            cmd.stdout(Stdio::piped());
        }
        Kind::Socketpair => {
            let (ours, theirs) = UnixStream::pair().unwrap();
            cmd.stdout(Stdio::from(OwnedFd::from(theirs)));
            stdout_reader = Some(Box::new(ours));
        }
        Kind::File => {
            cmd.stdout(File::create(&out_path).unwrap());
        }
    }
    let mut child = cmd.spawn().expect("agentmesh mcp starts");
    // The command holds the parent's copies of the child's ends: without dropping
    // them, a socketpair's reader would never see the end of the output.
    drop(cmd);
    if let Some(out) = child.stdout.take() {
        stdout_reader = Some(Box::new(out));
    }
    let reader = stdout_reader.map(|mut out| {
        std::thread::spawn(move || {
            let mut text = String::new();
            out.read_to_string(&mut text).map(|_| text)
        })
    });
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(script.as_bytes()).unwrap();
    }
    if let Some(mut socket) = stdin_writer {
        socket.write_all(script.as_bytes()).unwrap();
        socket.shutdown(std::net::Shutdown::Write).unwrap();
    }

    let status = wait_exit(&mut child, &what, DEADLINE);
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(status.success(), "{what}: {status}; stderr:\n{stderr}");
    let text = match reader {
        Some(reader) => reader.join().unwrap().unwrap(),
        None => std::fs::read_to_string(&out_path).unwrap(),
    };
    let answers = answers(&text);
    let answer =
        |id: u64| answers.get(&id).unwrap_or_else(|| panic!("{what}: no answer to request {id}: {text}"));
    assert_eq!(answer(1)["result"]["serverInfo"]["name"], "agentmesh", "{what}: {text}");
    let tools = answer(2)["result"]["tools"].as_array().unwrap_or_else(|| panic!("{what}: {text}"));
    assert_eq!(tools.len(), mcp_support::TOOLS.len(), "{what}");
    let call = &answer(3)["result"];
    assert_ne!(call["isError"], true, "{what}: {call}");
    assert_eq!(call["structuredContent"]["task"]["id"], task_id.as_str(), "{what}: {call}");
}

#[test]
fn every_pairing_of_pipe_socketpair_and_file_is_answered_and_ends_with_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    for input in KINDS {
        for output in KINDS {
            scripted_exchange(&data_dir, dir.path(), input, output);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_answers_over_one_unix_socketpair() {
    let dir = tempfile::tempdir().unwrap();
    let (ours, theirs) = UnixStream::pair().unwrap();
    let mut cmd = mcp_command(dir.path());
    cmd.stdin(Stdio::from(OwnedFd::from(theirs.try_clone().unwrap())));
    cmd.stdout(Stdio::from(OwnedFd::from(theirs)));
    let mut child = cmd.spawn().expect("agentmesh mcp starts");
    drop(cmd);

    ours.set_nonblocking(true).unwrap();
    let stream = tokio::net::UnixStream::from_std(ours).unwrap();
    let session = async {
        let client = ().serve(stream).await.expect("the MCP session initializes over the socketpair");
        mcp_support::exercise_every_tool(&client).await;
        client.cancel().await.unwrap();
    };
    if tokio::time::timeout(DEADLINE, session).await.is_err() {
        let _ = child.kill();
        panic!("the session over the socketpair did not finish within {DEADLINE:?}");
    }

    let status =
        tokio::task::spawn_blocking(move || wait_exit(&mut child, "the server", DEADLINE)).await.unwrap();
    assert!(status.success(), "{status}");
}

/// Runs the Node client with `node` against `agentmesh [globals] mcp` and returns
/// its report.
fn node_client_report(node: &str, data_dir: &Path, globals: &[&str]) -> Value {
    let packages = crate::node_support::install_packages();
    let dir = tempfile::tempdir().unwrap();
    // Files, not pipes: the server the client spawns inherits them, and a pipe
    // it held open would keep a reader waiting after the client is gone.
    let (out_path, err_path) = (dir.path().join("report.json"), dir.path().join("stderr.txt"));
    let mut child = Command::new(node)
        .arg(packages.join("mcp_client.mjs"))
        .arg(env!("CARGO_BIN_EXE_agentmesh"))
        .arg(data_dir)
        .args(globals)
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("{node} did not run: {e}"));
    let status = wait_exit(&mut child, "the Node client", NODE_DEADLINE);
    let stderr = std::fs::read_to_string(&err_path).unwrap();
    assert!(status.success(), "the Node client failed ({status}):\n{stderr}");
    let report = std::fs::read_to_string(&out_path).unwrap();
    serde_json::from_str(&report).unwrap_or_else(|e| panic!("{e}: {report}\n{stderr}"))
}

/// What every run of the Node client must report: the server, its tools, schemas
/// that compile, and the task its call enqueued.
fn assert_node_report(report: &Value) {
    assert_eq!(report["server"]["name"], "agentmesh");
    assert_eq!(report["tools"], json!(&mcp_support::TOOLS[..]));
    // Every tool schema compiles under ajv's defaults, draft-07 and 2020-12, and
    // the call's arguments are valid against it.
    assert_eq!(report["schemaErrors"], json!([]), "{report}");
    let result = &report["result"];
    assert_ne!(result["isError"], true, "{result}");
    assert_eq!(result["structuredContent"]["task"]["message"], "written by the Node client");
    assert_eq!(result["structuredContent"]["task"]["taskMode"], "code_change");
    // The task's history, asked for by its id.
    let history = &report["taskHistory"];
    assert_ne!(history["isError"], true, "{history}");
    let entries = history["structuredContent"]["entries"].as_array().unwrap_or_else(|| panic!("{history}"));
    let kinds: Vec<&Value> = entries.iter().map(|e| &e["kind"]).collect();
    assert_eq!(kinds, [&json!("task_dispatched")], "{history}");
    assert_eq!(entries[0]["payload"]["taskId"], result["structuredContent"]["task"]["id"]);
}

#[test]
fn the_typescript_sdk_stdio_client_lists_the_tools_and_calls_one() {
    let node = agentmesh_test_support::require!(Tool::Node);
    let dir = tempfile::tempdir().unwrap();
    let report = node_client_report(&node, &dir.path().join("data"), &[]);
    assert_node_report(&report);
}

/// The same host against an installation on PostgreSQL (`--database-url`,
/// `--database-schema`): the tools answer alike, and the task the call enqueued
/// is a row of the installation's schema on the server.
#[test]
fn the_typescript_sdk_stdio_client_works_on_a_postgresql_installation() {
    let url = agentmesh_test_support::require_postgres!();
    let node = agentmesh_test_support::require!(Tool::Node);
    let dir = tempfile::tempdir().unwrap();
    let schema = agentmesh_test_support::postgres::Schema::fresh(&url, "am_mcp_stdio");
    let report = node_client_report(
        &node,
        &dir.path().join("data"),
        &["--database-url", &url, "--database-schema", schema.name()],
    );
    assert_node_report(&report);
    let task_id =
        report["result"]["structuredContent"]["task"]["id"].as_str().expect("the task's id").to_owned();
    let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("a connection");
    let stored: Vec<String> = client
        .query(&format!("SELECT payload FROM \"{}\".mesh_queue WHERE id = $1", schema.name()), &[&task_id])
        .expect("the queue of the schema")
        .iter()
        .map(|r| agentmesh_store::packed::unpack(r.get(0)).expect("a readable payload").into_owned())
        .collect();
    assert_eq!(stored.len(), 1, "the task is one row of schema {}", schema.name());
    assert!(stored[0].contains("written by the Node client"), "{}", stored[0]);
    assert!(
        !dir.path().join("data").join("mesh-runtime.db").exists(),
        "nothing was written to an embedded file"
    );
}
