//! `agentmesh claim`: a worker session asks for its next task.
//!
//! "Nothing to claim" is an answer, not an error: with `--json` the document is
//! `null` and the refusal reason goes to stderr; the exit code is 0 either way, so
//! a worker loop can tell "no work" from "broken" by the exit code alone.
//!
//! The claimed task's fencing epoch is what `complete --epoch` asks for: the text
//! says `(epoch N)` and the `agentmesh complete` line to run when done, and the
//! JSON document, the task in the original's shape (its epoch under the
//! original's name `dispatchNonce`), carries it under `epoch` as well. The
//! refusal reason is the store's code in JSON and on stderr, and words with
//! the code after them in the text.

use std::num::NonZeroU32;
use std::time::Duration;

use agentmesh_api::views::ClaimView;
use agentmesh_api::wire::ClaimBody;
use agentmesh_core::{ClaimRefusal, InvalidInput, Task};
use serde_json::Value;

use super::{Context, id};
use crate::cli::ClaimArgs;
use crate::duration;
use crate::output::{self, Output};

/// Runs `claim`.
pub(super) fn run(ctx: &Context, args: ClaimArgs, out: &mut Output) -> anyhow::Result<()> {
    let body = ClaimBody {
        node_id: id("nodeId", &args.node)?.to_owned(),
        session_id: id("sessionId", &args.session)?.to_owned(),
        capability_tags: args.tags,
        provider_type: args.provider,
        provider_max_parallel: args.max_parallel,
        node_is_worktree: args.worktree,
        lease_ms: lease_ms(args.lease)?,
        assigned_transcript_profile: match (args.transcript_class, args.transcript_timing) {
            (Some(class), Some(timing)) => Some(agentmesh_core::TranscriptProfile {
                class,
                timing,
                emits_pty_turn_events: args.emits_pty_turn_events,
            }),
            _ => None,
        },
        allowed_task_difficulties: (!args.difficulties.is_empty()).then_some(args.difficulties),
    };
    let session = body.session_id.clone();
    let view = ctx.api()?.claim(ctx.mesh(), body)?;
    print_claim(view, &session, out)
}

/// A claim's lease in milliseconds, from `--lease`.
pub(super) fn lease_ms(lease: Option<Duration>) -> Result<Option<NonZeroU32>, InvalidInput> {
    lease
        .map(|lease| {
            duration::lease_millis(lease).ok_or_else(|| {
                InvalidInput::new(
                    "lease",
                    format!("must be between 1s and {}", duration::format(duration::MAX_LEASE)),
                )
            })
        })
        .transpose()
}

/// Prints a claim's answer for `session`: the task (with its epoch under
/// `epoch` too) and the command that reports it, or `null` (JSON) and why there
/// is none.
pub(super) fn print_claim(view: ClaimView, session: &str, out: &mut Output) -> anyhow::Result<()> {
    match view.task {
        Some(task) => out.emit(&with_epoch(&task)?, |w| {
            writeln!(
                w,
                "claimed {} (epoch {}): {}",
                task.id,
                task.epoch(),
                output::excerpt(&task.message, 100)
            )?;
            writeln!(
                w,
                "when it is done: agentmesh complete --session {} --task {} --epoch {} --summary '...' \
                 (or --failed --reason '...')",
                shell_word(session),
                shell_word(&task.id),
                task.epoch()
            )
        }),
        None => {
            let reason = view.refusal.unwrap_or_else(|| "no pending task".to_owned());
            let held: Vec<String> = view.blocked_by.iter().map(ToString::to_string).collect();
            if out.is_json() {
                eprintln!("agentmesh: nothing to claim: {reason}");
                for h in &held {
                    eprintln!("agentmesh:   {h}");
                }
            }
            out.emit(&None::<Task>, |w| {
                writeln!(w, "nothing to claim: {}", refusal_words(&reason))?;
                held.iter().try_for_each(|h| writeln!(w, "  - {h}"))
            })
        }
    }
}

/// `word` as one shell word: as it is when it holds only characters no shell
/// treats specially, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "._-:@%+=,/".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The task as a JSON object with its fencing epoch under `epoch` beside the
/// original's `dispatchNonce`, the name `complete --epoch` goes by.
pub(super) fn with_epoch(task: &Task) -> anyhow::Result<Value> {
    let mut value = serde_json::to_value(task)?;
    if let Value::Object(fields) = &mut value {
        fields.insert("epoch".to_owned(), Value::from(task.epoch()));
    }
    Ok(value)
}

/// A refusal reason in words, its code after them (`no pending task this session
/// may take (no_pending_candidates)`); a code this binary does not know is shown
/// as it is.
pub(super) fn refusal_words(code: &str) -> String {
    let Some(refusal) = ClaimRefusal::ALL.into_iter().find(|r| r.as_str() == code) else {
        return code.to_owned();
    };
    let words = match refusal {
        ClaimRefusal::SessionAlreadyAssigned => {
            "the session already holds a task; report it with `agentmesh complete` first"
        }
        ClaimRefusal::NoPendingCandidates => "no pending task this session may take",
        ClaimRefusal::RequiredTagsUnsatisfied => {
            "the pending tasks need capability tags this node does not offer (--tag)"
        }
        ClaimRefusal::DependenciesUnsatisfied => "the pending tasks wait for tasks they depend on",
        ClaimRefusal::NotBeforeDelayed => "the pending tasks may not start yet (--not-before)",
        ClaimRefusal::TaskParked => "the pending tasks are parked",
        ClaimRefusal::ConvergenceTargetIsWorktree => "convergence tasks do not go to a worktree node",
        ClaimRefusal::TargetPinUnmatched => "the pending tasks are pinned to another node or session",
        ClaimRefusal::ParallelCapReached => "this node runs as many tasks of this provider as it may",
        ClaimRefusal::NodeBusyWithActiveAssignment => "this node is busy with another write task",
        ClaimRefusal::PathsReserved => {
            "the tasks left touch paths another holder has reserved (see agentmesh reservations)"
        }
        ClaimRefusal::DifficultyFloorUnmet => {
            "the pending tasks are of difficulties this session does not take"
        }
    };
    format!("{words} ({code})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_print_as_one_shell_word() {
        assert_eq!(shell_word("worker-1"), "worker-1");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn refusals_read_as_words_with_their_code() {
        assert_eq!(
            refusal_words("no_pending_candidates"),
            "no pending task this session may take (no_pending_candidates)"
        );
        assert_eq!(refusal_words("something_new"), "something_new");
        for refusal in ClaimRefusal::ALL {
            assert!(refusal_words(refusal.as_str()).ends_with(&format!("({})", refusal.as_str())));
        }
    }

    #[test]
    fn the_claimed_task_carries_its_epoch_under_both_names() {
        let mut task = Task::new("t1", "m", "work", "2025-01-01T00:00:00.000Z");
        task.dispatch_nonce = Some(4);
        let value = with_epoch(&task).unwrap();
        assert_eq!(value["epoch"], 4);
        assert_eq!(value["dispatchNonce"], 4);
        assert_eq!(value["id"], "t1");
    }
}
