//! Conformance suite (filled in below).
