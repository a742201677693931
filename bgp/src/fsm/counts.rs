//! Messages of one session by type, each direction, counted where the state machine
//! frames what it reads and emits what it sends (`tern peers ADDR`, `tern status -o
//! wide`: vtysh's MsgRcvd / MsgSent). Counted by the header's type octet, so a message
//! that later fails to decode still counts as received.

use serde::Serialize;

/// Offset of the type octet in a BGP header (after the 16-octet marker and length).
const TYPE_OFFSET: usize = 18;

/// Messages of one direction, by type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MessageCounts {
    /// OPEN.
    pub open: u64,
    /// UPDATE.
    pub update: u64,
    /// NOTIFICATION.
    pub notification: u64,
    /// KEEPALIVE.
    pub keepalive: u64,
    /// ROUTE-REFRESH.
    pub route_refresh: u64,
}

impl MessageCounts {
    /// Counts one whole message (header included); too short or an unknown type counts
    /// nowhere.
    pub fn count(&mut self, message: &[u8]) {
        let slot = match message.get(TYPE_OFFSET) {
            Some(1) => &mut self.open,
            Some(2) => &mut self.update,
            Some(3) => &mut self.notification,
            Some(4) => &mut self.keepalive,
            Some(5) => &mut self.route_refresh,
            _ => return,
        };
        *slot += 1;
    }

    /// Every message counted.
    pub fn total(&self) -> u64 {
        self.open + self.update + self.notification + self.keepalive + self.route_refresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_by_the_type_octet() {
        let mut c = MessageCounts::default();
        let mut keepalive = vec![0xff; 16];
        keepalive.extend([0, 19, 4]);
        c.count(&keepalive);
        c.count(&keepalive);
        let mut update = keepalive.clone();
        update[TYPE_OFFSET] = 2;
        c.count(&update);
        c.count(&[0xff; 10]);
        update[TYPE_OFFSET] = 9;
        c.count(&update);
        assert_eq!((c.keepalive, c.update, c.total()), (2, 1, 3));
    }
}
