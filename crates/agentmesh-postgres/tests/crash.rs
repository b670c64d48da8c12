//! `kill -9` of a process in the middle of writing loses nothing it was told was
//! committed, and leaves no half of a write behind.
//!
//! This test has its own `main` (`harness = false`). Run without arguments it is the
//! parent: in a fresh schema, it starts a copy of this executable with `--writer`,
//! which enqueues and claims tasks and completes them as fast as it can, printing
//! every operation after it returned (so after its COMMIT). The parent reads those
//! lines, kills the writer with SIGKILL after a random number of them (and a random
//! sub-millisecond pause, so the kill lands anywhere in a round trip), opens the
//! installation again and checks that every reported operation is there with its
//! ledger entry, that every state change has exactly its entry and no entry lacks
//! its change, and that the store keeps working. It repeats this several times on
//! the same schema, then drops it. Without `AGENTMESH_TEST_DATABASE_URL` the
//! parent prints that it skipped and exits 0.

use std::io::Read;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use agentmesh_postgres::PgStore;
use agentmesh_store::conformance::crash::{self, WRITER_ARG, Written};
use agentmesh_test_support::postgres::database_url;

#[path = "it/support.rs"]
#[allow(dead_code)]
mod support;

const ROUNDS: u32 = 6;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == WRITER_ARG) {
        Some(i) => writer(&args[i + 1], &args[i + 2]),
        None if args.iter().any(|a| a == "--list") => ExitCode::SUCCESS,
        None => parent(),
    }
}

/// Writes until killed, on the installation in `schema`.
fn writer(schema: &str, round: &str) -> ExitCode {
    let url = database_url().expect("writers run only where the parent found the server");
    let mut options = support::options(&url, schema);
    options.max_connections = 2;
    let store = PgStore::open(&options).expect("writer opens the installation");
    crash::write_until_killed(&store, round);
    ExitCode::SUCCESS
}

/// A small random number generator (xorshift), seeded from a random UUID; the
/// seed is printed so a failing run can be told apart.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn parent() -> ExitCode {
    let Some(url) = database_url() else {
        return ExitCode::SUCCESS;
    };
    println!("running 1 test");
    let db = support::TestDb::new(&url);
    let schema = db.schema().to_owned();
    let seed = uuid::Uuid::new_v4().as_u64_pair().0 | 1;
    let mut rng = Rng(seed);
    let exe = std::env::current_exe().unwrap();
    let mut written = Written::default();
    let mut kills_at = Vec::new();
    let began = Instant::now();
    for round in 0..ROUNDS {
        let mut child = Command::new(&exe)
            .args([WRITER_ARG, &schema, &round.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn writer");
        // Let the writer get going, then kill it wherever it is: between two
        // round trips, or with a statement or a COMMIT on its way.
        let target = 30 + rng.below(300) as usize;
        let seen = written.read(child.stdout.take().unwrap(), target, Duration::from_secs(30));
        std::thread::sleep(Duration::from_micros(rng.below(1_000)));
        // SIGKILL: no destructors, no ROLLBACK, the connections just drop.
        child.kill().expect("kill the writer");
        child.wait().unwrap();
        let mut stderr = String::new();
        child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
        assert!(seen >= target, "the writer stopped early in round {round}:\n{stderr}");
        kills_at.push(seen);

        let store =
            PgStore::open(&support::options(&url, &schema)).expect("the installation opens after kill -9");
        written.check_after_kill(&store, round);
    }
    // The last writer's leftovers and the tasks reclaimed after each kill are
    // claimable and completable by a new session.
    let finished = crash::finish_leftovers(&db.store);
    println!(
        "test kill_9_loses_no_committed_write ... ok ({} enqueues and {} completions across {ROUNDS} kills \
         after {kills_at:?} operations, seed {seed:#x}; {finished} left-over tasks finished after; {:.2} s)",
        written.enqueued.len(),
        written.completed.len(),
        began.elapsed().as_secs_f64()
    );
    println!("\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out");
    ExitCode::SUCCESS
}
