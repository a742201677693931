//! Charts of a `tern-lab bench --json` file: time to the RIB and to the FIB, CPU
//! seconds and peak RSS per daemon (one panel per scenario, medians with min–max
//! whiskers), and the kernel route count over a restart, one line per daemon.

use serde_json::Value;

use super::{bar_chart, colour, line_chart, Bar, Group, Marker, Panel, Series};

/// Daemons in the order they are drawn; the `null` daemon (the injector's ceiling,
/// no routing at all) is left out of the pictures.
const ORDER: [&str; 4] = ["tern", "bird", "frr", "gobgp"];

/// One bar chart of a bench file: which figures (key, group label) it draws, in which
/// unit, and which scenarios it leaves out.
struct BarSpec {
    file: &'static str,
    title: &'static str,
    /// What is measured, before the common part of the subtitle.
    what: &'static str,
    keys: &'static [(&'static str, &'static str)],
    unit: &'static str,
    skip: fn(&str) -> bool,
}

/// Restarts and churn are no loads of a table.
fn not_loads(sc: &str) -> bool {
    sc.starts_with("restart") || sc.starts_with("churn")
}

/// The bar charts, in the order they are written.
const BARS: [BarSpec; 3] = [
    BarSpec {
        file: "bench-time.svg",
        title: "Time to the RIB and to the kernel FIB",
        what: "from the first UPDATE sent; GoBGP installs no FIB routes (n/a)",
        keys: &[
            ("converge_s", "RIB"),
            ("fib_s", "FIB"),
            ("withdraw_fib_s", "withdrawn (FIB)"),
        ],
        unit: "seconds",
        skip: not_loads,
    },
    BarSpec {
        file: "bench-cpu.svg",
        title: "CPU to take in the table",
        what: "user + system, all the daemon's processes",
        keys: &[("cpu_s", "CPU s to the table")],
        unit: "CPU seconds",
        skip: not_loads,
    },
    BarSpec {
        file: "bench-rss.svg",
        title: "Peak memory (RSS) with the table in",
        what: "VmHWM of all the daemon's processes; here tern is behind BIRD",
        keys: &[("peak_rss_mb", "peak RSS")],
        unit: "MB",
        skip: |sc| sc.starts_with("restart"),
    },
];

/// The `summary` object of a bench file and the daemons it holds figures of.
struct Summary<'a> {
    summary: &'a serde_json::Map<String, Value>,
    daemons: Vec<String>,
}

impl Summary<'_> {
    /// (median, min, max) of figure `k` of daemon `d` in scenario `sc`.
    fn figure(&self, sc: &str, d: &str, k: &str) -> Option<(f64, f64, f64)> {
        let st = self.summary.get(sc)?.get(d)?.get(k)?;
        Some((
            st.get("median")?.as_f64()?,
            st.get("min")?.as_f64()?,
            st.get("max")?.as_f64()?,
        ))
    }

    /// One panel per scenario that has any of the figures `keys`.
    fn panels(&self, keys: &[(&str, &str)], unit: &str, skip: fn(&str) -> bool) -> Vec<Panel> {
        self.summary
            .keys()
            .filter(|sc| !skip(sc))
            .filter(|sc| {
                keys.iter()
                    .any(|(k, _)| self.daemons.iter().any(|d| self.figure(sc, d, k).is_some()))
            })
            .map(|sc| Panel {
                title: scenario_title(sc),
                unit: unit.into(),
                groups: keys
                    .iter()
                    .map(|(k, label)| Group {
                        label: (*label).into(),
                        bars: self
                            .daemons
                            .iter()
                            .map(|d| Bar {
                                series: d.clone(),
                                value: self.figure(sc, d, k),
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect()
    }

    /// The most runs behind any scenario's median.
    fn reps(&self) -> u64 {
        let runs = |sc: &Value| {
            sc.get("tern")
                .and_then(|t| t.get("converge_s").or_else(|| t.get("restart_converge_s")))
                .and_then(|s| s.get("runs"))
                .and_then(Value::as_u64)
                .unwrap_or(0)
        };
        self.summary.values().map(runs).max().unwrap_or(0)
    }
}

/// The charts of a bench file: `(file name, SVG)`, or why there are none.
pub fn charts(doc: &Value, machine: &str) -> Result<Vec<(String, String)>, String> {
    let summary = doc
        .get("summary")
        .and_then(Value::as_object)
        .ok_or("no \"summary\" object: is this a `tern-lab bench --json` file?")?;
    let daemons: Vec<String> = ORDER
        .iter()
        .filter(|d| summary.values().any(|s| s.get(**d).is_some()))
        .map(|d| d.to_string())
        .collect();
    let summary = Summary { summary, daemons };
    let reps = summary.reps();
    let mut out = Vec::new();
    for bar in &BARS {
        let panels = summary.panels(bar.keys, bar.unit, bar.skip);
        if panels.is_empty() {
            continue;
        }
        let sub = format!(
            "{}; median of {reps} run(s), whiskers min–max; lower is better.\n{machine}",
            bar.what
        );
        out.push((
            bar.file.to_string(),
            bar_chart(bar.title, &sub, &summary.daemons, &panels),
        ));
    }
    if let Some(svg) = restart_timeline(doc, machine) {
        out.push(("restart-timeline.svg".to_string(), svg));
    }
    if out.is_empty() {
        return Err("the file holds no figure that a chart shows".into());
    }
    Ok(out)
}

/// "prefixes:100000" → "100,000 prefixes, 1 eBGP peer".
fn scenario_title(sc: &str) -> String {
    let mut parts = sc.split(':');
    let kind = parts.next().unwrap_or("");
    let n: Option<u64> = parts.next().and_then(|n| n.parse().ok());
    match (kind, n) {
        ("prefixes", Some(n)) => format!("{} prefixes, one eBGP peer", thousands(n)),
        ("peers", Some(n)) => format!("{} Calico mesh peers", thousands(n)),
        ("churn", _) => "churn".into(),
        _ => sc.to_string(),
    }
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The restart scenario's route count over time, the first run of each daemon that
/// has a timeline (GoBGP installs none).
fn restart_timeline(doc: &Value, machine: &str) -> Option<String> {
    let runs = doc.get("runs")?.as_array()?;
    let mut series = Vec::new();
    let mut scenario = String::new();
    for d in ORDER {
        let Some(run) = runs.iter().find(|r| {
            r.get("daemon").and_then(Value::as_str) == Some(d)
                && r.get("timeline")
                    .and_then(Value::as_array)
                    .is_some_and(|t| !t.is_empty())
        }) else {
            continue;
        };
        if scenario.is_empty() {
            scenario = run
                .get("scenario")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
        }
        let points: Vec<(f64, f64)> = run
            .get("timeline")
            .and_then(Value::as_array)?
            .iter()
            .filter_map(|p| Some((p.get(0)?.as_f64()?, p.get(1)?.as_f64()?)))
            .collect();
        // The legend says how low each daemon's count went after the stop: lines that
        // coincide (no route lost) would otherwise hide each other.
        let low = points
            .iter()
            .filter(|(t, _)| *t >= 0.0)
            .map(|(_, n)| *n)
            .fold(f64::INFINITY, f64::min);
        let name = if low.is_finite() {
            format!("{d} (fewest after the stop: {})", thousands(low as u64))
        } else {
            d.to_string()
        };
        series.push(Series {
            name,
            colour: colour(d).to_string(),
            points,
        });
    }
    if series.is_empty() {
        return None;
    }
    let n = scenario
        .split(':')
        .nth(1)
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    Some(line_chart(
        &format!("Kernel routes while the daemon restarts ({} routes)", thousands(n)),
        &format!(
            "SIGTERM at 0 s, started again at once; the daemon's routes in the kernel, from netlink. \
             A dip is traffic lost.\n{machine}"
        ),
        ("seconds since the stop", "routes in the kernel"),
        0.0,
        &series,
        &[Marker { x: 0.0, label: "stop".into(), colour: "#dc2626".into() }],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Value {
        serde_json::json!({
            "runs": [
                {"scenario": "restart:1000", "daemon": "tern", "rep": 0, "metrics": {},
                 "timeline": [[-1.0, 1000.0], [0.5, 1000.0], [4.0, 1000.0]]},
                {"scenario": "restart:1000", "daemon": "frr", "rep": 0, "metrics": {},
                 "timeline": [[-1.0, 1000.0], [0.5, 0.0], [4.0, 1000.0]]},
                {"scenario": "restart:1000", "daemon": "gobgp", "rep": 0, "metrics": {}}
            ],
            "summary": {
                "prefixes:100000": {
                    "tern": {"converge_s": {"median": 0.22, "min": 0.12, "max": 0.25, "runs": 3},
                             "fib_s": {"median": 0.74, "min": 0.63, "max": 0.78, "runs": 3},
                             "peak_rss_mb": {"median": 105.0, "min": 104.0, "max": 106.0, "runs": 3}},
                    "gobgp": {"converge_s": {"median": 1.45, "min": 1.29, "max": 1.55, "runs": 3}},
                    "null": {"converge_s": {"median": 0.01, "min": 0.01, "max": 0.01, "runs": 3}}
                },
                "restart:1000": {"tern": {"restart_converge_s": {"median": 0.4, "min": 0.4, "max": 0.4, "runs": 1}}}
            }
        })
    }

    #[test]
    fn a_bench_file_gives_time_rss_and_restart_charts() {
        let files = charts(&doc(), "test machine").unwrap();
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["bench-time.svg", "bench-rss.svg", "restart-timeline.svg"]
        );
        let time = &files[0].1;
        assert!(
            time.contains("100,000 prefixes") && time.contains(">0.74<") && time.contains(">n/a<")
        );
        assert!(!time.contains(">null<"), "the null daemon is not drawn");
        assert!(
            !time.contains("restart"),
            "no restart panel in the time chart"
        );
        let restart = &files[2].1;
        assert_eq!(
            restart.matches("<polyline").count(),
            2,
            "tern and frr; gobgp has no FIB"
        );
    }

    #[test]
    fn other_json_is_refused() {
        assert!(charts(&serde_json::json!({"x": 1}), "").is_err());
        assert!(charts(&serde_json::json!({"summary": {}}), "").is_err());
    }

    #[test]
    fn numbers_get_thousands_separators() {
        assert_eq!(thousands(100000), "100,000");
        assert_eq!(thousands(999), "999");
        assert_eq!(scenario_title("peers:200"), "200 Calico mesh peers");
    }
}
