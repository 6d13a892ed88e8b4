//! Who holds a listener's connection slots. A connection is *pending* from its accept
//! until its TLS handshake completes (plain HTTP: until its first byte), then
//! *established* until it closes. Pending connections are cheap to cut — nobody has
//! proven anything yet — so the slots are kept for established ones:
//!
//! - At most `--max-connections` in all, at most `--max-pending-connections` pending.
//!   When either is full, the new connection takes the slot of a pending one: the oldest
//!   that has sent nothing yet, else the oldest. Established connections are never
//!   evicted; when every slot is established, the new connection is closed at once.
//!   A client that opens connections and stays silent (or dribbles its ClientHello)
//!   therefore holds at most the pending slots, each at most `--tls-handshake-timeout`,
//!   and loses them to the next arrivals — among them the apiserver, whose ClientHello
//!   comes at once. A connection counts as talking from the accept on when its first
//!   bytes are already there, else from the moment its task sees them; the accept loop
//!   yields after each accept, so that a talking connection's task runs before a burst
//!   of newer ones can evict it.
//! - At most `--max-connections-per-peer` per source, pending and established: one
//!   address cannot take every slot. A source is an IPv4 address, or an IPv6 /64 (one
//!   host is routinely given a whole /64, so keying IPv6 by full address would give it
//!   2^64 caps); an IPv4-mapped IPv6 address counts as its IPv4 address ([`peer_key`]). A new connection of an address at its cap takes the
//!   slot of that address's own oldest silent pending connection (else its oldest
//!   pending one); only when all of them are established is it closed at once. Behind a
//!   NAT, or on loopback where the apiserver shares the attacker's address, the cap does
//!   not tell them apart, and the apiserver's connection then competes only with the
//!   attacker's silent ones, which it outlives.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use tokio::sync::oneshot;

/// The bounds of the slots (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SlotLimits {
    pub(super) max_connections: u32,
    pub(super) max_pending: u32,
    pub(super) max_per_peer: u32,
}

/// Why a new connection was closed at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// Its source IP holds `--max-connections-per-peer` already.
    PeerFull,
    /// Every slot is held by an established connection.
    Full,
}

/// A connection's record.
struct Record {
    peer: IpAddr,
    /// `Some` while pending: the signal that evicts it.
    evict: Option<oneshot::Sender<()>>,
    /// Pending and has sent a byte.
    talking: bool,
}

#[derive(Default)]
struct State {
    /// Every connection holding a slot, by the order of its accept.
    conns: BTreeMap<u64, Record>,
    pending: u32,
    per_peer: HashMap<IpAddr, u32>,
    next: u64,
    evicted: u64,
}

/// A listener's slots; shared by its accept loop and its connection tasks.
pub(super) struct Slots {
    limits: SlotLimits,
    state: Mutex<State>,
}

/// A slot held by a connection; released when dropped.
pub(super) struct Slot {
    slots: Arc<Slots>,
    id: u64,
}

/// Fires when a pending slot was given to a newer connection.
pub(super) type Evicted = oneshot::Receiver<()>;

impl Slots {
    pub(super) fn new(limits: SlotLimits) -> Arc<Self> {
        Arc::new(Self {
            limits: SlotLimits {
                max_pending: limits.max_pending.clamp(1, limits.max_connections),
                ..limits
            },
            state: Mutex::new(State::default()),
        })
    }

    fn state(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    /// A pending slot for a new connection from `peer` (`talking`: its first bytes are
    /// already there), and the signal of its eviction; evicts a pending connection when
    /// the listener or its pending budget is full.
    pub(super) fn admit(
        self: &Arc<Self>,
        peer: IpAddr,
        talking: bool,
    ) -> Result<(Slot, Evicted), Refused> {
        let peer = peer_key(peer);
        let mut st = self.state();
        if st.per_peer.get(&peer).copied().unwrap_or(0) >= self.limits.max_per_peer
            && !evict_one(&mut st, Some(peer))
        {
            return Err(Refused::PeerFull);
        }
        let full = st.conns.len() >= self.limits.max_connections as usize;
        if (full || st.pending >= self.limits.max_pending) && !evict_one(&mut st, None) {
            return Err(Refused::Full);
        }
        let id = st.next;
        st.next += 1;
        let (tx, rx) = oneshot::channel();
        st.conns.insert(
            id,
            Record {
                peer,
                evict: Some(tx),
                talking,
            },
        );
        st.pending += 1;
        *st.per_peer.entry(peer).or_default() += 1;
        Ok((
            Slot {
                slots: self.clone(),
                id,
            },
            rx,
        ))
    }

    /// Connections held now: (pending, established).
    pub(super) fn held(&self) -> (u32, u32) {
        let st = self.state();
        (st.pending, st.conns.len() as u32 - st.pending)
    }

    /// Pending connections evicted so far.
    pub(super) fn evicted(&self) -> u64 {
        self.state().evicted
    }
}

/// The source a connection from `ip` is counted under: an IPv4 address as it is, an IPv6
/// address by its /64 prefix (the rest zeroed), an IPv4-mapped IPv6 address as its IPv4.
pub(super) fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(
                v6.to_bits() & !((1u128 << 64) - 1),
            )),
        },
    }
}

/// Evict the oldest silent pending connection, else the oldest pending one (of `peer`
/// only, when given); false when there is none.
fn evict_one(st: &mut State, peer: Option<IpAddr>) -> bool {
    let pending = || {
        st.conns
            .iter()
            .filter(|(_, r)| r.evict.is_some() && peer.is_none_or(|p| r.peer == p))
    };
    let Some(id) = pending()
        .find(|(_, r)| !r.talking)
        .or_else(|| pending().next())
        .map(|(id, _)| *id)
    else {
        return false;
    };
    if let Some(mut r) = remove(st, id)
        && let Some(evict) = r.evict.take()
    {
        let _ = evict.send(());
    }
    st.evicted += 1;
    true
}

/// Remove `id`'s record and its counts.
fn remove(st: &mut State, id: u64) -> Option<Record> {
    let r = st.conns.remove(&id)?;
    if r.evict.is_some() {
        st.pending -= 1;
    }
    if let Some(n) = st.per_peer.get_mut(&r.peer) {
        *n -= 1;
        if *n == 0 {
            st.per_peer.remove(&r.peer);
        }
    }
    Some(r)
}

impl Slot {
    /// The connection sent its first byte: evicted after the silent ones.
    pub(super) fn talking(&self) {
        if let Some(r) = self.slots.state().conns.get_mut(&self.id) {
            r.talking = true;
        }
    }

    /// The handshake completed: the slot is established, never evicted. False when it
    /// was evicted meanwhile (the connection must close).
    pub(super) fn establish(&self) -> bool {
        let mut st = self.slots.state();
        let Some(r) = st.conns.get_mut(&self.id) else {
            return false;
        };
        if r.evict.take().is_some() {
            st.pending -= 1;
        }
        true
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        remove(&mut self.slots.state(), self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn slots(max_connections: u32, max_pending: u32, max_per_peer: u32) -> Arc<Slots> {
        Slots::new(SlotLimits {
            max_connections,
            max_pending,
            max_per_peer,
        })
    }

    #[test]
    fn one_peer_cannot_take_every_slot_another_still_connects() {
        let s = slots(8, 8, 3);
        let attacker: Vec<Slot> = (0..3).map(|_| s.admit(ip(1), false).unwrap().0).collect();
        for a in &attacker {
            assert!(a.establish());
        }
        assert_eq!(s.admit(ip(1), false).err(), Some(Refused::PeerFull));
        let (apiserver, _) = s.admit(ip(2), false).expect("another peer gets a slot");
        assert!(apiserver.establish());
        drop(attacker);
        assert_eq!(s.held(), (0, 1));
        assert!(
            s.admit(ip(1), false).is_ok(),
            "a peer's count falls as it closes"
        );
    }

    #[test]
    fn ipv6_peers_are_counted_by_their_64_prefix() {
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        let s = slots(100, 100, 3);
        // One host rotating through the addresses of its /64.
        let mine: Vec<Slot> = (1..=3)
            .map(|i| {
                s.admit(v6(&format!("2001:db8:1:2::{i:x}")), false)
                    .unwrap()
                    .0
            })
            .collect();
        for m in &mine {
            assert!(m.establish());
        }
        assert_eq!(
            s.admit(v6("2001:db8:1:2:ffff:ffff:ffff:ffff"), false).err(),
            Some(Refused::PeerFull),
            "another address of the same /64 is the same peer"
        );
        assert!(
            s.admit(v6("2001:db8:1:3::1"), false).is_ok(),
            "the next /64 is another peer"
        );
        // An IPv4-mapped address is its IPv4 address.
        assert_eq!(
            peer_key(v6("::ffff:10.0.0.1")),
            ip(1),
            "mapped IPv4 keyed as IPv4"
        );
        assert_eq!(peer_key(ip(7)), ip(7));
        drop(mine);
        assert!(s.admit(v6("2001:db8:1:2::9"), false).is_ok());
    }

    #[test]
    fn silent_pending_connections_are_evicted_first_and_established_never() {
        let s = slots(4, 3, 100);
        let (established, _) = s.admit(ip(9), false).unwrap();
        assert!(established.establish());
        let (silent1, mut silent1_evicted) = s.admit(ip(1), false).unwrap();
        let (talking, mut talking_evicted) = s.admit(ip(2), false).unwrap();
        talking.talking();
        let (silent2, mut silent2_evicted) = s.admit(ip(1), false).unwrap();
        assert_eq!(s.held(), (3, 1));
        // The listener is full: the next arrival takes the oldest silent slot.
        let (_newer, mut newer_evicted) = s.admit(ip(3), false).unwrap();
        assert!(silent1_evicted.try_recv().is_ok());
        assert!(
            !silent1.establish(),
            "an evicted connection cannot establish"
        );
        // Then the next silent ones, oldest first; never the talking one while a silent
        // one is left.
        let _newest = s.admit(ip(4), false).unwrap();
        assert!(silent2_evicted.try_recv().is_ok());
        let _last = s.admit(ip(5), false).unwrap();
        assert!(newer_evicted.try_recv().is_ok(), "silent before talking");
        assert!(talking_evicted.try_recv().is_err());
        assert!(
            talking.establish(),
            "a talking connection outlived the silent ones"
        );
        assert_eq!(s.evicted(), 3);
        drop(silent1);
        drop(silent2);
        assert_eq!(s.held(), (2, 2));
    }

    #[test]
    fn a_connection_whose_bytes_were_there_at_accept_counts_as_talking() {
        let s = slots(8, 2, 100);
        let (apiserver, mut apiserver_evicted) = s.admit(ip(2), true).unwrap();
        let (_silent, mut silent_evicted) = s.admit(ip(1), false).unwrap();
        let _newer = s.admit(ip(1), false).unwrap();
        assert!(
            silent_evicted.try_recv().is_ok(),
            "the silent one went first, though the talking one is older"
        );
        assert!(apiserver_evicted.try_recv().is_err());
        assert!(apiserver.establish());
    }

    #[test]
    fn a_peer_at_its_cap_loses_its_own_silent_connection_not_the_new_one() {
        // Loopback: the attacker's silent connections and the apiserver share 10.0.0.1.
        let s = slots(100, 100, 3);
        let (_a1, mut a1_evicted) = s.admit(ip(1), false).unwrap();
        let (established, _) = s.admit(ip(1), true).unwrap();
        assert!(established.establish());
        let (_a2, mut a2_evicted) = s.admit(ip(1), false).unwrap();
        let (apiserver, _) = s.admit(ip(1), true).expect("the silent ones make room");
        assert!(a1_evicted.try_recv().is_ok());
        assert!(a2_evicted.try_recv().is_err());
        assert!(apiserver.establish());
        let (_other, mut other_evicted) = s.admit(ip(2), false).unwrap();
        let _a3 = s.admit(ip(1), false).unwrap();
        assert!(
            a2_evicted.try_recv().is_ok(),
            "its own, never another peer's"
        );
        assert!(other_evicted.try_recv().is_err());
        assert_eq!(s.held(), (2, 2));
    }

    #[test]
    fn when_every_slot_is_established_a_new_connection_is_refused() {
        let s = slots(2, 2, 100);
        let (a, _) = s.admit(ip(1), false).unwrap();
        let (b, _) = s.admit(ip(2), false).unwrap();
        assert!(a.establish() && b.establish());
        assert_eq!(s.admit(ip(3), false).err(), Some(Refused::Full));
        drop(a);
        assert!(s.admit(ip(3), false).is_ok());
    }

    #[test]
    fn the_pending_budget_leaves_the_other_slots_to_established_connections() {
        let s = slots(10, 2, 100);
        // An attacker's endless silent connections hold at most two slots.
        let mut attacker = Vec::new();
        for _ in 0..50 {
            attacker.push(s.admit(ip(1), false).unwrap());
            assert!(s.held().0 <= 2);
        }
        // Eight clients connect and handshake, whatever the attacker does meanwhile.
        let mut clients = Vec::new();
        for i in 0..8 {
            let (c, _) = s.admit(ip(10 + i), false).unwrap();
            c.talking();
            attacker.push(s.admit(ip(1), false).unwrap());
            assert!(c.establish(), "client {i} evicted by a silent connection");
            clients.push(c);
        }
        assert_eq!(
            s.held(),
            (1, 8),
            "eight clients established, the attacker one pending"
        );
    }
}
