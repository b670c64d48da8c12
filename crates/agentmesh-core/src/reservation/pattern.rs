//! Path patterns and the overlap rule.
//!
//! A pattern names paths relative to the root of its scope (a repository), with
//! `/` between segments, and is anchored at that root: `src/*.rs` is the Rust
//! files directly in `src`, `**/*.rs` every Rust file. In a segment, `*` is any
//! run of characters and `?` one character (neither crosses a `/`), `[abc]`,
//! `[a-z]` and `[!a-z]` (or `[^a-z]`) a character class, `{a,b}` either
//! alternative, and `\` takes the next character literally; a segment that is
//! exactly `**` stands for any number of segments, none included.
//!
//! A pattern **covers** every path it matches and everything under such a
//! path: `src/parser` covers `src/parser/mod.rs`, as a directory reservation
//! should. Two patterns **overlap** when some path is covered by both.
//!
//! The rule is decided segment by segment, as two patterns are walked side by
//! side: `**` may take any number of the other side's segments, and two
//! segments may stand for the same name when both are literal and equal, when
//! one is literal and the other matches it, and, for two wildcard segments,
//! unless their literal starts or their literal ends differ (`*.rs` and `*.md`
//! never name the same file; `a*` and `*b` might, and are taken to). Once
//! either pattern is walked to its end, the two overlap: one names a path at
//! or under what the other names. So the answer is exact for every pair in
//! which one side is a literal path, and errs only towards "overlaps" for two
//! wildcard segments facing each other.
//!
//! Case: on a file system that ignores case (git's `core.ignorecase`), names
//! are compared without case; a pair overlaps when either side asks so.

use crate::InvalidInput;

/// At most this many characters in a pattern.
pub const MAX_PATTERN_CHARS: usize = 1024;

/// A path pattern as a caller gave it, checked and normalized: relative, `/`
/// between segments, no empty, `.` or `..` segment, no trailing `/`.
#[derive(
    Debug,
    Clone,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct PathPattern(String);

impl PathPattern {
    /// Checks and normalizes `raw` (a leading `./`, repeated `/` and a trailing
    /// `/` go), naming `field` in the refusal: an empty pattern, an absolute
    /// path, a `..` or `.` segment, a `\` used as a separator, a negation
    /// (`!`), control characters, and an unclosed `[` or `{` are refused.
    pub fn parse(field: &str, raw: &str) -> Result<PathPattern, InvalidInput> {
        let bad = |problem: &str| Err(InvalidInput::new(field, format!("{problem}: {raw:?}")));
        let text = raw.trim();
        if text.is_empty() {
            return Err(InvalidInput::new(field, "must not be blank"));
        }
        if text.chars().count() > MAX_PATTERN_CHARS {
            return Err(InvalidInput::new(field, format!("must be at most {MAX_PATTERN_CHARS} characters")));
        }
        if text.chars().any(char::is_control) {
            return bad("must not hold control characters");
        }
        if text.starts_with('/') || has_drive(text) {
            return bad("must be relative to the repository root, not absolute");
        }
        if text.starts_with('!') {
            return bad("negated patterns are not supported");
        }
        let mut segments = Vec::new();
        for segment in text.split('/') {
            match segment {
                "" | "." => continue,
                ".." => return bad("must not step out with '..'"),
                s if s.contains('\\') && !escapes_only(s) => {
                    return bad("separates with '\\': use '/'");
                }
                s => {
                    if let Err(problem) = check_segment(s) {
                        return bad(problem);
                    }
                    segments.push(s);
                }
            }
        }
        if segments.is_empty() {
            return bad("names no path");
        }
        // `a/**/**/b` is `a/**/b`.
        segments.dedup_by(|a, b| *a == "**" && *b == "**");
        Ok(PathPattern(segments.join("/")))
    }

    /// The pattern's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the pattern holds no wildcard: it names one path.
    pub fn is_literal(&self) -> bool {
        self.segments().all(is_literal)
    }

    /// The pattern's literal leading segments, joined by `/` (empty when its
    /// first segment is a wildcard), folded to lower case when `ignore_case`:
    /// two patterns overlap only when one's literal prefix is the other's or
    /// an ancestor of it, so stores index reservations by it.
    pub fn literal_prefix(&self, ignore_case: bool) -> String {
        let literal: Vec<String> = self.segments().take_while(|s| is_literal(s)).map(unescape).collect();
        let joined = literal.join("/");
        if ignore_case { joined.to_lowercase() } else { joined }
    }

    fn segments(&self) -> std::str::Split<'_, char> {
        self.0.split('/')
    }

    /// Whether some path is covered by both patterns (see the module).
    pub fn overlaps(&self, other: &PathPattern, ignore_case: bool) -> bool {
        let a: Vec<&str> = self.segments().collect();
        let b: Vec<&str> = other.segments().collect();
        walk_together(&a, &b, ignore_case)
    }

    /// Whether `path` (a file or directory, relative, `/` between segments)
    /// is covered: the pattern matches it or one of its ancestors.
    pub fn covers(&self, path: &str, ignore_case: bool) -> bool {
        let pattern: Vec<&str> = self.segments().collect();
        let path: Vec<&str> = path.split('/').filter(|s| !s.is_empty() && *s != ".").collect();
        // Reachable (pattern, path) positions; covered once the pattern is
        // walked to its end.
        let mut seen = vec![false; (pattern.len() + 1) * (path.len() + 1)];
        let mut stack = vec![(0usize, 0usize)];
        while let Some((i, j)) = stack.pop() {
            let key = i * (path.len() + 1) + j;
            if seen[key] {
                continue;
            }
            seen[key] = true;
            if i == pattern.len() {
                return true;
            }
            if pattern[i] == "**" {
                stack.push((i + 1, j));
                if j < path.len() {
                    stack.push((i, j + 1));
                }
            } else if j < path.len() && segment_matches(pattern[i], path[j], ignore_case) {
                stack.push((i + 1, j + 1));
            }
        }
        false
    }
}

impl std::fmt::Display for PathPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `C:` or `C:/...`: a Windows drive.
fn has_drive(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':'
}

/// Whether every `\` in `segment` escapes a wildcard character (`\*`), as
/// opposed to separating directories (`src\lib.rs`).
fn escapes_only(segment: &str) -> bool {
    let mut chars = segment.chars();
    while let Some(c) = chars.next() {
        if c == '\\' && !matches!(chars.next(), Some('*' | '?' | '[' | ']' | '{' | '}' | '\\' | '!')) {
            return false;
        }
    }
    true
}

/// A segment's wildcards are well formed: classes and alternatives closed,
/// `**` only as a whole segment.
fn check_segment(segment: &str) -> Result<(), &'static str> {
    let chars: Vec<char> = segment.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            '[' => match class_end(&chars, i) {
                Some(end) => i = end,
                None => return Err("has a '[' without its ']'"),
            },
            '{' => {
                let Some(end) = chars[i..].iter().position(|&c| c == '}') else {
                    return Err("has a '{' without its '}'");
                };
                if chars[i + 1..i + end].contains(&'{') {
                    return Err("nests '{' alternatives");
                }
                i += end;
            }
            '*' if chars.get(i + 1) == Some(&'*') && segment != "**" => {
                return Err("uses '**' inside a segment: it must be a whole segment (a/**/b)");
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// Where the class opened at `open` closes (the index of its `]`).
fn class_end(chars: &[char], open: usize) -> Option<usize> {
    let mut i = open + 1;
    if matches!(chars.get(i), Some('!' | '^')) {
        i += 1;
    }
    // A `]` right after the opening (or its negation) is a member.
    if chars.get(i) == Some(&']') {
        i += 1;
    }
    while i < chars.len() {
        if chars[i] == ']' {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Whether `segment` holds no wildcard (escaped ones are literal).
fn is_literal(segment: &str) -> bool {
    let mut chars = segment.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '*' | '?' | '[' | '{' => return false,
            _ => {}
        }
    }
    true
}

/// A literal segment's name, its escapes removed.
fn unescape(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    let mut chars = segment.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Walks two patterns side by side (see the module): `true` when they overlap.
fn walk_together(a: &[&str], b: &[&str], ignore_case: bool) -> bool {
    let width = b.len() + 1;
    let mut seen = vec![false; (a.len() + 1) * width];
    let mut stack = vec![(0usize, 0usize)];
    while let Some((i, j)) = stack.pop() {
        if seen[i * width + j] {
            continue;
        }
        seen[i * width + j] = true;
        if i == a.len() || j == b.len() {
            return true;
        }
        let (x, y) = (a[i], b[j]);
        if x == "**" {
            stack.push((i + 1, j));
            stack.push((i, j + 1));
        }
        if y == "**" {
            stack.push((i, j + 1));
            stack.push((i + 1, j));
        }
        if x != "**" && y != "**" && segments_may_meet(x, y, ignore_case) {
            stack.push((i + 1, j + 1));
        }
    }
    false
}

/// Whether two segments (neither `**`) may name the same file name.
fn segments_may_meet(x: &str, y: &str, ignore_case: bool) -> bool {
    match (is_literal(x), is_literal(y)) {
        (true, true) => same_name(&unescape(x), &unescape(y), ignore_case),
        (true, false) => segment_matches(y, &unescape(x), ignore_case),
        (false, true) => segment_matches(x, &unescape(y), ignore_case),
        (false, false) => {
            let (xs, ys) = (literal_start(x), literal_start(y));
            let (xe, ye) = (literal_end(x), literal_end(y));
            let fold = |s: String| if ignore_case { s.to_lowercase() } else { s };
            let (xs, ys, xe, ye) = (fold(xs), fold(ys), fold(xe), fold(ye));
            (xs.starts_with(&ys) || ys.starts_with(&xs)) && (xe.ends_with(&ye) || ye.ends_with(&xe))
        }
    }
}

fn same_name(x: &str, y: &str, ignore_case: bool) -> bool {
    if ignore_case { x.to_lowercase() == y.to_lowercase() } else { x == y }
}

/// The literal characters a wildcard segment starts with.
fn literal_start(segment: &str) -> String {
    let mut out = String::new();
    let mut chars = segment.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            '*' | '?' | '[' | '{' => break,
            c => out.push(c),
        }
    }
    out
}

/// The literal characters a wildcard segment ends with (after its last
/// wildcard; an escaped character counts as literal).
fn literal_end(segment: &str) -> String {
    let chars: Vec<char> = segment.chars().collect();
    let mut tail = Vec::new();
    let mut i = chars.len();
    while i > 0 {
        let c = chars[i - 1];
        let escaped = i >= 2 && chars[i - 2] == '\\';
        if !escaped && matches!(c, '*' | '?' | ']' | '}') {
            break;
        }
        tail.push(c);
        i -= if escaped { 2 } else { 1 };
    }
    tail.reverse();
    tail.into_iter().collect()
}

/// Whether the segment pattern `pattern` matches the name `name`.
fn segment_matches(pattern: &str, name: &str, ignore_case: bool) -> bool {
    let fold = |c: char| if ignore_case { c.to_lowercase().next().unwrap_or(c) } else { c };
    let pattern: Vec<char> = pattern.chars().map(fold).collect();
    let name: Vec<char> = name.chars().map(fold).collect();
    match_from(&pattern, &name)
}

/// Backtracking match of a segment pattern (folded) against a name (folded).
fn match_from(p: &[char], n: &[char]) -> bool {
    let Some(&first) = p.first() else { return n.is_empty() };
    match first {
        '*' => (0..=n.len()).any(|skip| match_from(&p[1..], &n[skip..])),
        '?' => !n.is_empty() && match_from(&p[1..], &n[1..]),
        '\\' => match (p.get(1), n.first()) {
            (Some(lit), Some(c)) if lit == c => match_from(&p[2..], &n[1..]),
            _ => false,
        },
        '[' => {
            let Some(end) = class_end(p, 0) else { return false };
            match n.first() {
                Some(&c) if class_has(&p[1..end], c) => match_from(&p[end + 1..], &n[1..]),
                _ => false,
            }
        }
        '{' => {
            let Some(end) = p.iter().position(|&c| c == '}') else { return false };
            let rest = &p[end + 1..];
            p[1..end].split(|&c| c == ',').any(|alternative| {
                let mut joined = alternative.to_vec();
                joined.extend_from_slice(rest);
                match_from(&joined, n)
            })
        }
        c => n.first() == Some(&c) && match_from(&p[1..], &n[1..]),
    }
}

/// Whether the class body `body` (between `[` and `]`) holds `c`.
fn class_has(body: &[char], c: char) -> bool {
    let (negated, body) = match body.first() {
        Some('!' | '^') => (true, &body[1..]),
        _ => (false, body),
    };
    let mut found = false;
    let mut i = 0;
    while i < body.len() {
        if i + 2 < body.len() && body[i + 1] == '-' {
            found |= body[i] <= c && c <= body[i + 2];
            i += 3;
        } else {
            found |= body[i] == c;
            i += 1;
        }
    }
    found != negated
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> PathPattern {
        PathPattern::parse("paths", text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn patterns_are_normalized() {
        for (raw, normal) in [
            ("./src/lib.rs", "src/lib.rs"),
            ("src//parser/", "src/parser"),
            ("  docs/*.md ", "docs/*.md"),
            ("a/**/**/b", "a/**/b"),
            ("src/./x", "src/x"),
            ("file\\*name", "file\\*name"),
        ] {
            assert_eq!(p(raw).as_str(), normal, "{raw}");
        }
    }

    #[test]
    fn bad_patterns_are_refused_naming_the_field() {
        for raw in [
            "",
            "  ",
            "/etc/passwd",
            "C:/x",
            "c:",
            "../up",
            "src/../../x",
            "!src",
            "src\\lib.rs",
            "a[b",
            "a{b",
            "a{b{c}}",
            "src/a**",
            "x\ny",
            ".",
            "./",
        ] {
            let err = PathPattern::parse("paths[2]", raw).expect_err(raw);
            assert_eq!(err.field, "paths[2]", "{raw}");
        }
    }

    /// The overlap rule as a table: (a, b, overlaps, overlaps ignoring case).
    #[test]
    fn overlap_table() {
        let table: &[(&str, &str, bool, bool)] = &[
            // Two literal paths: equal, or one under the other.
            ("src/lib.rs", "src/lib.rs", true, true),
            ("src/lib.rs", "src/main.rs", false, false),
            ("src", "src/lib.rs", true, true),
            ("src/parser", "src/parser.rs", false, false),
            ("src/Lib.rs", "src/lib.rs", false, true),
            ("SRC", "src/deep/file", false, true),
            // A path and a glob: exact.
            ("src/lib.rs", "src/*.rs", true, true),
            ("src/lib.rs", "src/*.md", false, false),
            ("src/LIB.RS", "src/*.rs", false, true),
            ("src/deep/lib.rs", "src/*.rs", false, false),
            ("src/deep/lib.rs", "src/**/*.rs", true, true),
            ("src/lib.rs", "src/**/*.rs", true, true),
            ("src", "**/*.rs", true, true),
            ("docs", "src/**", false, false),
            ("src/deep", "src/*", true, true),
            ("src/a.rs", "src/?.rs", true, true),
            ("src/ab.rs", "src/?.rs", false, false),
            ("src/b.rs", "src/[a-c].rs", true, true),
            ("src/d.rs", "src/[a-c].rs", false, false),
            ("src/d.rs", "src/[!a-c].rs", true, true),
            ("src/lib.rs", "src/{lib,main}.rs", true, true),
            ("src/mod.rs", "src/{lib,main}.rs", false, false),
            ("src/*.rs", "src/\\*.rs", true, true),
            ("src/x.rs", "src/\\*.rs", false, false),
            // Two globs: exact where the literal ends differ, else "may".
            ("src/*.rs", "src/*.md", false, false),
            ("src/*.rs", "src/lib*", true, true),
            ("src/a*", "src/b*", false, false),
            ("src/a*", "src/*b", true, true),
            ("**", "anything/at/all", true, true),
            // A directory may be named like a file: docs/a.md/b.rs is covered by both.
            ("**/*.rs", "docs/*.md", true, true),
            ("src/**/*.rs", "docs/*.md", false, false),
            ("**/tests/**", "src/**/*.rs", true, true),
            ("crates/*/src", "crates/core/*", true, true),
            ("crates/*/src", "docs/*", false, false),
            // A rename touches both of its paths: each side checked alone.
            ("old/name.rs", "old/**", true, true),
            ("new/name.rs", "old/**", false, false),
        ];
        for &(a, b, exact, folded) in table {
            let (a, b) = (p(a), p(b));
            assert_eq!(a.overlaps(&b, false), exact, "{a} vs {b}");
            assert_eq!(b.overlaps(&a, false), exact, "{b} vs {a} (symmetric)");
            assert_eq!(a.overlaps(&b, true), folded, "{a} vs {b} ignoring case");
        }
    }

    #[test]
    fn covers_a_path_matched_or_under_a_match() {
        let table: &[(&str, &str, bool)] = &[
            ("src", "src/lib.rs", true),
            ("src/lib.rs", "src", false),
            ("src/*.rs", "src/lib.rs", true),
            ("src/*.rs", "src/deep/lib.rs", false),
            ("src/*", "src/deep/lib.rs", true),
            ("**/*.rs", "a/b/c.rs", true),
            ("**/*.rs", "a/b/c.md", false),
            ("**", "x", true),
            ("docs/**", "docs", true),
        ];
        for &(pattern, path, covered) in table {
            assert_eq!(p(pattern).covers(path, false), covered, "{pattern} covers {path}");
        }
        assert!(p("Src/*.RS").covers("src/lib.rs", true));
        assert!(!p("Src/*.RS").covers("src/lib.rs", false));
    }

    #[test]
    fn literal_prefixes_index_the_patterns() {
        assert_eq!(p("src/parser/*.rs").literal_prefix(false), "src/parser");
        assert_eq!(p("src/lib.rs").literal_prefix(false), "src/lib.rs");
        assert_eq!(p("**/x").literal_prefix(false), "");
        assert_eq!(p("Src/X/*").literal_prefix(true), "src/x");
        assert!(p("a/b").is_literal());
        assert!(!p("a/b*").is_literal());
    }

    proptest::proptest! {
        /// The rule agrees with the paths: two patterns that cover one path
        /// overlap (never a missed conflict).
        #[test]
        fn patterns_covering_one_path_overlap(
            path in proptest::collection::vec("[ab]{1,2}", 1..4),
            mask_a in proptest::collection::vec(0u8..4, 4),
            mask_b in proptest::collection::vec(0u8..4, 4),
        ) {
            let pattern_of = |mask: &[u8]| {
                let segments: Vec<String> = path
                    .iter()
                    .zip(mask)
                    .map(|(s, m)| match m {
                        0 => "*".to_owned(),
                        1 => format!("{}*", &s[..1]),
                        2 => format!("?{}", &s[1..]),
                        _ => s.clone(),
                    })
                    .collect();
                p(&segments.join("/"))
            };
            let (a, b) = (pattern_of(&mask_a), pattern_of(&mask_b));
            let joined = path.join("/");
            proptest::prop_assert!(a.covers(&joined, false) && b.covers(&joined, false));
            proptest::prop_assert!(a.overlaps(&b, false), "{} vs {}", a, b);
        }
    }
}
