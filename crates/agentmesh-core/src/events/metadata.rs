//! Readers for an event's `metadataEvent`: session id, worker result, completion
//! summary, completion weakness and refine job id.
//!
//! Metadata is whatever the producer attached, so every reader is total: a missing
//! or mistyped field reads as absent. Strings are trimmed and blank counts as
//! absent. The fingerprints and the coordinator texts both read metadata through
//! these functions, so they always agree on what an event says.

use serde_json::{Map, Value};

use super::js::{read_non_empty, read_record};

/// The worker session an event is about: the first non-blank of `targetSessionId`,
/// `sessionId` and `instanceId`.
pub fn resolve_event_session_id(metadata: &Map<String, Value>) -> Option<&str> {
    ["targetSessionId", "sessionId", "instanceId"]
        .into_iter()
        .find_map(|key| read_non_empty(metadata.get(key)))
}

/// The structured worker result: the first object among `workerResult`,
/// `meshWorkerResult` and `structuredResult`.
pub fn read_worker_result(metadata: &Map<String, Value>) -> Option<&Map<String, Value>> {
    ["workerResult", "meshWorkerResult", "structuredResult"]
        .into_iter()
        .find_map(|key| read_record(metadata.get(key)))
}

/// The worker's final assistant text: the first non-blank of `finalSummary`, the
/// worker result's `summary` and `finalSummary`, and `result.summary` and
/// `result.finalSummary`.
pub fn read_completion_summary(metadata: &Map<String, Value>) -> Option<&str> {
    let worker = read_worker_result(metadata);
    let result = read_record(metadata.get("result"));
    read_non_empty(metadata.get("finalSummary"))
        .or_else(|| worker.and_then(|w| read_non_empty(w.get("summary"))))
        .or_else(|| worker.and_then(|w| read_non_empty(w.get("finalSummary"))))
        .or_else(|| result.and_then(|r| read_non_empty(r.get("summary"))))
        .or_else(|| result.and_then(|r| read_non_empty(r.get("finalSummary"))))
}

/// True when the worker went idle without a confirmed final assistant message:
/// `completionDiagnostic.finalAssistantPresent` is `false`, or its `blockReason`
/// is `missing_final_assistant`.
pub fn is_missing_final_assistant_diagnostic(metadata: &Map<String, Value>) -> bool {
    read_record(metadata.get("completionDiagnostic")).is_some_and(|diagnostic| {
        diagnostic.get("finalAssistantPresent") == Some(&Value::Bool(false))
            || diagnostic.get("blockReason").and_then(Value::as_str) == Some("missing_final_assistant")
    })
}

/// True when a completion's evidence is weak: `evidenceLevel` is `insufficient`
/// or `weak`, `reviewRecommended` is `true`, or the final assistant message is
/// missing. A weak completion may be superseded by a genuine one later, so the
/// two fingerprint differently and the coordinator is told to verify.
pub fn is_weak_completion_metadata(metadata: &Map<String, Value>) -> bool {
    matches!(read_non_empty(metadata.get("evidenceLevel")), Some("insufficient" | "weak"))
        || metadata.get("reviewRecommended") == Some(&Value::Bool(true))
        || is_missing_final_assistant_diagnostic(metadata)
}

/// The refine job id in an event's metadata: `jobId`, else
/// `result.refineJob.jobId`.
pub fn refine_job_id(metadata: &Map<String, Value>) -> Option<&str> {
    read_non_empty(metadata.get("jobId")).or_else(|| {
        let job = read_record(metadata.get("result")).and_then(|result| read_record(result.get("refineJob")));
        job.and_then(|job| read_non_empty(job.get("jobId")))
    })
}

/// The refine job id of a raw event or metadata object: read from its
/// `metadataEvent` when that is an object, otherwise from the value itself.
pub fn read_refine_job_id(value: &Value) -> Option<&str> {
    let object = value.as_object()?;
    refine_job_id(read_record(object.get("metadataEvent")).unwrap_or(object))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn md(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn session_id_fallbacks() {
        assert_eq!(
            resolve_event_session_id(&md(json!({"targetSessionId": " ", "sessionId": " s2 "}))),
            Some("s2")
        );
        assert_eq!(resolve_event_session_id(&md(json!({"instanceId": "i1", "sessionId": 3}))), Some("i1"));
        assert_eq!(resolve_event_session_id(&md(json!({}))), None);
    }

    #[test]
    fn summary_fallbacks() {
        assert_eq!(read_completion_summary(&md(json!({"finalSummary": " a "}))), Some("a"));
        assert_eq!(
            read_completion_summary(&md(
                json!({"finalSummary": " ", "workerResult": "x", "meshWorkerResult": {"finalSummary": "b"}})
            )),
            Some("b")
        );
        assert_eq!(read_completion_summary(&md(json!({"structuredResult": {"summary": "c"}}))), Some("c"));
        assert_eq!(
            read_completion_summary(&md(json!({"result": {"summary": "", "finalSummary": "d"}}))),
            Some("d")
        );
        assert_eq!(read_completion_summary(&md(json!({"result": "e"}))), None);
    }

    #[test]
    fn weakness() {
        assert!(!is_weak_completion_metadata(&md(json!({}))));
        assert!(is_weak_completion_metadata(&md(json!({"evidenceLevel": " weak "}))));
        assert!(is_weak_completion_metadata(&md(json!({"evidenceLevel": "insufficient"}))));
        assert!(!is_weak_completion_metadata(&md(json!({"evidenceLevel": "sufficient"}))));
        assert!(is_weak_completion_metadata(&md(json!({"reviewRecommended": true}))));
        assert!(!is_weak_completion_metadata(&md(json!({"reviewRecommended": "true"}))));
        assert!(is_weak_completion_metadata(&md(
            json!({"completionDiagnostic": {"finalAssistantPresent": false}})
        )));
        assert!(is_weak_completion_metadata(&md(
            json!({"completionDiagnostic": {"blockReason": "missing_final_assistant"}})
        )));
        assert!(!is_weak_completion_metadata(&md(
            json!({"completionDiagnostic": {"finalAssistantPresent": true}})
        )));
    }

    #[test]
    fn refine_job_ids() {
        assert_eq!(refine_job_id(&md(json!({"jobId": " j1 "}))), Some("j1"));
        assert_eq!(refine_job_id(&md(json!({"result": {"refineJob": {"jobId": "j2"}}}))), Some("j2"));
        assert_eq!(
            refine_job_id(&md(json!({"jobId": "", "result": {"refineJob": {"jobId": "j3"}}}))),
            Some("j3")
        );
        assert_eq!(
            read_refine_job_id(&json!({"metadataEvent": {"jobId": "j4"}, "jobId": "outer"})),
            Some("j4")
        );
        assert_eq!(read_refine_job_id(&json!({"metadataEvent": "x", "jobId": "outer"})), Some("outer"));
        assert_eq!(read_refine_job_id(&json!("j")), None);
    }
}
