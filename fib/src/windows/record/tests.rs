//! The record file: its text, its errors, and ownership.

use super::*;

fn key(prefix: &str, gw: &str, interface: u32) -> RowKey {
    RowKey {
        prefix: prefix.parse().unwrap_or_else(|e| panic!("{prefix}: {e}")),
        next_hop: gw.parse().unwrap_or_else(|e| panic!("{gw}: {e}")),
        interface,
    }
}

fn sample() -> Record {
    let mut r = Record::default();
    for (k, luid, onlink) in [
        (
            key("198.18.1.0/26", "198.51.100.3", 4),
            1_688_849_860_263_936,
            false,
        ),
        (
            key("198.18.1.0/26", "198.51.100.2", 4),
            1_688_849_860_263_936,
            false,
        ),
        (
            key("198.18.0.0/16", "198.51.100.2", 4),
            1_688_849_860_263_936,
            false,
        ),
        (key("2001:db8:1::/64", "::", 7), 1_689_399_632_478_208, true),
    ] {
        r.insert(RecordEntry {
            key: k,
            luid,
            onlink,
        });
    }
    r
}

#[test]
fn the_text_lists_one_row_per_line_after_a_header() {
    let text = sample().to_text();
    assert_eq!(
        text,
        format!(
            "{HEADER}\n\
             198.18.0.0/16 198.51.100.2 4 1688849860263936\n\
             198.18.1.0/26 198.51.100.2 4 1688849860263936\n\
             198.18.1.0/26 198.51.100.3 4 1688849860263936\n\
             2001:db8:1::/64 :: 7 1689399632478208 onlink\n"
        )
    );
    assert_eq!(Record::parse(&text), Ok(sample()));
}

#[test]
fn a_record_survives_save_and_load_and_a_missing_one_is_empty() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("routes.record");
    assert_eq!(Record::load(&path), Ok(Record::default()));
    sample().save(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(Record::load(&path), Ok(sample()));
    assert!(
        !path.with_extension("tmp").exists(),
        "the temporary file is renamed"
    );
    let nowhere = dir.path().join("missing-dir").join("routes.record");
    assert!(sample()
        .save(&nowhere)
        .is_err_and(|e| e.contains("missing-dir")));
}

#[test]
fn bad_lines_are_refused_with_their_number_and_field() {
    let cases = [
        (
            "198.18.1.0/99 198.51.100.2 4 1",
            "line 2: prefix \"198.18.1.0/99\"",
        ),
        ("198.18.1.0/26 x 4 1", "line 2: next hop \"x\""),
        ("198.18.1.0/26 198.51.100.2 -4 1", "line 2: ifindex \"-4\""),
        ("198.18.1.0/26 198.51.100.2 4 luid", "line 2: luid \"luid\""),
        (
            "198.18.1.0/26 2001:db8::1 4 1",
            "line 2: next hop 2001:db8::1 is not of the family",
        ),
        ("198.18.1.0/26 198.51.100.2 4", "line 2: expected"),
        (
            "198.18.1.0/26 198.51.100.2 4 1 blackhole",
            "line 2: expected",
        ),
    ];
    for (line, why) in cases {
        let text = format!("# comment\n{line}\n");
        let e = Record::parse(&text).expect_err(line);
        assert!(e.starts_with(why), "{line}: {e}");
    }
    assert_eq!(
        Record::parse("\n# only comments\n   \n"),
        Ok(Record::default())
    );
}

#[test]
fn the_rows_of_a_prefix_are_found_and_no_others() {
    let r = sample();
    let of = |p: &str| -> Vec<RowKey> {
        r.for_prefix(p.parse().unwrap_or_else(|e| panic!("{e}")))
            .map(|e| e.key)
            .collect()
    };
    assert_eq!(
        of("198.18.1.0/26"),
        [
            key("198.18.1.0/26", "198.51.100.2", 4),
            key("198.18.1.0/26", "198.51.100.3", 4)
        ]
    );
    assert_eq!(
        of("198.18.0.0/16"),
        [key("198.18.0.0/16", "198.51.100.2", 4)]
    );
    assert_eq!(of("2001:db8:1::/64"), [key("2001:db8:1::/64", "::", 7)]);
    assert!(of("198.18.1.0/24").is_empty());
}

#[test]
fn ownership_needs_the_record_the_luid_and_the_protocol() {
    let r = sample();
    let row = InstalledRow {
        key: key("198.18.1.0/26", "198.51.100.2", 4),
        luid: 1_688_849_860_263_936,
        metric: 5,
        protocol: PROTOCOL_NETMGMT,
    };
    assert!(r.owns(&row));
    assert!(!r.owns(&InstalledRow { luid: 1, ..row }));
    assert!(!r.owns(&InstalledRow { protocol: 2, ..row }));
    let other = key("198.18.1.0/26", "198.51.100.9", 4);
    assert!(!r.owns(&InstalledRow { key: other, ..row }));
}
