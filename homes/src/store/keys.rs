//! Object names of checkpoints: what both the object store and its revision ledger read, so
//! neither imports the other for it.

use crate::{HomeKey, Revision};

/// Prefix of every object this store writes.
pub const OBJECT_PREFIX: &str = "homes/";

/// The object name of a checkpoint.
pub fn object_key(home: &HomeKey, revision: Revision) -> String {
    format!("{OBJECT_PREFIX}{home}/{revision}")
}

/// The (home, revision) an object name stands for, if this store could have written it.
pub(crate) fn parse_object_key(key: &str) -> Option<(HomeKey, Revision)> {
    let rest = key.strip_prefix(OBJECT_PREFIX)?;
    let (home, rev) = rest.split_once('/')?;
    Some((HomeKey::new(home).ok()?, Revision::parse(rev).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_keys_round_trip() {
        let home = HomeKey::new("team-w1").unwrap();
        let key = object_key(&home, Revision::new(7).unwrap());
        assert_eq!(key, "homes/team-w1/7");
        assert_eq!(
            parse_object_key(&key),
            Some((home, Revision::new(7).unwrap()))
        );
        for foreign in [
            "homes/x",
            "homes/x/0",
            "homes/x/y",
            "other/x/1",
            "homes/a b/1",
        ] {
            assert_eq!(parse_object_key(foreign), None, "{foreign}");
        }
    }
}
