//! What the store suites share: the two real databases every case runs on. SQLite is a temp
//! file; PostgreSQL is the server at `RAKAZO_TEST_PG_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), each case in a schema of its own. PostgreSQL is
//! required: an unreachable one fails the cases, naming its URL.

use control_plane::db::{testing, Db};

// Tests may read their environment; this names the PostgreSQL the CI script starts.
#[allow(clippy::disallowed_methods)]
fn pg_url() -> String {
    std::env::var("RAKAZO_TEST_PG_URL").unwrap_or_else(|_| testing::DEFAULT_PG_URL.to_owned())
}

/// A fresh database on the real PostgreSQL.
pub async fn postgres() -> Db {
    let url = pg_url();
    testing::postgres(&url).await.unwrap_or_else(|e| {
        panic!("PostgreSQL at {url} (RAKAZO_TEST_PG_URL) is required and unreachable: {e:?}")
    })
}

/// A fresh SQLite database in a temp file.
pub async fn sqlite() -> Db {
    testing::sqlite().await.expect("sqlite fixture")
}

/// Runs each `async fn case(db: Db)` of the calling file as two `#[tokio::test]`s, one per
/// database, in the modules `sqlite` and `postgres`.
// Not every suite uses it: lease_store runs its cases through `lease_conformance!`.
#[allow(unused_macros)]
macro_rules! on_both_databases {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case($crate::common::sqlite().await).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case($crate::common::postgres().await).await;
                }
            )*
        }
    };
}
