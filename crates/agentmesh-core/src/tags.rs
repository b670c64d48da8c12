//! Capability tags: what a node offers (`os=linux`, `provider=claude-cli`) and what a
//! task requires. Matching is exact and case-sensitive, as in the original.

/// Trims every tag, drops blanks and duplicates (keeping the first occurrence).
pub fn normalize_tags<S: AsRef<str>>(tags: &[S]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(tags.len());
    for tag in tags {
        let tag = tag.as_ref().trim();
        if !tag.is_empty() && !out.iter().any(|t| t == tag) {
            out.push(tag.to_owned());
        }
    }
    out
}

/// Normalizes a JSON value the way the original does: a non-array gives no tags,
/// and non-string elements are dropped.
pub fn normalize_tags_value(value: &serde_json::Value) -> Vec<String> {
    match value.as_array() {
        Some(items) => {
            let strings: Vec<&str> = items.iter().filter_map(|v| v.as_str()).collect();
            normalize_tags(&strings)
        }
        None => Vec::new(),
    }
}

/// True when every required tag is among the capability tags (both normalized).
/// An empty requirement is always satisfied.
pub fn satisfies_required_tags<R: AsRef<str>, C: AsRef<str>>(required: &[R], capability: &[C]) -> bool {
    required.iter().all(|req| {
        let req = req.as_ref().trim();
        req.is_empty() || capability.iter().any(|c| c.as_ref().trim() == req)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization_trims_and_dedups() {
        assert_eq!(normalize_tags(&[" os=linux", "", "os=linux ", "gpu"]), ["os=linux", "gpu"]);
        assert_eq!(normalize_tags_value(&serde_json::json!(["a", 3, " b ", null, "a"])), ["a", "b"]);
        assert!(normalize_tags_value(&serde_json::json!("a")).is_empty());
    }

    #[test]
    fn every_required_tag_must_be_offered() {
        let caps = ["os=linux", "provider=claude-cli"];
        assert!(satisfies_required_tags::<&str, _>(&[], &caps));
        assert!(satisfies_required_tags(&["os=linux"], &caps));
        assert!(!satisfies_required_tags(&["os=linux", "gpu"], &caps));
        assert!(!satisfies_required_tags(&["OS=linux"], &caps));
    }
}
