//! Resident memory of this process (`VmRSS` of /proc/self/status), for bytes-per-object
//! figures: read before and after filling a structure.

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
}
