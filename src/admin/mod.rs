//! Operations: four-letter words on the client port, the admin HTTP server (ZooKeeper's
//! `/commands`, plus session listing and killing and readiness probes), and the Prometheus
//! exporter. Other modules declare their own metrics; this module only exports them.

pub mod four_letter;
pub mod http;
pub mod metrics;

use crate::dispatch::Dispatcher;

/// Answers a four-letter word (and `stmk`'s 8-byte argument) with ZooKeeper's text (the
/// connection closes afterwards).
pub fn four_letter(d: &Dispatcher, word: &[u8; 4], arg: Option<[u8; 8]>) -> String {
    four_letter::run(d, word, arg)
}
