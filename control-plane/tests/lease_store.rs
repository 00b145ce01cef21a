//! The lease conformance suite against every store: in memory, SQLite (a temp file) and the real
//! PostgreSQL at `RAKAZO_TEST_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`), each
//! PostgreSQL case in a schema of its own. PostgreSQL is required: if it is unreachable the
//! cases fail, naming the URL.

use control_plane::db::{testing, Db};
use control_plane::lease::{MemLeaseStore, SqlLeaseStore};

// Tests may read their environment; this names the PostgreSQL the CI script starts.
#[allow(clippy::disallowed_methods)]
fn pg_url() -> String {
    std::env::var("RAKAZO_TEST_PG_URL").unwrap_or_else(|_| testing::DEFAULT_PG_URL.to_owned())
}

async fn postgres() -> Db {
    let url = pg_url();
    testing::postgres(&url).await.unwrap_or_else(|e| {
        panic!("PostgreSQL at {url} (RAKAZO_TEST_PG_URL) is required and unreachable: {e:?}")
    })
}

async fn sqlite() -> Db {
    testing::sqlite().await.expect("sqlite fixture")
}

control_plane::lease_conformance!(mem, async { MemLeaseStore::new() });
control_plane::lease_conformance!(sqlite, async { SqlLeaseStore::new(sqlite().await) });
control_plane::lease_conformance!(postgres, async { SqlLeaseStore::new(postgres().await) });
