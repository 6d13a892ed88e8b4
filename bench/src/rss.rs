//! What this process uses: resident memory (`VmRSS` of /proc/self/status), for
//! bytes-per-object figures, and the calling thread's on-CPU time
//! (/proc/thread-self/schedstat), so that phases are timed by the CPU they took rather
//! than by a wall clock that also counts the time other work on a shared machine held
//! the cores.

/// `VmRSS` in bytes; 0 where /proc is not readable.
pub fn vm_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| parse_vm_rss(&s))
        .unwrap_or(0)
}

/// The `VmRSS:` line of a /proc status text, in bytes.
pub fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Nanoseconds the calling thread has run on a CPU so far (0 where /proc is not
/// readable: the caller then reports zero durations, never made-up ones).
pub fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// A stopwatch of the calling thread's on-CPU time.
#[derive(Clone, Copy, Debug)]
pub struct CpuTimer(u64);

impl CpuTimer {
    /// Start now.
    pub fn start() -> Self {
        Self(thread_cpu_ns())
    }

    /// On-CPU time since the start.
    pub fn elapsed(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(thread_cpu_ns().saturating_sub(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_vm_rss_line_in_bytes() {
        let text = "Name:\tkq-bench\nVmPeak:\t  9000 kB\nVmRSS:\t  1234 kB\nThreads:\t1\n";
        assert_eq!(parse_vm_rss(text), Some(1234 * 1024));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
        assert!(vm_rss() > 0, "this process has resident memory");
    }

    #[test]
    fn the_cpu_timer_counts_work_done() {
        let t = CpuTimer::start();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(std::hint::black_box(x) != 1);
        assert!(t.elapsed() > std::time::Duration::ZERO);
    }
}
