//! Faults (issue 36): each test breaks one thing the runtime depends on, through the real
//! binaries, and checks what holds (docs/faults.md).

mod link;
