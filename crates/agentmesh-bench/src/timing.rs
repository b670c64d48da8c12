//! Timing of store calls and the result line of one case.
//!
//! Only the store call itself is inside the clock; setup, refills and completions
//! between timed calls are not. The JSON line has the seed harness's fields,
//! rounding and number style, so `bench/compare.py` can join the two outputs.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Latencies of the timed calls of one case.
#[derive(Debug, Default)]
pub(crate) struct Timer {
    latencies: Vec<Duration>,
    total: Duration,
}

impl Timer {
    /// Runs `call`, adding its wall-clock time to this timer.
    pub(crate) fn time<T>(&mut self, call: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = call();
        let elapsed = start.elapsed();
        self.total += elapsed;
        self.latencies.push(elapsed);
        out
    }

    /// Latencies of calls that ran concurrently, and the wall-clock time they took
    /// together. Its `seconds` is that wall-clock time, so a result line's
    /// `ops_per_s` is the throughput of all callers together.
    pub(crate) fn concurrent(latencies: Vec<Duration>, wall: Duration) -> Timer {
        Timer { latencies, total: wall }
    }

    /// Number of timed calls.
    pub(crate) fn calls(&self) -> usize {
        self.latencies.len()
    }

    /// Sum of the timed calls (the wall-clock time of concurrent ones), in seconds.
    pub(crate) fn seconds(&self) -> f64 {
        self.total.as_secs_f64()
    }

    /// The `p` quantile (0..=1) of the call latencies in microseconds, by nearest
    /// rank; 0 without calls.
    pub(crate) fn percentile_us(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return 0.0;
        }
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        let rank = (p * sorted.len() as f64).ceil() as usize;
        let idx = rank.clamp(1, sorted.len()) - 1;
        sorted[idx].as_nanos() as f64 / 1_000.0
    }
}

/// `x` rounded to `digits` decimals, half up, like `Math.round(x * 10^d) / 10^d`.
fn round(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale + 0.5).floor() / scale
}

/// The stdout line of one case: `{"case","n","ops","seconds","ops_per_s","p50_us","p99_us"}`.
///
/// `ops` counts units of work (tasks, entries); the latencies are per timed call.
/// Numbers print as JavaScript's `JSON.stringify` prints them (`163`, not `163.0`).
pub(crate) fn result_line(case: &str, n: usize, ops: usize, timer: &Timer) -> String {
    let seconds = timer.seconds();
    let ops_per_s = if seconds > 0.0 { ops as f64 / seconds } else { 0.0 };
    let mut line = String::new();
    write!(
        line,
        r#"{{"case":{},"n":{n},"ops":{ops},"seconds":{},"ops_per_s":{},"p50_us":{},"p99_us":{}}}"#,
        serde_json::Value::from(case),
        round(seconds, 6),
        round(ops_per_s, 1),
        round(timer.percentile_us(0.5), 1),
        round(timer.percentile_us(0.99), 1),
    )
    .expect("writing to a String cannot fail");
    line
}

/// Runs `work(k, input)` for every input on an OS thread of its own, all
/// released together once every thread is up. Returns the results in input
/// order, and the wall-clock time from the release until the last one ended.
pub(crate) fn released_together<I: Send, R: Send>(
    inputs: Vec<I>,
    work: impl Fn(usize, I) -> anyhow::Result<R> + Sync,
) -> (anyhow::Result<Vec<R>>, Duration) {
    let start = std::sync::Barrier::new(inputs.len() + 1);
    std::thread::scope(|s| {
        let threads: Vec<_> = inputs
            .into_iter()
            .enumerate()
            .map(|(k, input)| {
                let (start, work) = (&start, &work);
                s.spawn(move || {
                    start.wait();
                    work(k, input)
                })
            })
            .collect();
        start.wait();
        let began = Instant::now();
        let results = threads
            .into_iter()
            .map(|t| t.join().expect("a load thread panicked"))
            .collect::<anyhow::Result<_>>();
        (results, began.elapsed())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timer_of(micros: &[u64]) -> Timer {
        let latencies: Vec<Duration> = micros.iter().copied().map(Duration::from_micros).collect();
        Timer { total: latencies.iter().sum(), latencies }
    }

    #[test]
    fn nearest_rank_percentiles() {
        let t = timer_of(&(1..=100).collect::<Vec<_>>());
        assert_eq!(t.percentile_us(0.5), 50.0);
        assert_eq!(t.percentile_us(0.99), 99.0);
        let t = timer_of(&[7]);
        assert_eq!(t.percentile_us(0.5), 7.0);
        assert_eq!(t.percentile_us(0.99), 7.0);
        assert_eq!(Timer::default().percentile_us(0.5), 0.0);
    }

    #[test]
    fn line_has_the_seed_format() {
        let t = timer_of(&[100, 163, 200]);
        assert_eq!(
            result_line("enqueue", 3, 3, &t),
            r#"{"case":"enqueue","n":3,"ops":3,"seconds":0.000463,"ops_per_s":6479.5,"p50_us":163,"p99_us":200}"#
        );
    }
}
