//! The Prometheus exporter: installs the `metrics` recorder and serves `render()` at
//! `/metrics` on `metricsProvider.httpHost:metricsProvider.httpPort` (ZooKeeper's port 7000).
//! Gauges derived from state (znode count, sessions, Raft indexes) are refreshed at scrape time.

use std::net::SocketAddr;

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusBuilder;
use metrics_exporter_prometheus::PrometheusHandle;

use super::View;

/// Bucket bounds (seconds) for every `*_seconds` histogram: request latency per opcode, fsync
/// time. 100 µs to 10 s, so a histogram aggregates across servers as summaries cannot.
const SECONDS_BUCKETS: &[f64] =
    &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Installs the global recorder; call once, before anything records.
pub fn install() -> Option<PrometheusHandle> {
    let builder = match PrometheusBuilder::new()
        .set_buckets_for_metric(metrics_exporter_prometheus::Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
    {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "metrics buckets not set");
            PrometheusBuilder::new()
        }
    };
    match builder.install_recorder() {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!(error = %e, "metrics recorder not installed");
            None
        }
    }
}

/// Sets the gauges that are read from state rather than counted as they happen.
pub fn refresh(d: &View) {
    d.stats.export_packet_counters();
    for (key, value) in crate::admin::four_letter::monitor(d) {
        let Some(name) = key.strip_prefix("zk_") else { continue };
        // Exported as counters by `export_packet_counters`; a gauge of the same name would clash.
        if matches!(name, "packets_received" | "packets_sent") {
            continue;
        }
        if let Ok(v) = value.parse::<f64>() {
            metrics::gauge!(name.to_owned()).set(v);
        }
    }
    use crate::stats::names;
    let quotas = d.tree.read().quota_metrics();
    for (namespace, values) in quotas {
        for (name, v) in
            [names::QUOTA_COUNT_LIMIT, names::QUOTA_BYTES_LIMIT, names::QUOTA_COUNT_USAGE, names::QUOTA_BYTES_USAGE]
                .into_iter()
                .zip(values)
        {
            metrics::gauge!(name, "key" => namespace.clone()).set(v as f64);
        }
    }
    let m = d.raft.status();
    metrics::gauge!("warden_raft_term").set(m.term as f64);
    metrics::gauge!("warden_raft_leader_id").set(m.leader.map_or(-1.0, |l| l as f64));
    metrics::gauge!("warden_raft_last_log_index").set(m.last_log_index as f64);
    metrics::gauge!("warden_raft_applied_index").set(m.applied_index as f64);
    metrics::gauge!("warden_raft_snapshot_index").set(m.snapshot_index as f64);
    metrics::gauge!("warden_raft_is_leader").set(if m.leader == Some(m.id) { 1.0 } else { 0.0 });
    // On the leader: how far each follower's matched log index trails the leader's last index.
    for (follower, lag) in &m.replication_lag {
        metrics::gauge!("warden_raft_replication_lag_entries", "follower" => follower.to_string()).set(*lag as f64);
    }
}

async fn render(State((d, h)): State<(View, PrometheusHandle)>) -> String {
    refresh(&d);
    h.run_upkeep();
    h.render()
}

/// How often histogram samples are folded into their buckets when nobody scrapes.
const UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Serves `/metrics` until `stop` fires, and meanwhile folds recorded histogram samples into
/// their buckets every [`UPKEEP_EVERY`]. The exporter otherwise keeps every sample (8 bytes and
/// more per request, for the request-latency histogram) until the next scrape: a server nobody
/// scrapes grew by 88 MiB over 3.5 million gets.
pub async fn serve(addr: SocketAddr, d: View, handle: PrometheusHandle, stop: tokio::sync::watch::Receiver<bool>) {
    let upkeep = {
        let handle = handle.clone();
        let mut stop = stop.clone();
        async move {
            let mut every = tokio::time::interval(UPKEEP_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = every.tick() => handle.run_upkeep(),
                    _ = stop.changed() => break,
                }
            }
        }
    };
    let app = Router::new().route("/metrics", get(render)).with_state((d, handle));
    let serve = super::serve_router(addr, app, "Prometheus metrics at /metrics", stop);
    tokio::join!(upkeep, serve);
}
