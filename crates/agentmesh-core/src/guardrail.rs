//! The read-only guardrail: a read-only task (mode `live_debug_readonly`, or
//! `readonly: true`) whose message asks for an operation that changes something is
//! refused at enqueue, as the original refused it.
//!
//! The message is scanned for seven families of forbidden operations, each with
//! the original's label: source edits, checkpoints, deploys and version bumps,
//! destructive shell commands, package installs, container mutations and git
//! mutations. A keyword counts only where it reads as a command and not as prose:
//!
//! - it is in command context: inside a code fence or backticks, on a `$ ` or `> `
//!   prompt line, at the start of a line, after `&&`, `||`, `|` or `;`, after
//!   "then", "run" or "first", after a comma, or inside a `./`, `../`, `~/` or `/`
//!   path that is itself run at command position;
//! - and it is not negated (a negation cue among the six words before it in the
//!   same clause, or a Korean cue anywhere in the clause, before or after it), not
//!   glued to a letter of any script, not a segment of a path, and not inside a
//!   quoted span.
//!
//! [`check_readonly_message`] turns the families found into the refusal, whose
//! text is the original's reason: `live_debug_readonly_guardrail_violation:
//! forbidden operations (git_mutation, ...)`. This module only reads text; it
//! knows nothing of tasks beyond the message.

use std::fmt;

use crate::InvalidInput;

/// The reason code that opens the refusal text.
pub const GUARDRAIL_VIOLATION: &str = "live_debug_readonly_guardrail_violation";

/// A family of operations a read-only task must not ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ForbiddenOperation {
    /// Editing, patching, writing, creating or deleting files.
    SourceEdit,
    /// Taking a checkpoint.
    Checkpoint,
    /// Deploying, releasing, publishing or bumping a version.
    DeployOrVersionBump,
    /// `rm -rf`, `mv`, `truncate`, `tee`, `sed -i`, `shred`.
    DestructiveShell,
    /// Installing or removing packages (npm, yarn, pnpm, pip, brew, apt, cargo).
    PackageInstall,
    /// Building, running or changing containers and cluster objects.
    ContainerMutation,
    /// A git command that changes the work tree, the index, refs or a remote.
    GitMutation,
}

impl ForbiddenOperation {
    /// Every family, in the order the refusal lists them.
    pub const ALL: [ForbiddenOperation; 7] = [
        ForbiddenOperation::SourceEdit,
        ForbiddenOperation::Checkpoint,
        ForbiddenOperation::DeployOrVersionBump,
        ForbiddenOperation::DestructiveShell,
        ForbiddenOperation::PackageInstall,
        ForbiddenOperation::ContainerMutation,
        ForbiddenOperation::GitMutation,
    ];

    /// The original's label.
    pub const fn label(self) -> &'static str {
        match self {
            ForbiddenOperation::SourceEdit => "source_edit",
            ForbiddenOperation::Checkpoint => "checkpoint",
            ForbiddenOperation::DeployOrVersionBump => "deploy_or_version_bump",
            ForbiddenOperation::DestructiveShell => "destructive_shell",
            ForbiddenOperation::PackageInstall => "package_install",
            ForbiddenOperation::ContainerMutation => "container_mutation",
            ForbiddenOperation::GitMutation => "git_mutation",
        }
    }

    /// The keyword phrases of a family, except git's (see [`git_mutation`]). At one
    /// position the first phrase that matches is the match.
    fn phrases(self) -> &'static [&'static [Part]] {
        use Part::{Arg, Gap, Lit};
        match self {
            ForbiddenOperation::SourceEdit => &[
                &[Lit("edit")],
                &[Lit("modify")],
                &[Lit("patch")],
                &[Lit("apply"), Gap, Lit("patch")],
                &[Lit("write"), Gap, Lit("to"), Gap, Lit("file")],
                &[Lit("write"), Gap, Lit("to"), Gap, Lit("source")],
                &[Lit("write"), Gap, Lit("file")],
                &[Lit("write"), Gap, Lit("source")],
                &[Lit("overwrite")],
                &[Lit("delete"), Gap, Lit("file")],
                &[Lit("remove"), Gap, Lit("file")],
                &[Lit("create"), Gap, Lit("file")],
                &[Lit("touch"), Gap, Lit("file")],
            ],
            ForbiddenOperation::Checkpoint => &[&[Lit("checkpoint")], &[Lit("mesh_checkpoint")]],
            ForbiddenOperation::DeployOrVersionBump => &[
                &[Lit("deploy")],
                &[Lit("wrangler"), Gap, Lit("deploy")],
                &[Lit("version"), Gap, Lit("bump")],
                &[Lit("version-bump")],
                &[Lit("versionbump")],
                &[Lit("npm"), Gap, Lit("version")],
                &[Lit("release")],
                &[Lit("npm"), Gap, Lit("publish")],
                &[Lit("yarn"), Gap, Lit("publish")],
                &[Lit("pnpm"), Gap, Lit("publish")],
            ],
            ForbiddenOperation::DestructiveShell => &[
                &[Lit("rm"), Gap, Lit("-rf")],
                &[Lit("mv"), Gap, Arg, Gap, Arg],
                &[Lit("truncate"), Gap],
                &[Lit("tee"), Gap, Arg],
                &[Lit("sed"), Gap, Lit("-i")],
                &[Lit("shred")],
            ],
            ForbiddenOperation::PackageInstall => &[
                &[Lit("npm"), Gap, Lit("install")],
                &[Lit("npm"), Gap, Lit("i")],
                &[Lit("npm"), Gap, Lit("add")],
                &[Lit("npm"), Gap, Lit("link")],
                &[Lit("npm"), Gap, Lit("uninstall")],
                &[Lit("npm"), Gap, Lit("remove")],
                &[Lit("yarn"), Gap, Lit("add")],
                &[Lit("yarn"), Gap, Lit("remove")],
                &[Lit("yarn"), Gap, Lit("link")],
                &[Lit("pnpm"), Gap, Lit("add")],
                &[Lit("pnpm"), Gap, Lit("remove")],
                &[Lit("pnpm"), Gap, Lit("link")],
                &[Lit("pip"), Gap, Lit("install")],
                &[Lit("brew"), Gap, Lit("install")],
                &[Lit("apt"), Gap, Lit("install")],
                &[Lit("cargo"), Gap, Lit("install")],
            ],
            ForbiddenOperation::ContainerMutation => &[
                &[Lit("docker"), Gap, Lit("build")],
                &[Lit("docker"), Gap, Lit("run")],
                &[Lit("docker"), Gap, Lit("exec")],
                &[Lit("docker"), Gap, Lit("push")],
                &[Lit("docker"), Gap, Lit("tag")],
                &[Lit("docker"), Gap, Lit("rmi")],
                &[Lit("docker"), Gap, Lit("rm")],
                &[Lit("docker"), Gap, Lit("create")],
                &[Lit("docker"), Gap, Lit("start")],
                &[Lit("docker"), Gap, Lit("stop")],
                &[Lit("docker"), Gap, Lit("kill")],
                &[Lit("kubectl"), Gap, Lit("apply")],
                &[Lit("kubectl"), Gap, Lit("delete")],
                &[Lit("kubectl"), Gap, Lit("patch")],
                &[Lit("kubectl"), Gap, Lit("replace")],
                &[Lit("kubectl"), Gap, Lit("create")],
                &[Lit("kubectl"), Gap, Lit("scale")],
            ],
            ForbiddenOperation::GitMutation => &[],
        }
    }
}

impl fmt::Display for ForbiddenOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Git subcommands that change the work tree, the index, refs or a remote.
/// `stash`, `checkout`, `submodule` and `worktree` are judged with the word after
/// them (see [`git_mutation`]).
const GIT_MUTATING: &[&str] = &[
    "add",
    "commit",
    "push",
    "reset",
    "rebase",
    "clean",
    "switch",
    "merge",
    "tag",
    "restore",
    "rm",
    "mv",
    "cherry-pick",
    "revert",
    "pull",
    "fetch",
    "am",
    "apply",
    "gc",
    "prune",
];

/// English negation cues, looked for among the six words before a keyword.
const ENGLISH_NEGATIONS: &[&str] =
    &["don't", "do not", "never", "avoid", "without", "no longer", "not", "forbidden"];
/// Korean negation cues, looked for anywhere in the keyword's clause, before or
/// after it (Korean puts the negation after the verb).
const KOREAN_NEGATIONS: &[&str] = &["하지 마", "하지 마세요", "말 것", "금지", "없음", "않"];
/// How many words before a keyword are searched for an English negation cue.
const NEGATION_WINDOW_WORDS: usize = 6;

/// One piece of a keyword phrase.
#[derive(Debug, Clone, Copy)]
enum Part {
    /// These characters, ASCII case ignored.
    Lit(&'static str),
    /// One or more whitespace characters.
    Gap,
    /// One word of any non-whitespace characters (an argument).
    Arg,
}

/// The families of forbidden operations `message` asks for, in the order of
/// [`ForbiddenOperation::ALL`]; empty when it asks for none.
pub fn forbidden_operations(message: &str) -> Vec<ForbiddenOperation> {
    let text = Text::new(message);
    ForbiddenOperation::ALL
        .into_iter()
        .filter(|op| match op {
            ForbiddenOperation::GitMutation => git_mutation(&text),
            other => family_matches(&text, other.phrases()),
        })
        .collect()
}

/// Refuses the message of a read-only task that asks for a forbidden operation,
/// with the original's reason naming the families found (field `message`).
pub fn check_readonly_message(message: &str) -> Result<(), InvalidInput> {
    let found = forbidden_operations(message);
    if found.is_empty() {
        return Ok(());
    }
    let labels: Vec<&str> = found.iter().map(|op| op.label()).collect();
    Err(InvalidInput::new(
        "message",
        format!("{GUARDRAIL_VIOLATION}: forbidden operations ({})", labels.join(", ")),
    ))
}

/// The message being scanned, with the views of it the checks need.
struct Text<'a> {
    s: &'a str,
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

impl<'a> Text<'a> {
    fn new(s: &'a str) -> Text<'a> {
        Text { s }
    }

    fn bytes(&self) -> &[u8] {
        self.s.as_bytes()
    }

    /// Whether a word (ASCII letters, digits, `_`) starts or ends at byte `at`.
    fn boundary(&self, at: usize) -> bool {
        let b = self.bytes();
        let before = at > 0 && is_word_byte(b[at - 1]);
        let after = at < b.len() && is_word_byte(b[at]);
        before != after
    }

    /// The end of `parts` matched at `at`, if they match there.
    fn match_parts(&self, at: usize, parts: &[Part]) -> Option<usize> {
        let b = self.bytes();
        let mut pos = at;
        for part in parts {
            match part {
                Part::Lit(lit) => {
                    let end = pos + lit.len();
                    if end > b.len() || !b[pos..end].eq_ignore_ascii_case(lit.as_bytes()) {
                        return None;
                    }
                    pos = end;
                }
                Part::Gap => {
                    let start = pos;
                    while let Some(c) = self.s[pos..].chars().next().filter(|c| c.is_whitespace()) {
                        pos += c.len_utf8();
                    }
                    if pos == start {
                        return None;
                    }
                }
                Part::Arg => {
                    let start = pos;
                    while let Some(c) = self.s[pos..].chars().next().filter(|c| !c.is_whitespace()) {
                        pos += c.len_utf8();
                    }
                    if pos == start {
                        return None;
                    }
                    // An argument ends where a word does: trailing punctuation is
                    // not part of it.
                    while pos > start && !is_word_byte(b[pos - 1]) {
                        pos -= 1;
                    }
                    if pos == start || !self.s.is_char_boundary(pos) {
                        return None;
                    }
                }
            }
        }
        self.boundary(pos).then_some(pos)
    }

    /// The first phrase of `phrases` that matches at `at` (a word start).
    fn match_at(&self, at: usize, phrases: &[&[Part]]) -> Option<usize> {
        if !self.boundary(at) {
            return None;
        }
        phrases.iter().find_map(|parts| self.match_parts(at, parts))
    }

    /// The start of the line holding byte `at`.
    fn line_start(&self, at: usize) -> usize {
        self.s[..at].rfind('\n').map_or(0, |i| i + 1)
    }

    /// The end of the line holding byte `at` (the `\n` or the end of the text).
    fn line_end(&self, at: usize) -> usize {
        self.s[at..].find('\n').map_or(self.s.len(), |i| at + i)
    }

    /// The char before byte `at`, if any.
    fn char_before(&self, at: usize) -> Option<char> {
        self.s[..at].chars().next_back()
    }

    /// The char at byte `at`, if any.
    fn char_at(&self, at: usize) -> Option<char> {
        self.s[at..].chars().next()
    }

    /// The start of the whitespace-delimited token holding byte `at`, within its line.
    fn token_start(&self, at: usize) -> usize {
        let line = self.line_start(at);
        let mut start = at;
        while start > line {
            match self.char_before(start) {
                Some(c) if !c.is_whitespace() => start -= c.len_utf8(),
                _ => break,
            }
        }
        start
    }
}

/// Whether any phrase of a family matches somewhere as a command. The text is
/// scanned left to right; after a match that does not count, the scan goes on
/// past it.
fn family_matches(text: &Text<'_>, phrases: &[&[Part]]) -> bool {
    let mut at = 0;
    while at < text.s.len() {
        if text.s.is_char_boundary(at)
            && let Some(end) = text.match_at(at, phrases)
        {
            if is_real_match(text, at, end) {
                return true;
            }
            at = end;
            continue;
        }
        at += 1;
    }
    false
}

/// Whether the message holds a git command that changes something, as a command.
fn git_mutation(text: &Text<'_>) -> bool {
    let b = text.bytes();
    let mut at = 0;
    while at < b.len() {
        let Some(after_git) = text.s.is_char_boundary(at).then(|| text.match_git_word(at)).flatten() else {
            at += 1;
            continue;
        };
        let Some((sub, sub_end)) = subcommand(text, after_git) else {
            at = after_git;
            continue;
        };
        let next = subcommand(text, sub_end);
        let next_word = next.as_ref().map(|(w, _)| w.as_str()).unwrap_or("");
        let end = match sub.as_str() {
            s if GIT_MUTATING.contains(&s) => Some(sub_end),
            "stash" => (!matches!(next_word, "list" | "show")).then_some(sub_end),
            "checkout" => Some(sub_end),
            "submodule" => matches!(next_word, "update" | "add" | "sync" | "deinit")
                .then(|| next.as_ref().map_or(sub_end, |(_, e)| *e)),
            "worktree" => matches!(next_word, "add" | "remove" | "move" | "prune")
                .then(|| next.as_ref().map_or(sub_end, |(_, e)| *e)),
            _ => None,
        };
        if let Some(end) = end
            && is_real_match(text, at, end)
        {
            return true;
        }
        at = sub_end;
    }
    false
}

impl Text<'_> {
    /// The byte after `git` and the whitespace following it, when the word `git`
    /// starts at `at`.
    fn match_git_word(&self, at: usize) -> Option<usize> {
        if !self.boundary(at) {
            return None;
        }
        let b = self.bytes();
        let end = at + 3;
        if end > b.len() || !b[at..end].eq_ignore_ascii_case(b"git") {
            return None;
        }
        let mut pos = end;
        while let Some(c) = self.char_at(pos).filter(|c| c.is_whitespace()) {
            pos += c.len_utf8();
        }
        (pos > end).then_some(pos)
    }
}

/// The git-style word (a letter, then letters, digits and `-`) starting at `at`
/// after optional whitespace, lowercased, with its end.
fn subcommand(text: &Text<'_>, at: usize) -> Option<(String, usize)> {
    let b = text.bytes();
    let mut pos = at;
    while let Some(c) = text.char_at(pos).filter(|c| c.is_whitespace()) {
        pos += c.len_utf8();
    }
    if pos >= b.len() || !b[pos].is_ascii_alphabetic() {
        return None;
    }
    let start = pos;
    while pos < b.len() && (b[pos].is_ascii_alphanumeric() || b[pos] == b'-') {
        pos += 1;
    }
    Some((text.s[start..pos].to_ascii_lowercase(), pos))
}

/// Whether a keyword at `start..end` counts: not negated, not glued to a letter,
/// not a path segment, not quoted, and in command context.
fn is_real_match(text: &Text<'_>, start: usize, end: usize) -> bool {
    !negated_before(text, start)
        && !negated_after(text, end)
        && !glued_to_letter(text, start, end)
        && !in_path_segment(text, start, end)
        && !in_quoted_span(text, start, end)
        && in_command_context(text, start)
}

/// A negation cue before `at` in its clause: an English cue among the six words
/// before it, or a Korean cue anywhere before it. A clause ends at a line break,
/// at `.`, `!` or `?` followed by a space, and at `;`.
fn negated_before(text: &Text<'_>, at: usize) -> bool {
    let before = &text.s[..at];
    let clause_start =
        ["\n", ". ", "! ", "? ", ";"].iter().filter_map(|stop| before.rfind(stop)).max().map_or(0, |i| i + 1);
    let clause = before[clause_start..].to_lowercase();
    let words: Vec<&str> = clause.split_whitespace().collect();
    let window = words[words.len().saturating_sub(NEGATION_WINDOW_WORDS)..].join(" ");
    ENGLISH_NEGATIONS.iter().any(|cue| window.contains(cue))
        || KOREAN_NEGATIONS.iter().any(|cue| clause.contains(cue))
}

/// A Korean negation cue after `at` in its clause (up to a line break, `. ` or `; `).
fn negated_after(text: &Text<'_>, at: usize) -> bool {
    let after = &text.s[at..];
    let clause_end =
        ["\n", ". ", "; "].iter().filter_map(|stop| after.find(stop)).min().unwrap_or(after.len());
    let clause = &after[..clause_end];
    KOREAN_NEGATIONS.iter().any(|cue| clause.contains(cue))
}

/// A keyword fused to a letter of any script (`deploy된`) is part of a word.
fn glued_to_letter(text: &Text<'_>, start: usize, end: usize) -> bool {
    text.char_before(start).is_some_and(char::is_alphabetic)
        || text.char_at(end).is_some_and(char::is_alphabetic)
}

fn is_separator(c: Option<char>) -> bool {
    matches!(c, Some('/' | '\\'))
}

fn is_segment_char(c: Option<char>) -> bool {
    matches!(c, Some(c) if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '~' | '-'))
}

/// Whether the keyword names a path segment (`build/Release`, `dist/release/`)
/// rather than a command. A `./`, `../`, `~/` or `/` path run at command position
/// (`./scripts/deploy.sh`) is a command, not a segment.
fn in_path_segment(text: &Text<'_>, start: usize, end: usize) -> bool {
    let (prev, next) = (text.char_before(start), text.char_at(end));
    let joins = |c: Option<char>| {
        c.is_none() || is_separator(c) || is_segment_char(c) || c.is_some_and(char::is_whitespace)
    };
    let in_path = (is_separator(prev) && joins(next)) || (is_separator(next) && joins(prev));
    if !in_path {
        return false;
    }
    !runs_a_path(text, start)
}

/// Whether the token holding byte `at` is a `./`, `../`, `~/` or `/` path at
/// command position (the start of its line, or right after a shell connective).
fn runs_a_path(text: &Text<'_>, at: usize) -> bool {
    let token = text.token_start(at);
    let lead = &text.s[token..at];
    let before = &text.s[text.line_start(at)..token];
    let at_command = before.trim().is_empty() || ends_with_connective(before);
    at_command && ["./", "../", "~/", "/"].iter().any(|p| lead.starts_with(p))
}

/// Whether `prefix` ends with `&&`, `||`, `|` or `;` (then optional whitespace).
fn ends_with_connective(prefix: &str) -> bool {
    let t = prefix.trim_end();
    t.ends_with("&&") || t.ends_with('|') || t.ends_with(';')
}

/// Whether the keyword sits inside a quoted span: typographic quotes and CJK
/// brackets anywhere before it and closed after it, or straight quotes opened
/// before it on its line and closed after it on that line. A `'` opens a quote
/// only at the start of a line or after whitespace or an opening bracket, so an
/// apostrophe (`don't`) opens nothing.
fn in_quoted_span(text: &Text<'_>, start: usize, end: usize) -> bool {
    const PAIRS: [(char, char); 5] = [('“', '”'), ('‘', '’'), ('「', '」'), ('『', '』'), ('《', '》')];
    for (open, close) in PAIRS {
        if let Some(opened) = text.s[..start].rfind(open)
            && let Some(closed) = text.s[opened + open.len_utf8()..].find(close)
            && opened + open.len_utf8() + closed >= end
        {
            return true;
        }
    }
    let line = text.line_start(start);
    let line_end = text.line_end(end);
    for quote in ['"', '\''] {
        let before = &text.s[line..start];
        let count = before.matches(quote).count();
        let closed_after = text.s[end..line_end].contains(quote);
        if count % 2 == 0 || !closed_after {
            continue;
        }
        if quote == '"' {
            return true;
        }
        // The quote that left the span open: the last one at an odd position.
        let opener = before.match_indices(quote).map(|(i, _)| i).step_by(2).last().unwrap_or(0);
        let opens = opener == 0
            || before[..opener].chars().next_back().is_some_and(|c| c.is_whitespace() || "([{>".contains(c));
        if opens {
            return true;
        }
    }
    false
}

/// Whether byte `at` is where a command would be: see the module docs.
fn in_command_context(text: &Text<'_>, at: usize) -> bool {
    if in_code(text, at) {
        return true;
    }
    let line = text.line_start(at);
    let prefix = &text.s[line..at];
    let rest = text.s[line..].trim_start_matches([' ', '\t']);
    let mut rest_chars = rest.chars();
    if matches!(rest_chars.next(), Some('$' | '>')) && rest_chars.next().is_some_and(char::is_whitespace) {
        return true;
    }
    if prefix.trim().is_empty() || ends_with_connective(prefix) || runs_a_path(text, at) {
        return true;
    }
    if prefix.trim_end().ends_with(',') {
        return true;
    }
    after_imperative(prefix)
}

/// Whether `prefix` ends with `then`, `run` or `first` (any case) and whitespace,
/// the word standing at the start or after whitespace or a comma.
fn after_imperative(prefix: &str) -> bool {
    let trimmed = prefix.trim_end();
    if trimmed.len() == prefix.len() {
        return false;
    }
    let lower = trimmed.to_ascii_lowercase();
    ["then", "run", "first"].iter().any(|word| {
        lower
            .strip_suffix(word)
            .is_some_and(|head| head.is_empty() || head.ends_with(|c: char| c.is_whitespace() || c == ','))
    })
}

/// Whether byte `at` lies inside a code fence (an odd number of ```` ``` ````
/// before it) or an inline code span (an odd number of other backticks before it).
fn in_code(text: &Text<'_>, at: usize) -> bool {
    let before = &text.s[..at];
    if before.matches("```").count() % 2 == 1 {
        return true;
    }
    let b = before.as_bytes();
    let (mut i, mut inline) = (0, 0);
    while i < b.len() {
        if b[i] == b'`' {
            if b[i..].starts_with(b"```") {
                i += 3;
                continue;
            }
            inline += 1;
        }
        i += 1;
    }
    inline % 2 == 1
}

#[cfg(test)]
mod tests {
    use super::ForbiddenOperation::*;
    use super::*;

    fn found(message: &str) -> Vec<ForbiddenOperation> {
        forbidden_operations(message)
    }

    #[test]
    fn the_issues_examples_are_refused_with_the_originals_reason() {
        assert_eq!(found("read the logs, then git commit -am wip"), [GitMutation]);
        assert_eq!(found("rm -rf build && npm publish"), [DeployOrVersionBump, DestructiveShell]);
        let err = check_readonly_message("rm -rf build && npm publish").unwrap_err();
        assert_eq!(err.field, "message");
        assert_eq!(
            err.problem,
            "live_debug_readonly_guardrail_violation: forbidden operations (deploy_or_version_bump, destructive_shell)"
        );
        assert!(check_readonly_message("tail the daemon log and report the last error").is_ok());
    }

    #[test]
    fn every_family_is_found_at_command_position() {
        let cases: [(&str, ForbiddenOperation); 7] = [
            ("edit src/main.rs to add logging", SourceEdit),
            ("checkpoint the workspace", Checkpoint),
            ("run wrangler deploy", DeployOrVersionBump),
            ("$ sed -i s/a/b/ config.toml", DestructiveShell),
            ("first pip install requests", PackageInstall),
            ("`kubectl scale deploy/api --replicas=0`", ContainerMutation),
            ("look around; git push origin main", GitMutation),
        ];
        for (message, op) in cases {
            assert_eq!(found(message), [op], "{message:?}");
        }
        assert_eq!(found("> docker run --rm alpine"), [ContainerMutation]);
        assert_eq!(found("inspect it, brew install jq"), [PackageInstall]);
        assert_eq!(found("./scripts/version-bump.sh patch"), [DeployOrVersionBump]);
        assert_eq!(found("ls | tee out.txt"), [DestructiveShell]);
        assert_eq!(found("Version bump the crate"), [DeployOrVersionBump]);
    }

    #[test]
    fn git_mutations_are_told_from_read_only_git() {
        for message in [
            "git stash",
            "git stash pop",
            "git checkout main",
            "git submodule update --init",
            "git worktree remove ../wt",
            "GIT REBASE -i HEAD~3",
        ] {
            assert_eq!(found(message), [GitMutation], "{message:?}");
        }
        for message in [
            "git status",
            "git log --oneline",
            "git stash list",
            "git stash show -p",
            "git checkout-index -a",
            "git submodule status",
            "git worktree list",
            "git diff HEAD~1",
        ] {
            assert!(found(message).is_empty(), "{message:?} is read-only git");
        }
    }

    #[test]
    fn prose_mentions_do_not_count() {
        for message in [
            "read the deploy logs and summarize them",
            "report why the release failed",
            "do not git reset anything, just read",
            "never run `npm publish` here",
            "list the files in build/Release",
            "quote the commit message \"chore: version bump\" verbatim",
            "git reset 하지 마세요",
            "deploy된 워커의 로그를 읽어라",
            "is it edited somewhere?",
            "check the mesh_checkpointer metrics",
        ] {
            assert!(found(message).is_empty(), "{message:?} is prose: {:?}", found(message));
        }
    }

    #[test]
    fn negation_ends_with_its_clause() {
        assert!(found("don't touch prod.\ngit push origin main").contains(&GitMutation));
        assert_eq!(found("do not deploy. Then deploy anyway"), [DeployOrVersionBump], "a new sentence");
        assert_eq!(found("nothing else; then git commit -m x"), [GitMutation]);
    }

    #[test]
    fn fences_and_backticks_are_command_context() {
        assert_eq!(found("look at this:\n```\nnpm install left-pad\n```"), [PackageInstall]);
        assert_eq!(found("the fix is `git apply fix.patch` probably"), [SourceEdit, GitMutation]);
        assert!(found("the word patch in prose").is_empty());
    }
}
