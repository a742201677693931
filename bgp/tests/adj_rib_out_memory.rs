//! What bounds the memory a reflector keeps per client, and must not change what the
//! clients get: what each peer was sent is kept by prefix number
//! (`rib::export::sent`), numbers nobody holds are freed and given to other prefixes;
//! a peer that stops reading has its changed prefixes noted by number
//! (`speaker::deferred`), and what waited, like a new session's table, goes a piece at
//! a time, the next once the session took the last.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a panic is the test failing

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use ipnet::IpNet;
use tern_bgp::session::SessionEvent;
use tern_bgp::speaker::core::{Input, Output, Speaker, TimerId};
use tern_bgp::wire::{CodecOptions, Message, Update};

#[path = "scenarios/parse.rs"]
#[allow(dead_code)] // the scenarios use more of it
mod parse;

fn words(s: &str) -> Vec<&str> {
    s.split_whitespace().collect()
}

/// The `n` /32s of round `r`: rounds 0 and 5 are the same prefixes.
fn round(r: u32, n: u32) -> Vec<String> {
    (0..n)
        .map(|i| {
            let x = (r % 5) * n + i;
            format!("198.18.{}.{}/32", x / 256, x % 256)
        })
        .collect()
}

const A: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 2)), 179);
const B: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 3)), 179);

/// A reflector with two clients up, A and B.
fn reflector(t0: Instant) -> Speaker {
    let mut speaker = reflector_with_a(t0);
    up(&mut speaker, t0, B);
    speaker
}

/// A session with `p` comes up.
fn up(speaker: &mut Speaker, at: Instant, p: SocketAddr) -> Vec<Output> {
    let (_, n) = parse::up(&words(&format!(
        "{} as 65000 id {} families ipv4",
        p.ip(),
        p.ip()
    )));
    speaker.handle(
        at,
        Input::Session(SessionEvent::Up {
            peer: p,
            negotiated: Box::new(n),
        }),
    )
}

/// A reflector with clients A and B configured, only A up.
fn reflector_with_a(t0: Instant) -> Speaker {
    let mut cfg = parse::config(&words("id 198.51.100.1 as 65000 cluster-id 198.51.100.250"));
    cfg.peers = [A, B]
        .iter()
        .map(|p| {
            let line = format!("{} as 65000 rr-client local 198.51.100.1", p.ip());
            parse::peer(&words(&line))
        })
        .collect();
    let (mut speaker, _) = Speaker::new(cfg, t0);
    up(&mut speaker, t0, A);
    speaker
}

/// What B is sent, as (announced, withdrawn, End-of-RIB markers, End-of-RIB last).
fn sent_to_b(out: &[Output]) -> (BTreeSet<IpNet>, BTreeSet<IpNet>, usize, bool) {
    let (mut announced, mut withdrawn, mut eor, mut eor_last) =
        (BTreeSet::new(), BTreeSet::new(), 0, false);
    for msgs in out.iter().filter_map(|o| match o {
        Output::Send(ip, m) if *ip == B.ip() => Some(m),
        _ => None,
    }) {
        for b in msgs {
            let Ok(Message::Update(u)) = Message::decode(b.clone(), &CodecOptions::modern()) else {
                continue;
            };
            eor_last = u.end_of_rib_family().is_some();
            eor += usize::from(eor_last);
            announced.extend(u.nlri.iter().map(|n| n.prefix));
            withdrawn.extend(u.withdrawn.iter().map(|n| n.prefix));
        }
    }
    (announced, withdrawn, eor, eor_last)
}

/// Answers each `Wake` for B with `Writable`, as the driver does once B's session
/// took what it was sent; everything the speaker says meanwhile.
fn drain_b(speaker: &mut Speaker, at: Instant, mut out: Vec<Output>) -> (Vec<Output>, usize) {
    let mut pieces = 1;
    while out
        .iter()
        .any(|o| matches!(o, Output::Wake(ip) if *ip == B.ip()))
        && pieces < 100
    {
        out.retain(|o| !matches!(o, Output::Wake(_)));
        out.extend(speaker.handle(at, Input::Writable(B.ip())));
        pieces += 1;
    }
    (out, pieces)
}

#[test]
fn a_peer_coming_up_is_sent_the_table_a_piece_at_a_time() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let mut speaker = reflector_with_a(t0);
    let table = round(0, 3000);
    announce_from_a(&mut speaker, at(1), &table);

    // B comes up: one piece, and a Wake for the next.
    let first = up(&mut speaker, at(2), B);
    let (announced, _, eor, _) = sent_to_b(&first);
    assert!(
        !announced.is_empty() && announced.len() < 3000,
        "{} prefixes in the first piece",
        announced.len()
    );
    assert_eq!(eor, 0, "End-of-RIB only after the whole table");
    assert!(first
        .iter()
        .any(|o| matches!(o, Output::Wake(ip) if *ip == B.ip())));

    // Meanwhile A withdraws one prefix B was sent, one it was not yet, and announces
    // a new one: nothing for B until it takes more.
    let (sent_early, sent_late) = (table[0].clone(), table[2999].clone());
    let during = from_a(
        &mut speaker,
        at(3),
        parse::withdrawal(&words(&format!("{sent_early} {sent_late}"))),
    );
    let new = "198.18.200.1/32";
    let during2 = announce_from_a(&mut speaker, at(3), &[new.to_string()]);
    assert_eq!(sent_to_b(&during).0.len() + sent_to_b(&during2).0.len(), 0);

    let (all, pieces) = drain_b(&mut speaker, at(4), first);
    assert!(pieces > 2, "3,000 prefixes in pieces of fewer: {pieces}");
    let (announced, withdrawn, eor, eor_last) = sent_to_b(&all);
    let mut want = set(&table);
    want.remove(&sent_early.parse().unwrap());
    want.remove(&sent_late.parse().unwrap());
    want.insert(new.parse().unwrap());
    assert_eq!(held_by_b(&speaker), want);
    assert_eq!(eor, 1, "End-of-RIB once");
    assert!(eor_last, "End-of-RIB after the table");
    assert!(announced.is_superset(&want));
    assert!(
        !announced.contains(&sent_late.parse::<IpNet>().unwrap()),
        "gone before its piece"
    );
    assert_eq!(
        withdrawn,
        set(&[sent_early]),
        "only what B was sent is withdrawn"
    );
}

/// A announces `prefixes` with itself as next hop.
fn announce_from_a(speaker: &mut Speaker, at: Instant, prefixes: &[String]) -> Vec<Output> {
    let line = format!("{} nh 198.51.100.2", prefixes.join(" "));
    from_a(speaker, at, parse::announce(&words(&line)))
}

/// An UPDATE from A.
fn from_a(speaker: &mut Speaker, at: Instant, update: Update) -> Vec<Output> {
    let update = Box::new(update);
    speaker.handle(at, Input::Session(SessionEvent::Update { peer: A, update }))
}

/// The prefixes B holds, all with A's next hop.
fn held_by_b(speaker: &Speaker) -> BTreeSet<IpNet> {
    speaker
        .advertised(B.ip())
        .expect("b is established")
        .into_iter()
        .map(|(p, e)| {
            assert_eq!(e.next_hop, A.ip());
            p
        })
        .collect()
}

fn set(prefixes: &[String]) -> BTreeSet<IpNet> {
    prefixes.iter().map(|p| p.parse().unwrap()).collect()
}

#[test]
fn clients_hold_the_table_while_numbers_are_freed_and_given_again() {
    let t0 = Instant::now();
    let mut speaker = reflector(t0);
    let send = |speaker: &mut Speaker, s: u64, update| {
        from_a(speaker, t0 + Duration::from_secs(s), update);
    };
    let mut most = 0;
    for r in 0..8u32 {
        let now = round(r, 1000);
        let line = format!("{} nh 198.51.100.2", now.join(" "));
        send(
            &mut speaker,
            u64::from(r) + 1,
            parse::announce(&words(&line)),
        );
        if r > 0 {
            let gone = round(r - 1, 1000).join(" ");
            send(
                &mut speaker,
                u64::from(r) + 1,
                parse::withdrawal(&words(&gone)),
            );
        }
        most = most.max(speaker.prefix_numbers());

        assert_eq!(held_by_b(&speaker), set(&now), "round {r}");
        assert!(
            speaker.advertised(A.ip()).expect("a").is_empty(),
            "never back to the sender"
        );
    }
    // Five rounds of distinct prefixes were numbered (5,000), yet numbers were freed
    // along the way: never more than twice the 1,024 kept before a sweep, plus a round.
    assert!(most <= 2 * 1024 + 1000, "{most} numbers");
    assert!(most >= 2000, "{most}: every round's prefixes were numbered");
}

#[test]
fn a_client_far_behind_is_sent_the_table_again_and_what_went_withdrawn() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let mut speaker = reflector(t0);
    let first = round(0, 3000);
    announce_from_a(&mut speaker, at(1), &first);
    assert_eq!(held_by_b(&speaker), set(&first));

    // B stops reading: 2,000 withdrawn and 2,000 new, past the 1,024 noted.
    speaker.handle(at(2), Input::Stalled(B.ip()));
    let gone = &first[..2000];
    from_a(
        &mut speaker,
        at(3),
        parse::withdrawal(&words(&gone.join(" "))),
    );
    let new = round(2, 2000); // 4,000 to 5,999: none of the first
    let out = announce_from_a(&mut speaker, at(3), &new);
    assert!(
        !out.iter()
            .any(|o| matches!(o, Output::Send(ip, _) if *ip == B.ip())),
        "nothing for b while it does not read"
    );
    assert_eq!(held_by_b(&speaker), set(&first), "b holds what it was sent");

    // What waited goes a piece at a time: the next once the session took one.
    let out = speaker.handle(at(4), Input::Writable(B.ip()));
    let (out, pieces) = drain_b(&mut speaker, at(4), out);
    assert!(pieces > 1, "4,000 prefixes waited: more than one piece");
    let (announced, withdrawn, _, _) = sent_to_b(&out);
    let want: BTreeSet<IpNet> = set(&first[2000..]).union(&set(&new)).copied().collect();
    assert_eq!(held_by_b(&speaker), want);
    assert_eq!(withdrawn, set(gone), "what went, withdrawn");
    assert_eq!(
        announced,
        set(&new),
        "only what b did not have: the rest is unchanged"
    );
}

/// When the pack timer is asked for in `out`, if it is.
fn pack_at(out: &[Output]) -> Option<Option<Instant>> {
    out.iter().find_map(|o| match o {
        Output::Timer {
            id: TimerId::Pack,
            at,
        } => Some(*at),
        _ => None,
    })
}

/// The Loc-RIB's table is packed once thousands of prefixes came and then a second
/// passed without any coming or going; not while the table still arrives.
#[test]
fn the_table_is_packed_once_it_stopped_changing() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let mut speaker = reflector(t0);
    let first = announce_from_a(&mut speaker, t0, &round(0, 3000));
    assert_eq!(
        pack_at(&first),
        None,
        "3,000 prefixes: not worth a walk yet"
    );
    let t1 = t0 + ms(300);
    let second = announce_from_a(&mut speaker, t1, &round(1, 3000));
    assert_eq!(pack_at(&second), Some(Some(t1 + ms(1000))));
    let t2 = t1 + ms(500);
    let third = announce_from_a(&mut speaker, t2, &round(2, 3000)[..100]);
    assert_eq!(pack_at(&third), None, "armed already");
    // Due while the table changed half a second ago: it waits a second after that.
    let early = speaker.handle(t1 + ms(1000), Input::Timer(TimerId::Pack));
    assert_eq!(pack_at(&early), Some(Some(t2 + ms(1000))));
    assert_eq!(speaker.unpacked(), 6100);
    let before = speaker.routes();
    let done = speaker.handle(t2 + ms(1000), Input::Timer(TimerId::Pack));
    assert_eq!((pack_at(&done), speaker.unpacked()), (None, 0));
    assert_eq!(speaker.routes(), before);
    // Changes after it count again, and B still gets them.
    let new = &round(3, 3000)[..10];
    let later = announce_from_a(&mut speaker, t2 + ms(2000), new);
    assert_eq!(speaker.unpacked(), 10);
    assert_eq!(sent_to_b(&later).0, set(new));
}
