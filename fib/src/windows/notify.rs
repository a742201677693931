//! Windows change notifications: IP Helper calls back (NotifyRouteChange2,
//! NotifyIpInterfaceChange, NotifyUnicastIpAddressChange) on a system thread, and the
//! daemon hears what the Linux watcher tells it: a route row left the table (tern's,
//! if it had one for that prefix: put it back), or something changed that only a
//! re-read can tell (a route row's parameters, an interface, an address).
//!
//! [`event`] decides what a notification means and is tested everywhere; the
//! registration and the `extern "system"` callbacks are Windows only.

use ipnet::IpNet;

/// What one notification means for tern's routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// A route row for this prefix was deleted.
    RouteRemoved(IpNet),
    /// Re-read the table: a row changed in place, or an interface or address changed
    /// (connected subnets and next-hop reachability may differ now).
    Resync,
}

/// IP Helper's MIB_NOTIFICATION_TYPE values (windows-sys names them only on Windows).
pub mod kind {
    /// MibParameterNotification: a row's parameters changed.
    pub const PARAMETER: i32 = 0;
    /// MibAddInstance.
    pub const ADD: i32 = 1;
    /// MibDeleteInstance.
    pub const DELETE: i32 = 2;
    /// MibInitialNotification: sent once at registration when asked for.
    pub const INITIAL: i32 = 3;
}

/// The meaning of a route notification of `kind` for the row with destination
/// `prefix` (`None` when the row could not be read). An added row needs nothing:
/// Windows keeps several rows per prefix, so another row never displaces tern's.
pub fn route_event(kind: i32, prefix: Option<IpNet>) -> Option<WatchEvent> {
    match (kind, prefix) {
        (kind::DELETE, Some(p)) => Some(WatchEvent::RouteRemoved(p)),
        (kind::DELETE, None) | (kind::PARAMETER, _) => Some(WatchEvent::Resync),
        _ => None,
    }
}

/// The meaning of an interface or address notification.
pub fn interface_event(kind: i32) -> Option<WatchEvent> {
    (kind != kind::INITIAL).then_some(WatchEvent::Resync)
}

#[cfg(windows)]
pub use registration::{watch, Watch};

#[cfg(windows)]
mod registration {
    use std::ffi::c_void;

    use ipnet::IpNet;
    use windows_sys::Win32::Foundation::{HANDLE, NO_ERROR};
    use windows_sys::Win32::NetworkManagement::IpHelper::{
        CancelMibChangeNotify2, NotifyIpInterfaceChange, NotifyRouteChange2,
        NotifyUnicastIpAddressChange, MIB_IPFORWARD_ROW2, MIB_IPINTERFACE_ROW,
        MIB_NOTIFICATION_TYPE, MIB_UNICASTIPADDRESS_ROW,
    };
    use windows_sys::Win32::Networking::WinSock::AF_UNSPEC;

    use super::{interface_event, route_event, WatchEvent};
    use crate::FibError;

    /// Where events go; called on IP Helper's threads, so it must be quick and must
    /// not block (the daemon's sink only records and wakes the FIB task).
    type Sink = dyn Fn(WatchEvent) + Send + Sync;

    /// The registrations; dropping it cancels them (waiting for callbacks in flight)
    /// and only then frees the sink they point to.
    pub struct Watch {
        handles: Vec<HANDLE>,
        sink: *mut Box<Sink>,
    }

    // SAFETY: the handles are opaque IP Helper handles, valid from any thread; the sink
    // is Send + Sync and only read through the pointer until Drop frees it.
    unsafe impl Send for Watch {}
    // SAFETY: as above; &Watch exposes nothing.
    unsafe impl Sync for Watch {}

    impl Drop for Watch {
        fn drop(&mut self) {
            for h in self.handles.drain(..) {
                // SAFETY: `h` came from a successful Notify* call and is cancelled once;
                // CancelMibChangeNotify2 returns after callbacks in flight complete.
                unsafe { CancelMibChangeNotify2(h) };
            }
            // SAFETY: `sink` came from Box::into_raw in `watch` and no callback can run
            // any more (every registration is cancelled above).
            drop(unsafe { Box::from_raw(self.sink) });
        }
    }

    /// # Safety
    /// `ctx` is the sink pointer registered by [`watch`], alive until the [`Watch`] is
    /// dropped; `row` is null or a row IP Helper owns for the duration of the call.
    unsafe extern "system" fn on_route(
        ctx: *const c_void,
        row: *const MIB_IPFORWARD_ROW2,
        kind: MIB_NOTIFICATION_TYPE,
    ) {
        // SAFETY: the function's contract: a null row is checked, a live one is read.
        let prefix = unsafe { row.as_ref() }.and_then(|r| {
            let dst = super::super::iphlp::from_sockaddr(&r.DestinationPrefix.Prefix)?;
            IpNet::new(dst, r.DestinationPrefix.PrefixLength).ok()
        });
        if let Some(e) = route_event(kind, prefix) {
            // SAFETY: the function's contract: `ctx` is the live sink.
            unsafe { deliver(ctx, e) };
        }
    }

    /// # Safety
    /// As [`on_route`].
    unsafe extern "system" fn on_interface(
        ctx: *const c_void,
        _row: *const MIB_IPINTERFACE_ROW,
        kind: MIB_NOTIFICATION_TYPE,
    ) {
        if let Some(e) = interface_event(kind) {
            // SAFETY: the function's contract: `ctx` is the live sink.
            unsafe { deliver(ctx, e) };
        }
    }

    /// # Safety
    /// As [`on_route`].
    unsafe extern "system" fn on_address(
        ctx: *const c_void,
        _row: *const MIB_UNICASTIPADDRESS_ROW,
        kind: MIB_NOTIFICATION_TYPE,
    ) {
        if let Some(e) = interface_event(kind) {
            // SAFETY: the function's contract: `ctx` is the live sink.
            unsafe { deliver(ctx, e) };
        }
    }

    /// # Safety
    /// `ctx` is a live `*mut Box<Sink>` from [`watch`].
    unsafe fn deliver(ctx: *const c_void, e: WatchEvent) {
        // SAFETY: the function's contract.
        if let Some(sink) = unsafe { ctx.cast::<Box<Sink>>().as_ref() } {
            // A panic must not unwind into IP Helper's thread.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink(e)));
        }
    }

    /// Registers for route, interface and address changes (both families); events go to
    /// `sink` until the returned [`Watch`] is dropped.
    pub fn watch(sink: impl Fn(WatchEvent) + Send + Sync + 'static) -> Result<Watch, FibError> {
        let boxed: Box<Sink> = Box::new(sink);
        let mut w = Watch {
            handles: Vec::new(),
            sink: Box::into_raw(Box::new(boxed)),
        };
        let ctx = w.sink.cast::<c_void>().cast_const();
        let fail = |call: &str, code: u32| FibError::Kernel {
            what: format!("{call} (watching for changes)"),
            reason: super::super::iphlp::reason(call, code),
        };
        let mut h: HANDLE = std::ptr::null_mut();
        // SAFETY: `ctx` stays valid until `w` is dropped, which cancels the
        // registration first; `h` is a valid out-pointer.
        let rc = unsafe { NotifyRouteChange2(AF_UNSPEC, Some(on_route), ctx, false, &mut h) };
        if rc != NO_ERROR {
            return Err(fail("NotifyRouteChange2", rc));
        }
        // Wine's stubs succeed without a handle: nothing to cancel then.
        if !h.is_null() {
            w.handles.push(h);
        }
        let mut h: HANDLE = std::ptr::null_mut();
        // SAFETY: as above.
        let rc =
            unsafe { NotifyIpInterfaceChange(AF_UNSPEC, Some(on_interface), ctx, false, &mut h) };
        if rc != NO_ERROR {
            return Err(fail("NotifyIpInterfaceChange", rc));
        }
        if !h.is_null() {
            w.handles.push(h);
        }
        let mut h: HANDLE = std::ptr::null_mut();
        // SAFETY: as above.
        let rc = unsafe {
            NotifyUnicastIpAddressChange(AF_UNSPEC, Some(on_address), ctx, false, &mut h)
        };
        if rc != NO_ERROR {
            return Err(fail("NotifyUnicastIpAddressChange", rc));
        }
        if !h.is_null() {
            w.handles.push(h);
        }
        Ok(w)
    }

    #[cfg(test)]
    mod tests {
        use std::sync::{Arc, Mutex};

        use windows_sys::Win32::Networking::WinSock::AF_INET;

        use super::*;

        /// The callback path, as IP Helper would drive it: a deleted row reaches the
        /// sink as its prefix, through the registered context pointer.
        #[test]
        fn a_deleted_row_reaches_the_sink_through_the_callback() {
            let got = Arc::new(Mutex::new(Vec::new()));
            let g = Arc::clone(&got);
            let w = match watch(move |e| g.lock().unwrap().push(e)) {
                Ok(w) => w,
                Err(e) => panic!("{e}"),
            };
            let mut row = MIB_IPFORWARD_ROW2::default();
            row.DestinationPrefix.Prefix.si_family = AF_INET;
            row.DestinationPrefix.Prefix.Ipv4.sin_addr.S_un.S_addr =
                u32::from(std::net::Ipv4Addr::new(198, 18, 4, 0)).to_be();
            row.DestinationPrefix.PrefixLength = 26;
            let ctx = w.sink.cast::<c_void>().cast_const();
            // SAFETY: `ctx` is the live sink of `w`; `row` lives across the calls.
            unsafe {
                on_route(ctx, &row, super::super::kind::DELETE);
                on_route(ctx, &row, super::super::kind::ADD);
                on_route(ctx, std::ptr::null(), super::super::kind::DELETE);
                on_address(ctx, std::ptr::null(), super::super::kind::ADD);
            }
            drop(w);
            let want = vec![
                WatchEvent::RouteRemoved("198.18.4.0/26".parse().unwrap()),
                WatchEvent::Resync,
                WatchEvent::Resync,
            ];
            assert_eq!(*got.lock().unwrap(), want);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletions_name_their_prefix_and_changes_in_place_ask_for_a_reread() {
        let p: IpNet = "198.18.4.0/26".parse().unwrap();
        assert_eq!(
            route_event(kind::DELETE, Some(p)),
            Some(WatchEvent::RouteRemoved(p))
        );
        assert_eq!(route_event(kind::DELETE, None), Some(WatchEvent::Resync));
        assert_eq!(
            route_event(kind::PARAMETER, Some(p)),
            Some(WatchEvent::Resync)
        );
        assert_eq!(
            route_event(kind::ADD, Some(p)),
            None,
            "rows coexist on Windows"
        );
        assert_eq!(route_event(kind::INITIAL, Some(p)), None);
        assert_eq!(interface_event(kind::ADD), Some(WatchEvent::Resync));
        assert_eq!(interface_event(kind::INITIAL), None);
    }
}
