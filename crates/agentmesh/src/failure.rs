//! How a failed command ends: the exit code, the machine-readable error code and
//! the report on stderr (and on stdout with `--json`).
//!
//! [`classify`] is the one place that decides exit codes: 2 when the caller's
//! input was at fault (a clap error, an [`InvalidInput`] raised here or in the
//! core, a [`StoreError`] whose `is_caller_error()` holds), 75 (`EX_TEMPFAIL`)
//! when the store was busy, a lock stayed held or the database could not be
//! reached within the request's deadline (run it again in a moment), 1 for everything else
//! (a read-only command on a data dir with no database among them: `no_database`).
//! A refused backup or restore ([`BackupRefusal`]) has a code of its own, and
//! exits 2 when the file named was the wrong one.
//! A full disk or quota is `storage_full` also where the command's own file
//! handling (not the store) met it.
//! Commands never pick an exit code themselves; they return an `anyhow::Error` and
//! the classification looks through its whole chain.
//!
//! An error the user can fix from the command line ends with the fix: [`with_fix`]
//! appends it to the message, and the error keeps its code and exit code.

use std::io::{self, Write};
use std::process::ExitCode;

use agentmesh_api::MeshError;
use agentmesh_core::InvalidInput;
use agentmesh_sqlite::BackupRefusal;
use agentmesh_store::StoreError;
use serde_json::json;

use crate::commands::NoDatabase;

/// Exit code for bad input.
pub(crate) const EXIT_BAD_INPUT: u8 = 2;
/// Exit code for every other failure.
pub(crate) const EXIT_FAILURE: u8 = 1;
/// Exit code for a fault of the environment that the same command, run again
/// in a moment, may get past (`busy`, `lock_timeout`, `unavailable`): sysexits' `EX_TEMPFAIL`.
pub(crate) const EXIT_TRY_AGAIN: u8 = 75;

/// What an error means for the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Classified {
    /// The process exit code.
    pub exit_code: u8,
    /// The stable code in the JSON error object.
    pub code: String,
}

/// Decides the exit code and wire code of `err`, from the first error in its chain
/// that this crate knows.
pub(crate) fn classify(err: &anyhow::Error) -> Classified {
    let exit = |caller: bool, transient: bool| match (caller, transient) {
        (true, _) => EXIT_BAD_INPUT,
        (false, true) => EXIT_TRY_AGAIN,
        (false, false) => EXIT_FAILURE,
    };
    for cause in err.chain() {
        if let Some(fixed) = cause.downcast_ref::<WithFix>() {
            return classify(&fixed.error);
        }
        let refusal = cause
            .downcast_ref::<BackupRefusal>()
            .or_else(|| cause.downcast_ref::<StoreError>().and_then(BackupRefusal::of));
        if let Some(refusal) = refusal {
            return Classified {
                exit_code: exit(refusal.is_caller_error(), false),
                code: refusal.code().to_owned(),
            };
        }
        if let Some(mesh) = cause.downcast_ref::<MeshError>() {
            return Classified {
                exit_code: exit(mesh.is_caller_error(), mesh.is_transient()),
                code: mesh.code().to_owned(),
            };
        }
        if let Some(store) = cause.downcast_ref::<StoreError>() {
            return Classified {
                exit_code: exit(store.is_caller_error(), store.is_transient()),
                code: store.code().to_owned(),
            };
        }
        if cause.downcast_ref::<InvalidInput>().is_some() {
            return Classified { exit_code: EXIT_BAD_INPUT, code: "invalid_input".to_owned() };
        }
        if cause.downcast_ref::<NoDatabase>().is_some() {
            return Classified { exit_code: EXIT_FAILURE, code: "no_database".to_owned() };
        }
        if cause.downcast_ref::<io::Error>().and_then(agentmesh_store::FullStorage::of_io).is_some() {
            return Classified { exit_code: EXIT_FAILURE, code: "storage_full".to_owned() };
        }
    }
    Classified { exit_code: EXIT_FAILURE, code: "internal_error".to_owned() }
}

/// True when `err` is only the reader of our stdout going away (`agentmesh task
/// list | head`), which is not worth a complaint.
pub(crate) fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause.downcast_ref::<WithFix>().is_some_and(|fixed| is_broken_pipe(&fixed.error))
            || cause
                .downcast_ref::<io::Error>()
                .is_some_and(|io_err| io_err.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// An error followed by what the user can do about it: its message is the
/// error's whole chain, then `; ` and the fix. It classifies as the error it
/// wraps (same code, same exit code).
#[derive(Debug)]
pub(crate) struct WithFix {
    /// The error, with its causes.
    error: anyhow::Error,
    /// What to do: the flag to add, the command to run.
    fix: String,
}

impl std::fmt::Display for WithFix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}; {}", self.error, self.fix)
    }
}

// No `source`: the message already holds the wrapped chain, which `{:#}` would
// otherwise print twice. `classify` looks inside.
impl std::error::Error for WithFix {}

/// `err` with `fix` appended to its message (see [`WithFix`]).
pub(crate) fn with_fix(err: anyhow::Error, fix: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(WithFix { error: err, fix: fix.into() })
}

/// The stable code of `err`, as the JSON error object carries it (`task_not_found`,
/// `stale_epoch`, ...).
pub(crate) fn code_of(err: &anyhow::Error) -> String {
    classify(err).code
}

/// The context that marks an error the command has already written to stderr in
/// its own log format (`serve --log-format json` logs its failure as a JSON
/// line): [`report`] then adds no plain-text line of its own.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AlreadyLogged;

impl std::fmt::Display for AlreadyLogged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("already logged")
    }
}

/// An answer the command printed in full (a denied reservation, with every
/// conflict) that still ends the process with [`EXIT_FAILURE`], so that a
/// script can tell it by the exit code: [`report`] prints nothing more.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answered(pub(crate) &'static str);

impl std::fmt::Display for Answered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Answered {}

/// Reports `err` (stderr always, unless it was [`AlreadyLogged`]; stdout too with
/// `json`) and returns the exit code.
pub(crate) fn report(err: &anyhow::Error, json: bool) -> ExitCode {
    if is_broken_pipe(err) {
        return ExitCode::SUCCESS;
    }
    if err.downcast_ref::<Answered>().is_some() {
        return ExitCode::from(EXIT_FAILURE);
    }
    let classified = classify(err);
    let logged = err.downcast_ref::<AlreadyLogged>().is_some();
    // `{err:#}`, without the marker when there is one.
    let message =
        err.chain().skip(usize::from(logged)).map(ToString::to_string).collect::<Vec<_>>().join(": ");
    if !logged {
        // A closed or full stderr must not turn the failure into a panic.
        let _ = writeln!(io::stderr(), "agentmesh: {message}");
    }
    if json {
        print_json_error(&classified.code, &message);
    }
    ExitCode::from(classified.exit_code)
}

/// Reports a command-line parsing error from clap (its own rendering on stderr,
/// the JSON object on stdout with `json`) and returns exit code 2. Help and
/// version requests are printed and exit 0.
pub(crate) fn report_usage(err: &clap::Error, json: bool) -> ExitCode {
    // `print` writes help and version to stdout and real errors to stderr.
    let _ = err.print();
    if !err.use_stderr() {
        return ExitCode::SUCCESS;
    }
    if json {
        let rendered = err.render().to_string();
        let first_line = rendered.lines().next().unwrap_or_default();
        let message = first_line.strip_prefix("error: ").unwrap_or(first_line);
        print_json_error("invalid_input", message);
    }
    ExitCode::from(EXIT_BAD_INPUT)
}

fn print_json_error(code: &str, message: &str) {
    let body = json!({ "error": { "code": code, "message": message } });
    let mut stdout = io::stdout().lock();
    // Nothing useful can be done when stdout is gone while reporting an error.
    let _ = writeln!(stdout, "{body}");
}

#[cfg(test)]
mod tests {
    use anyhow::Context;

    use super::*;

    #[test]
    fn caller_errors_exit_2_and_keep_their_code() {
        let err = anyhow::Error::new(StoreError::TaskNotFound { mesh_id: "m".into(), task_id: "t".into() })
            .context("failed to cancel task t");
        assert_eq!(classify(&err), Classified { exit_code: 2, code: "task_not_found".to_owned() });
        let err = anyhow::Error::new(InvalidInput::new("status", "unknown"));
        assert_eq!(classify(&err), Classified { exit_code: 2, code: "invalid_input".to_owned() });
    }

    #[test]
    fn faults_of_the_environment_exit_75() {
        let err = anyhow::Error::new(StoreError::Busy);
        assert_eq!(classify(&err), Classified { exit_code: EXIT_TRY_AGAIN, code: "busy".to_owned() });
        let err = anyhow::Error::new(StoreError::Unavailable(String::from("the server is gone")));
        assert_eq!(classify(&err), Classified { exit_code: EXIT_TRY_AGAIN, code: "unavailable".to_owned() });
        let err = anyhow::Error::new(MeshError::Remote {
            status: 503,
            code: String::from("lock_timeout"),
            message: String::from("a lock stayed held"),
        });
        assert_eq!(classify(&err), Classified { exit_code: EXIT_TRY_AGAIN, code: "lock_timeout".to_owned() });
    }

    #[test]
    fn a_fix_ends_the_message_and_keeps_the_code() {
        let err = anyhow::Error::new(StoreError::TaskNotFound { mesh_id: "m".into(), task_id: "t".into() })
            .context("failed to show task t");
        let fixed = with_fix(err, "`agentmesh task list` lists the tasks");
        assert_eq!(
            format!("{fixed:#}"),
            "failed to show task t: task t not found in mesh m; `agentmesh task list` lists the tasks"
        );
        assert_eq!(classify(&fixed), Classified { exit_code: 2, code: "task_not_found".to_owned() });
        let outer = fixed.context("outer");
        assert_eq!(code_of(&outer), "task_not_found");
        let pipe = with_fix(anyhow::Error::new(io::Error::from(io::ErrorKind::BrokenPipe)), "x");
        assert!(is_broken_pipe(&pipe));
    }

    #[test]
    fn system_errors_exit_1() {
        let err: anyhow::Error =
            Err::<(), _>(io::Error::other("disk on fire")).context("writing").unwrap_err();
        assert_eq!(classify(&err), Classified { exit_code: 1, code: "internal_error".to_owned() });
        assert!(!is_broken_pipe(&err));
        let full: anyhow::Error = Err::<(), _>(io::Error::from(io::ErrorKind::StorageFull))
            .context("writing the token")
            .unwrap_err();
        assert_eq!(classify(&full), Classified { exit_code: 1, code: "storage_full".to_owned() });
        let pipe = anyhow::Error::new(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(is_broken_pipe(&pipe));
    }
}
