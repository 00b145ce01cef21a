//! The capability table: which unix socket each live capability of each bot targets.
//!
//! A capability is found only by (bot, kind) for the RFB servers, or by its own id for terminal
//! sessions, or (a terminal a dropped connection left, docs/screens.md#reconnecting) by its bot,
//! control lease and session key together; its socket path is chosen here from a counter, never
//! from anything the control plane sent (docs/screens.md#live-views: never a path built from a
//! token). Removing an entry is the
//! first step of every revocation (docs/screens.md#teardown): once it is out of the table no new
//! connection can reach it. What runs behind an entry (`T`) is the gateway's business; this module
//! is plain data.

use gateway_proto::live::{CapabilityKind, RevokeScope};
use gateway_proto::BotId;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// One live capability: a socket, what serves it, and its connected clients.
#[derive(Debug)]
pub struct Capability<T> {
    pub id: u64,
    pub kind: CapabilityKind,
    /// The control lease a terminal belongs to.
    pub lease: Option<String>,
    /// The desktop instance it was made for (a restarted display gets a new epoch).
    pub epoch: u64,
    pub socket: PathBuf,
    /// Cancelled on revocation: every relay of this capability stops.
    pub cancel: CancellationToken,
    /// Each relay holds a clone of the sender; `clients_gone` waits until all are dropped.
    clients: Option<mpsc::Sender<()>>,
    clients_rx: mpsc::Receiver<()>,
    /// A terminal that outlives its connection: how it is found again.
    pub reattach: Option<Reattach>,
    pub serving: T,
}

/// How a terminal session is found again after its connection dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reattach {
    /// The session key the control plane derived for the page and URL that opened it.
    pub key: String,
    /// Counts the connections given to it: a grace period that began before the latest one
    /// does not end the session.
    pub attachments: u64,
    /// While nobody is connected, when its connection ended, in the order of
    /// [`CapTable::detach`] (`None` while a connection is).
    pub detached: Option<u64>,
}

/// Held by a relay for as long as its client is connected.
#[derive(Debug)]
pub struct ClientGuard(#[allow(dead_code)] mpsc::Sender<()>);

impl<T> Capability<T> {
    pub fn new(
        id: u64,
        kind: CapabilityKind,
        lease: Option<String>,
        epoch: u64,
        socket: PathBuf,
        serving: T,
    ) -> Self {
        let (tx, rx) = mpsc::channel(1);
        Self {
            id,
            kind,
            lease,
            epoch,
            socket,
            cancel: CancellationToken::new(),
            clients: Some(tx),
            clients_rx: rx,
            reattach: None,
            serving,
        }
    }

    /// The same capability, found again by `key` after a dropped connection.
    pub fn with_reattach(mut self, key: String) -> Self {
        self.reattach = Some(Reattach {
            key,
            attachments: 1,
            detached: None,
        });
        self
    }

    /// A guard for one more connected client, or `None` once the capability is being revoked.
    pub fn client(&self) -> Option<ClientGuard> {
        self.clients.clone().map(ClientGuard)
    }

    /// How many clients are connected now.
    pub fn connected(&self) -> usize {
        self.clients
            .as_ref()
            .map_or(0, |tx| tx.strong_count().saturating_sub(1))
    }

    /// Disconnects every client and waits until their relays have let go (or `limit` passed).
    /// Returns whether they all did.
    pub async fn disconnect(&mut self, limit: std::time::Duration) -> bool {
        self.cancel.cancel();
        self.clients = None;
        tokio::time::timeout(limit, self.clients_rx.recv())
            .await
            .is_ok()
    }
}

/// The capabilities of one bot.
#[derive(Debug)]
struct BotCaps<T> {
    view: Option<Capability<T>>,
    control: Option<Capability<T>>,
    terminals: Vec<Capability<T>>,
}

impl<T> Default for BotCaps<T> {
    fn default() -> Self {
        Self {
            view: None,
            control: None,
            terminals: Vec::new(),
        }
    }
}

impl<T> BotCaps<T> {
    fn is_empty(&self) -> bool {
        self.view.is_none() && self.control.is_none() && self.terminals.is_empty()
    }
}

/// Every live capability of this guest.
#[derive(Debug)]
pub struct CapTable<T> {
    dir: PathBuf,
    next: u64,
    /// Orders the detachments of terminals (which waited longest).
    detachments: u64,
    bots: HashMap<BotId, BotCaps<T>>,
}

impl<T> CapTable<T> {
    /// A table whose sockets live in `dir` (a private 0700 directory).
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            next: 0,
            detachments: 0,
            bots: HashMap::new(),
        }
    }

    /// The directory of the sockets.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A fresh id and the socket path that goes with it; no two capabilities ever share one,
    /// so a socket of a revoked capability is never reused for another.
    pub fn allocate(&mut self, kind: CapabilityKind) -> (u64, PathBuf) {
        self.next += 1;
        let id = self.next;
        (id, self.dir.join(format!("{id}-{}.sock", kind.as_str())))
    }

    /// The bot's RFB capability of `kind` (View or Control).
    pub fn rfb(&mut self, bot: &BotId, kind: CapabilityKind) -> Option<&mut Capability<T>> {
        let caps = self.bots.get_mut(bot)?;
        match kind {
            CapabilityKind::View => caps.view.as_mut(),
            CapabilityKind::Control => caps.control.as_mut(),
            CapabilityKind::Terminal => None,
        }
    }

    /// Takes the bot's RFB capability of `kind` out of the table.
    pub fn take_rfb(&mut self, bot: &BotId, kind: CapabilityKind) -> Option<Capability<T>> {
        let caps = self.bots.get_mut(bot)?;
        let taken = match kind {
            CapabilityKind::View => caps.view.take(),
            CapabilityKind::Control => caps.control.take(),
            CapabilityKind::Terminal => None,
        };
        self.forget_if_empty(bot);
        taken
    }

    /// Adds a capability for `bot`. An RFB capability replaces none: the caller takes the old
    /// one out first.
    pub fn insert(&mut self, bot: &BotId, cap: Capability<T>) {
        let caps = self.bots.entry(bot.clone()).or_default();
        match cap.kind {
            CapabilityKind::View => caps.view = Some(cap),
            CapabilityKind::Control => caps.control = Some(cap),
            CapabilityKind::Terminal => caps.terminals.push(cap),
        }
    }

    /// Takes the terminal session `id` of `bot` out of the table (it ended on its own).
    pub fn take_terminal(&mut self, bot: &BotId, id: u64) -> Option<Capability<T>> {
        let caps = self.bots.get_mut(bot)?;
        let at = caps.terminals.iter().position(|c| c.id == id)?;
        let taken = caps.terminals.remove(at);
        self.forget_if_empty(bot);
        Some(taken)
    }

    /// The terminal of `bot` kept under `key` for `lease`: never one of another bot, another
    /// lease, or one made without a key.
    pub fn terminal_by_key(
        &mut self,
        bot: &BotId,
        lease: Option<&str>,
        key: &str,
    ) -> Option<&mut Capability<T>> {
        let caps = self.bots.get_mut(bot)?;
        caps.terminals.iter_mut().find(|c| {
            c.lease.as_deref() == lease && c.reattach.as_ref().is_some_and(|r| r.key == key)
        })
    }

    /// The terminal session `id` of `bot`.
    pub fn terminal(&mut self, bot: &BotId, id: u64) -> Option<&mut Capability<T>> {
        let caps = self.bots.get_mut(bot)?;
        caps.terminals.iter_mut().find(|c| c.id == id)
    }

    /// Marks the kept terminal `id` of `bot` as waiting for a reattachment (its connection
    /// ended) and returns how many connections it has had, or `None` if it is not a kept
    /// terminal of the bot.
    pub fn detach(&mut self, bot: &BotId, id: u64) -> Option<u64> {
        self.detachments += 1;
        let order = self.detachments;
        let re = self.terminal(bot, id)?.reattach.as_mut()?;
        re.detached = Some(order);
        Some(re.attachments)
    }

    /// The ids of the bot's detached terminals beyond the `keep` detached most recently,
    /// longest detached first (the ones to end to stay within a bound).
    pub fn detached_beyond(&self, bot: &BotId, keep: usize) -> Vec<u64> {
        let Some(caps) = self.bots.get(bot) else {
            return Vec::new();
        };
        let mut detached: Vec<(u64, u64)> = caps
            .terminals
            .iter()
            .filter_map(|c| Some((c.reattach.as_ref()?.detached?, c.id)))
            .collect();
        detached.sort_unstable();
        let over = detached.len().saturating_sub(keep);
        detached.into_iter().take(over).map(|(_, id)| id).collect()
    }

    /// Takes out every capability of `bot` that `scope` revokes: control and terminals for
    /// `Control`, everything for `All`.
    pub fn take_scope(&mut self, bot: &BotId, scope: RevokeScope) -> Vec<Capability<T>> {
        let Some(caps) = self.bots.get_mut(bot) else {
            return Vec::new();
        };
        let mut out: Vec<Capability<T>> = caps.terminals.drain(..).collect();
        out.extend(caps.control.take());
        if scope == RevokeScope::All {
            out.extend(caps.view.take());
        }
        self.forget_if_empty(bot);
        out
    }

    /// How many terminal sessions the bot has open.
    pub fn terminals(&self, bot: &BotId) -> usize {
        self.bots.get(bot).map_or(0, |c| c.terminals.len())
    }

    /// How many capabilities the bot has (tests, diagnostics).
    pub fn count(&self, bot: &BotId) -> usize {
        self.bots.get(bot).map_or(0, |c| {
            c.terminals.len() + usize::from(c.view.is_some()) + usize::from(c.control.is_some())
        })
    }

    fn forget_if_empty(&mut self, bot: &BotId) {
        if self.bots.get(bot).is_some_and(BotCaps::is_empty) {
            self.bots.remove(bot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn bot(name: &str) -> BotId {
        BotId::new(name).unwrap()
    }

    fn add(t: &mut CapTable<()>, b: &BotId, kind: CapabilityKind, lease: Option<&str>) -> u64 {
        let (id, socket) = t.allocate(kind);
        t.insert(
            b,
            Capability::new(id, kind, lease.map(String::from), 1, socket, ()),
        );
        id
    }

    #[test]
    fn sockets_are_fresh_names_in_the_private_dir() {
        let mut t: CapTable<()> = CapTable::new("/run/g".into());
        let (a, pa) = t.allocate(CapabilityKind::View);
        let (b, pb) = t.allocate(CapabilityKind::View);
        assert_ne!(a, b);
        assert_ne!(pa, pb);
        assert_eq!(pa.parent(), Some(Path::new("/run/g")));
        assert!(pb.ends_with("2-view.sock"), "{pb:?}");
    }

    #[test]
    fn revoking_control_keeps_the_view_and_all_takes_everything() {
        let mut t: CapTable<()> = CapTable::new("/run/g".into());
        let (a, other) = (bot("a"), bot("b"));
        add(&mut t, &a, CapabilityKind::View, None);
        add(&mut t, &a, CapabilityKind::Control, Some("l1"));
        add(&mut t, &a, CapabilityKind::Terminal, Some("l1"));
        add(&mut t, &a, CapabilityKind::Terminal, Some("l1"));
        add(&mut t, &other, CapabilityKind::Terminal, Some("l2"));
        let taken = t.take_scope(&a, RevokeScope::Control);
        let mut kinds: Vec<_> = taken.iter().map(|c| c.kind.as_str()).collect();
        kinds.sort_unstable();
        assert_eq!(kinds, ["control", "terminal", "terminal"]);
        assert_eq!(t.count(&a), 1);
        assert!(t.rfb(&a, CapabilityKind::View).is_some());
        assert!(t.rfb(&a, CapabilityKind::Control).is_none());
        assert_eq!(t.take_scope(&a, RevokeScope::All).len(), 1);
        assert_eq!(t.count(&a), 0);
        assert_eq!(t.count(&other), 1, "another bot is untouched");
        assert!(t.take_scope(&a, RevokeScope::All).is_empty());
    }

    #[test]
    fn a_terminal_that_ended_leaves_the_others() {
        let mut t: CapTable<()> = CapTable::new("/run/g".into());
        let a = bot("a");
        let first = add(&mut t, &a, CapabilityKind::Terminal, Some("l1"));
        add(&mut t, &a, CapabilityKind::Terminal, Some("l1"));
        assert!(t.take_terminal(&a, first).is_some());
        assert!(t.take_terminal(&a, first).is_none());
        assert_eq!(t.count(&a), 1);
    }

    fn add_keyed(t: &mut CapTable<()>, b: &BotId, lease: &str, key: &str) -> u64 {
        let (id, socket) = t.allocate(CapabilityKind::Terminal);
        let cap = Capability::new(
            id,
            CapabilityKind::Terminal,
            Some(lease.into()),
            1,
            socket,
            (),
        );
        t.insert(b, cap.with_reattach(key.into()));
        id
    }

    #[test]
    fn a_kept_terminal_is_found_only_by_its_own_bot_lease_and_key() {
        let mut t: CapTable<()> = CapTable::new("/run/g".into());
        let (a, b) = (bot("a"), bot("b"));
        let mine = add_keyed(&mut t, &a, "l1", "k1");
        add(&mut t, &a, CapabilityKind::Terminal, Some("l1"));
        let found = t.terminal_by_key(&a, Some("l1"), "k1").map(|c| c.id);
        assert_eq!(found, Some(mine));
        // Another bot with the same lease id and key, another lease, another key, no lease.
        assert!(t.terminal_by_key(&b, Some("l1"), "k1").is_none());
        assert!(t.terminal_by_key(&a, Some("l2"), "k1").is_none());
        assert!(t.terminal_by_key(&a, Some("l1"), "k2").is_none());
        assert!(t.terminal_by_key(&a, None, "k1").is_none());
        // Bot b's own terminal under the same key is its own, never a's.
        let theirs = add_keyed(&mut t, &b, "l1", "k1");
        assert_eq!(
            t.terminal_by_key(&b, Some("l1"), "k1").map(|c| c.id),
            Some(theirs)
        );
        assert_eq!(
            t.terminal_by_key(&a, Some("l1"), "k1").map(|c| c.id),
            Some(mine)
        );
        // A terminal without a key is never found by one (not even an empty one).
        assert!(t.terminal_by_key(&a, Some("l1"), "").is_none());
        // Revoking a's control takes its kept terminal too; b's stays.
        assert_eq!(t.take_scope(&a, RevokeScope::Control).len(), 2);
        assert!(t.terminal_by_key(&a, Some("l1"), "k1").is_none());
        assert!(t.terminal_by_key(&b, Some("l1"), "k1").is_some());
    }

    #[test]
    fn the_longest_detached_terminals_are_the_ones_beyond_the_bound() {
        let mut t: CapTable<()> = CapTable::new("/run/g".into());
        let a = bot("a");
        let ids: Vec<u64> = (0..4)
            .map(|i| add_keyed(&mut t, &a, "l1", &format!("k{i}")))
            .collect();
        let attached = add_keyed(&mut t, &a, "l1", "attached");
        let plain = add(&mut t, &a, CapabilityKind::Terminal, Some("l1"));
        // Detached in the order 2, 0, 3, 1; `attached` is not detached, `plain` cannot be.
        for id in [ids[2], ids[0], ids[3], ids[1]] {
            assert_eq!(t.detach(&a, id), Some(1), "one connection so far");
        }
        assert_eq!(t.detach(&a, plain), None);
        assert_eq!(t.detach(&bot("b"), ids[0]), None, "not b's");
        assert_eq!(t.detached_beyond(&a, 4), Vec::<u64>::new());
        assert_eq!(t.detached_beyond(&a, 2), vec![ids[2], ids[0]]);
        assert_eq!(
            t.detached_beyond(&a, 0),
            vec![ids[2], ids[0], ids[3], ids[1]]
        );
        assert!(!t.detached_beyond(&a, 0).contains(&attached));
        assert!(!t.detached_beyond(&a, 0).contains(&plain));
        assert!(t.detached_beyond(&bot("b"), 0).is_empty());
        // Detached again later, 2 is now the most recent.
        assert_eq!(t.detach(&a, ids[2]), Some(1));
        assert_eq!(t.detached_beyond(&a, 3), vec![ids[0]]);
    }

    #[tokio::test]
    async fn disconnect_waits_for_every_client_guard() {
        let mut cap = Capability::new(1, CapabilityKind::View, None, 1, "/x".into(), ());
        let guard = cap.client().unwrap();
        let cancel = cap.cancel.clone();
        let relay = tokio::spawn(async move {
            cancel.cancelled().await;
            drop(guard);
        });
        assert_eq!(cap.connected(), 1);
        assert!(cap.disconnect(Duration::from_secs(30)).await);
        assert!(cap.client().is_none(), "no new client after a revocation");
        relay.await.unwrap();
    }
}
