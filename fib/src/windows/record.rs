//! The persisted record of the forward rows tern created on Windows.
//!
//! Windows cannot say which rows are tern's: the route Protocol field of a row tern
//! creates is NETMGMT, the same as an administrator's `route add` or a VPN client's.
//! So tern writes down every row it creates and never deletes or replaces a row it has
//! not written down. The record is a small line file (one row per line) so that an
//! operator can read it; it is rewritten atomically after each batch. It is pure data
//! and file handling, compiled on every platform.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use ipnet::IpNet;

use super::convert::{InstalledRow, RowKey, PROTOCOL_NETMGMT};

/// First line of a record file; names the format so a later change can be detected.
const HEADER: &str = "# tern windows route record v1: prefix next-hop ifindex luid [onlink]";

/// One row tern created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordEntry {
    /// The row's identity.
    pub key: RowKey,
    /// The interface LUID the row was created on. Interface indexes can be reused by
    /// another adapter after a reboot; LUIDs are not, so ownership checks both.
    pub luid: u64,
    /// The next hop was asked for as on-link. Windows rows carry no such flag, so it
    /// lives here to give back the route exactly as tern asked for it.
    pub onlink: bool,
}

/// tern's rows, ordered by prefix so that the rows of one prefix are found by a range.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    rows: BTreeMap<RowKey, RecordEntry>,
}

impl Record {
    /// Adds or overwrites the entry for its key.
    pub fn insert(&mut self, entry: RecordEntry) {
        self.rows.insert(entry.key, entry);
    }

    /// Removes the entry for `key`, if any.
    pub fn remove(&mut self, key: &RowKey) -> Option<RecordEntry> {
        self.rows.remove(key)
    }

    /// The entry for `key`.
    pub fn get(&self, key: &RowKey) -> Option<&RecordEntry> {
        self.rows.get(key)
    }

    /// Every entry, ordered by prefix, next hop and interface.
    pub fn entries(&self) -> impl Iterator<Item = &RecordEntry> {
        self.rows.values()
    }

    /// The entries for one prefix.
    pub fn for_prefix(&self, prefix: IpNet) -> impl Iterator<Item = &RecordEntry> {
        self.rows
            .range(RowKey::first_of(prefix)..)
            .map(|(_, e)| e)
            .take_while(move |e| e.key.prefix == prefix)
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// No rows recorded.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Whether an installed row is tern's: recorded, on the same interface LUID, and
    /// still of the protocol tern creates rows with (anything else means the row was
    /// replaced by someone else since).
    pub fn owns(&self, row: &InstalledRow) -> bool {
        row.protocol == PROTOCOL_NETMGMT
            && self.rows.get(&row.key).is_some_and(|e| e.luid == row.luid)
    }

    /// Parses a record file's text; errors name the line.
    pub fn parse(text: &str) -> Result<Record, String> {
        let mut record = Record::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let entry = parse_entry(line).map_err(|e| format!("line {}: {e}", n + 1))?;
            record.insert(entry);
        }
        Ok(record)
    }

    /// The record file's text.
    pub fn to_text(&self) -> String {
        let mut text = format!("{HEADER}\n");
        for e in self.rows.values() {
            let k = &e.key;
            text.push_str(&format!(
                "{} {} {} {}{}\n",
                k.prefix,
                k.next_hop,
                k.interface,
                e.luid,
                if e.onlink { " onlink" } else { "" }
            ));
        }
        text
    }

    /// Reads the record at `path`. A missing file is an empty record (first start).
    pub fn load(path: &Path) -> Result<Record, String> {
        match std::fs::read_to_string(path) {
            Ok(text) => Record::parse(&text).map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Record::default()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// Writes the record to `path` through a temporary file and a rename, so a crash
    /// leaves the old record or the new one, never half of one.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, self.to_text()).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
    }
}

fn parse_entry(line: &str) -> Result<RecordEntry, String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (prefix, next_hop, interface, luid, onlink) = match fields.as_slice() {
        [p, n, i, l] => (*p, *n, *i, *l, false),
        [p, n, i, l, "onlink"] => (*p, *n, *i, *l, true),
        _ => {
            return Err(format!(
                "expected `prefix next-hop ifindex luid [onlink]`, got {line:?}"
            ))
        }
    };
    let prefix: IpNet = prefix
        .parse()
        .map_err(|e| format!("prefix {prefix:?}: {e}"))?;
    let next_hop: IpAddr = next_hop
        .parse()
        .map_err(|e| format!("next hop {next_hop:?}: {e}"))?;
    if next_hop.is_ipv4() != prefix.addr().is_ipv4() {
        return Err(format!(
            "next hop {next_hop} is not of the family of {prefix}"
        ));
    }
    Ok(RecordEntry {
        key: RowKey {
            prefix,
            next_hop,
            interface: interface
                .parse()
                .map_err(|e| format!("ifindex {interface:?}: {e}"))?,
        },
        luid: luid.parse().map_err(|e| format!("luid {luid:?}: {e}"))?,
        onlink,
    })
}

impl RowKey {
    /// The smallest key with this prefix: where a range over one prefix starts.
    pub(crate) fn first_of(prefix: IpNet) -> RowKey {
        RowKey {
            prefix,
            next_hop: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            interface: 0,
        }
    }
}

#[cfg(test)]
mod tests;
