//! A PostgreSQL server of a test's own: a cluster made by `initdb` in a
//! directory of its own, on a port of its own, for the tests that stop the
//! server or cut it off. The machine's shared server is never touched.
//!
//! The binaries are the installed PostgreSQL's (`/usr/lib/postgresql/<n>/bin`,
//! the highest version, or the directory `AGENTMESH_TEST_PG_BIN` names). Run as
//! root, every command runs as the `postgres` user (`runuser`), since the
//! server refuses to run as root. The cluster is stopped and removed when its
//! handle drops.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

/// The variable that may name the directory of `initdb` and `pg_ctl`.
pub const BIN_VAR: &str = "AGENTMESH_TEST_PG_BIN";

/// A running (or stopped) cluster of the test's own.
#[derive(Debug)]
pub struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
}

impl Cluster {
    /// Makes a cluster (trust authentication, no fsync: a test's data) and
    /// starts it on a free loopback port.
    ///
    /// # Panics
    ///
    /// When PostgreSQL's binaries are not installed, or the cluster cannot be
    /// made or started; the message says why.
    pub fn start() -> Cluster {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let bin = binaries();
        let dir = std::env::temp_dir().join(format!(
            "agentmesh-pg-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).expect("the cluster's directory");
        let as_postgres = running_as_root();
        if as_postgres {
            must(Command::new("chown").args(["-R", "postgres:postgres"]).arg(&dir).output(), "chown");
        }
        let port = free_port();
        let cluster = Cluster { dir, bin, port, as_postgres };
        let data = cluster.data();
        cluster.run(
            "initdb",
            &[
                "-D",
                data.to_str().expect("a UTF-8 path"),
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "--no-instructions",
            ],
        );
        cluster.start_again();
        cluster
    }

    /// The URL of the cluster's `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The cluster's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server (fast shutdown: clients are disconnected), waiting
    /// until it is down.
    pub fn stop(&self) {
        let data = self.data();
        self.run("pg_ctl", &["-D", data.to_str().expect("a UTF-8 path"), "-m", "fast", "-w", "stop"]);
    }

    /// Starts the (stopped) server again on the same port, waiting until it
    /// takes connections.
    pub fn start_again(&self) {
        let data = self.data();
        let log = self.dir.join("server.log");
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off -c max_connections=200",
            self.port,
            self.dir.display()
        );
        self.run(
            "pg_ctl",
            &[
                "-D",
                data.to_str().expect("a UTF-8 path"),
                "-l",
                log.to_str().expect("a UTF-8 path"),
                "-o",
                &options,
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn run(&self, tool: &str, args: &[&str]) -> Output {
        let program = self.bin.join(tool);
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            Command::new(&program)
        };
        command.args(args).current_dir(&self.dir);
        let out = must(command.output(), tool);
        assert!(
            out.status.success(),
            "{tool} {args:?} failed: {}\n{}\nserver log:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
        );
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data();
        let program = self.bin.join("pg_ctl");
        let args = ["-D", data.to_str().unwrap_or_default(), "-m", "immediate", "-w", "stop"];
        let _ = if self.as_postgres {
            Command::new("runuser").args(["-u", "postgres", "--"]).arg(&program).args(args).output()
        } else {
            Command::new(&program).args(args).output()
        };
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn must(out: std::io::Result<Output>, what: &str) -> Output {
    out.unwrap_or_else(|err| panic!("could not run {what}: {err}"))
}

/// The directory of `initdb` and `pg_ctl`.
fn binaries() -> PathBuf {
    if let Some(dir) = std::env::var_os(BIN_VAR) {
        return PathBuf::from(dir);
    }
    let root = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|entry| Some((entry.file_name().to_str()?.parse().ok()?, entry.path().join("bin"))))
        .filter(|(_, bin)| bin.join("initdb").is_file())
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).unwrap_or_else(|| {
        panic!(
            "this test runs a PostgreSQL server of its own and found no initdb under {} (install PostgreSQL's \
             server package, or set {BIN_VAR})",
            root.display()
        )
    })
}

fn running_as_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    let listener = TcpListener::bind(("127.0.0.1", 0)).expect("a free port");
    listener.local_addr().expect("its address").port()
}
