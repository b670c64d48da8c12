//! The claim walk both stores run: which candidate a claim takes, and which
//! refusal it names when it takes none. A store supplies the candidate streams
//! ([`Streams`]); the walk decides.
//!
//! A store keeps its pending tasks in six ordered streams per hold value: one
//! per tier (pinned to the claimant's session, pinned to its node, pinned to
//! neither), each whole or only its read-only tasks, every stream in claim
//! order (priority, then age, then insertion). The hold value says why a
//! pending task waits: 0 ready, 1 dependencies or a block, 2 parked.

use crate::{ClaimRefusal, Claimant, TaskMode, Timestamp};

use super::{CandidateFacts, NodeLoad, check_gates};

/// How many candidates a refusal diagnosis looks at per stream.
pub const DIAGNOSIS_LIMIT: usize = 256;

/// A pending task as the streams give it: the columns the gates read, without
/// the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The task's id.
    pub id: String,
    /// Required capability tags.
    pub required_tags: Vec<String>,
    /// `notBefore` in milliseconds.
    pub not_before_ms: Option<i64>,
    /// The task mode.
    pub task_mode: Option<TaskMode>,
    /// The task is read-only.
    pub readonly: bool,
    /// The node pin.
    pub target_node_id: Option<String>,
    /// The session pin.
    pub target_session_id: Option<String>,
    /// The task's difficulty: read only for a claimant that takes only some
    /// ([`Candidate::read_difficulty`]).
    pub difficulty: Option<String>,
}

/// A stored candidate whose required tags are not a JSON array of strings.
#[derive(Debug)]
pub struct BadCandidate {
    /// The task's id.
    pub id: String,
    /// Why its tags did not parse.
    pub error: serde_json::Error,
}

impl Candidate {
    /// A candidate from a store's columns: the required tags as their stored
    /// JSON array (`None` for none) and the mode as its name (one this version
    /// does not know counts as none).
    pub fn from_columns(
        id: String,
        required_tags: Option<&str>,
        not_before_ms: Option<i64>,
        task_mode: Option<&str>,
        readonly: bool,
        target_node_id: Option<String>,
        target_session_id: Option<String>,
    ) -> Result<Candidate, BadCandidate> {
        Ok(Candidate {
            required_tags: match required_tags.map(serde_json::from_str).transpose() {
                Ok(tags) => tags.unwrap_or_default(),
                Err(error) => return Err(BadCandidate { id, error }),
            },
            not_before_ms,
            task_mode: task_mode.and_then(|m| m.parse().ok()),
            readonly,
            target_node_id,
            target_session_id,
            id,
            difficulty: None,
        })
    }

    /// Reads the task's difficulty from its stored `payload` when `claimant`
    /// takes only some difficulties (the one gate that needs it); otherwise
    /// leaves the payload unread. An unreadable payload has none.
    pub fn read_difficulty(&mut self, claimant: &Claimant, payload: &str) {
        #[derive(serde::Deserialize)]
        struct Difficulty {
            #[serde(default)]
            difficulty: Option<String>,
        }
        if claimant.allowed_difficulties.is_some() {
            self.difficulty = serde_json::from_str::<Difficulty>(payload).ok().and_then(|d| d.difficulty);
        }
    }

    /// What the gates read of it, in the stream of `hold`.
    pub fn facts(&self, hold: i64) -> CandidateFacts<'_> {
        CandidateFacts {
            required_tags: &self.required_tags,
            dependencies_met: hold != 1,
            not_before_ms: self.not_before_ms,
            parked: hold == 2,
            task_mode: self.task_mode,
            readonly: self.readonly,
            target_node_id: self.target_node_id.as_deref(),
            target_session_id: self.target_session_id.as_deref(),
            difficulty: self.difficulty.as_deref(),
        }
    }
}

/// A claim tier: whom the stream's tasks are pinned to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tier {
    /// Pinned to the claimant's session.
    Session,
    /// Pinned to the claimant's node (any of its id forms), not to a session.
    Node,
    /// Pinned to neither.
    Open,
}

/// The tiers in the order a claim tries them.
pub const TIERS: [Tier; 3] = [Tier::Session, Tier::Node, Tier::Open];

/// One stream: a tier at one hold value, whole or only its read-only tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stream {
    /// Whom its tasks are pinned to.
    pub tier: Tier,
    /// Their hold value.
    pub hold: i64,
    /// Only the read-only tasks.
    pub readonly_only: bool,
}

/// What the walk says of the candidate a stream just gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visit {
    /// Go on to the next candidate.
    Next,
    /// Stop the walk.
    Stop,
    /// Stop the walk and hand over this candidate.
    Take,
}

/// What a stream's scan hands each candidate to: the walk's verdict on it.
pub type Visitor<'a> = &'a mut dyn FnMut(&Candidate) -> Visit;

/// A store's candidate streams, for one claim.
pub trait Streams {
    /// A candidate handed over, loaded as the store needs it to write the claim.
    type Taken;
    /// The store's error.
    type Error;

    /// Gives `visit` the candidates of `stream` in claim order until it stops
    /// the walk or `limit` were given; returns the one it took.
    fn scan(
        &mut self,
        stream: Stream,
        limit: usize,
        visit: Visitor<'_>,
    ) -> Result<Option<Self::Taken>, Self::Error>;
}

/// What a store learns before it walks, in one read: the claim's first gate
/// and which pinned streams hold a ready task at all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Survey {
    /// The session holds an assigned task.
    pub session_assigned: bool,
    /// Some assigned task runs on the claimant's node (any id form).
    pub node_busy: bool,
    /// The session-pinned stream at hold 0 holds a task.
    pub session_pinned: bool,
    /// The node-pinned stream at hold 0 holds a task.
    pub node_pinned: bool,
}

/// How a walk ended.
#[derive(Debug)]
pub enum Walked<T> {
    /// The candidate to claim.
    Take(T),
    /// No candidate passed; the reason of the one that got furthest.
    Refused(ClaimRefusal),
}

/// The claim walk, after the survey (whose `session_assigned` the caller has
/// refused already) and the node's `load`.
///
/// Candidates come tier by tier (session-pinned, node-pinned, open), each in
/// claim order and only among ready tasks (hold 0; only the read-only ones when
/// the node is busy); a pinned stream the survey found empty is skipped. The
/// first candidate that passes every gate is taken. When none passes, a bounded
/// look at the other streams ([`DIAGNOSIS_LIMIT`] candidates each) names the
/// refusal of the candidate that got furthest through the gates, deepest
/// possible first.
pub fn walk<S: Streams>(
    streams: &mut S,
    survey: &Survey,
    claimant: &Claimant,
    load: NodeLoad,
    now: Timestamp,
) -> Result<Walked<S::Taken>, S::Error> {
    let mut best: Option<ClaimRefusal> = None;
    if !load.cap_reached {
        for tier in TIERS {
            let empty = match tier {
                Tier::Session => !survey.session_pinned,
                Tier::Node => !survey.node_pinned,
                Tier::Open => false,
            };
            if empty {
                continue;
            }
            let stream = Stream { tier, hold: 0, readonly_only: load.node_busy };
            let taken = streams.scan(stream, usize::MAX, &mut |c| {
                // The streams select only this claimant's rows; the pin gate
                // still checks every pin exactly.
                match check_gates(&c.facts(0), claimant, load, now) {
                    Ok(()) => Visit::Take,
                    Err(reason) => {
                        best = Some(ClaimRefusal::furthest(best, reason));
                        Visit::Next
                    }
                }
            })?;
            if let Some(taken) = taken {
                return Ok(Walked::Take(taken));
            }
        }
    }
    diagnose(streams, claimant, load, now, best).map(Walked::Refused)
}

/// Names the refusal when no candidate passed, looking at the streams the
/// winner walk did not fully cover.
fn diagnose<S: Streams>(
    streams: &mut S,
    claimant: &Claimant,
    load: NodeLoad,
    now: Timestamp,
    mut best: Option<ClaimRefusal>,
) -> Result<ClaimRefusal, S::Error> {
    let depth = |b: &Option<ClaimRefusal>| b.map_or(0, |r| r.depth());
    // Streams by hold, with the deepest gate a candidate in them can reach.
    let ready_max = if load.cap_reached {
        ClaimRefusal::ParallelCapReached.depth()
    } else {
        ClaimRefusal::NodeBusyWithActiveAssignment.depth()
    };
    let ready_covered = !load.cap_reached && !load.node_busy;
    let holds = [
        (0, ready_max, ready_covered),
        (2, ClaimRefusal::TaskParked.depth(), false),
        (1, ClaimRefusal::DependenciesUnsatisfied.depth(), false),
    ];
    for (hold, max_depth, covered) in holds {
        if covered || depth(&best) >= max_depth {
            continue;
        }
        for tier in TIERS {
            let stream = Stream { tier, hold, readonly_only: false };
            streams.scan(stream, DIAGNOSIS_LIMIT, &mut |c| {
                if let Err(reason) = check_gates(&c.facts(hold), claimant, load, now) {
                    best = Some(ClaimRefusal::furthest(best, reason));
                }
                if depth(&best) >= max_depth { Visit::Stop } else { Visit::Next }
            })?;
            if depth(&best) >= max_depth {
                break;
            }
        }
    }
    Ok(best.unwrap_or(ClaimRefusal::NoPendingCandidates))
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::collections::HashMap;

    /// Streams held in memory: each a list of candidates in claim order; every
    /// scan is recorded.
    #[derive(Default)]
    struct Fake {
        streams: HashMap<(Tier, i64, bool), Vec<Candidate>>,
        scanned: Vec<(Stream, usize)>,
    }

    impl Fake {
        fn with(mut self, tier: Tier, hold: i64, tasks: Vec<Candidate>) -> Fake {
            let readonly: Vec<Candidate> = tasks.iter().filter(|c| c.readonly).cloned().collect();
            self.streams.insert((tier, hold, true), readonly);
            self.streams.insert((tier, hold, false), tasks);
            self
        }
    }

    impl Streams for Fake {
        type Taken = String;
        type Error = ();

        fn scan(&mut self, stream: Stream, limit: usize, visit: Visitor<'_>) -> Result<Option<String>, ()> {
            self.scanned.push((stream, limit));
            let tasks = self.streams.get(&(stream.tier, stream.hold, stream.readonly_only)).cloned();
            for c in tasks.unwrap_or_default().iter().take(limit) {
                match visit(c) {
                    Visit::Take => return Ok(Some(c.id.clone())),
                    Visit::Stop => return Ok(None),
                    Visit::Next => {}
                }
            }
            Ok(None)
        }
    }

    fn task(id: &str) -> Candidate {
        Candidate::from_columns(id.into(), None, None, None, false, None, None).unwrap()
    }

    fn claimant() -> Claimant {
        Claimant {
            node_id: "daemon_mach_A".into(),
            session_id: "s1".into(),
            capability_tags: vec!["os=linux".into()],
            ..Claimant::default()
        }
    }

    fn now() -> Timestamp {
        Timestamp::from_millis(1_780_000_000_000)
    }

    fn run(fake: &mut Fake, survey: Survey, load: NodeLoad) -> Walked<String> {
        walk(fake, &survey, &claimant(), load, now()).unwrap()
    }

    #[test]
    fn the_first_candidate_that_passes_every_gate_is_taken_tier_by_tier() {
        let tagged = Candidate { required_tags: vec!["gpu".into()], ..task("needs-gpu") };
        let pinned = Candidate { target_session_id: Some("s1".into()), ..task("pinned") };
        let mut fake = Fake::default().with(Tier::Session, 0, vec![pinned]).with(
            Tier::Open,
            0,
            vec![tagged, task("open")],
        );
        let survey = Survey { session_pinned: true, ..Survey::default() };
        let taken = run(&mut fake, survey, NodeLoad::default());
        assert!(matches!(taken, Walked::Take(ref id) if id == "pinned"), "{taken:?}");

        // Without the session's pin, the open stream's first passing task.
        let survey = Survey::default();
        let taken = run(&mut fake, survey, NodeLoad::default());
        assert!(matches!(taken, Walked::Take(ref id) if id == "open"), "{taken:?}");
    }

    #[test]
    fn a_pinned_stream_the_survey_found_empty_is_not_read() {
        let mut fake = Fake::default().with(Tier::Open, 0, vec![task("open")]);
        run(&mut fake, Survey::default(), NodeLoad::default());
        let tiers: Vec<Tier> = fake.scanned.iter().map(|(s, _)| s.tier).collect();
        assert_eq!(tiers, vec![Tier::Open]);
    }

    #[test]
    fn a_busy_node_walks_only_the_read_only_tasks() {
        let readonly = Candidate { readonly: true, ..task("readonly") };
        let mut fake = Fake::default().with(Tier::Open, 0, vec![task("writes"), readonly]);
        let load = NodeLoad { node_busy: true, cap_reached: false };
        let taken = run(&mut fake, Survey { node_busy: true, ..Survey::default() }, load);
        assert!(matches!(taken, Walked::Take(ref id) if id == "readonly"), "{taken:?}");
        assert_eq!(fake.scanned[0].0, Stream { tier: Tier::Open, hold: 0, readonly_only: true });
    }

    #[test]
    fn with_no_candidate_the_refusal_is_the_furthest_reason_and_none_at_all_is_said_so() {
        let later = Candidate { not_before_ms: Some(now().millis() + 60_000), ..task("later") };
        let tagged = Candidate { required_tags: vec!["gpu".into()], ..task("needs-gpu") };
        let mut fake = Fake::default().with(Tier::Open, 0, vec![tagged, later]).with(
            Tier::Open,
            1,
            vec![task("waits-on-a-dependency")],
        );
        let refused = run(&mut fake, Survey::default(), NodeLoad::default());
        assert!(matches!(refused, Walked::Refused(ClaimRefusal::NotBeforeDelayed)), "{refused:?}");

        // Only a parked task: the diagnosis reads the parked stream.
        let mut fake = Fake::default().with(Tier::Node, 2, vec![task("parked")]);
        let refused = run(&mut fake, Survey::default(), NodeLoad::default());
        assert!(matches!(refused, Walked::Refused(ClaimRefusal::TaskParked)), "{refused:?}");
        assert!(fake.scanned.iter().all(|(_, limit)| *limit == DIAGNOSIS_LIMIT || *limit == usize::MAX));

        let mut fake = Fake::default();
        let refused = run(&mut fake, Survey::default(), NodeLoad::default());
        assert!(matches!(refused, Walked::Refused(ClaimRefusal::NoPendingCandidates)), "{refused:?}");
    }

    #[test]
    fn stored_tags_that_are_not_a_list_of_strings_name_the_task() {
        let bad = Candidate::from_columns("t1".into(), Some("{\"gpu\":1}"), None, None, false, None, None)
            .expect_err("an object is not a tag list");
        assert_eq!(bad.id, "t1");
        let good = Candidate::from_columns(
            "t2".into(),
            Some("[\"gpu\"]"),
            None,
            Some("no-such-mode"),
            true,
            None,
            None,
        )
        .expect("a tag list");
        assert_eq!((good.required_tags, good.task_mode, good.readonly), (vec!["gpu".to_owned()], None, true));
    }

    #[test]
    fn a_reached_cap_takes_nothing_and_says_so_for_a_ready_task() {
        let mut fake = Fake::default().with(Tier::Open, 0, vec![task("ready")]);
        let load = NodeLoad { node_busy: false, cap_reached: true };
        let refused = run(&mut fake, Survey::default(), load);
        assert!(matches!(refused, Walked::Refused(ClaimRefusal::ParallelCapReached)), "{refused:?}");
        assert!(fake.scanned.iter().all(|(_, limit)| *limit == DIAGNOSIS_LIMIT), "{:?}", fake.scanned);
    }
}
