//! Daemon-id forms and identity comparison.
//!
//! One machine appears under several ids: `mach_X`, `daemon_mach_X` and
//! `standalone_mach_X` all name machine `X`. Comparison goes through the machine
//! *core* (the id with one `daemon_`/`standalone_` prefix removed); SQL filters use
//! the expanded list of forms, because an index cannot compare cores.

/// The first value that is non-empty after trimming, trimmed.
pub fn read_string<'a>(values: impl IntoIterator<Item = Option<&'a str>>) -> Option<&'a str> {
    values.into_iter().flatten().map(str::trim).find(|s| !s.is_empty())
}

/// The machine core of a daemon id: trimmed, with one leading `daemon_` (checked
/// first) or `standalone_` prefix removed. `None` for blank input or a bare prefix.
pub fn machine_core(id: &str) -> Option<&str> {
    let id = id.trim();
    if id.is_empty() {
        return None;
    }
    let rest = id.strip_prefix("daemon_").or_else(|| id.strip_prefix("standalone_"));
    match rest {
        Some(rest) => {
            let rest = rest.trim();
            (!rest.is_empty()).then_some(rest)
        }
        None => Some(id),
    }
}

/// True when both ids have a machine core and the cores are equal.
pub fn daemon_ids_equivalent(a: &str, b: &str) -> bool {
    matches!((machine_core(a), machine_core(b)), (Some(x), Some(y)) if x == y)
}

/// The canonical form: `daemon_mach_X` for machine ids, the bare core otherwise.
pub fn canonical_daemon_id(id: &str) -> Option<String> {
    let core = machine_core(id)?;
    if core.starts_with("mach_") { Some(format!("daemon_{core}")) } else { Some(core.to_owned()) }
}

/// Every stored form of the given ids, for SQL `IN` filters.
///
/// First the inputs themselves (trimmed, blanks skipped, in order), then for each
/// input whose core starts with `mach_`: the core, `daemon_` + core and
/// `standalone_` + core. Duplicates are dropped, keeping the first; element 0 is the
/// primary id.
pub fn expand_daemon_id_forms<'a>(ids: impl IntoIterator<Item = &'a str> + Clone) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let add = |s: String, out: &mut Vec<String>| {
        if !out.contains(&s) {
            out.push(s);
        }
    };
    for raw in ids.clone() {
        let raw = raw.trim();
        if !raw.is_empty() {
            add(raw.to_owned(), &mut out);
        }
    }
    for raw in ids {
        if let Some(core) = machine_core(raw).filter(|c| c.starts_with("mach_")) {
            add(core.to_owned(), &mut out);
            add(format!("daemon_{core}"), &mut out);
            add(format!("standalone_{core}"), &mut out);
        }
    }
    out
}

/// Session ids have one form: equal after trimming, and never blank.
pub fn session_ids_equivalent(a: &str, b: &str) -> bool {
    let (a, b) = (a.trim(), b.trim());
    !a.is_empty() && a == b
}

/// A node pin matches a node when the two name one machine or are the same node id.
pub fn node_pin_matches(pin: &str, node_id: &str) -> bool {
    daemon_ids_equivalent(pin, node_id) || {
        let pin = pin.trim();
        !pin.is_empty() && pin == node_id.trim()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_removes_one_prefix() {
        assert_eq!(machine_core(" daemon_mach_X "), Some("mach_X"));
        assert_eq!(machine_core("standalone_mach_X"), Some("mach_X"));
        assert_eq!(machine_core("daemon_standalone_mach_X"), Some("standalone_mach_X"));
        assert_eq!(machine_core("daemon_foo"), Some("foo"));
        assert_eq!(machine_core("daemon_"), None);
        assert_eq!(machine_core("   "), None);
    }

    #[test]
    fn equivalence_goes_through_the_core() {
        assert!(daemon_ids_equivalent("mach_X", "daemon_mach_X"));
        assert!(daemon_ids_equivalent("standalone_mach_X", "daemon_mach_X"));
        assert!(daemon_ids_equivalent("foo", "daemon_foo"));
        assert!(!daemon_ids_equivalent("mach_X", "mach_Y"));
        assert!(!daemon_ids_equivalent("", ""));
    }

    #[test]
    fn canonical_form() {
        assert_eq!(canonical_daemon_id("mach_X").as_deref(), Some("daemon_mach_X"));
        assert_eq!(canonical_daemon_id("daemon_foo").as_deref(), Some("foo"));
        assert_eq!(canonical_daemon_id(" "), None);
    }

    #[test]
    fn expansion_matches_the_original() {
        assert_eq!(
            expand_daemon_id_forms(["daemon_mach_X"]),
            ["daemon_mach_X", "mach_X", "standalone_mach_X"]
        );
        assert_eq!(
            expand_daemon_id_forms(["mach_A", "mach_B"]),
            ["mach_A", "mach_B", "daemon_mach_A", "standalone_mach_A", "daemon_mach_B", "standalone_mach_B"]
        );
        assert_eq!(expand_daemon_id_forms(["daemon_foo"]), ["daemon_foo"]);
        assert!(expand_daemon_id_forms(["  "]).is_empty());
    }

    #[test]
    fn sessions_and_node_pins() {
        assert!(session_ids_equivalent(" s1", "s1 "));
        assert!(!session_ids_equivalent("", ""));
        assert!(node_pin_matches("mach_X", "daemon_mach_X"));
        assert!(node_pin_matches("worktree-a", " worktree-a"));
        assert!(!node_pin_matches("mach_X", "mach_Y"));
    }

    #[test]
    fn read_string_picks_first_non_blank() {
        assert_eq!(read_string([None, Some("  "), Some(" a "), Some("b")]), Some("a"));
        assert_eq!(read_string([None, Some("")]), None);
    }
}
