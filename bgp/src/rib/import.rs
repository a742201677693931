//! What a peer's route must pass before it enters the RIB: AS-path loop detection
//! (with Calico's `numAllowedLocalASNumbers`, i.e. allowas-in), the eBGP first-AS
//! check and the "next hop is not us" rule (RFC 4271 §6.3), and the route-reflection
//! loop checks (RFC 4456 §8). A route that fails is treated as withdrawn, so an earlier
//! announcement from the same peer does not linger.
//!
//! RFC 4271's other next-hop rule (an eBGP next hop one hop away must share a subnet
//! with us) needs the node's interfaces, which the sans-IO speaker does not have: a
//! next hop off every connected subnet is refused by the kernel when installed, and
//! `tern diagnose` names it (`fib::diag`), rather than being second-guessed here.

use std::net::{IpAddr, Ipv4Addr};

use serde::Serialize;

use crate::wire::{MpNextHop, PathAttributes, Update};

/// Per-peer import settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportPolicy {
    /// Our AS on this session.
    pub local_as: u32,
    /// How many times our AS may already appear (Calico's numAllowedLocalASNumbers).
    pub allowas_in: u8,
    /// The session is eBGP.
    pub ebgp: bool,
    /// The peer's AS.
    pub peer_as: u32,
    /// Our BGP identifier.
    pub router_id: Ipv4Addr,
    /// Our route reflector cluster id, if we are a reflector.
    pub cluster_id: Option<Ipv4Addr>,
    /// Our own addresses (router id, session addresses): never a valid next hop.
    pub own: std::sync::Arc<[IpAddr]>,
}

/// Why a route was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "reason")]
pub enum Rejection {
    /// Our AS is in the path more often than allowed.
    AsPathLoop {
        /// How often it appears.
        count: usize,
        /// How often it may.
        allowed: u8,
    },
    /// An eBGP peer's route does not start with the peer's AS.
    FirstAsMismatch {
        /// The first AS in the path (none for an empty path).
        first: Option<u32>,
        /// The peer's AS.
        peer: u32,
    },
    /// Reflected back to where it came from: ORIGINATOR_ID is ours.
    OriginatorIsUs,
    /// Our cluster id is already in CLUSTER_LIST.
    ClusterLoop,
    /// The NEXT_HOP is one of our own addresses (RFC 4271 §6.3: semantically
    /// incorrect; the route is ignored).
    NextHopIsUs {
        /// The next hop.
        next_hop: IpAddr,
    },
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejection::AsPathLoop { count, allowed } => {
                write!(f, "our AS appears {count} times in AS_PATH (allowed: {allowed}; see numAllowedLocalASNumbers)")
            }
            Rejection::FirstAsMismatch {
                first: Some(a),
                peer,
            } => write!(f, "AS_PATH starts with AS {a}, not the peer's AS {peer}"),
            Rejection::FirstAsMismatch { first: None, peer } => {
                write!(f, "empty AS_PATH from eBGP peer AS {peer}")
            }
            Rejection::OriginatorIsUs => {
                f.write_str("ORIGINATOR_ID is our router id (reflected back to us)")
            }
            Rejection::ClusterLoop => {
                f.write_str("our cluster id is in CLUSTER_LIST (route reflection loop)")
            }
            Rejection::NextHopIsUs { next_hop } => {
                write!(
                    f,
                    "next hop {next_hop} is this node's own address (RFC 4271 §6.3)"
                )
            }
        }
    }
}

/// Checks a peer's route attributes.
pub fn check(a: &PathAttributes, p: &ImportPolicy) -> Result<(), Rejection> {
    let count = a.as_path.as_ref().map_or(0, |path| path.count(p.local_as));
    if count > usize::from(p.allowas_in) {
        return Err(Rejection::AsPathLoop {
            count,
            allowed: p.allowas_in,
        });
    }
    if p.ebgp {
        let first = a.as_path.as_ref().and_then(|path| path.first_as());
        if first != Some(p.peer_as) {
            return Err(Rejection::FirstAsMismatch {
                first,
                peer: p.peer_as,
            });
        }
    } else {
        if a.originator_id == Some(p.router_id) {
            return Err(Rejection::OriginatorIsUs);
        }
        if p.cluster_id.is_some_and(|c| a.cluster_list.contains(&c)) {
            return Err(Rejection::ClusterLoop);
        }
    }
    Ok(())
}

/// Checks the UPDATE's next hops (NEXT_HOP, and MP_REACH_NLRI's global address)
/// against our own addresses.
pub fn check_next_hops(u: &Update, p: &ImportPolicy) -> Result<(), Rejection> {
    let v4 = u.attributes.next_hop.map(IpAddr::V4);
    let mp = u.mp_reach.as_ref().and_then(|m| match m.next_hop {
        MpNextHop::V4(a) => Some(IpAddr::V4(a)),
        MpNextHop::V6 { global, .. } => Some(IpAddr::V6(global)),
        MpNextHop::Other(_) => None,
    });
    match [v4, mp].into_iter().flatten().find(|nh| p.own.contains(nh)) {
        Some(next_hop) => Err(Rejection::NextHopIsUs { next_hop }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::AsPath;

    fn policy(ebgp: bool) -> ImportPolicy {
        ImportPolicy {
            local_as: 64512,
            allowas_in: 0,
            ebgp,
            peer_as: if ebgp { 64601 } else { 64512 },
            router_id: Ipv4Addr::new(198, 51, 100, 1),
            cluster_id: Some(Ipv4Addr::new(198, 51, 100, 100)),
            own: vec![
                IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1)),
                "2001:db8::1"
                    .parse()
                    .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            ]
            .into(),
        }
    }

    #[test]
    fn our_own_address_is_no_next_hop() {
        let mut u = Update {
            attributes: PathAttributes {
                next_hop: Some(Ipv4Addr::new(198, 51, 100, 1)),
                ..with_path(&[64601])
            },
            ..Update::default()
        };
        let e = check_next_hops(&u, &policy(true)).map_err(|r| r.to_string());
        assert_eq!(
            e,
            Err("next hop 198.51.100.1 is this node's own address (RFC 4271 §6.3)".into())
        );
        u.attributes.next_hop = Some(Ipv4Addr::new(198, 51, 100, 2));
        assert_eq!(check_next_hops(&u, &policy(true)), Ok(()));
        u.mp_reach = Some(crate::wire::MpReach {
            family: crate::wire::Family::IPV6_UNICAST,
            next_hop: MpNextHop::V6 {
                global: "2001:db8::1"
                    .parse()
                    .unwrap_or(std::net::Ipv6Addr::UNSPECIFIED),
                link_local: None,
            },
            nlri: Vec::new(),
            unparsed: None,
        });
        assert!(matches!(
            check_next_hops(&u, &policy(true)),
            Err(Rejection::NextHopIsUs {
                next_hop: IpAddr::V6(_)
            })
        ));
    }

    fn with_path(asns: &[u32]) -> PathAttributes {
        PathAttributes {
            as_path: Some(AsPath::from_sequence(asns.iter().copied())),
            ..PathAttributes::default()
        }
    }

    #[test]
    fn as_path_loops_and_allowas_in() {
        let looped = with_path(&[64601, 64512, 64700]);
        assert_eq!(
            check(&looped, &policy(true)),
            Err(Rejection::AsPathLoop {
                count: 1,
                allowed: 0
            })
        );
        assert_eq!(
            check(
                &looped,
                &ImportPolicy {
                    allowas_in: 1,
                    ..policy(true)
                }
            ),
            Ok(())
        );
        let twice = with_path(&[64601, 64512, 64512]);
        let e = check(
            &twice,
            &ImportPolicy {
                allowas_in: 1,
                ..policy(true)
            },
        );
        assert_eq!(
            e.map_err(|r| r.to_string()),
            Err(
                "our AS appears 2 times in AS_PATH (allowed: 1; see numAllowedLocalASNumbers)"
                    .into()
            )
        );
    }

    #[test]
    fn first_as_of_ebgp_routes() {
        assert_eq!(
            check(&with_path(&[64999, 64601]), &policy(true)),
            Err(Rejection::FirstAsMismatch {
                first: Some(64999),
                peer: 64601
            })
        );
        assert!(check(&with_path(&[]), &policy(true)).is_err());
        assert_eq!(
            check(&with_path(&[]), &policy(false)),
            Ok(()),
            "iBGP routes may have an empty path"
        );
    }

    #[test]
    fn reflection_loops() {
        let back = PathAttributes {
            originator_id: Some(Ipv4Addr::new(198, 51, 100, 1)),
            ..with_path(&[])
        };
        assert_eq!(check(&back, &policy(false)), Err(Rejection::OriginatorIsUs));
        let cl = PathAttributes {
            cluster_list: vec![Ipv4Addr::new(198, 51, 100, 100)],
            ..with_path(&[])
        };
        assert_eq!(check(&cl, &policy(false)), Err(Rejection::ClusterLoop));
    }
}
