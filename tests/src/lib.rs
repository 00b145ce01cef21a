//! System-test harness.
