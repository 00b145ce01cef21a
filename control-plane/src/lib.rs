//! placeholder

pub mod computers;
pub mod db;
pub mod lease;
