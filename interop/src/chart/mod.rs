//! `tern-lab chart`: SVG pictures of the lab's measurements, made from the files the
//! measuring commands write: `tern-lab bench --json` (time, CPU and memory per daemon,
//! the restart timeline), the soak's CSVs (RSS per node with kill and flap markers), and
//! the lab plan (the topology `./demo.sh` builds). Drawing is pure (data in, SVG text
//! out) and unit-tested; only [`write`] touches files.

pub mod bench;
pub mod soak;
pub mod svg;
pub mod topology;

use self::svg::{Anchor, Svg};

/// A daemon's colour, the same in every chart.
pub fn colour(daemon: &str) -> &'static str {
    match daemon {
        "tern" => "#2563eb",
        "bird" => "#16a34a",
        "frr" => "#ea580c",
        "gobgp" => "#9333ea",
        _ => "#6b7280",
    }
}

/// A colour per index, for series that are not daemons (soak nodes).
pub fn series_colour(i: usize) -> &'static str {
    const C: [&str; 10] = [
        "#2563eb", "#16a34a", "#ea580c", "#9333ea", "#0891b2", "#ca8a04", "#db2777", "#4b5563",
        "#65a30d", "#7c3aed",
    ];
    C[i % C.len()]
}

/// Round tick marks from 0 to at least `max`: a step of 1, 2 or 5 × 10^k, 3 to 8 ticks.
pub fn ticks(max: f64) -> Vec<f64> {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    // The step is m × 10^k; ticks are computed from integers so 0.6 reads 0.6.
    let k = (max / 5.0).log10().floor() as i32;
    let scale = |units: f64| {
        if k < 0 {
            units / 10f64.powi(-k)
        } else {
            units * 10f64.powi(k)
        }
    };
    let m = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .find(|m| max / scale(*m) <= 6.0)
        .unwrap_or(10.0);
    let n = (max / scale(m)).ceil() as usize;
    (0..=n.max(1)).map(|i| scale(i as f64 * m)).collect()
}

/// A number as a chart label: few digits, no trailing zeros.
pub fn label(x: f64) -> String {
    let a = x.abs();
    let s = if a == 0.0 {
        "0".to_string()
    } else if a >= 1e6 {
        format!("{:.1}M", x / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", x / 1e3)
    } else if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    };
    if s.contains('.') && !s.ends_with('k') && !s.ends_with('M') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// One bar: a daemon's median with its min–max whisker; None is drawn as "n/a".
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// Series (daemon) name, for the colour and the legend.
    pub series: String,
    /// Median, min, max.
    pub value: Option<(f64, f64, f64)>,
}

/// Bars side by side under one label (e.g. "RIB" with one bar per daemon).
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// Label under the group.
    pub label: String,
    /// Its bars.
    pub bars: Vec<Bar>,
}

/// One panel of a bar chart: its own title and y axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// Title above the panel.
    pub title: String,
    /// Unit of the y axis.
    pub unit: String,
    /// Its groups.
    pub groups: Vec<Group>,
}

const PANEL_W: f64 = 380.0;
const PANEL_H: f64 = 300.0;
const TOP: f64 = 78.0;

/// Panels side by side, a title, a subtitle and a legend of `series`.
pub fn bar_chart(title: &str, subtitle: &str, series: &[String], panels: &[Panel]) -> String {
    let width = 20.0 + PANEL_W * panels.len().max(1) as f64;
    let mut s = Svg::new(width, TOP + PANEL_H + 70.0);
    s.bold(16.0, 24.0, title, 16.0, Anchor::Start, "#111827");
    subtitle_lines(&mut s, subtitle);
    for (i, p) in panels.iter().enumerate() {
        panel(&mut s, 20.0 + i as f64 * PANEL_W, p);
    }
    legend(&mut s, 16.0, TOP + PANEL_H + 50.0, series);
    s.finish()
}

/// The subtitle under the title: its lines are separated by '\n' (at most two fit).
fn subtitle_lines(s: &mut Svg, subtitle: &str) {
    for (i, line) in subtitle.lines().take(2).enumerate() {
        s.text(
            16.0,
            42.0 + 14.0 * i as f64,
            line,
            11.0,
            Anchor::Start,
            "#4b5563",
        );
    }
}

fn panel(s: &mut Svg, x0: f64, p: &Panel) {
    let (left, right) = (x0 + 48.0, x0 + PANEL_W - 16.0);
    let (top, bottom) = (TOP + 22.0, TOP + PANEL_H - 30.0);
    s.bold(
        (left + right) / 2.0,
        TOP + 6.0,
        &p.title,
        12.0,
        Anchor::Middle,
        "#111827",
    );
    let max = p
        .groups
        .iter()
        .flat_map(|g| g.bars.iter())
        .filter_map(|b| b.value.map(|(m, _, hi)| m.max(hi)))
        .fold(0.0, f64::max);
    let ticks = ticks(max);
    let top_value = ticks.last().copied().unwrap_or(1.0);
    let y = |v: f64| bottom - (v / top_value) * (bottom - top);
    for t in &ticks {
        s.line((left, y(*t)), (right, y(*t)), "#e5e7eb", 1.0, false);
        s.text(
            left - 5.0,
            y(*t) + 4.0,
            &label(*t),
            10.0,
            Anchor::End,
            "#374151",
        );
    }
    s.text(
        x0 + 6.0,
        top - 10.0,
        &p.unit,
        10.0,
        Anchor::Start,
        "#374151",
    );
    s.line((left, bottom), (right, bottom), "#374151", 1.0, false);
    let groups = p.groups.len().max(1) as f64;
    let gw = (right - left) / groups;
    for (gi, g) in p.groups.iter().enumerate() {
        let gx = left + gi as f64 * gw;
        let bars = g.bars.len().max(1) as f64;
        let bw = (gw * 0.8 / bars).min(34.0);
        let start = gx + (gw - bw * bars) / 2.0;
        for (bi, b) in g.bars.iter().enumerate() {
            let bx = start + bi as f64 * bw;
            let cx = bx + bw / 2.0;
            match b.value {
                Some((m, lo, hi)) => {
                    s.rect(bx + 1.0, y(m), bw - 2.0, bottom - y(m), colour(&b.series));
                    if hi > lo {
                        s.line((cx, y(lo)), (cx, y(hi)), "#111827", 1.0, false);
                        s.line((cx - 3.0, y(hi)), (cx + 3.0, y(hi)), "#111827", 1.0, false);
                        s.line((cx - 3.0, y(lo)), (cx + 3.0, y(lo)), "#111827", 1.0, false);
                    }
                    s.text(
                        cx,
                        y(m.max(hi)) - 4.0,
                        &label(m),
                        9.0,
                        Anchor::Middle,
                        "#111827",
                    );
                }
                None => s.text(cx, bottom - 4.0, "n/a", 9.0, Anchor::Middle, "#6b7280"),
            }
        }
        s.text(
            gx + gw / 2.0,
            bottom + 16.0,
            &g.label,
            11.0,
            Anchor::Middle,
            "#111827",
        );
    }
}

fn legend(s: &mut Svg, x: f64, y: f64, series: &[String]) {
    let mut x = x;
    for name in series {
        s.rect(x, y - 10.0, 12.0, 12.0, colour(name));
        s.text(x + 16.0, y, name, 11.0, Anchor::Start, "#111827");
        x += 24.0 + 8.0 * name.len() as f64;
    }
}

/// One line of a line chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Name in the legend.
    pub name: String,
    /// Its colour.
    pub colour: String,
    /// Points (x, y).
    pub points: Vec<(f64, f64)>,
}

/// A vertical marker line at x, with a short label and a colour.
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    /// Where.
    pub x: f64,
    /// Label at its top.
    pub label: String,
    /// Its colour.
    pub colour: String,
}

/// A line chart; the y axis starts at `y_min` (0 for counts, near the data for RSS).
pub fn line_chart(
    title: &str,
    subtitle: &str,
    (x_label, y_label): (&str, &str),
    y_min: f64,
    series: &[Series],
    markers: &[Marker],
) -> String {
    let (w, h) = (900.0, 430.0);
    let (left, right, top, bottom) = (70.0, w - 20.0, 88.0, h - 80.0);
    let mut s = Svg::new(w, h);
    s.bold(16.0, 24.0, title, 16.0, Anchor::Start, "#111827");
    subtitle_lines(&mut s, subtitle);
    let pts = || series.iter().flat_map(|s| s.points.iter());
    let (mut x_lo, mut x_hi) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut y_hi = f64::NEG_INFINITY;
    for (x, y) in pts() {
        x_lo = x_lo.min(*x);
        x_hi = x_hi.max(*x);
        y_hi = y_hi.max(*y);
    }
    if !x_lo.is_finite() || x_hi <= x_lo {
        (x_lo, x_hi) = (0.0, 1.0);
    }
    let y_ticks: Vec<f64> = ticks((y_hi - y_min).max(f64::MIN_POSITIVE))
        .into_iter()
        .map(|t| t + y_min)
        .collect();
    let y_top = y_ticks.last().copied().unwrap_or(y_min + 1.0);
    let px = |x: f64| left + (x - x_lo) / (x_hi - x_lo) * (right - left);
    let py = |y: f64| bottom - (y - y_min) / (y_top - y_min) * (bottom - top);
    for t in &y_ticks {
        s.line((left, py(*t)), (right, py(*t)), "#e5e7eb", 1.0, false);
        s.text(
            left - 6.0,
            py(*t) + 4.0,
            &label(*t),
            10.0,
            Anchor::End,
            "#374151",
        );
    }
    x_ticks(&mut s, (x_lo, x_hi), bottom, &px);
    s.line((left, bottom), (right, bottom), "#374151", 1.0, false);
    s.line((left, top), (left, bottom), "#374151", 1.0, false);
    s.text(
        (left + right) / 2.0,
        bottom + 34.0,
        x_label,
        11.0,
        Anchor::Middle,
        "#111827",
    );
    s.text(
        left - 60.0,
        top - 12.0,
        y_label,
        11.0,
        Anchor::Start,
        "#111827",
    );
    for m in markers {
        s.line((px(m.x), top), (px(m.x), bottom), &m.colour, 1.0, true);
        s.text(px(m.x), top - 3.0, &m.label, 9.0, Anchor::Middle, &m.colour);
    }
    // The first series is drawn last, on top: where lines coincide, it shows.
    for line in series.iter().rev() {
        let p: Vec<(f64, f64)> = line.points.iter().map(|(x, y)| (px(*x), py(*y))).collect();
        s.polyline(&p, &line.colour, 2.0);
    }
    series_legend(&mut s, series, left, h);
    s.finish()
}

/// Round x ticks under the plot: the step of ticks(range), from the first multiple of
/// it; `px` maps x to the picture.
fn x_ticks(s: &mut Svg, (x_lo, x_hi): (f64, f64), bottom: f64, px: &dyn Fn(f64) -> f64) {
    let xt = ticks(x_hi - x_lo);
    let step = xt.get(1).copied().unwrap_or(1.0);
    let first = (x_lo / step).ceil() as i64;
    for k in first.. {
        let x = k as f64 * step;
        if x > x_hi + 1e-9 {
            break;
        }
        let x = if x.abs() < 1e-9 { 0.0 } else { x };
        s.line(
            (px(x), bottom),
            (px(x), bottom + 4.0),
            "#374151",
            1.0,
            false,
        );
        s.text(
            px(x),
            bottom + 16.0,
            &label(x),
            10.0,
            Anchor::Middle,
            "#374151",
        );
    }
}

/// One coloured square and name per series, along the bottom.
fn series_legend(s: &mut Svg, series: &[Series], left: f64, h: f64) {
    let mut lx = left;
    for line in series {
        s.rect(lx, h - 26.0, 12.0, 12.0, &line.colour);
        s.text(
            lx + 16.0,
            h - 16.0,
            &line.name,
            11.0,
            Anchor::Start,
            "#111827",
        );
        lx += 30.0 + 7.0 * line.name.len() as f64;
    }
}

/// Writes `files` (name, SVG) into `dir`; returns the paths written.
pub fn write(dir: &std::path::Path, files: &[(String, String)]) -> std::io::Result<Vec<String>> {
    std::fs::create_dir_all(dir)?;
    let mut out = Vec::new();
    for (name, svg) in files {
        let path = dir.join(name);
        std::fs::write(&path, svg)?;
        out.push(path.display().to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_maximum() {
        assert_eq!(ticks(0.74), vec![0.0, 0.2, 0.4, 0.6, 0.8]);
        assert_eq!(
            ticks(105.0),
            vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0, 120.0]
        );
        assert_eq!(ticks(0.0), vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(ticks(f64::NAN).len(), 6);
        for m in [0.013, 1.39, 7.2, 813.0, 131072.0] {
            let t = ticks(m);
            assert!(
                *t.last().unwrap() >= m && t.len() >= 3 && t.len() <= 8,
                "{m}: {t:?}"
            );
        }
    }

    #[test]
    fn labels_are_short() {
        assert_eq!(label(0.0), "0");
        assert_eq!(label(0.22), "0.22");
        assert_eq!(label(1.5), "1.5");
        assert_eq!(label(105.0), "105");
        assert_eq!(label(100000.0), "100k");
        assert_eq!(label(2_500_000.0), "2.5M");
    }

    #[test]
    fn a_missing_bar_says_so_and_bars_carry_their_values() {
        let p = Panel {
            title: "t".into(),
            unit: "s".into(),
            groups: vec![Group {
                label: "FIB".into(),
                bars: vec![
                    Bar {
                        series: "tern".into(),
                        value: Some((0.74, 0.63, 0.78)),
                    },
                    Bar {
                        series: "gobgp".into(),
                        value: None,
                    },
                ],
            }],
        };
        let svg = bar_chart("T", "sub", &["tern".into(), "gobgp".into()], &[p]);
        assert!(svg.contains(">0.74<") && svg.contains(">n/a<"), "{svg}");
        assert!(svg.contains(colour("tern")));
    }

    #[test]
    fn a_line_chart_draws_each_series_and_marker() {
        let s = vec![Series {
            name: "tern".into(),
            colour: "#000".into(),
            points: vec![(0.0, 10.0), (1.0, 20.0)],
        }];
        let m = vec![Marker {
            x: 0.5,
            label: "kill 3".into(),
            colour: "red".into(),
        }];
        let svg = line_chart("T", "", ("s", "routes"), 0.0, &s, &m);
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert!(svg.contains(">kill 3<") && svg.contains("stroke-dasharray"));
    }
}
