//! The process figures Prometheus' own clients export under the same names
//! (`process_resident_memory_bytes`, `process_cpu_seconds_total`, `process_open_fds`,
//! `process_start_time_seconds`), so the dashboards made for them show tern's memory.
//!
//! On Linux they come from `/proc/self` (a few small reads per scrape); on Windows
//! from GetProcessMemoryInfo (the working set), GetProcessTimes and
//! GetProcessHandleCount (handles stand for descriptors there). Elsewhere they are
//! left out.

/// One reading; a figure the system would not give is `None` and left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// Resident set size, bytes.
    pub resident_bytes: Option<u64>,
    /// User and system CPU time, seconds.
    pub cpu_seconds: Option<f64>,
    /// Open file descriptors.
    pub open_fds: Option<u64>,
    /// When the process started, seconds since the Unix epoch.
    pub start_time_seconds: Option<f64>,
}

/// The figures now.
#[cfg(target_os = "linux")]
pub fn read() -> Figures {
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    let fields = stat.as_deref().map(stat_fields).unwrap_or_default();
    // SAFETY: sysconf only reads a configuration value; it takes no pointers.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let ticks = u64::try_from(ticks).ok().filter(|t| *t > 0);
    let page = u64::try_from(page).ok().filter(|p| *p > 0);
    let boot = std::fs::read_to_string("/proc/stat")
        .ok()
        .as_deref()
        .and_then(boot_time);
    from_stat(&fields, ticks, page, boot, open_fds())
}

/// The figures now.
#[cfg(windows)]
pub fn read() -> Figures {
    use windows_sys::Win32::Foundation::FILETIME;
    use windows_sys::Win32::System::ProcessStatus::{
        K32GetProcessMemoryInfo, PROCESS_MEMORY_COUNTERS,
    };
    use windows_sys::Win32::System::Threading::{
        GetCurrentProcess, GetProcessHandleCount, GetProcessTimes,
    };
    // 100 ns units; FILETIME counts from 1601-01-01, 11,644,473,600 s before 1970.
    let ticks = |f: &FILETIME| (u64::from(f.dwHighDateTime) << 32) | u64::from(f.dwLowDateTime);
    let secs = |f: &FILETIME| ticks(f) as f64 / 1e7;
    let mut f = Figures::default();
    let size = std::mem::size_of::<PROCESS_MEMORY_COUNTERS>() as u32;
    let mut mem = PROCESS_MEMORY_COUNTERS {
        cb: size,
        ..Default::default()
    };
    let zero = FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    };
    let (mut created, mut exited, mut kernel, mut user) = (zero, zero, zero, zero);
    let mut handles = 0u32;
    // SAFETY: GetCurrentProcess returns a pseudo handle that needs no closing; each
    // call writes only into the local it is given, of the size it is told.
    unsafe {
        let me = GetCurrentProcess();
        if K32GetProcessMemoryInfo(me, &mut mem, size) != 0 {
            f.resident_bytes = Some(mem.WorkingSetSize as u64);
        }
        if GetProcessTimes(me, &mut created, &mut exited, &mut kernel, &mut user) != 0 {
            f.cpu_seconds = Some(secs(&kernel) + secs(&user));
            f.start_time_seconds = Some(secs(&created) - 11_644_473_600.0);
        }
        // A live process always holds handles: 0 means the call is a stub (Wine's),
        // so the figure is left out rather than shown as 0.
        if GetProcessHandleCount(me, &mut handles) != 0 && handles > 0 {
            f.open_fds = Some(u64::from(handles));
        }
    }
    f
}

/// The figures (none on this platform).
#[cfg(not(any(target_os = "linux", windows)))]
pub fn read() -> Figures {
    Figures::default()
}

#[cfg(target_os = "linux")]
fn open_fds() -> Option<u64> {
    let dir = std::fs::read_dir("/proc/self/fd").ok()?;
    // The directory's own descriptor, open while it is read, is not counted.
    Some((dir.count() as u64).saturating_sub(1))
}

/// `/proc/self/stat`'s fields from the third on (state, ppid, ...): the command name
/// before them is in parentheses and may itself hold spaces and parentheses.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn stat_fields(stat: &str) -> Vec<u64> {
    let after = stat
        .rfind(')')
        .and_then(|i| stat.get(i + 1..))
        .unwrap_or("");
    // The state is a letter: kept as 0 so that positions stay those of proc(5).
    after
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect()
}

/// `btime` of `/proc/stat`: when the system booted, seconds since the Unix epoch.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The figures from `/proc/self/stat`'s fields (see [`stat_fields`]), the clock ticks
/// per second, the page size and the boot time.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn from_stat(
    fields: &[u64],
    ticks: Option<u64>,
    page: Option<u64>,
    boot: Option<u64>,
    open_fds: Option<u64>,
) -> Figures {
    // proc(5) numbers fields from 1; `fields` starts at field 3.
    let field = |n: usize| fields.get(n - 3).copied();
    let secs = |t: u64| ticks.map(|per_s| t as f64 / per_s as f64);
    let cpu = field(14).zip(field(15)).map(|(u, s)| u + s);
    Figures {
        resident_bytes: field(24).zip(page).map(|(pages, size)| pages * size),
        cpu_seconds: cpu.and_then(secs),
        open_fds,
        start_time_seconds: field(22)
            .and_then(secs)
            .zip(boot)
            .map(|(since_boot, boot)| boot as f64 + since_boot),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command name with a space and a parenthesis does not shift the fields.
    #[test]
    fn figures_from_a_stat_line() {
        let line = "4242 (ter n) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 \
                    250 50 0 0 20 0 9 0 12345 104857600 3000 18446744073709551615";
        let fields = stat_fields(line);
        let f = from_stat(&fields, Some(100), Some(4096), Some(1_700_000_000), Some(7));
        assert_eq!(f.resident_bytes, Some(3000 * 4096));
        assert_eq!(f.cpu_seconds, Some(3.0));
        let start = f.start_time_seconds.unwrap_or(0.0);
        assert!((start - 1_700_000_123.45).abs() < 1e-3, "{start}");
        assert_eq!(f.open_fds, Some(7));
        assert_eq!(
            boot_time("cpu 1 2\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
    }

    #[cfg(any(target_os = "linux", windows))]
    #[test]
    fn this_process_has_figures() {
        let f = read();
        assert!(f.resident_bytes.is_some_and(|b| b > 1_000_000), "{f:?}");
        assert!(f.cpu_seconds.is_some(), "{f:?}");
        // Linux always counts them; Windows under Wine cannot (see `read`).
        if cfg!(target_os = "linux") {
            assert!(f.open_fds.is_some_and(|n| n >= 3), "{f:?}");
        } else {
            assert!(f.open_fds.is_none_or(|n| n >= 3), "{f:?}");
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let start = f.start_time_seconds.unwrap_or(0.0);
        assert!(
            start > now - 3600.0 && start <= now + 1.0,
            "{start} vs {now}"
        );
    }
}
