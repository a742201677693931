//! The tunnel rule: a wanted next hop that is `onlink` with no interface (an IP pool
//! that asks for IPIP toward it) goes out through the IPIP device, as Calico's BIRD
//! programs it (`via NH dev tunl0 onlink`). The daemon leaves the interface open
//! because only the FIB task knows the interfaces.

use std::borrow::Cow;

use crate::{FailureKind, Route, RouteFailure, RouteKind};

/// The IPIP tunnel device, as Calico names it.
pub const TUNNEL_DEVICE: &str = "tunl0";

/// Whether a wanted route goes through the tunnel (onlink, interface left open).
pub fn needs_tunnel(r: &Route) -> bool {
    matches!(&r.kind, RouteKind::Unicast(h) if h.iter().any(|n| n.onlink && n.interface.is_none()))
}

/// The route with its open onlink next hops put on interface `index`.
pub fn through(r: &Route, index: u32) -> Route {
    let mut r = r.clone();
    if let RouteKind::Unicast(hops) = &mut r.kind {
        for n in std::sync::Arc::make_mut(hops)
            .iter_mut()
            .filter(|n| n.onlink && n.interface.is_none())
        {
            n.interface = Some(index);
        }
    }
    r
}

/// The wanted route as the kernel should get it, given the tunnel device's index (if
/// it exists); without the device, a refusal of our own: the route is not sent
/// plainly, which would forward outside the tunnel the pool asks for.
pub fn resolve(want: &Route, tunnel: Option<u32>) -> Result<Cow<'_, Route>, RouteFailure> {
    if !needs_tunnel(want) {
        return Ok(Cow::Borrowed(want));
    }
    match tunnel {
        Some(i) => Ok(Cow::Owned(through(want, i))),
        None => Err(RouteFailure {
            prefix: want.prefix,
            change: "add",
            kind: FailureKind::ByTern,
            reason: format!(
                "no {TUNNEL_DEVICE} device, and the IP pool asks for IPIP (load the ipip module; calico-node creates {TUNNEL_DEVICE})"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NextHop;

    fn route(onlink: bool) -> Route {
        Route {
            prefix: "198.18.1.0/26".parse().unwrap_or_else(|e| panic!("{e}")),
            kind: RouteKind::unicast(vec![NextHop {
                onlink,
                ..NextHop::via("198.51.100.2".parse().unwrap_or_else(|e| panic!("{e}")))
            }]),
            metric: 0,
            table: 254,
        }
    }

    #[test]
    fn an_open_onlink_hop_goes_through_the_tunnel_or_is_refused() {
        let plain = route(false);
        assert_eq!(resolve(&plain, None).as_deref(), Ok(&plain));
        let ipip = route(true);
        let on = resolve(&ipip, Some(7)).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            matches!(&on.kind, RouteKind::Unicast(h) if h[0].interface == Some(7) && h[0].onlink)
        );
        let refused = resolve(&ipip, None).err();
        assert!(refused.is_some_and(|f| f.reason.contains(TUNNEL_DEVICE)));
    }
}
