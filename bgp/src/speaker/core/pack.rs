//! When the Loc-RIB's table is packed ([`crate::rib::Rib::pack`]): once at least
//! [`PACK_AFTER`] prefixes came or went and the table then kept its prefixes for
//! [`PACK_QUIET`]. Packing while a table still arrives would redo the work for every
//! piece; once it is in, packing halves the table's memory.

use std::time::{Duration, Instant};

use super::{Output, Speaker, TimerId};

/// Prefixes added or removed before packing is worth a walk of the table.
pub(super) const PACK_AFTER: usize = 4096;
/// How long the table keeps its prefixes before it is packed.
pub(super) const PACK_QUIET: Duration = Duration::from_secs(1);

/// Whether the pack timer is armed, and when the table last gained or lost a prefix.
#[derive(Debug, Default)]
pub(super) struct Packing {
    armed: bool,
    /// [`crate::rib::Rib::unpacked`] when last looked at.
    seen: usize,
    changed_at: Option<Instant>,
}

impl Speaker {
    /// After an input: notes whether prefixes came or went, and arms the timer once
    /// enough did.
    pub(super) fn note_shape(&mut self, now: Instant) {
        let n = self.rib.unpacked();
        if n == self.packing.seen {
            return;
        }
        self.packing.seen = n;
        self.packing.changed_at = Some(now);
        if n >= PACK_AFTER && !self.packing.armed {
            self.arm_pack(now + PACK_QUIET);
        }
    }

    /// The pack timer expired: packs if the table kept its prefixes since long
    /// enough, else waits for that.
    pub(super) fn pack_timer(&mut self, now: Instant) {
        self.packing.armed = false;
        let due = self.packing.changed_at.map_or(now, |t| t + PACK_QUIET);
        if now < due {
            return self.arm_pack(due);
        }
        if self.rib.unpacked() >= PACK_AFTER {
            self.rib.pack();
            self.out.push(Output::Packed);
        }
        self.packing.seen = self.rib.unpacked();
    }

    fn arm_pack(&mut self, at: Instant) {
        self.packing.armed = true;
        self.out.push(Output::Timer {
            id: TimerId::Pack,
            at: Some(at),
        });
    }
}
