//! Unit checks of the layer's parts; the repository's behaviour on both stores is the
//! conformance suite's (homes/tests/cas_conformance.rs).

use super::*;

#[test]
fn trees_that_would_leave_the_root_are_refused() {
    for name in ["..", ".", "a/b", "", "x\0y"] {
        let t = tree::Tree {
            entries: vec![tree::Entry {
                name: name.into(),
                mode: 0o644,
                mtime_ns: 0,
                node: tree::Node::Symlink {
                    target: "/etc".into(),
                },
            }],
        };
        assert!(tree::Tree::decode(&t.encode()).is_err(), "{name:?}");
    }
}
