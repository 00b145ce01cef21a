//! Faults (issue 36): each test breaks one thing the runtime depends on (the link, the
//! database, the object store) or misbehaves as a client, through the real binaries, and checks
//! what holds (docs/faults.md, docs/faults-storage.md).

mod db;
mod disk;
mod limits;
mod link;
mod soak;
mod store;
