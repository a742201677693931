//! Text output of a soak: an ASCII chart of a series over time, the flatness rule for
//! memory, and the CSV of every sample. Pure functions, unit-tested.

use std::fmt::Write as _;

/// One reading of one tern process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds since the soak started.
    pub t: f64,
    /// Node index (1-based).
    pub node: usize,
    /// Its tern's process id at that moment.
    pub pid: u32,
    /// Resident set size, bytes.
    pub rss: u64,
    /// User + system CPU seconds since that process started.
    pub cpu_s: f64,
}

/// The CSV of all samples: `t_s,node,pid,rss_kb,cpu_s`.
pub fn csv(samples: &[Sample]) -> String {
    let mut s = String::from("t_s,node,pid,rss_kb,cpu_s\n");
    for x in samples {
        let _ = writeln!(
            s,
            "{:.1},{},{},{},{:.2}",
            x.t,
            x.node,
            x.pid,
            x.rss / 1024,
            x.cpu_s
        );
    }
    s
}

/// The CSV of the flaps: `t_s,node,event` (`kill` or `flap`), which `tern-lab chart
/// --soak` marks on the RSS chart.
pub fn events_csv(events: &[(f64, usize, &str)]) -> String {
    let mut s = String::from("t_s,node,event\n");
    for (t, node, what) in events {
        let _ = writeln!(s, "{t:.1},{node},{what}");
    }
    s
}

/// Memory growth verdict for one series (RSS over time).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Flatness {
    /// Largest value in the first quarter after the warm-up.
    pub first_max: f64,
    /// Largest value in the last quarter.
    pub last_max: f64,
    /// The bound the last quarter must stay under.
    pub limit: f64,
}

impl Flatness {
    /// Whether the series stayed flat.
    pub fn ok(&self) -> bool {
        self.last_max <= self.limit
    }
}

/// The flatness rule: after `warmup` seconds, split the rest of the run (up to `end`)
/// in quarters; the largest value of the last quarter must not exceed the largest of
/// the first quarter by more than `ratio` (e.g. 1.10) plus `slack` (absolute, in the
/// series' unit; allocators hand memory back in coarse steps). None when a quarter
/// holds no point (a run too short for its sampling interval).
pub fn flatness(
    points: &[(f64, f64)],
    warmup: f64,
    end: f64,
    ratio: f64,
    slack: f64,
) -> Option<Flatness> {
    let q = (end - warmup) / 4.0;
    if q <= 0.0 {
        return None;
    }
    let max_in = |from: f64, to: f64| {
        points
            .iter()
            .filter(|(t, _)| *t >= from && *t <= to)
            .map(|(_, v)| *v)
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
    };
    let first_max = max_in(warmup, warmup + q)?;
    let last_max = max_in(end - q, end)?;
    Some(Flatness {
        first_max,
        last_max,
        limit: first_max * ratio + slack,
    })
}

/// The least-squares slope of `points` from `from` seconds on, in value units per
/// minute (None with fewer than two points).
pub fn slope_per_min(points: &[(f64, f64)], from: f64) -> Option<f64> {
    let p: Vec<&(f64, f64)> = points.iter().filter(|(t, _)| *t >= from).collect();
    if p.len() < 2 {
        return None;
    }
    let n = p.len() as f64;
    let mt = p.iter().map(|x| x.0).sum::<f64>() / n;
    let mv = p.iter().map(|x| x.1).sum::<f64>() / n;
    let cov: f64 = p.iter().map(|x| (x.0 - mt) * (x.1 - mv)).sum();
    let var: f64 = p.iter().map(|x| (x.0 - mt).powi(2)).sum();
    (var > 0.0).then(|| 60.0 * cov / var)
}

/// An ASCII chart of `points` (time in seconds, value), `width` columns by `height`
/// rows; each column shows the largest value of its time slice. The value axis spans
/// the data's own range (labelled in `unit`), so small changes stay visible.
pub fn ascii(points: &[(f64, f64)], width: usize, height: usize, unit: &str) -> String {
    let (width, height) = (width.max(10), height.max(3));
    if points.is_empty() {
        return "(no samples)\n".into();
    }
    let t_end = points.iter().map(|p| p.0).fold(0.0, f64::max).max(1e-9);
    let mut cols: Vec<Option<f64>> = vec![None; width];
    for (t, v) in points {
        let c = ((t / t_end) * (width - 1) as f64).round() as usize;
        if let Some(slot) = cols.get_mut(c.min(width - 1)) {
            *slot = Some(slot.map_or(*v, |m: f64| m.max(*v)));
        }
    }
    // Carry the last value over empty columns (fewer samples than columns).
    let mut last = None;
    for c in cols.iter_mut() {
        match c {
            Some(v) => last = Some(*v),
            None => *c = last,
        }
    }
    let lo = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let hi = points.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    let span = if hi - lo < 1e-9 { 1.0 } else { hi - lo };
    let mut s = String::new();
    for row in 0..height {
        // Row 0 is the top: the value at the top edge of this row's band.
        let level = hi - span * row as f64 / (height - 1) as f64;
        let label = if row == 0 || row == height - 1 || row == height / 2 {
            format!("{level:>9.1} {unit} |")
        } else {
            format!("{:>9} {:w$} |", "", "", w = unit.len())
        };
        s.push_str(&label);
        for c in &cols {
            let mark = match c {
                Some(v) => {
                    let r = ((hi - v) / span * (height - 1) as f64).round() as usize;
                    if r == row {
                        '*'
                    } else if r < row {
                        ':'
                    } else {
                        ' '
                    }
                }
                None => ' ',
            };
            s.push(mark);
        }
        s.push('\n');
    }
    let pad = 9 + 1 + unit.len() + 1;
    let _ = writeln!(s, "{:pad$}+{}", "", "-".repeat(width));
    let end_label = format!("{:.0} s", t_end);
    let _ = writeln!(
        s,
        "{:pad$} 0 s{:>w$}",
        "",
        end_label,
        w = width.saturating_sub(3)
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_and_growing_series_are_told_apart() {
        let flat: Vec<(f64, f64)> = (0..100)
            .map(|i| (i as f64, 40.0 + (i % 3) as f64 * 0.2))
            .collect();
        let f = flatness(&flat, 10.0, 99.0, 1.1, 2.0).unwrap();
        assert!(f.ok(), "{f:?}");
        let leak: Vec<(f64, f64)> = (0..100)
            .map(|i| (i as f64, 40.0 + i as f64 * 0.5))
            .collect();
        let f = flatness(&leak, 10.0, 99.0, 1.1, 2.0).unwrap();
        assert!(!f.ok(), "{f:?}");
        assert!(flatness(&flat, 100.0, 99.0, 1.1, 2.0).is_none());
        assert!(flatness(&[], 0.0, 99.0, 1.1, 2.0).is_none());
    }

    #[test]
    fn slope_is_per_minute() {
        let pts: Vec<(f64, f64)> = (0..10).map(|i| (i as f64 * 30.0, 5.0 + i as f64)).collect();
        let s = slope_per_min(&pts, 0.0).unwrap();
        assert!((s - 2.0).abs() < 1e-9, "{s}");
        assert!(slope_per_min(&pts, 1e9).is_none());
    }

    #[test]
    fn chart_has_the_asked_size_and_marks_every_column() {
        let pts: Vec<(f64, f64)> = (0..50).map(|i| (i as f64 * 2.0, (i % 7) as f64)).collect();
        let c = ascii(&pts, 40, 8, "MB");
        let rows: Vec<&str> = c.lines().collect();
        assert_eq!(rows.len(), 8 + 2, "{c}");
        for r in &rows[..8] {
            assert_eq!(r.chars().count(), 9 + 1 + 2 + 2 + 40, "{r:?}");
        }
        // Every column has exactly one '*'.
        for col in 0..40 {
            let stars = rows[..8]
                .iter()
                .filter(|r| r.chars().nth(14 + col) == Some('*'))
                .count();
            assert_eq!(stars, 1, "column {col}\n{c}");
        }
        assert!(
            c.contains("6.0 MB") && c.contains("0.0 MB") && c.contains("98 s"),
            "{c}"
        );
        assert_eq!(ascii(&[], 40, 8, "MB"), "(no samples)\n");
    }

    #[test]
    fn csv_has_a_header_and_a_line_per_sample() {
        let s = Sample {
            t: 1.5,
            node: 3,
            pid: 42,
            rss: 10 * 1024 * 1024,
            cpu_s: 0.5,
        };
        assert_eq!(
            csv(&[s]),
            "t_s,node,pid,rss_kb,cpu_s\n1.5,3,42,10240,0.50\n"
        );
    }
}
