//! What the core keeps per peer, and what it derives from a peer's configuration: the
//! session's settings and capabilities, the import and export policies. The two policy
//! functions here ([`import`] and [`Peer::export`]) are the only places routes pass
//! between a peer and the RIB: the RFC rules and then the peer's route policy
//! (`super::policy`) run there. Our own routes enter the RIB as UPDATEs of ours
//! ([`own_route`], [`own_withdrawal`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ipnet::IpNet;

use crate::fsm::{Negotiated, SessionConfig, OPEN_HOLD_TIME};
use crate::rib::export::{AdjRibOut, ExportMemo, ExportPolicy};
use crate::rib::import::{ImportPolicy, Rejection};
use crate::rib::{BestChange, PeerSource, Rib};
use crate::session::{self, DriverConfig};
use crate::wire::{
    AddPathFamily, Capability, CodecOptions, Family, GracefulRestart, GracefulRestartFamily,
    PathAttributes, Update,
};

use super::deferred::Deferred;
use super::gr::Helper;
use super::policy::{self, ExportView, OwnRoutes, Refused};
use super::{PeerConfig, SpeakerConfig, DEFAULT_RESTART_TIME};

/// What an established session sends with: its Adj-RIB-Out and codec options.
pub(super) struct Out {
    pub rib: AdjRibOut,
    pub tx: CodecOptions,
    /// Enhanced route refresh (RFC 7313) was negotiated.
    pub enhanced: bool,
}

/// One configured peer.
pub(super) struct Peer {
    pub cfg: PeerConfig,
    /// The peer as a source of paths, while its session is up.
    pub source: Option<Arc<PeerSource>>,
    pub out: Option<Out>,
    /// Helper-side graceful restart.
    pub gr: Helper,
    /// UPDATEs received.
    pub updates_in: u64,
    /// UPDATEs sent.
    pub updates_out: u64,
    /// The families negotiated with it and those it sent End-of-RIB for, this session.
    pub families: Vec<Family>,
    pub eor_in: Vec<Family>,
    /// While we restart: the session is up but its initial UPDATEs are held.
    pub held: Option<Negotiated>,
    /// The session's queue was full when last tried (its peer stopped reading); the
    /// driver says when it takes commands again.
    pub stalled: bool,
    /// What the session could not take yet (see [`Deferred`]).
    pub deferred: Deferred,
    /// The initial table, while it is still being sent.
    pub feed: Option<Feed>,
    /// Route refresh requests waiting for the same reason (one per family).
    pub refreshes: Vec<Family>,
    /// Why we reset the session for passing a limit, said with its Down event.
    pub limit_reset: Option<String>,
    /// RFC 7606 errors already reported this session (attribute code, subcode): each
    /// kind is logged once with its bytes, not for every UPDATE a broken peer repeats.
    pub malformed_seen: Vec<(u8, u8)>,
    /// The session negotiated route refresh (plain or enhanced): we may ask the peer
    /// to send its routes again after a new import policy.
    pub route_refresh: bool,
    /// Routes its import policy rejected, routes its export policy kept from it.
    pub rejected_import: u64,
    pub filtered_export: u64,
    /// NOTIFICATIONs received and sent, by error code name.
    pub notifications_in: BTreeMap<String, u64>,
    pub notifications_out: BTreeMap<String, u64>,
    /// The last NOTIFICATION each way, and what the session negotiated while up.
    pub last_notification_in: Option<String>,
    pub last_notification_out: Option<String>,
    pub negotiated: Option<Negotiated>,
    /// Policy statements whose first rejection was reported (`import …`/`export …`):
    /// one event per statement and direction, not one per route.
    pub reported: BTreeSet<String>,
    /// The operator disabled it (`tern disable`): no session until enabled.
    pub disabled: bool,
    /// Paths it sent this session that did not enter the RIB, with why.
    pub rejected: super::rejected::Rejected,
}

/// Where a session's initial table stands: the Loc-RIB after `after` is still to be
/// sent, then End-of-RIB for each of `families` (see `Speaker::feed`).
#[derive(Debug, Clone)]
pub struct Feed {
    pub after: Option<IpNet>,
    pub families: Vec<Family>,
}

impl Peer {
    pub fn new(cfg: PeerConfig) -> Peer {
        Peer {
            cfg,
            source: None,
            out: None,
            gr: Helper::default(),
            updates_in: 0,
            updates_out: 0,
            families: Vec::new(),
            eor_in: Vec::new(),
            held: None,
            stalled: false,
            deferred: Deferred::default(),
            feed: None,
            refreshes: Vec::new(),
            limit_reset: None,
            malformed_seen: Vec::new(),
            route_refresh: false,
            rejected_import: 0,
            filtered_export: 0,
            notifications_in: BTreeMap::new(),
            notifications_out: BTreeMap::new(),
            last_notification_in: None,
            last_notification_out: None,
            negotiated: None,
            reported: BTreeSet::new(),
            disabled: false,
            rejected: Default::default(),
        }
    }

    /// Counts routes a policy program refused and returns the texts of the first
    /// rejection by each statement (`export` false: import).
    pub fn refused(&mut self, export: bool, refused: Vec<Refused>) -> Vec<String> {
        let dir = if export { "export" } else { "import" };
        if export {
            self.filtered_export += refused.len() as u64;
        } else {
            self.rejected_import += refused.len() as u64;
        }
        let mut texts = Vec::new();
        for r in refused {
            if self.reported.insert(format!("{dir} {}", r.label)) {
                let tail = "; further ones by this statement are counted, not reported";
                let what = if r.label == "default" {
                    format!("{dir} policy default")
                } else {
                    format!("{dir} policy: {}", r.label)
                };
                texts.push(format!("{what} rejected {}{tail}", r.prefix));
            }
        }
        texts
    }

    /// Export: Loc-RIB changes through the peer's export policy and export rules
    /// into its Adj-RIB-Out, as the UPDATEs to send (counted), with the texts of first
    /// rejections. Every route sent to a peer (initial table, changes, deferred
    /// changes, a new policy) passes here and only here; ROUTE-REFRESH answers repeat
    /// what passed. Nothing when the session is not established.
    pub fn export(
        &mut self,
        spk: &SpeakerConfig,
        own: &OwnRoutes,
        changes: &[BestChange],
        memo: &mut ExportMemo<'_>,
    ) -> (Vec<Bytes>, Vec<String>) {
        let Some(out) = self.out.as_mut() else {
            return (Vec::new(), Vec::new());
        };
        let Some(pol) = self.cfg.policy.as_deref() else {
            let msgs = out
                .rib
                .apply_with(changes, &out.tx, memo)
                .unwrap_or_default();
            self.updates_out += msgs.len() as u64;
            return (msgs, Vec::new());
        };
        let local_as = self.cfg.local_as.unwrap_or(spk.local_as);
        let view = ExportView {
            program: &pol.export,
            peer: policy::peer_type(local_as, self.cfg.peer_as),
            own,
            address: self.cfg.address.ip(),
            refuses_ibgp: local_as == self.cfg.peer_as && spk.cluster_id.is_none(),
        };
        let mut refused = Vec::new();
        let filtered = view.changes(changes, &mut refused);
        let msgs = out
            .rib
            .apply_with(&filtered, &out.tx, memo)
            .unwrap_or_default();
        self.updates_out += msgs.len() as u64;
        (msgs, self.refused(true, refused))
    }

    /// A ROUTE-REFRESH request for each of the session's families: the peer sends its
    /// routes again. Encoded with the session's codec options when the table went out
    /// (a ROUTE-REFRESH encodes the same under any).
    pub fn refresh_requests(&self) -> Vec<bytes::Bytes> {
        let tx = self
            .out
            .as_ref()
            .map_or(crate::wire::CodecOptions::default(), |o| o.tx);
        self.families
            .iter()
            .filter_map(|f| {
                let r = crate::wire::RouteRefresh {
                    family: *f,
                    subtype: crate::wire::RefreshSubtype::Request,
                };
                crate::wire::Message::RouteRefresh(r).encode(&tx).ok()
            })
            .collect()
    }

    /// Forgets the session: what it was sent, what waits for it.
    pub fn clear_session(&mut self) {
        self.source = None;
        self.negotiated = None;
        self.out = None;
        self.held = None;
        self.deferred.clear();
        self.feed = None;
        self.refreshes.clear();
        self.rejected.clear();
    }
}

/// The session task's settings for peer `p`.
pub(super) fn driver_config(cfg: &SpeakerConfig, p: &PeerConfig) -> DriverConfig {
    let fsm = SessionConfig {
        local_as: p.local_as.unwrap_or(cfg.local_as),
        peer_as: p.peer_as,
        router_id: cfg.router_id,
        hold_time: p.hold_time,
        keepalive: p.keepalive,
        connect_retry: p.connect_retry,
        passive: p.passive,
        delay_open: None,
        idle_hold: Duration::from_secs(1),
        idle_hold_max: Duration::from_secs(120),
        capabilities: capabilities(p, cfg.local_as, cfg.restarting, cfg.restarting),
        open_hold_time: p.open_hold_time.unwrap_or(OPEN_HOLD_TIME),
        send_hold_time: p.send_hold_time,
    };
    DriverConfig {
        fsm,
        peer: p.address,
        local_addr: p.local_address,
        password: p.password.clone(),
        ttl_security: p.ttl_security,
        write_high_water: session::DEFAULT_WRITE_HIGH_WATER,
    }
}

/// The router id and every session's configured local addresses.
pub(super) fn own_addresses<'a>(
    router_id: &Ipv4Addr,
    peers: impl Iterator<Item = &'a PeerConfig>,
) -> Arc<[IpAddr]> {
    let mut own = vec![IpAddr::V4(*router_id)];
    for p in peers {
        let v6 = p.local_v6.map(IpAddr::V6);
        for a in [p.local_address, v6].into_iter().flatten() {
            if !a.is_unspecified() && !own.contains(&a) {
                own.push(a);
            }
        }
    }
    own.into()
}

/// What we advertise to peer `p`: its families (Multiprotocol), route refresh (plain
/// and enhanced), and graceful restart, so peers send End-of-RIB and keep our routes
/// for the restart time when our connection drops; `restarting` sets the R bit and
/// says our forwarding state was kept (F bits).
///
/// `forwarding_kept` stays true after our restart is over: our routes are still in
/// the kernel, so a peer whose session comes up only after the selection deferral
/// timer must still keep our routes until we send them again (with F clear it would
/// drop them at once and traffic to this node would stop until our table arrived).
pub(super) fn capabilities(
    p: &PeerConfig,
    local_as: u32,
    restarting: bool,
    forwarding_kept: bool,
) -> Vec<Capability> {
    let families = if p.families.is_empty() {
        vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST]
    } else {
        p.families.clone()
    };
    let mut caps: Vec<Capability> = families
        .iter()
        .map(|f| Capability::Multiprotocol(*f))
        .collect();
    // ADD-PATH with iBGP peers, both ways: a reflector sends its clients the whole ECMP
    // set and takes several paths from them. eBGP peers get one path (we are their next
    // hop anyway) and are not offered the capability at all.
    if p.peer_as == p.local_as.unwrap_or(local_as) {
        caps.push(Capability::AddPath(
            families
                .iter()
                .map(|f| AddPathFamily {
                    family: *f,
                    receive: true,
                    send: true,
                })
                .collect(),
        ));
    }
    caps.extend([
        Capability::RouteRefresh,
        Capability::EnhancedRouteRefresh,
        Capability::GracefulRestart(GracefulRestart {
            restart_state: restarting,
            notification: false,
            restart_time: p.restart_time.unwrap_or(DEFAULT_RESTART_TIME).min(4095),
            families: families
                .into_iter()
                .map(|family| GracefulRestartFamily {
                    family,
                    forwarding_preserved: forwarding_kept,
                })
                .collect(),
        }),
    ]);
    caps
}

/// The export rules towards peer `p` on a session whose TCP connection runs from
/// `session_local` (our end; None when unknown): an eBGP peer gets that address as
/// next hop for routes of its family (RFC 4271 §5.1.3), whichever address the session
/// was configured with (Calico's `sourceAddress: None` leaves the choice to the
/// kernel); other families and iBGP peers get the configured ones.
pub(super) fn export_policy(
    cfg: &SpeakerConfig,
    p: &PeerConfig,
    session_local: Option<IpAddr>,
) -> ExportPolicy {
    let local_as = p.local_as.unwrap_or(cfg.local_as);
    ExportPolicy {
        peer: p.address.ip(),
        ebgp: p.peer_as != local_as,
        local_as,
        router_id: cfg.router_id,
        cluster_id: cfg.cluster_id,
        peer_is_client: p.rr_client,
        next_hop_self: p.next_hop_self,
        next_hop_keep: p.next_hop_keep,
        local_v4: match p.local_address {
            Some(IpAddr::V4(a)) => Some(a),
            _ => p.local_v4,
        },
        local_v6: p.local_v6.or(match p.local_address {
            Some(IpAddr::V6(a)) => Some(a),
            _ => None,
        }),
        session_local: session_local.filter(|a| !a.is_unspecified()),
        graceful_shutdown: false,
    }
}

/// Import: an UPDATE from peer `p` (as `source`) through the RFC import checks and
/// then the peer's import policy into the RIB. Every path a peer sends passes here and
/// only here. Returns the Loc-RIB changes, the RFC check that failed (the whole UPDATE
/// is then treated as withdrawn) and the routes the policy rejected (each treated as a
/// withdrawal of its prefix).
pub(super) fn import(
    rib: &mut Rib,
    cfg: &SpeakerConfig,
    own: &Arc<[IpAddr]>,
    p: &PeerConfig,
    source: &Arc<PeerSource>,
    update: &Update,
) -> (Vec<BestChange>, Option<Rejection>, Vec<Refused>) {
    let checks = ImportPolicy {
        local_as: p.local_as.unwrap_or(cfg.local_as),
        allowas_in: p.allowas_in,
        ebgp: source.ebgp,
        peer_as: source.asn,
        router_id: cfg.router_id,
        cluster_id: cfg.cluster_id,
        own: Arc::clone(own),
    };
    let Some(pol) = p.policy.as_deref() else {
        let mut ebgp;
        let default = Some(crate::rib::decision::DEFAULT_LOCAL_PREF);
        let update = if source.ebgp && update.attributes.local_pref != default {
            ebgp = update.clone();
            policy::with_ebgp_local_pref(&mut ebgp.attributes);
            &ebgp
        } else {
            update
        };
        let (changes, rejection) = rib.import_update(source, update, &checks);
        return (changes, rejection, Vec::new());
    };
    let passes = crate::rib::import::check(&update.attributes, &checks)
        .and_then(|()| crate::rib::import::check_next_hops(update, &checks));
    if update.treat_as_withdraw() || passes.is_err() {
        // Withdrawn whatever the policy says.
        let (changes, rejection) = rib.import_update(source, update, &checks);
        return (changes, rejection, Vec::new());
    }
    let kind = if source.ebgp {
        crate::policy::PeerType::External
    } else {
        crate::policy::PeerType::Internal
    };
    let (updates, refused) = policy::import(&pol.import, kind, update);
    let mut changes = Vec::new();
    for u in &updates {
        changes.extend(rib.apply_update(source, u));
    }
    (changes, None, refused)
}

/// The UPDATE that puts our own route for `prefix` into the RIB.
pub(super) fn own_route(router_id: Ipv4Addr, prefix: IpNet, attrs: PathAttributes) -> Update {
    let nlri = crate::wire::Nlri::new(prefix);
    if prefix.addr().is_ipv4() {
        Update {
            attributes: PathAttributes {
                next_hop: Some(router_id),
                ..attrs
            },
            nlri: vec![nlri],
            ..Update::default()
        }
    } else {
        Update {
            attributes: attrs,
            mp_reach: Some(crate::wire::MpReach {
                family: Family::IPV6_UNICAST,
                // Exported with the session's IPv6 address; never as IPv4.
                next_hop: crate::wire::MpNextHop::V6 {
                    global: router_id.to_ipv6_mapped(),
                    link_local: None,
                },
                nlri: vec![nlri],
                unparsed: None,
            }),
            ..Update::default()
        }
    }
}

/// The UPDATE that takes our own route for `prefix` out of the RIB.
pub(super) fn own_withdrawal(prefix: IpNet) -> Update {
    let nlri = crate::wire::Nlri::new(prefix);
    if prefix.addr().is_ipv4() {
        Update {
            withdrawn: vec![nlri],
            ..Update::default()
        }
    } else {
        Update {
            mp_unreach: Some(crate::wire::MpUnreach {
                family: Family::IPV6_UNICAST,
                withdrawn: vec![nlri],
                unparsed: None,
            }),
            ..Update::default()
        }
    }
}
