//! The watch on the computers' pods (label `rakazo.dev/managed=true`): which pods went away
//! without this provider deleting them (deleted with their node, evicted and collected,
//! removed by an operator), and which were marked lost by their node (`status.reason`
//! `NodeLost`).
//!
//! kube-runtime's watcher lists, then watches from the list's resourceVersion; a watch whose
//! resourceVersion has expired (`410 Gone`) makes it list again. A pod deleted while no watch
//! was open has no DELETED event: the relist shows it missing, and it counts as deleted then.

use super::LABEL_MANAGED;
use futures_util::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use tracing::{debug, info, warn};

/// What the watch learnt.
#[derive(Default)]
struct State {
    /// The pods seen, by name.
    known: HashSet<String>,
    /// The pods of a list under way (between `Init` and `InitDone`).
    relisting: Option<HashSet<String>>,
    /// Pods deleted behind our back, and why.
    lost: HashMap<String, String>,
    /// Pods this provider is deleting itself: their DELETED event is no loss.
    deleting: HashSet<String>,
    /// Completed lists (the first, then one per expired watch or reconnect).
    lists: u64,
}

/// The shared view of the watch.
#[derive(Default, Clone)]
pub(super) struct Watch(Arc<Mutex<State>>);

impl Watch {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why pod `name` was lost, if it was.
    pub(super) fn lost(&self, name: &str) -> Option<String> {
        self.state().lost.get(name).cloned()
    }

    /// This provider deletes pod `name` now (a stop, a destroy, a restart of a finished pod):
    /// its going is no loss.
    pub(super) fn deleting(&self, name: &str) {
        self.state().deleting.insert(name.to_string());
    }

    /// Pod `name` is (re)made by this provider: nothing lost about it any more.
    pub(super) fn fresh(&self, name: &str) {
        let mut st = self.state();
        st.lost.remove(name);
        st.deleting.remove(name);
    }

    /// Forgets pod `name` (its computer is destroyed).
    pub(super) fn forget(&self, name: &str) {
        let mut st = self.state();
        st.lost.remove(name);
        st.known.remove(name);
    }

    /// Completed lists so far.
    pub(super) fn lists(&self) -> u64 {
        self.state().lists
    }

    fn gone(st: &mut State, name: &str) {
        st.known.remove(name);
        if st.deleting.remove(name) {
            return;
        }
        info!(
            pod = name,
            "kubernetes pod deleted outside Rakazo (its node lost?): its computer is gone"
        );
        st.lost
            .entry(name.to_string())
            .or_insert_with(|| "the pod was deleted outside Rakazo (its node was lost?)".into());
    }

    fn seen(st: &mut State, obj: &DynamicObject) {
        let Some(name) = obj.metadata.name.clone() else {
            return;
        };
        if obj.data["status"]["reason"] == "NodeLost" && !st.deleting.contains(&name) {
            st.lost
                .entry(name.clone())
                .or_insert_with(|| "the pod's node was lost (NodeLost)".into());
        }
        st.known.insert(name);
    }

    fn apply(&self, event: Event<DynamicObject>) {
        let mut st = self.state();
        match event {
            Event::Init => st.relisting = Some(HashSet::new()),
            Event::InitApply(obj) => {
                if let Some(name) = obj.metadata.name.clone() {
                    if let Some(r) = st.relisting.as_mut() {
                        r.insert(name);
                    }
                }
                Self::seen(&mut st, &obj);
            }
            Event::InitDone => {
                let listed = st.relisting.take().unwrap_or_default();
                let missing: Vec<String> = st
                    .known
                    .iter()
                    .filter(|n| !listed.contains(*n))
                    .cloned()
                    .collect();
                for name in missing {
                    Self::gone(&mut st, &name);
                }
                // Deletions of ours whose event a relist swallowed are done.
                let deleting: Vec<String> = st
                    .deleting
                    .iter()
                    .filter(|n| !listed.contains(*n))
                    .cloned()
                    .collect();
                for n in deleting {
                    st.deleting.remove(&n);
                }
                st.lists += 1;
                debug!(
                    pods = listed.len(),
                    lists = st.lists,
                    "kubernetes pods listed"
                );
            }
            Event::Apply(obj) => Self::seen(&mut st, &obj),
            Event::Delete(obj) => {
                if let Some(name) = obj.metadata.name.as_deref() {
                    Self::gone(&mut st, name);
                }
            }
        }
    }

    /// Runs the watch on `pods` until the task is aborted. Errors (an expired watch, a
    /// connection lost) are retried with the watcher's backoff.
    pub(super) async fn run(self, pods: Api<DynamicObject>) {
        let config = watcher::Config::default().labels(&format!("{LABEL_MANAGED}=true"));
        let mut stream = watcher::watcher(pods, config).default_backoff().boxed();
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => self.apply(event),
                Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                    info!("kubernetes pod watch expired (410 Gone): listing again")
                }
                Err(e) => warn!(error = %e, "kubernetes pod watch failed: retrying"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ApiResource;

    fn pod(name: &str) -> DynamicObject {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        DynamicObject::new(name, &ar)
    }

    #[test]
    fn a_pod_missing_from_a_relist_is_lost_unless_we_deleted_it() {
        let w = Watch::default();
        for e in [
            Event::Init,
            Event::InitApply(pod("a")),
            Event::InitApply(pod("b")),
            Event::InitApply(pod("c")),
            Event::InitDone,
        ] {
            w.apply(e);
        }
        w.deleting("b");
        w.apply(Event::Delete(pod("b")));
        assert_eq!(w.lost("b"), None);
        // The watch expired; a and c went meanwhile, c by our own hand.
        w.deleting("c");
        for e in [Event::Init, Event::InitDone] {
            w.apply(e);
        }
        assert!(w.lost("a").is_some());
        assert_eq!(w.lost("c"), None);
        assert_eq!(w.lists(), 2);
        w.fresh("a");
        assert_eq!(w.lost("a"), None);
    }
}
