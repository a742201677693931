//! BIRD 1.6's CLI protocol as pure functions: a command line is parsed into a
//! [`Command`], and [`reply`] renders the answer from a [`BirdView`] and the time.
//!
//! Each reply line starts with a four-digit code and `-` (more lines follow) or ` `
//! (the last line); a line of the same code as the one before it starts with a single
//! space instead (BIRD's `cli_printf`). The codes are BIRD's `doc/reply_codes`. The
//! layouts are BIRD 1.6.8's (`nest/proto.c`, `nest/cmds.c`, `proto/bgp/bgp.c`), which
//! calico-node (`node/pkg/health/bird/bird.go`) and calicoctl
//! (`calicoctl/commands/node/status.go`) split into whitespace-separated columns.
//! Times are UTC (calico-node's image runs in UTC; BIRD prints local time).

use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use tern_config::intent::PeerKind;

use super::{BirdPeer, BirdView, Family};

/// The BIRD version tern answers as: the one Calico shipped before BIRD 3.
pub const BIRD_VERSION: &str = "1.6.8";
/// BIRD's receive buffer: a longer command gets `9000 Command too long`.
pub const MAX_LINE: usize = 4096;
/// How long tern's restart waits at most for End-of-RIB (the selection deferral
/// timer), shown as BIRD's graceful-restart wait timer.
const GR_WAIT: Duration = Duration::from_secs(30);
/// BIRD 1.6 prints `%T` for a state change younger than this, `%F` for older ones.
const RECENT: Duration = Duration::from_secs(20 * 3600);
/// Commands a read-only socket refuses (BIRD's `restrict`ed CLI refuses the same).
const DENIED: &[&str] = &[
    "configure",
    "disable",
    "enable",
    "restart",
    "reload",
    "down",
    "debug",
    "dump",
    "eval",
    "echo",
    "mrtdump",
    "graceful",
];

/// A parsed command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// An empty line: no answer, as BIRD.
    Empty,
    /// `exit` / `quit`: close the connection.
    Exit,
    /// `show status`.
    ShowStatus,
    /// `show protocols [all] [<name> | "<pattern>"]`.
    ShowProtocols {
        /// `all`: the details of each protocol.
        all: bool,
        /// Which protocols: none is all of them.
        only: Option<Select>,
    },
    /// `restrict`: the socket is read-only already.
    Restrict,
    /// A command that changes something.
    Denied,
    /// Not a command tern answers; holds the unexpected word.
    Syntax(String),
}

/// Which protocols `show protocols` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Select {
    /// One protocol by name (a BIRD symbol).
    Name(String),
    /// A quoted shell pattern (`*`, `?`).
    Pattern(String),
}

impl Command {
    /// Whether the answer needs the daemon's state.
    pub fn needs_view(&self) -> bool {
        matches!(self, Command::ShowStatus | Command::ShowProtocols { .. })
    }
}

/// The greeting BIRD sends to each new client.
pub fn greeting() -> String {
    format!("0001 BIRD {BIRD_VERSION} ready.\n")
}

/// The answer to a command line longer than [`MAX_LINE`].
pub fn too_long() -> String {
    "9000 Command too long\n".to_string()
}

/// Parses one command line (without its newline). Keywords are case-insensitive;
/// protocol names are not.
pub fn parse(line: &str) -> Command {
    let words: Vec<&str> = line.split_whitespace().collect();
    let lower: Vec<String> = words.iter().map(|w| w.to_ascii_lowercase()).collect();
    let kw: Vec<&str> = lower.iter().map(String::as_str).collect();
    let unexpected = |i: usize| {
        Command::Syntax(
            words
                .get(i)
                .map_or("end of line".to_string(), |w| w.to_string()),
        )
    };
    match kw.as_slice() {
        [] => Command::Empty,
        ["exit"] | ["quit"] => Command::Exit,
        ["restrict"] => Command::Restrict,
        [first, ..] if DENIED.contains(first) => Command::Denied,
        ["show", "status"] => Command::ShowStatus,
        ["show", "protocols", rest @ ..] => {
            let all = rest.first() == Some(&"all");
            let at = 2 + usize::from(all);
            match words.get(at..).unwrap_or_default() {
                [] => Command::ShowProtocols { all, only: None },
                [one] => match select(one) {
                    Some(only) => Command::ShowProtocols {
                        all,
                        only: Some(only),
                    },
                    None => unexpected(at),
                },
                _ => unexpected(at + 1),
            }
        }
        ["show", ..] => unexpected(1),
        _ => unexpected(0),
    }
}

/// A protocol name (BIRD symbol syntax) or a quoted pattern.
fn select(word: &str) -> Option<Select> {
    if let Some(p) = word.strip_prefix('"').and_then(|w| w.strip_suffix('"')) {
        return Some(Select::Pattern(p.to_string()));
    }
    let mut chars = word.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    (first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then(|| Select::Name(word.to_string()))
}

/// Reply lines with BIRD's continuation rule.
struct Out {
    text: String,
    last: Option<u16>,
}

impl Out {
    fn new() -> Out {
        Out {
            text: String::new(),
            last: None,
        }
    }

    /// A line with more to follow.
    fn more(&mut self, code: u16, line: &str) {
        if self.last == Some(code) {
            self.text.push(' ');
        } else {
            let _ = write!(self.text, "{code:04}-");
        }
        self.push(code, line);
    }

    /// The last line of the reply.
    fn done(mut self, code: u16, line: &str) -> String {
        let _ = write!(self.text, "{code:04} ");
        self.push(code, line);
        self.text
    }

    fn push(&mut self, code: u16, line: &str) {
        // Peer-supplied text (a last error) must not break the line protocol.
        self.text
            .extend(line.chars().map(|c| if c.is_control() { ' ' } else { c }));
        self.text.push('\n');
        self.last = Some(code);
    }
}

/// The answer to `command` (one that [`Command::needs_view`] or not), for the
/// `family` socket at `now`. `view` is the daemon's state, or why it is unreadable.
pub fn reply(
    command: &Command,
    view: Result<&BirdView, &str>,
    family: Family,
    now: SystemTime,
) -> String {
    match command {
        Command::Empty | Command::Exit => String::new(),
        Command::Restrict => Out::new().done(16, "Access restricted"),
        Command::Denied => Out::new().done(8007, "Access denied"),
        Command::Syntax(word) => Out::new().done(9001, &format!("syntax error, unexpected {word}")),
        Command::ShowStatus => match view {
            Ok(v) => show_status(v, family, now),
            Err(e) => Out::new().done(8002, e),
        },
        Command::ShowProtocols { all, only } => match view {
            Ok(v) => show_protocols(v, family, now, *all, only.as_ref()),
            Err(e) => Out::new().done(8002, e),
        },
    }
}

/// `show status` (BIRD 1.6's `cmd_show_status` and `graceful_restart_show_status`).
fn show_status(v: &BirdView, family: Family, now: SystemTime) -> String {
    let mut out = Out::new();
    out.more(1000, &format!("BIRD {BIRD_VERSION}"));
    let id = v.router_id.map_or("0.0.0.0".to_string(), |r| r.to_string());
    out.more(1011, &format!("Router ID is {id}"));
    out.more(1011, &format!("Current server time is {}", date_time(now)));
    out.more(1011, &format!("Last reboot on {}", date_time(v.started)));
    out.more(
        1011,
        &format!("Last reconfiguration on {}", date_time(v.started)),
    );
    if v.in_grace {
        let waiting = v.peers.iter().filter(|p| family.holds(p.address)).count();
        let elapsed = now.duration_since(v.started).unwrap_or_default();
        let left = GR_WAIT.saturating_sub(elapsed).as_secs();
        out.more(24, "Graceful restart recovery in progress");
        out.more(24, &format!("  Waiting for {waiting} protocols to recover"));
        out.more(24, &format!("  Wait timer is {left}/{}", GR_WAIT.as_secs()));
    }
    if v.not_configured.is_some() {
        out.done(13, "Reconfiguration in progress")
    } else {
        out.done(13, "Daemon is up and running")
    }
}

/// `show protocols [all] [name]` (BIRD 1.6's `proto_cmd_show`): the kernel, device
/// and direct protocols (tern's FIB task and interface watch, up since the start; a
/// real BIRD always has them, and Calico's parsers skip them), then one BGP protocol
/// per session of the socket's family.
fn show_protocols(
    v: &BirdView,
    family: Family,
    now: SystemTime,
    all: bool,
    only: Option<&Select>,
) -> String {
    if let Some(why) = &v.not_configured {
        // No sessions are known yet: an empty table would read as "no peers, ready".
        return Out::new().done(8002, &format!("tern has no valid configuration yet: {why}"));
    }
    let mut rows: Vec<Row> = ["kernel1 Kernel", "device1 Device", "direct1 Direct"]
        .iter()
        .filter_map(|s| s.split_once(' '))
        .map(|(name, proto)| Row {
            name: name.to_string(),
            proto,
            state: "up",
            since: v.started,
            info: String::new(),
            peer: None,
        })
        .collect();
    rows.extend(
        v.peers
            .iter()
            .filter(|p| family.holds(p.address))
            .map(bgp_row),
    );
    let wanted: Vec<&Row> = rows
        .iter()
        .filter(|r| match only {
            None => true,
            Some(Select::Name(n)) => r.name == *n,
            Some(Select::Pattern(p)) => pattern_match(p, &r.name),
        })
        .collect();
    if wanted.is_empty() {
        return match only {
            Some(Select::Name(n)) => Out::new().done(9002, &format!("{n} is not a protocol")),
            _ => Out::new().done(8003, "No protocols match"),
        };
    }
    let mut out = Out::new();
    out.more(2002, "name     proto    table    state  since       info");
    for r in wanted {
        out.more(
            1002,
            &format!(
                "{:<8} {:<8} {:<8} {:<5}  {:<10}  {}",
                r.name,
                r.proto,
                "master",
                r.state,
                since(r.since, now),
                r.info
            ),
        );
        if all {
            details(&mut out, r);
        }
    }
    out.done(0, "")
}

/// One protocol of the table.
struct Row<'a> {
    name: String,
    proto: &'static str,
    state: &'static str,
    since: SystemTime,
    info: String,
    peer: Option<&'a BirdPeer>,
}

fn bgp_row(p: &BirdPeer) -> Row<'_> {
    let (state, info) = if p.up {
        ("up", format!("{:<14}", "Established"))
    } else {
        let error = p
            .last_error
            .as_deref()
            .map(|e| format!("Error: {e}"))
            .unwrap_or_default();
        ("start", format!("{:<14}{error}", bgp_state(p)))
    };
    Row {
        name: protocol_name(p),
        proto: "BGP",
        state,
        since: p.since,
        info,
        peer: Some(p),
    }
}

/// BIRD's BGP state word (`bgp_state_dsc`): never empty, since calico-node's parser
/// needs the sixth column; an idle passive session is `Passive`.
fn bgp_state(p: &BirdPeer) -> &str {
    match p.state.as_str() {
        "" | "Established" => "Idle",
        "Idle" if p.passive => "Passive",
        s if s.contains(char::is_whitespace) => "Idle",
        s => s,
    }
}

/// The protocol name Calico's confd gives the session in `bird.cfg` / `bird6.cfg`:
/// `Mesh_`, `Global_`, `Node_` or `Local_Workload_`, then the address with its dots (or colons) as
/// underscores, and `_port_<port>` for a BGPPeer with a port of its own (179 is
/// taken as unset). Route-reflector sessions come from BGPPeers with a node selector
/// in Calico's set-ups, so they are `Node_`.
pub fn protocol_name(p: &BirdPeer) -> String {
    let prefix = match p.kind {
        PeerKind::Mesh => "Mesh",
        PeerKind::Global => "Global",
        PeerKind::NodeSpecific | PeerKind::RouteReflector | PeerKind::RouteReflectorClient => {
            "Node"
        }
        PeerKind::LocalWorkload => "Local_Workload",
    };
    let id = match p.address {
        IpAddr::V4(a) => a.to_string().replace('.', "_"),
        IpAddr::V6(a) => a.to_string().replace(':', "_"),
    };
    if p.kind != PeerKind::Mesh && p.port != 179 {
        format!("{prefix}_{id}_port_{}", p.port)
    } else {
        format!("{prefix}_{id}")
    }
}

/// `show protocols all`: BIRD 1.6's `proto_show_basic_info` and
/// `bgp_show_proto_info`, with what tern knows of the session.
fn details(out: &mut Out, r: &Row) {
    let Some(p) = r.peer else {
        out.more(1006, "  Preference:     10");
        out.more(1006, "  Input filter:   ACCEPT");
        out.more(1006, "  Output filter:  REJECT");
        out.more(1006, "");
        return;
    };
    out.more(1006, "  Description:    Connection to BGP peer");
    out.more(1006, "  Preference:     100");
    out.more(1006, "  Input filter:   calico_import_from_bgp_peers");
    out.more(1006, "  Output filter:  calico_export_to_bgp_peers");
    out.more(
        1006,
        &format!(
            "  Routes:         {} imported, {} exported, {} preferred",
            p.received, p.advertised, p.received
        ),
    );
    let state = if p.up { "Established" } else { bgp_state(p) };
    out.more(1006, &format!("  BGP state:          {state}"));
    out.more(1006, &format!("    Neighbor address: {}", p.address));
    out.more(1006, &format!("    Neighbor AS:      {}", p.remote_as));
    if p.up {
        out.more(1006, &format!("    Neighbor caps:   {}", caps(p)));
        let mut session = String::from(if p.remote_as == p.local_as {
            "internal"
        } else {
            "external"
        });
        session.push_str(" multihop");
        if p.rr_client {
            session.push_str(" route-reflector");
        }
        session.push_str(" AS4");
        out.more(1006, &format!("    Session:          {session}"));
        if let Some(s) = p.source {
            out.more(1006, &format!("    Source address:   {s}"));
        }
    }
    // As BIRD, an Established session's earlier error is not shown any more.
    if let Some(e) = p.last_error.as_ref().filter(|_| !p.up) {
        out.more(1006, &format!("    Last error:       {e}"));
    }
    out.more(1006, "");
}

/// The peer's capabilities in BIRD's words, each after a space.
fn caps(p: &BirdPeer) -> String {
    let mut s = String::new();
    for c in &p.capabilities {
        let word = match c.as_str() {
            "route-refresh" => "refresh",
            "enhanced-route-refresh" => "enhanced-refresh",
            "graceful-restart" => "restart-aware",
            "4-octet-as" => "AS4",
            w if w.starts_with("add-path-send") => "add-path-tx",
            w if w.starts_with("add-path-receive") => "add-path-rx",
            _ => continue,
        };
        s.push(' ');
        s.push_str(word);
    }
    s
}

/// BIRD 1.6's protocol time: `%T` when recent, `%F` when older (UTC).
fn since(t: SystemTime, now: SystemTime) -> String {
    let stamp = humantime::format_rfc3339_seconds(t).to_string();
    let recent = now.duration_since(t).map_or(true, |d| d < RECENT);
    let part = if recent {
        stamp.get(11..19)
    } else {
        stamp.get(0..10)
    };
    part.unwrap_or("?").to_string()
}

/// BIRD 1.6's base time format, `%F %T` (UTC).
fn date_time(t: SystemTime) -> String {
    let stamp = humantime::format_rfc3339_seconds(t).to_string();
    match (stamp.get(0..10), stamp.get(11..19)) {
        (Some(d), Some(t)) => format!("{d} {t}"),
        _ => stamp,
    }
}

/// BIRD's `patt_match`: `*` any run, `?` any one character.
fn pattern_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative matching with one backtrack point for the last `*`.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        match p.get(i) {
            Some('*') => {
                star = Some((i, j));
                i += 1;
            }
            Some(c) if *c == '?' || Some(c) == n.get(j) => {
                i += 1;
                j += 1;
            }
            _ => match star {
                Some((si, sj)) => {
                    i = si + 1;
                    j = sj + 1;
                    star = Some((si, sj + 1));
                }
                None => return false,
            },
        }
    }
    p.get(i..).unwrap_or_default().iter().all(|c| *c == '*')
}
