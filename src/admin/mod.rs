//! Operations: four-letter words on the client port, the admin HTTP server (ZooKeeper's
//! `/commands`, plus session listing and killing and readiness probes), and the Prometheus
//! exporter. Other modules declare their own metrics; this module only exports them.

pub mod four_letter;
pub mod http;
pub mod metrics;

use crate::dispatch::Dispatcher;

/// Answers a four-letter word with ZooKeeper's text (the connection closes afterwards).
pub fn four_letter(d: &Dispatcher, word: &[u8; 4]) -> String {
    four_letter::run(d, word)
}
