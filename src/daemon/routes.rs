//! The route path, which skips the main loop: the speaker sends its Loc-RIB news on a
//! channel of its own to the FIB task, which turns them into kernel routes with
//! [`RibFilter`] (no lock, no other task in between). The filter reads the intent the
//! main loop last accepted from a `watch` channel: its own prefixes are left out (their
//! blackholes come and go with the intent only) and learnt routes take the current
//! encapsulation. Also here: what the main loop does to routes when the intent changes
//! (originate or withdraw its prefixes, install their blackholes).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ipnet::IpNet;
use tern_bgp::policy::RouteSource;
use tern_bgp::rib::Best;
use tern_bgp::speaker::{RibNews, SpeakerCommand};
use tern_config::diff::IntentDiff;
use tern_config::intent::{Encapsulation, Intent, OriginSource};
use tern_fib::task::{FibMsg, RouteFilter, Routes};
use tern_fib::Route;
use tokio::sync::{mpsc, watch};

use super::convert;

/// The intent in force, as the main loop publishes it (`None` until the first valid
/// configuration).
pub type IntentWatch = watch::Receiver<Option<Arc<Intent>>>;

/// What the filter needs of the intent, copied out once per accepted intent.
#[derive(Debug, Default)]
struct View {
    own: BTreeSet<IpNet>,
    encap: Encapsulation,
}

/// Turns the speaker's [`RibNews`] into the FIB task's wanted routes.
pub struct RibFilter {
    intent: IntentWatch,
    view: View,
    table: u32,
    /// Whether a kernel FIB is programmed: without one (a route reflector) there is no
    /// tunnel to go through.
    kernel: bool,
    /// `tern monitor`'s stream: told every Loc-RIB change (nothing while unwatched).
    monitor: super::monitor::Hub,
}

impl RibFilter {
    /// A filter for routes in `table`; `kernel` false when no kernel FIB is programmed.
    pub fn new(intent: IntentWatch, table: u32, kernel: bool) -> RibFilter {
        RibFilter {
            intent,
            view: View::default(),
            table,
            kernel,
            monitor: super::monitor::Hub::default(),
        }
    }

    /// Tells `hub` every Loc-RIB change that passes.
    pub fn with_monitor(mut self, hub: super::monitor::Hub) -> RibFilter {
        self.monitor = hub;
        self
    }

    /// Tells the monitor stream about `changes` (also when no kernel FIB is kept).
    pub fn tell_monitor(&self, changes: &[tern_bgp::rib::BestChange]) {
        self.monitor.routes(changes);
    }

    /// Takes the intent the main loop published last, if it changed.
    fn refresh(&mut self) {
        if !self.intent.has_changed().unwrap_or(false) {
            return;
        }
        let view = match &*self.intent.borrow_and_update() {
            Some(i) => View {
                // The peer routes are the intent's too: in BIRD a static route
                // (preference 200) beats a BGP one (100) to the same prefix.
                own: i
                    .originated
                    .keys()
                    .copied()
                    .chain(i.peer_routes().into_keys())
                    .collect(),
                encap: if self.kernel {
                    i.encapsulation()
                } else {
                    Encapsulation::default()
                },
            },
            None => View::default(),
        };
        self.view = view;
    }

    /// The kernel's side of one Loc-RIB entry: `None` (leave the prefix alone) for our
    /// own prefixes and for routes we originate.
    fn want(&self, prefix: IpNet, now: Option<&Best>) -> Option<(IpNet, Option<Route>)> {
        // A withdrawn own prefix must not delete its blackhole: those are only
        // removed through the intent.
        if self.view.own.contains(&prefix) {
            return None;
        }
        match now {
            Some(best) if best.best.source.local => None,
            Some(best) => Some((
                prefix,
                convert::kernel_route(prefix, best, self.table, &self.view.encap),
            )),
            None => Some((prefix, None)),
        }
    }
}

impl RouteFilter for RibFilter {
    type News = RibNews;

    fn filter(&mut self, news: RibNews) -> Routes {
        match news {
            RibNews::Converged => Routes::Converged,
            RibNews::Changes(changes) => {
                self.monitor.routes(&changes);
                self.want_all(&changes)
            }
            // The table as it is, not news: `tern monitor` hears nothing.
            RibNews::Replay(entries) => self.want_all(&entries),
        }
    }
}

impl RibFilter {
    /// The kernel's side of Loc-RIB entries, under the intent published last.
    fn want_all(&mut self, entries: &[tern_bgp::rib::BestChange]) -> Routes {
        self.refresh();
        Routes::Want(
            entries
                .iter()
                .filter_map(|c| self.want(c.prefix, c.now.as_ref()))
                .collect(),
        )
    }
}

/// The kernel routes of the diff's own prefixes: a blackhole where the intent asks
/// for one, none for a prefix no longer originated; and the host routes to peers that
/// `reachableBy` asks for. A peer route that goes while a learnt route to the same
/// address exists is replaced by it through the Loc-RIB replay that follows (the diff
/// says `policy_changed`).
pub fn own_routes(d: &IntentDiff, intent: &Intent, table: u32) -> Vec<(IpNet, Option<Route>)> {
    let mut want: Vec<(IpNet, Option<Route>)> = d
        .peer_routes
        .iter()
        .map(|(net, gw)| (*net, gw.map(|gw| convert::peer_route(*net, gw, table))))
        .collect();
    for (prefix, o) in &d.originated {
        want.push((
            *prefix,
            o.blackhole.then(|| convert::blackhole(*prefix, table)),
        ));
    }
    for prefix in &d.withdrawn {
        if !intent.originated.contains_key(prefix) {
            want.push((*prefix, None));
        }
    }
    want
}

/// Originates (or withdraws) the diff's prefixes at the speaker. For export policy,
/// blocks and service routes are `Originated` (BIRD's static routes in Calico) and
/// borrowed workload addresses `Kernel` on the workload's interface (from `workloads`,
/// the kernel's workload routes), as BIRD learns them from the kernel.
pub async fn originate(
    d: &IntentDiff,
    speaker: &mpsc::Sender<SpeakerCommand>,
    workloads: &BTreeMap<IpNet, String>,
) {
    for (prefix, o) in &d.originated {
        let cmd = if o.export {
            let (source, interface) = match o.source {
                OriginSource::Borrowed => (RouteSource::Kernel, workloads.get(prefix).cloned()),
                OriginSource::Block | OriginSource::Service(_) => (RouteSource::Originated, None),
            };
            SpeakerCommand::Originate {
                prefix: *prefix,
                attrs: convert::origin_attrs(o),
                source,
                interface,
            }
        } else {
            SpeakerCommand::Withdraw(*prefix)
        };
        let _ = speaker.send(cmd).await;
    }
    for prefix in &d.withdrawn {
        let _ = speaker.send(SpeakerCommand::Withdraw(*prefix)).await;
    }
}

/// Originates again the intent's borrowed addresses whose workload interface changed
/// between two readings of the kernel's workload routes (first seen, or moved), so
/// export policy judges them with the interface they have now.
pub async fn reoriginate_borrowed(
    intent: &Intent,
    old: &BTreeMap<IpNet, String>,
    new: &BTreeMap<IpNet, String>,
    speaker: &mpsc::Sender<SpeakerCommand>,
) {
    for (prefix, o) in &intent.originated {
        if o.source != OriginSource::Borrowed || !o.export || old.get(prefix) == new.get(prefix) {
            continue;
        }
        let cmd = SpeakerCommand::Originate {
            prefix: *prefix,
            attrs: convert::origin_attrs(o),
            source: RouteSource::Kernel,
            interface: new.get(prefix).cloned(),
        };
        let _ = speaker.send(cmd).await;
    }
}

/// Installs (or removes) the blackholes of the diff's own prefixes.
pub async fn install_own(d: &IntentDiff, intent: &Intent, fib: &mpsc::Sender<FibMsg>, table: u32) {
    let want = own_routes(d, intent, table);
    if !want.is_empty() {
        let _ = fib.send(FibMsg::Want(want)).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

    use super::*;
    use tern_fib::{NextHop, RouteKind};

    #[test]
    fn news_before_any_intent_pass_and_convergence_is_kept() {
        let (_tx, rx) = watch::channel(None);
        let mut f = RibFilter::new(rx, 254, true);
        assert_eq!(f.filter(RibNews::Converged), Routes::Converged);
        // A replayed table is wanted as news is.
        assert_eq!(
            f.filter(RibNews::Replay(vec![tern_bgp::rib::BestChange {
                prefix: "198.18.2.0/26".parse().unwrap(),
                now: None,
            }])),
            Routes::Want(vec![("198.18.2.0/26".parse().unwrap(), None)])
        );
        assert_eq!(
            f.filter(RibNews::Changes(vec![tern_bgp::rib::BestChange {
                prefix: "198.18.1.0/26".parse().unwrap(),
                now: None,
            }])),
            Routes::Want(vec![("198.18.1.0/26".parse().unwrap(), None)])
        );
    }

    #[test]
    fn the_intents_own_prefixes_are_left_out_once_published() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/config/examples/mesh/cluster.yaml"
        ))
        .unwrap();
        let mut t = tern_config::tracker::Tracker::new("node-a");
        let doc = tern_config::datastore::Document {
            origin: "cluster.yaml".into(),
            text,
        };
        t.apply(&[doc], 1).unwrap();
        let intent = t.current().cloned().unwrap();
        let own = *intent.originated.keys().next().unwrap();
        let other: IpNet = "198.18.250.0/26".parse().unwrap();
        let gone = |p: IpNet| tern_bgp::rib::BestChange {
            prefix: p,
            now: None,
        };
        let (tx, rx) = watch::channel(None);
        let mut f = RibFilter::new(rx, 254, true);
        let both = || RibNews::Changes(vec![gone(own), gone(other)]);
        assert_eq!(
            f.filter(both()),
            Routes::Want(vec![(own, None), (other, None)]),
            "no intent yet: nothing is own"
        );
        tx.send_replace(Some(Arc::new(intent)));
        assert_eq!(f.filter(both()), Routes::Want(vec![(other, None)]));
    }

    /// A cluster with a VXLAN, an IPIP and a plain pool, `extra` added.
    fn kernel_intent(extra: &str) -> Arc<Intent> {
        let text = format!(
            "apiVersion: projectcalico.org/v3
kind: Node
metadata: {{name: node-a}}
spec: {{bgp: {{ipv4Address: 198.51.100.10/24, ipv6Address: \"2001:db8::10/64\"}}}}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {{name: vxlan}}
spec: {{cidr: 198.18.0.0/24, vxlanMode: CrossSubnet}}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {{name: ipip}}
spec: {{cidr: 198.18.2.0/24, ipipMode: Always}}
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {{name: plain}}
spec: {{cidr: 198.18.3.0/24}}
{extra}"
        );
        let (c, _) =
            tern_config::cluster::Cluster::from_documents(&[tern_config::datastore::Document {
                origin: "cluster.yaml".into(),
                text,
            }])
            .unwrap();
        Arc::new(tern_config::intent::intent(&c, "node-a").unwrap().0)
    }

    /// A Loc-RIB entry learnt from `hop` (iBGP unless `ebgp`), with `local_pref`.
    fn learnt(hop: &str, ebgp: bool, local_pref: Option<u32>) -> Best {
        use tern_bgp::rib::{Path, PeerSource, Reason};
        let address: std::net::IpAddr = hop.parse().unwrap();
        let p = Arc::new(Path {
            source: Arc::new(PeerSource {
                address,
                router_id: "198.51.100.99".parse().unwrap(),
                asn: if ebgp { 64513 } else { 64512 },
                ebgp,
                rr_client: false,
                local: false,
            }),
            attrs: Arc::new(tern_bgp::wire::PathAttributes {
                local_pref,
                ..Default::default()
            }),
            next_hop: address,
            path_id: 0,
            igp_cost: None,
            stale: false,
        });
        Best {
            best: Arc::clone(&p),
            multipath: vec![p].into(),
            reason: Reason::Equal,
        }
    }

    /// The kernel route the filter wants for `prefix` learnt as `best`.
    fn wanted(intent: &Arc<Intent>, prefix: &str, best: Best) -> Option<Route> {
        let (tx, rx) = watch::channel(None);
        let mut f = RibFilter::new(rx, 254, true);
        // Published after the filter starts, as the main loop does.
        tx.send_replace(Some(Arc::clone(intent)));
        let prefix: IpNet = prefix.parse().unwrap();
        let Routes::Want(mut w) = f.filter(RibNews::Changes(vec![tern_bgp::rib::BestChange {
            prefix,
            now: Some(best),
        }])) else {
            panic!("not a route list");
        };
        assert_eq!(w.len(), 1);
        let (p, r) = w.remove(0);
        assert_eq!(p, prefix);
        r
    }

    fn hops(r: &Route) -> Vec<NextHop> {
        match &r.kind {
            RouteKind::Unicast(h) => h.to_vec(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn vxlan_pool_routes_are_left_to_felix_and_removed_if_there() {
        let i = kernel_intent("");
        // None: the FIB task removes a route of ours to the prefix, if it has one.
        assert_eq!(
            wanted(&i, "198.18.0.64/26", learnt("203.0.113.2", false, None)),
            None
        );
        assert_eq!(
            wanted(&i, "198.18.0.64/26", learnt("198.51.100.2", false, None)),
            None
        );
    }

    #[test]
    fn ipip_and_plain_pools_follow_program_cluster_routes() {
        let i = kernel_intent("");
        let ipip = wanted(&i, "198.18.2.64/26", learnt("198.51.100.2", false, None)).unwrap();
        assert!(hops(&ipip)[0].onlink, "IPIP: through the tunnel");
        let plain = wanted(&i, "198.18.3.64/26", learnt("198.51.100.2", false, None)).unwrap();
        assert!(!hops(&plain)[0].onlink);
        let off = kernel_intent("---\napiVersion: projectcalico.org/v3\nkind: BGPConfiguration\nmetadata: {name: default}\nspec: {programClusterRoutes: Disabled}\n");
        for p in ["198.18.2.64/26", "198.18.3.64/26"] {
            assert_eq!(
                wanted(&off, p, learnt("198.51.100.2", false, None)),
                None,
                "{p}"
            );
        }
        // Outside every pool (a fabric's route): always tern's.
        assert!(wanted(&off, "203.0.113.0/24", learnt("198.51.100.2", true, None)).is_some());
    }

    #[test]
    fn the_metric_is_what_bird_would_install() {
        let i = kernel_intent("---\napiVersion: projectcalico.org/v3\nkind: BGPConfiguration\nmetadata: {name: default}\nspec: {ipv4NormalRoutePriority: 300, ipv6NormalRoutePriority: 2000}\n");
        let metric = |p: &str, b: Best| wanted(&i, p, b).unwrap().metric;
        assert_eq!(
            metric("198.18.3.64/26", learnt("198.51.100.2", false, None)),
            300
        );
        // An eBGP route carries the LOCAL_PREF 100 the speaker gave it, as BIRD does.
        assert_eq!(
            metric("203.0.113.0/24", learnt("198.51.100.1", true, Some(100))),
            2_147_483_547
        );
        let lp = tern_bgp::policy::BIRD_INT_MAX - 512;
        assert_eq!(
            metric("198.18.3.64/26", learnt("198.51.100.2", false, Some(lp))),
            512
        );
        assert_eq!(
            metric("2001:db8:5::/64", learnt("2001:db8::2", false, None)),
            2000
        );
        // An import policy's setPriority wins over LOCAL_PREF and the normal priority
        // (BIRD's kernel export derives `krt_metric` only when none is set).
        let mut set = learnt("198.51.100.2", false, Some(lp));
        set.best = Arc::new(tern_bgp::rib::Path {
            attrs: Arc::new(tern_bgp::wire::PathAttributes {
                kernel_priority: Some(77),
                ..(*set.best.attrs).clone()
            }),
            ..(*set.best).clone()
        });
        assert_eq!(metric("198.18.3.64/26", set), 77);
        // IPv6's 1024 is the kernel's default, which tern-fib reads back as 0.
        let d = kernel_intent("");
        assert_eq!(
            wanted(&d, "2001:db8:5::/64", learnt("2001:db8::2", false, None))
                .unwrap()
                .metric,
            0
        );
        assert_eq!(
            wanted(&d, "198.18.3.64/26", learnt("198.51.100.2", false, None))
                .unwrap()
                .metric,
            1024
        );
    }
}
