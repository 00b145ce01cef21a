mod db;
mod store;
