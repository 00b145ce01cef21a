//! The lease conformance suite against every store: in memory, SQLite (a temp file) and the real
//! PostgreSQL at `RAKAZO_TEST_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`), each
//! PostgreSQL case in a schema of its own. PostgreSQL is required: if it is unreachable the
//! cases fail, naming the URL.

use common::{postgres, sqlite};
use control_plane::lease::{MemLeaseStore, SqlLeaseStore};

mod common;

control_plane::lease_conformance!(mem, async { MemLeaseStore::new() });
control_plane::lease_conformance!(sqlite, async { SqlLeaseStore::new(sqlite().await) });
control_plane::lease_conformance!(postgres, async { SqlLeaseStore::new(postgres().await) });
