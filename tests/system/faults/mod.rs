//! The fault suite (issue 36): what holds when a link, the database, the object store or a
//! client misbehaves, each through the real binaries.

mod limits;
