//! The benchmark's results: per scenario and daemon the median, minimum and maximum of
//! each figure over the repetitions, tern's ratio against the best of the others, as
//! a text table and as JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::RunResult;

/// Median, min and max of one figure.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Stat {
    /// Median (the mean of the middle two for an even count).
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Runs it is over.
    pub runs: usize,
}

/// The statistics of `xs` (None when empty).
pub fn stat(xs: &[f64]) -> Option<Stat> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    let median = if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    };
    Some(Stat {
        median,
        min: v[0],
        max: v[v.len() - 1],
        runs: v.len(),
    })
}

/// scenario → daemon → figure → statistics, over the runs that succeeded.
pub type Summary = BTreeMap<String, BTreeMap<String, BTreeMap<String, Stat>>>;

/// Summarises `runs`.
pub fn summarise(runs: &[RunResult]) -> Summary {
    let mut raw: BTreeMap<String, BTreeMap<String, BTreeMap<String, Vec<f64>>>> = BTreeMap::new();
    for r in runs.iter().filter(|r| r.error.is_none()) {
        let d = raw
            .entry(r.scenario.clone())
            .or_default()
            .entry(r.daemon.clone())
            .or_default();
        for (k, v) in &r.metrics {
            d.entry(k.clone()).or_default().push(*v);
        }
    }
    raw.into_iter()
        .map(|(s, ds)| {
            let ds = ds
                .into_iter()
                .map(|(d, ms)| {
                    let ms = ms
                        .into_iter()
                        .filter_map(|(k, v)| stat(&v).map(|st| (k, st)))
                        .collect();
                    (d, ms)
                })
                .collect();
            (s, ds)
        })
        .collect()
}

/// Figures shown in the table, in order, with their column titles and whether lower
/// is better (for the ratio; None: no ratio, the figure describes the setup).
const COLUMNS: &[(&str, &str, Option<bool>)] = &[
    ("sessions_s", "sessions up s", None),
    ("converge_s", "RIB s", Some(true)),
    ("fib_s", "FIB s", Some(true)),
    ("reflect_s", "reflected s", Some(true)),
    ("cpu_s", "CPU s", Some(true)),
    ("settled_cpu_s", "CPU s settled", Some(true)),
    ("settle_s", "settles after s", Some(true)),
    ("routes_per_cpu_s", "routes/CPU-s", Some(false)),
    ("peak_rss_mb", "peak RSS MB", Some(true)),
    ("bytes_per_route", "B/route", Some(true)),
    ("settled_bytes_per_route", "B/route settled", Some(true)),
    ("withdraw_s", "withdraw RIB s", Some(true)),
    ("withdraw_fib_s", "withdraw FIB s", Some(true)),
    ("withdraw_reflect_s", "withdrawn at clients s", Some(true)),
    ("withdrawn_rss_pct", "RSS left %", Some(true)),
    ("restart_deletions", "deletions", Some(true)),
    ("restart_converge_s", "back s", Some(true)),
    ("churn_cpu_s", "churn CPU s", Some(true)),
    ("churn_rss_growth_mb", "RSS growth MB", Some(true)),
    ("inject_s", "injector s", None),
];

fn fmt_num(x: f64) -> String {
    let a = x.abs();
    if a >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", x / 1e3)
    } else if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn cell(s: &Stat) -> String {
    if s.runs > 1 && (s.max - s.min).abs() > f64::EPSILON {
        format!(
            "{} ({}–{})",
            fmt_num(s.median),
            fmt_num(s.min),
            fmt_num(s.max)
        )
    } else {
        fmt_num(s.median)
    }
}

/// The text table: one block per scenario, a row per daemon, then tern's ratio
/// against the best other real daemon for each figure (above 1: tern is better).
pub fn table(summary: &Summary, runs: &[RunResult]) -> String {
    let mut out = String::new();
    for (sc, daemons) in summary {
        let cols: Vec<&(&str, &str, Option<bool>)> = COLUMNS
            .iter()
            .filter(|(k, ..)| daemons.values().any(|m| m.contains_key(*k)))
            .collect();
        let mut rows: Vec<Vec<String>> = Vec::new();
        let mut head = vec!["daemon".to_string()];
        head.extend(cols.iter().map(|c| c.1.to_string()));
        rows.push(head);
        for (d, m) in daemons {
            let mut row = vec![d.clone()];
            row.extend(
                cols.iter()
                    .map(|(k, ..)| m.get(*k).map(cell).unwrap_or_else(|| "-".into())),
            );
            rows.push(row);
        }
        if let Some(t) = daemons.get("tern") {
            let mut row = vec!["tern ×".to_string()];
            for (k, _, lower) in &cols {
                let Some(lower) = lower else {
                    row.push("".into());
                    continue;
                };
                let best = daemons
                    .iter()
                    .filter(|(d, _)| *d != "tern" && *d != "null")
                    .filter_map(|(_, m)| m.get(*k).map(|s| s.median))
                    .reduce(|a, b| if *lower { a.min(b) } else { a.max(b) });
                let r = match (t.get(*k), best) {
                    (Some(ts), Some(b)) if ts.median > 0.0 && b > 0.0 => {
                        let r = if *lower { b / ts.median } else { ts.median / b };
                        format!("{r:.2}")
                    }
                    _ => "-".into(),
                };
                row.push(r);
            }
            rows.push(row);
        }
        let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
            .map(|i| {
                rows.iter()
                    .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let _ = writeln!(out, "\n== {sc} ==");
        for r in &rows {
            let line: Vec<String> = r
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (c, w))| {
                    let pad = w.saturating_sub(c.chars().count());
                    if i == 0 {
                        format!("{c}{}", " ".repeat(pad))
                    } else {
                        format!("{}{c}", " ".repeat(pad))
                    }
                })
                .collect();
            let _ = writeln!(out, "{}", line.join("  "));
        }
    }
    let _ = writeln!(
        out,
        "\nmedian (min–max) over the runs; \"tern ×\": the best of BIRD, FRR and GoBGP \
         relative to tern on that figure (above 1: tern ahead). RIB: the daemon's own \
         CLI reports every prefix; FIB: every route seen arriving in the kernel."
    );
    let failed: Vec<&RunResult> = runs.iter().filter(|r| r.error.is_some()).collect();
    if !failed.is_empty() {
        let _ = writeln!(out, "\nfailed runs:");
        for r in failed {
            let _ = writeln!(
                out,
                "  {} {} rep {}: {}",
                r.scenario,
                r.daemon,
                r.rep,
                r.error.as_deref().unwrap_or("")
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(d: &str, rep: usize, rib: f64) -> RunResult {
        RunResult {
            scenario: "prefixes:10".into(),
            daemon: d.into(),
            rep,
            metrics: [("converge_s".to_string(), rib)].into_iter().collect(),
            timeline: Vec::new(),
            error: None,
        }
    }

    #[test]
    fn medians_and_ratios() {
        assert_eq!(stat(&[3.0, 1.0, 2.0]).map(|s| s.median), Some(2.0));
        assert_eq!(stat(&[4.0, 1.0, 2.0, 3.0]).map(|s| s.median), Some(2.5));
        assert_eq!(stat(&[]), None);
        let runs = vec![
            run("tern", 0, 1.0),
            run("tern", 1, 3.0),
            run("bird", 0, 4.0),
            run("bird", 1, 4.0),
            run("frr", 0, 9.0),
            run("null", 0, 0.1),
        ];
        let s = summarise(&runs);
        let t = table(&s, &runs);
        // tern's median 2.0 against BIRD's 4.0 (the best other; null is not a daemon).
        assert!(t.contains("tern ×") && t.contains("2.00"), "{t}");
        assert!(t.contains("2.00 (1.00–3.00)"), "{t}");
    }
}
