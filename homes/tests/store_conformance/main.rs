//! The `HomeStore` conformance suite, run against both backends: the local store in a temp data
//! dir, and the object store against a real s3s-fs started per test. Each case is written once
//! in `cases` and turned into one `#[tokio::test]` per backend by `conformance!`.
//!
//! The object store adds the tampering cases of issue 6 "Must show" 2, the reconciler (orphaned
//! objects, and the parts of multipart uploads whose commit died), and S3 failures, in
//! `object_only`.

mod cas_only;
mod cases;
mod object_only;
#[path = "../support/mod.rs"]
mod support;

use homes::archive::{pack_reader, restore_async, UnpackOptions};
use homes::seal::ContentKey;
use homes::testing::{expected_after_restore, manifest, noise, write_sample_home, RawArchive};
use homes::{
    CasHomeStore, CasPlace, Checkpoint, HomeKey, HomeStore, LocalHomeStore, MemRevisionLedger,
    ObjectHomeStore, ObjectStoreConfig, Revision,
};
use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;
use support::S3sFs;

const BUCKET: &str = "rakazo-homes";

trait Fixture: Sized + Send + Sync + 'static {
    type Store: HomeStore + 'static;
    async fn start() -> anyhow::Result<Self>;
    fn store(&self) -> Arc<Self::Store>;
}

struct LocalFixture {
    _tmp: tempfile::TempDir,
    store: Arc<LocalHomeStore>,
}

impl Fixture for LocalFixture {
    type Store = LocalHomeStore;
    async fn start() -> anyhow::Result<Self> {
        let tmp = tempfile::tempdir()?;
        let store = Arc::new(LocalHomeStore::new(tmp.path().join("data")));
        Ok(Self { _tmp: tmp, store })
    }
    fn store(&self) -> Arc<LocalHomeStore> {
        self.store.clone()
    }
}

struct ObjectFixture {
    s3: S3sFs,
    store: Arc<ObjectHomeStore<MemRevisionLedger>>,
}

fn object_config(endpoint: &str) -> ObjectStoreConfig {
    let mut config = ObjectStoreConfig::new(BUCKET, "us-east-1", "test", "test");
    config.endpoint = Some(endpoint.to_owned());
    config.force_path_style = true;
    // The smallest part S3 allows, so a 12 MiB home takes three parts.
    config.part_size = 5 << 20;
    config
}

impl ObjectFixture {
    fn store_with(&self, content_key: ContentKey) -> ObjectHomeStore<MemRevisionLedger> {
        ObjectHomeStore::new(
            &object_config(&self.s3.endpoint),
            content_key,
            MemRevisionLedger::default(),
        )
    }
}

impl Fixture for ObjectFixture {
    type Store = ObjectHomeStore<MemRevisionLedger>;
    async fn start() -> anyhow::Result<Self> {
        let s3 = S3sFs::start().await?;
        let store = ObjectHomeStore::new(
            &object_config(&s3.endpoint),
            ContentKey::generate(),
            MemRevisionLedger::default(),
        );
        store.client().create_bucket().bucket(BUCKET).send().await?;
        Ok(Self {
            s3,
            store: Arc::new(store),
        })
    }
    fn store(&self) -> Arc<Self::Store> {
        self.store.clone()
    }
}

/// The incremental store in a directory, in front of a local whole-archive store.
struct CasLocalFixture {
    tmp: tempfile::TempDir,
    store: Arc<CasHomeStore<LocalHomeStore>>,
}

impl Fixture for CasLocalFixture {
    type Store = CasHomeStore<LocalHomeStore>;
    async fn start() -> anyhow::Result<Self> {
        let tmp = tempfile::tempdir()?;
        let store = Arc::new(CasHomeStore::new(
            LocalHomeStore::new(tmp.path().join("data")),
            CasPlace::Local(tmp.path().join("data/home-cas")),
            ContentKey::generate(),
            Arc::new(|| 0),
        ));
        Ok(Self { tmp, store })
    }
    fn store(&self) -> Arc<Self::Store> {
        self.store.clone()
    }
}

/// The incremental store in a bucket, in front of the sealed whole-archive store.
struct CasObjectFixture {
    _s3: S3sFs,
    store: Arc<CasHomeStore<ObjectHomeStore<MemRevisionLedger>>>,
}

impl Fixture for CasObjectFixture {
    type Store = CasHomeStore<ObjectHomeStore<MemRevisionLedger>>;
    async fn start() -> anyhow::Result<Self> {
        let s3 = S3sFs::start().await?;
        let config = object_config(&s3.endpoint);
        let content_key = ContentKey::generate();
        let legacy =
            ObjectHomeStore::new(&config, content_key.clone(), MemRevisionLedger::default());
        legacy
            .client()
            .create_bucket()
            .bucket(BUCKET)
            .send()
            .await?;
        let store = CasHomeStore::new(
            legacy,
            CasPlace::Object(config),
            content_key,
            Arc::new(|| 0),
        );
        Ok(Self {
            _s3: s3,
            store: Arc::new(store),
        })
    }
    fn store(&self) -> Arc<Self::Store> {
        self.store.clone()
    }
}

fn key(s: &str) -> HomeKey {
    HomeKey::new(s).unwrap()
}

fn small(content: &[u8]) -> Cursor<Vec<u8>> {
    Cursor::new(
        RawArchive::new()
            .dir(b"d")
            .file(b"d/f", false, content)
            .end(),
    )
}

/// Restores a checkpoint into `dst` and returns `d/f` of a [`small`] archive.
async fn restore_small(cp: Checkpoint, dst: &Path) -> Vec<u8> {
    restore_async(cp.archive, dst.to_path_buf(), UnpackOptions::default())
        .await
        .unwrap();
    std::fs::read(dst.join("d/f")).unwrap()
}

macro_rules! conformance {
    ($name:ident, $fixture:ty) => {
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn round_trip() {
                cases::round_trip::<$fixture>().await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn large_home_round_trip() {
                cases::large_home_round_trip::<$fixture>().await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn empty_store() {
                cases::empty_store::<$fixture>().await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn revisions_increment() {
                cases::revisions_increment::<$fixture>().await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn concurrent_commits_are_serialized() {
                cases::concurrent_commits_are_serialized::<$fixture>().await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn delete_forgets_the_home() {
                cases::delete_forgets_the_home::<$fixture>().await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_bad_archive_keeps_the_previous_revision() {
                cases::a_bad_archive_keeps_the_previous_revision::<$fixture>().await
            }
        }
    };
}

conformance!(local, LocalFixture);
conformance!(object, ObjectFixture);
conformance!(cas_local, CasLocalFixture);
conformance!(cas_object, CasObjectFixture);
