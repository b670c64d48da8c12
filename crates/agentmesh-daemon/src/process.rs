//! The `process_*` metrics: the daemon process's memory, CPU time, file
//! descriptors and start time, under the names every Prometheus client library
//! uses, so existing dashboards and alerts work unchanged.
//!
//! On Linux they are read from `/proc` at scrape time: `/proc/self/stat` (CPU
//! time, start time, virtual memory), `/proc/self/status` (resident memory),
//! `/proc/self/fd` (open descriptors), `/proc/self/limits` (the descriptor limit)
//! and `/proc/stat` (boot time). Elsewhere there is no `/proc`, and the family is
//! left out rather than exported with made-up values. Nothing here keeps state.
//!
//! The parsers take the files' text, so they are tested on fixed input.

/// Clock ticks per second of the CPU and start times in `/proc/self/stat`.
///
/// The kernel reports these in `USER_HZ`, which is 100 on every architecture
/// agentmesh runs on; reading it properly needs `sysconf`, which safe Rust cannot
/// call, and the Prometheus client libraries make the same assumption.
const USER_HZ: f64 = 100.0;

/// What the `process_*` metrics report. Each figure is `None` when its source
/// could not be read or parsed, and that one figure is then left out.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct ProcessStats {
    /// User and system CPU time spent, in seconds.
    pub cpu_seconds: Option<f64>,
    /// Resident memory, in bytes.
    pub resident_memory_bytes: Option<u64>,
    /// Virtual memory, in bytes.
    pub virtual_memory_bytes: Option<u64>,
    /// Open file descriptors.
    pub open_fds: Option<u64>,
    /// The soft limit on open file descriptors (`None` as well when unlimited).
    pub max_fds: Option<u64>,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time_seconds: Option<f64>,
}

impl ProcessStats {
    /// The current figures of this process; all `None` where there is no `/proc`.
    pub(crate) fn read() -> ProcessStats {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let stat = read("/proc/self/stat").and_then(|text| StatFields::parse(&text));
        let boot_time = read("/proc/stat").and_then(|text| boot_time_seconds(&text));
        ProcessStats {
            cpu_seconds: stat.map(|s| (s.utime_ticks + s.stime_ticks) as f64 / USER_HZ),
            resident_memory_bytes: read("/proc/self/status").and_then(|text| resident_bytes(&text)),
            virtual_memory_bytes: stat.map(|s| s.vsize_bytes),
            open_fds: std::fs::read_dir("/proc/self/fd").ok().map(|entries| entries.count() as u64),
            max_fds: read("/proc/self/limits").and_then(|text| max_open_files(&text)),
            start_time_seconds: stat
                .zip(boot_time)
                .map(|(s, boot)| boot as f64 + s.start_ticks as f64 / USER_HZ),
        }
    }
}

/// The fields of `/proc/self/stat` the metrics use.
#[derive(Debug, Clone, Copy, PartialEq)]
struct StatFields {
    utime_ticks: u64,
    stime_ticks: u64,
    start_ticks: u64,
    vsize_bytes: u64,
}

impl StatFields {
    /// Parses `/proc/<pid>/stat`. The second field is the command name in
    /// parentheses, which may itself hold spaces and parentheses, so the fields
    /// are counted from the last `)`.
    fn parse(text: &str) -> Option<StatFields> {
        let after_name = &text[text.rfind(')')? + 1..];
        // Field 3 (the state) is the first one after the name; `proc(5)` numbers
        // utime 14, stime 15, starttime 22 and vsize 23.
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let field = |number: usize| fields.get(number - 3)?.parse::<u64>().ok();
        Some(StatFields {
            utime_ticks: field(14)?,
            stime_ticks: field(15)?,
            start_ticks: field(22)?,
            vsize_bytes: field(23)?,
        })
    }
}

/// `VmRSS` of `/proc/<pid>/status`, in bytes (the file gives kB).
fn resident_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|line| line.strip_prefix("VmRSS:"))?;
    let kib = line.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
    kib.checked_mul(1024)
}

/// The soft limit of the `Max open files` row of `/proc/<pid>/limits`; `None`
/// when it is `unlimited`.
fn max_open_files(limits: &str) -> Option<u64> {
    let row = limits.lines().find_map(|line| line.strip_prefix("Max open files"))?;
    row.split_whitespace().next()?.parse().ok()
}

/// The `btime` line of `/proc/stat`: when the system booted, in seconds since the
/// Unix epoch.
fn boot_time_seconds(stat: &str) -> Option<u64> {
    stat.lines().find_map(|line| line.strip_prefix("btime "))?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `/proc/self/stat` line whose command name holds a space and a `)`.
    const STAT: &str = "4242 (agent mesh) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 \
                        250 75 0 0 20 0 9 0 123456 987654321 4321 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        assert_eq!(
            StatFields::parse(STAT),
            Some(StatFields {
                utime_ticks: 250,
                stime_ticks: 75,
                start_ticks: 123_456,
                vsize_bytes: 987_654_321
            })
        );
        assert_eq!(StatFields::parse("4242 (cut short) S 1 2"), None);
        assert_eq!(StatFields::parse("no parenthesis at all"), None);
    }

    #[test]
    fn resident_memory_is_read_in_kilobytes() {
        let status = "Name:\tagentmesh\nVmPeak:\t  99999 kB\nVmRSS:\t   20480 kB\nThreads:\t9\n";
        assert_eq!(resident_bytes(status), Some(20_480 * 1024));
        assert_eq!(resident_bytes("Name:\tkernel-thread\n"), None);
    }

    #[test]
    fn the_descriptor_limit_is_the_soft_limit() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             63432                63432                processes \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(max_open_files(limits), Some(1024));
        let unlimited = "Max open files            unlimited            unlimited            files     \n";
        assert_eq!(max_open_files(unlimited), None);
    }

    #[test]
    fn boot_time_is_the_btime_line() {
        let stat = "cpu  1 2 3 4\nintr 5\nctxt 6\nbtime 1764590000\nprocesses 7\n";
        assert_eq!(boot_time_seconds(stat), Some(1_764_590_000));
        assert_eq!(boot_time_seconds("cpu 1 2 3\n"), None);
    }

    /// On Linux every figure is there, and plausible for a running test process.
    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reports_every_figure() {
        let stats = ProcessStats::read();
        assert!(stats.resident_memory_bytes.is_some_and(|b| b > 0), "{stats:?}");
        assert!(stats.virtual_memory_bytes.is_some_and(|b| b > 0), "{stats:?}");
        assert!(stats.open_fds.is_some_and(|n| n >= 3), "{stats:?}");
        assert!(stats.cpu_seconds.is_some_and(|s| s >= 0.0), "{stats:?}");
        assert!(stats.start_time_seconds.is_some_and(|s| s > 1_500_000_000.0), "{stats:?}");
        assert!(stats.max_fds.is_none_or(|n| n >= stats.open_fds.unwrap_or(0)), "{stats:?}");
    }
}
