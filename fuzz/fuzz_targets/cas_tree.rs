//! The CAS tree decoder (homes/src/cas/tree.rs): a directory's blob as it opens from a pack.
//! Sealing makes tampering by a store detectable, but the decoder is the last line against a
//! bug or a leaked key, so it checks what it reads.
//!
//! Input: the tree's bytes (JSON). Asserts: it never panics; a tree it accepts has only plain,
//! sorted, unique names and modes within 0o7777, and encodes and decodes again to itself.
#![no_main]

use homes::cas::tree::{plain_bytes, Tree};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(tree) = Tree::decode(data) else {
        return;
    };
    let mut last: Option<Vec<u8>> = None;
    for e in &tree.entries {
        let name = e
            .name_bytes()
            .expect("an accepted tree's names decode")
            .into_owned();
        assert!(plain_bytes(&name), "accepted name {name:?}");
        assert!(
            last.as_ref().is_none_or(|l| *l < name),
            "names out of order"
        );
        assert!(e.mode <= 0o7777);
        last = Some(name);
    }
    let again = Tree::decode(&tree.encode()).expect("a tree's own encoding decodes");
    assert_eq!(again, tree);
});
