//! The soak's picture: every tern's RSS over the run (from `soak.csv`), one line per
//! node, with a marker at each kill -9 and link flap (from `soak-events.csv`).

use std::collections::BTreeMap;

use super::{line_chart, series_colour, Marker, Series};

/// The RSS chart of a soak; `events` may be empty (an older soak without the file).
pub fn chart(samples_csv: &str, events_csv: &str) -> Result<String, String> {
    let mut by_node: BTreeMap<usize, Vec<(f64, f64)>> = BTreeMap::new();
    for (i, line) in samples_csv.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let (Some(t), Some(node), Some(rss)) = (f.first(), f.get(1), f.get(3)) else {
            return Err(format!(
                "soak.csv line {}: expected t_s,node,pid,rss_kb,cpu_s",
                i + 1
            ));
        };
        let parse = |s: &str| {
            s.trim()
                .parse::<f64>()
                .map_err(|e| format!("soak.csv line {}: {e}", i + 1))
        };
        let node = node
            .trim()
            .parse::<usize>()
            .map_err(|e| format!("soak.csv line {}: {e}", i + 1))?;
        let rss_kb = parse(rss)?;
        if rss_kb > 0.0 {
            // MB as the soak report prints them (10^6 bytes).
            by_node
                .entry(node)
                .or_default()
                .push((parse(t)?, rss_kb * 1024.0 / 1e6));
        }
    }
    if by_node.is_empty() {
        return Err("soak.csv holds no sample".into());
    }
    let mut markers = Vec::new();
    let (mut kills, mut flaps) = (0, 0);
    for (i, line) in events_csv.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let (Some(t), Some(node), Some(what)) = (f.first(), f.get(1), f.get(2)) else {
            return Err(format!(
                "soak-events.csv line {}: expected t_s,node,event",
                i + 1
            ));
        };
        let t = t
            .trim()
            .parse::<f64>()
            .map_err(|e| format!("soak-events.csv line {}: {e}", i + 1))?;
        let (label, colour) = match what.trim() {
            "kill" => {
                kills += 1;
                (format!("✕{}", node.trim()), "#dc2626")
            }
            _ => {
                flaps += 1;
                (format!("↯{}", node.trim()), "#d97706")
            }
        };
        markers.push(Marker {
            x: t,
            label,
            colour: colour.into(),
        });
    }
    let y_min = by_node
        .values()
        .flatten()
        .map(|(_, y)| *y)
        .fold(f64::INFINITY, f64::min);
    let y_min = (y_min * 0.9).floor().max(0.0);
    let series: Vec<Series> = by_node
        .into_iter()
        .enumerate()
        .map(|(i, (node, points))| Series {
            name: format!("node-{node}"),
            colour: series_colour(i).into(),
            points,
        })
        .collect();
    Ok(line_chart(
        "Soak: each tern's resident memory under churn and flaps",
        &format!(
            "{} nodes; ✕N = kill -9 and restart of node N ({kills}), ↯N = link down past the hold time ({flaps}); the y axis starts at {y_min:.0} MB",
            series.len()
        ),
        ("seconds since the start", "RSS, MB"),
        y_min,
        &series,
        &markers,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_node_and_a_marker_per_event() {
        let samples = "t_s,node,pid,rss_kb,cpu_s\n0.0,1,10,12000,0.1\n5.0,1,10,12100,0.2\n0.0,2,11,11000,0.1\n5.0,2,12,9000,0.0\n";
        let events = "t_s,node,event\n2.5,2,kill\n4.0,1,flap\n";
        let svg = chart(samples, events).unwrap();
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains(">✕2<") && svg.contains(">↯1<"), "{svg}");
        assert!(svg.contains("(1)"));
    }

    #[test]
    fn bad_files_are_named() {
        assert!(chart("t_s,node\n", "").unwrap_err().contains("no sample"));
        let e = chart("h\n1.0,x,1,2,3\n", "").unwrap_err();
        assert!(e.contains("soak.csv line 2"), "{e}");
        let e = chart("h\n1.0,1,1,2,3\n", "h\nnope\n").unwrap_err();
        assert!(e.contains("soak-events.csv line 2"), "{e}");
    }
}
