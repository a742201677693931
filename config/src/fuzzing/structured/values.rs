//! The values a structured fuzz input draws its fields from: per kind of field, a table
//! whose first entry is typical and valid (what an exhausted input gets, so short
//! inputs still form working resources), followed by boundary and hostile values; and
//! composite values (addresses, prefixes, selectors, names) built from fuzzed numbers
//! where a table could not cover the range.

use arbitrary::{Arbitrary, Unstructured};
use serde_json::Value;

/// A table entry: a JSON scalar.
#[derive(Debug, Clone, Copy)]
pub enum Lit {
    /// A string.
    S(&'static str),
    /// A signed number.
    I(i64),
    /// An unsigned number (beyond `i64`).
    U(u64),
    /// A fraction.
    F(f64),
    /// A boolean.
    B(bool),
    /// `null`.
    Null,
}

use Lit::*;

impl Lit {
    fn value(self) -> Value {
        match self {
            S(s) => s.into(),
            I(i) => i.into(),
            U(u) => u.into(),
            F(f) => f.into(),
            B(b) => b.into(),
            Null => Value::Null,
        }
    }
}

/// Go durations (keepaliveTime, holdTime, restart times): issue 23 is the third huge one.
#[rustfmt::skip] // a table reads better dense than one entry a line
pub const DURATIONS: &[Lit] = &[
    S("10s"), S("0s"), S("-1s"), S("1.5h"), S("120s"), S("90s"), S("3s"), S("1ms"),
    S("10000000000000000000s10000000000000000000s"), S("9223372036854775807ns"),
    S("9223372036854775808ns"), S("2562047h47m16.854775807s"),
    S("2562047h47m16.854775808s"), S("2562047h47m16.854775807s1ns"),
    S("18446744073709551616s"), S("1h2m3.5s"), S("0.1ns"), S(".5s"), S("5.s"), S("1e3s"),
    S("1µs"), S("1us"), S("1h-1s"), S("-0"), S("0"), S("10"), S("s"), S(""), S(" 10s"),
    S("10S"), S("+5s"), S("9999999999999999999999h"), S("1.9999999999999999999s"), I(10),
    F(1.5),
];

/// AS numbers: 2-byte, 4-byte, reserved, asdot, out of range, text.
#[rustfmt::skip] // a table reads better dense than one entry a line
pub const ASNS: &[Lit] = &[
    I(64512), I(0), I(1), I(23456), I(64513), I(65535), I(65536), I(4294967295),
    I(4294967296), U(u64::MAX), I(-1), F(64512.5), S("64512"), S("64512.1"), S("1.10"),
    S("0.0"), S("65535.65535"), S("65536.1"), S("1.65536"), S("4294967295"),
    S("4294967296"), S("-1"), S(""), S("AS64512"), S(" 64512"), S("1."), S(".1"), S("0x10"),
];

/// Ports.
#[rustfmt::skip] // a table reads better dense than one entry a line
pub const PORTS: &[Lit] = &[
    I(179), I(0), I(1), I(1790), I(65535), I(65536), I(-1), S("179"),
];

/// Counts, block sizes, prefix lengths, TTLs, allowas-in, allocation indices.
#[rustfmt::skip] // a table reads better dense than one entry a line
pub const COUNTS: &[Lit] = &[
    I(26), I(0), I(1), I(2), I(24), I(32), I(33), I(64), I(122), I(128), I(129), I(255),
    I(256), I(-1), I(4294967295), I(4294967296), U(u64::MAX), F(0.5), S("26"),
];

/// Booleans, and what Calico writes for them in the CRDs.
#[rustfmt::skip] // a table reads better dense than one entry a line
pub const BOOLS: &[Lit] = &[
    B(true), B(false), S("true"), S("false"), S("True"), S("yes"), S(""), I(1), Null,
];

/// Keywords of the enumerated fields, all in one table: a value valid for one field
/// is a plausible mistake in another.
#[rustfmt::skip] // a table reads better dense than one entry a line
pub const KEYWORDS: &[Lit] = &[
    S("Accept"), S("Reject"), S("Equal"), S("NotEqual"), S("In"), S("NotIn"),
    S("RemotePeers"), S("eBGP"), S("iBGP"), S("Auto"), S("Self"), S("Keep"), S("Manual"),
    S("None"), S("NodeIP"), S("UseNodeIP"), S("Never"), S("Always"), S("CrossSubnet"),
    S("IPv4"), S("IPv6"), S("confirmed"), S("pending"), S("pendingDeletion"),
    S("host:node-a"), S("host:node-b"), S("host:"), S("node-a"), S("eth*"), S("cali*"),
    S("*"), S("["), S("Info"), S("accept"), S(""), S("ipv4"),
];

/// Communities: standard, large, well-known names, out of range, malformed.
#[rustfmt::skip] // a table reads better dense than one entry a line
pub const COMMUNITIES: &[Lit] = &[
    S("64512:100"), S("0:0"), S("65535:65535"), S("65536:1"), S("1:65536"),
    S("4294967295:1:1"), S("4294967296:1:1"), S("1:2:3:4"), S(":"), S("1:"), S("no-export"),
    S("64512:-1"), S("a:b"), S(""), S("my-community"), S("64512:100 "), S("64512.1:100"),
];

/// Names: typical, the known-good ones (so edits collide with them), invalid.
#[rustfmt::skip] // a table reads better dense than one entry a line
pub const NAMES: &[Lit] = &[
    S("node-a"), S("default"), S("node-b"), S("node-c"), S("node.node-a"), S("node.node-x"),
    S("node-x"), S("tor"), S("rr"), S("pods-v4"), S(""), S("Node-A"), S("-a"), S("a-"),
    S("a/b"), S("ünïcødé"), S("node-a\n"), S("."), S("route-reflector"), S("true"), S("0"),
];

/// Prefixes and node addresses (`addr/len`): boundaries of both families, host bits,
/// IPv4-mapped, malformed.
#[rustfmt::skip] // a table reads better dense than one entry a line
pub const CIDRS: &[Lit] = &[
    S("198.18.0.0/16"), S("198.18.4.0/26"), S("198.51.100.13/24"), S("198.51.100.10/24"),
    S("2001:db8:100::13/64"), S("0.0.0.0/0"), S("198.51.100.1/32"), S("198.51.100.1/33"),
    S("2001:db8:4000::/48"), S("2001:db8:4000::/122"), S("::/0"), S("::1/128"), S("::/129"),
    S("::ffff:198.18.0.0/112"), S("198.18.4.1/26"), S("198.18.0.0"), S("198.18.0.0/"),
    S("/24"), S("198.18.0.0/-1"), S("198.18.0.0/024"), S("10.0.0.0/8"), S("127.0.0.1/8"),
    S("224.0.0.1/4"), S("255.255.255.255/32"), S("fe80::1/64"), S(""),
];

/// Addresses, with and without ports (peerIP, reachableBy, cluster ids).
#[rustfmt::skip] // a table reads better dense than one entry a line
pub const ADDRS: &[Lit] = &[
    S("198.51.100.1"), S("198.51.100.1:1790"), S("198.51.100.1:0"), S("198.51.100.1:65536"),
    S("[2001:db8::1]:1790"), S("2001:db8::1"), S("::ffff:198.51.100.1"), S("0.0.0.0"),
    S("255.255.255.255"), S("198.51.100.10"), S("198.51.100.11"), S("::"), S("fe80::1"),
    S("fe80::1%eth0"), S("[::1]"), S("1.2.3"), S("198.51.100.1:"), S(""), S("localhost"),
    S("224.0.0.1"), S("2001:db8:100::11"),
];

/// Label selectors.
#[rustfmt::skip] // a table reads better dense than one entry a line
pub const SELECTORS: &[Lit] = &[
    S("all()"), S(""), S("has(route-reflector)"), S("rack == 'a'"), S("rack != 'a'"),
    S("rack in {'a', 'b'}"), S("rack not in {'a'}"), S("!has(x)"),
    S("a == 'b' && c == 'd' || e == 'f'"), S("((("), S("rack == \"a\""), S("global()"),
    S("has("), S("'unterminated"), S("rack == 'a' &&"), S("x in {}"), S("!!!!all()"),
    S("rack contains 'a'"), S("rack starts with 'a'"), S("has(\u{0})"),
];

/// Keys of fields tern does not know (and of ones it does, in the wrong place).
#[rustfmt::skip] // a table reads better dense than one entry a line
pub const UNKNOWN_KEYS: &[Lit] = &[
    S("status"), S("unknownField"), S("creationTimestamp"), S("asNumber"), S("spec"), S(""),
    S("metadata"), S("resourceVersion"), S("node"), S("<<"),
];

/// apiVersions.
#[rustfmt::skip] // a table reads better dense than one entry a line
pub const API_VERSIONS: &[Lit] = &[
    S("projectcalico.org/v3"), S("crd.projectcalico.org/v1"), S("projectcalico.org/v2"),
    S(""), S("v1"),
];

/// Kinds (and near misses).
#[rustfmt::skip] // a table reads better dense than one entry a line
pub const KINDS: &[Lit] = &[
    S("BGPPeer"), S("BGPConfiguration"), S("Node"), S("IPPool"), S("BGPFilter"),
    S("IPAMBlock"), S("BlockAffinity"), S("bgppeer"), S("Pod"), S(""),
];

/// Password files and control sockets: paths that hold nothing.
#[rustfmt::skip] // a table reads better dense than one entry a line
pub const PATHS: &[Lit] = &[
    S("cluster.yaml"), S("/nonexistent/tern-fuzz"), S(""), S("."), S("/"),
    S("\\\\.\\pipe\\tern"),
];

/// `tern.yaml` keywords and addresses.
#[rustfmt::skip] // a table reads better dense than one entry a line
pub const TERN_WORDS: &[Lit] = &[
    S("file"), S("etcdv3"), S("info"), S("tern=debug,info"), S("http://127.0.0.1:2379"),
    S("https://[::1]:2379"), S("127.0.0.1:9477"), S("0.0.0.0:9477"), S("[::1]:9477"),
    S("127.0.0.1:0"), S("127.0.0.1:65536"), S("localhost:9477"), S("trace"), S("etcd"),
    S(""), S("=="), S("127.0.0.1:2379"),
];

/// Integers of `tern.yaml` (protocols, tables, limits).
#[rustfmt::skip] // a table reads better dense than one entry a line
pub const NUMBERS: &[Lit] = &[
    I(201), I(0), I(1), I(4), I(5), I(12), I(186), I(254), I(255), I(256), I(65536),
    I(4294967295), I(4294967296), I(i64::MAX), I(i64::MIN), I(-1), U(u64::MAX), F(1.5),
    S("201"),
];

/// A field's value: an entry of its table (most of the time), or one of another type.
#[derive(Debug, Clone)]
pub enum Pick {
    /// The table entry at this index (modulo the table's length).
    Known(u8),
    /// A value of the wrong type.
    Wrong(Wrong),
}

impl<'a> Arbitrary<'a> for Pick {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        // One in ten wrong: enough to reach every type error, while most resources
        // stay well-typed and reach validation.
        Ok(match u8::arbitrary(u)? {
            b @ 0..=229 => Pick::Known(b),
            _ => Pick::Wrong(Wrong::arbitrary(u)?),
        })
    }
}

impl Pick {
    /// The value, from `table` unless wrong.
    pub fn value(&self, table: &[Lit]) -> Value {
        match self {
            Pick::Known(i) => table
                .get(usize::from(*i) % table.len().max(1))
                .map_or(Value::Null, |l| l.value()),
            Pick::Wrong(w) => w.value(),
        }
    }
}

/// A value of the wrong type for whatever field it lands in.
#[derive(Debug, Clone, Arbitrary)]
pub enum Wrong {
    /// `null`.
    Null,
    /// A boolean.
    Bool(bool),
    /// A number.
    Int(i64),
    /// A fraction (non-finite ones become `null`).
    Float(f64),
    /// Any text.
    Text(String),
    /// `[]`.
    EmptyList,
    /// `{}`.
    EmptyMap,
    /// A list of numbers.
    List(Vec<u8>),
    /// Lists in lists, this deep (up to 200: past the parsers' depth limits).
    Nested(u16),
}

impl Wrong {
    /// The value.
    pub fn value(&self) -> Value {
        match self {
            Wrong::Null => Value::Null,
            Wrong::Bool(b) => (*b).into(),
            Wrong::Int(i) => (*i).into(),
            Wrong::Float(f) => (*f).into(),
            Wrong::Text(s) => s.as_str().into(),
            Wrong::EmptyList => Value::Array(Vec::new()),
            Wrong::EmptyMap => Value::Object(Default::default()),
            Wrong::List(l) => l.iter().map(|b| Value::from(*b)).collect(),
            Wrong::Nested(n) => {
                (0..n % 201).fold(Value::Array(Vec::new()), |v, _| Value::Array(vec![v]))
            }
        }
    }
}

/// A name (resource, label, node reference).
#[derive(Debug, Clone, Arbitrary)]
pub enum Name {
    /// From [`NAMES`] (or of the wrong type).
    Pick(Pick),
    /// `n-<number>`: many distinct valid names.
    Numbered(u16),
    /// This many characters (up to 600; a Kubernetes name has at most 253).
    Long(u16, char),
}

impl Name {
    /// The value.
    pub fn value(&self) -> Value {
        match self {
            Name::Pick(p) => p.value(NAMES),
            Name::Numbered(n) => format!("n-{n}").into(),
            Name::Long(n, c) => c.to_string().repeat(usize::from(*n % 601)).into(),
        }
    }

    /// The name as text (for etcd keys); a name of the wrong type gives `fuzz`.
    pub fn text(&self) -> String {
        match self.value() {
            Value::String(s) => s,
            _ => "fuzz".into(),
        }
    }
}

/// A prefix or an address with its prefix length.
#[derive(Debug, Clone, Arbitrary)]
pub enum Cidr {
    /// From [`CIDRS`].
    Pick(Pick),
    /// Any IPv4 address and length (lengths past 32 included).
    V4([u8; 4], u8),
    /// Any IPv6 address and length.
    V6(u128, u8),
    /// IPv4-mapped IPv6.
    Mapped([u8; 4], u8),
}

impl Cidr {
    /// The value.
    pub fn value(&self) -> Value {
        match self {
            Cidr::Pick(p) => p.value(CIDRS),
            Cidr::V4(a, l) => format!("{}/{l}", std::net::Ipv4Addr::from(*a)).into(),
            Cidr::V6(a, l) => format!("{}/{l}", std::net::Ipv6Addr::from(*a)).into(),
            Cidr::Mapped(a, l) => format!("::ffff:{}/{l}", std::net::Ipv4Addr::from(*a)).into(),
        }
    }
}

/// An address, possibly with a port.
#[derive(Debug, Clone, Arbitrary)]
pub enum Addr {
    /// From [`ADDRS`].
    Pick(Pick),
    /// Any IPv4 address, any port number (beyond 65535 too).
    V4([u8; 4], Option<u32>),
    /// Any IPv6 address, any port number.
    V6(u128, Option<u32>),
}

impl Addr {
    /// The value.
    pub fn value(&self) -> Value {
        match self {
            Addr::Pick(p) => p.value(ADDRS),
            Addr::V4(a, None) => std::net::Ipv4Addr::from(*a).to_string().into(),
            Addr::V4(a, Some(p)) => format!("{}:{p}", std::net::Ipv4Addr::from(*a)).into(),
            Addr::V6(a, None) => std::net::Ipv6Addr::from(*a).to_string().into(),
            Addr::V6(a, Some(p)) => format!("[{}]:{p}", std::net::Ipv6Addr::from(*a)).into(),
        }
    }
}

/// A label selector.
#[derive(Debug, Clone, Arbitrary)]
pub enum Selector {
    /// From [`SELECTORS`].
    Pick(Pick),
    /// `key == 'value'`.
    Label(Name, Name),
    /// `!(!(…all()…))`, this deep (up to 500).
    Nested(u16),
    /// `a == 'b' || …` this many terms (up to 500).
    Huge(u16),
}

impl Selector {
    /// The value.
    pub fn value(&self) -> Value {
        match self {
            Selector::Pick(p) => p.value(SELECTORS),
            Selector::Label(k, v) => format!("{} == '{}'", k.text(), v.text()).into(),
            Selector::Nested(n) => {
                let n = usize::from(*n % 501);
                format!("{}all(){}", "!(".repeat(n), ")".repeat(n)).into()
            }
            Selector::Huge(n) => {
                format!("{}all()", "a == 'b' || ".repeat(usize::from(*n % 501))).into()
            }
        }
    }
}

/// A list: as generated, or one item many times (up to 600).
#[derive(Debug, Clone, Arbitrary)]
pub enum Many<T> {
    /// These items.
    Items(Vec<T>),
    /// This item, this many times.
    Repeat(T, u16),
}

impl<T> Many<T> {
    /// The values, each rendered by `f`.
    pub fn value(&self, f: impl Fn(&T) -> Value) -> Value {
        match self {
            Many::Items(items) => items.iter().map(f).collect(),
            Many::Repeat(item, n) => {
                let v = f(item);
                Value::Array(vec![v; usize::from(*n % 601)])
            }
        }
    }
}
