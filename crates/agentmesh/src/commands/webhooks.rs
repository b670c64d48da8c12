//! `agentmesh webhook`: the mesh's webhook subscriptions. `add` prints the
//! signing secret once; `list` and `show` never print it; `test` sends a signed
//! sample; `resume` and `skip` move a failing subscription on; `remove` ends one.

use std::io::Write;

use agentmesh_api::webhook::WebhookBody;
use agentmesh_core::Webhook;
use agentmesh_store::WebhookCommand as Command;

use super::{Context, id};
use crate::cli::WebhookCommand;
use crate::output::Output;

/// Runs `webhook ...`.
pub(super) fn run(ctx: &Context, command: WebhookCommand, out: &mut Output) -> anyhow::Result<()> {
    match command {
        WebhookCommand::Add(args) => {
            let body = WebhookBody {
                url: args.url,
                kinds: args.kinds,
                tags: args.tags,
                description: args.description,
                secret: args.secret,
                from_start: args.from_start,
            };
            let added = ctx.api()?.add_webhook(ctx.mesh(), body)?;
            out.emit(&added, |w| {
                write_summary(w, &added.webhook)?;
                writeln!(w, "secret: {}", added.secret)?;
                writeln!(w, "keep the secret: it is not shown again (receivers check signatures with it)")
            })
        }
        WebhookCommand::List => {
            let hooks = ctx.read_api()?.webhooks(ctx.mesh())?;
            out.emit(&serde_json::json!({ "webhooks": hooks }), |w| {
                if hooks.is_empty() {
                    return writeln!(
                        w,
                        "mesh {} has no webhook subscriptions (add one: agentmesh webhook add URL)",
                        ctx.mesh()
                    );
                }
                for hook in &hooks {
                    write_summary(w, hook)?;
                }
                Ok(())
            })
        }
        WebhookCommand::Show(args) => {
            let hook = ctx.read_api()?.webhook(ctx.mesh(), id("webhookId", &args.id)?)?;
            out.emit(&hook, |w| {
                write_summary(w, &hook)?;
                if let Some(stuck) = &hook.stuck_on {
                    writeln!(
                        w,
                        "  stuck on: {} ({}), {} failed attempt(s)",
                        stuck.entry_id, stuck.kind, hook.failures
                    )?;
                }
                if let Some(error) = &hook.last_error {
                    writeln!(w, "  last error: {error}")?;
                }
                if let Some(at) = &hook.retry_at {
                    writeln!(w, "  next attempt: {at}")?;
                }
                if hook.log.is_empty() {
                    return writeln!(w, "  no attempts yet");
                }
                writeln!(w, "  last attempts:")?;
                for a in &hook.log {
                    let status = a.status.map_or_else(|| "-".to_owned(), |s| s.to_string());
                    let error = a.error.as_deref().map(|e| format!("  {e}")).unwrap_or_default();
                    writeln!(
                        w,
                        "    {}  {}  {}  {status}  {} ms{error}",
                        a.at, a.kind, a.entry_id, a.latency_ms
                    )?;
                }
                Ok(())
            })
        }
        WebhookCommand::Test(args) => {
            let view = ctx.api()?.test_webhook(ctx.mesh(), id("webhookId", &args.id)?)?;
            let ok = view.attempt.delivered();
            out.emit(&view, |w| {
                let status =
                    view.attempt.status.map_or_else(|| "no answer".to_owned(), |s| format!("HTTP {s}"));
                match &view.attempt.error {
                    None => writeln!(
                        w,
                        "sent a signed sample to {}: {status} in {} ms",
                        view.webhook_id, view.attempt.latency_ms
                    ),
                    Some(error) => {
                        writeln!(w, "the sample to {} was not taken: {error} ({status})", view.webhook_id)
                    }
                }
            })?;
            if ok { Ok(()) } else { Err(crate::failure::Answered("webhook_test_failed").into()) }
        }
        WebhookCommand::Resume(args) => {
            let hook = ctx.api()?.webhook_command(ctx.mesh(), id("webhookId", &args.id)?, Command::Resume)?;
            out.emit(&hook, |w| {
                writeln!(w, "resumed {}: delivering from after ledger sequence {}", hook.id, hook.cursor)
            })
        }
        WebhookCommand::Skip(args) => {
            let hook = ctx.api()?.webhook_command(ctx.mesh(), id("webhookId", &args.id)?, Command::Skip)?;
            out.emit(&hook, |w| {
                writeln!(
                    w,
                    "{} skipped the entry it was stuck on; delivering from after ledger sequence {}",
                    hook.id, hook.cursor
                )
            })
        }
        WebhookCommand::Remove(args) => {
            let hook = ctx.api()?.remove_webhook(ctx.mesh(), id("webhookId", &args.id)?)?;
            out.emit(&hook, |w| writeln!(w, "removed {} ({} entries delivered)", hook.id, hook.delivered))
        }
    }
}

fn write_summary(w: &mut dyn Write, hook: &Webhook) -> std::io::Result<()> {
    let kinds = if hook.kinds.is_empty() { "every kind".to_owned() } else { hook.kinds.join(", ") };
    let tags = if hook.tags.is_empty() { String::new() } else { format!(", tags {}", hook.tags.join(", ")) };
    writeln!(
        w,
        "{}  {}  {}  {kinds}{tags}  delivered {}  cursor {}",
        hook.id,
        hook.state.as_str(),
        agentmesh_core::webhook::redacted(&hook.url),
        hook.delivered,
        hook.cursor
    )?;
    if let Some(description) = &hook.description {
        writeln!(w, "  {description}")?;
    }
    Ok(())
}
