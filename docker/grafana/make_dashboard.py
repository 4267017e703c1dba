#!/usr/bin/env python3
"""Writes dashboards/warden.json, the Grafana dashboard over Warden's Prometheus metrics.

The panels are listed here once; compat-tests/test_ops_dashboard.py evaluates every
panel's query against a real Prometheus scraping a real Warden. Run after editing:
    python3 docker/grafana/make_dashboard.py
"""

import json
import os

DS = {"type": "prometheus", "uid": "${datasource}"}

# (row title, [(panel title, unit, [(expr, legend)])])
ROWS = [
    ("Clients", [
        ("Requests per second by op", "reqps",
         [('sum by (op) (rate(warden_request_latency_seconds_count{instance=~"$instance"}[1m]))', "{{op}}")]),
        ("Request latency p99 by op", "s",
         [('histogram_quantile(0.99, sum by (le, op) (rate(warden_request_latency_seconds_bucket{instance=~"$instance"}[5m])))', "{{op}}")]),
        ("Outstanding requests", "short",
         [('outstanding_requests{instance=~"$instance"}', "{{instance}}")]),
        ("Connections", "short",
         [('num_alive_connections{instance=~"$instance"}', "{{instance}}")]),
        ("Sessions", "short",
         [('global_sessions{instance=~"$instance"}', "{{instance}}")]),
    ]),
    ("Data", [
        ("Znodes", "short", [('znode_count{instance=~"$instance"}', "{{instance}}")]),
        ("Watches", "short", [('watch_count{instance=~"$instance"}', "{{instance}}")]),
        ("Ephemerals", "short", [('ephemerals_count{instance=~"$instance"}', "{{instance}}")]),
        ("Approximate data size", "bytes", [('approximate_data_size{instance=~"$instance"}', "{{instance}}")]),
        ("Quota usage by namespace (count)", "short",
         [('max by (key) (quota_count_usage_per_namespace{instance=~"$instance"})', "{{key}} used"),
          ('max by (key) (quota_count_limit_per_namespace{instance=~"$instance"})', "{{key}} limit")]),
    ]),
    ("Disk and Raft", [
        ("Log fsync p99", "s",
         [('histogram_quantile(0.99, sum by (le, instance) (rate(warden_raft_fsync_seconds_bucket{instance=~"$instance"}[5m])))', "{{instance}}")]),
        ("Raft term", "short", [('warden_raft_term{instance=~"$instance"}', "{{instance}}")]),
        ("Leader", "short", [('warden_raft_leader_id{instance=~"$instance"}', "{{instance}} sees leader")]),
        ("Applied entries per second", "ops",
         [('rate(warden_raft_applied_index{instance=~"$instance"}[1m])', "{{instance}}")]),
        ("Follower replication lag (entries, on the leader)", "short",
         [('warden_raft_replication_lag_entries{instance=~"$instance"}', "follower {{follower}}")]),
        ("Digest mismatches", "short",
         [('digest_mismatches_count{instance=~"$instance"}', "{{instance}} mismatches"),
          ('digest_diverged{instance=~"$instance"}', "{{instance}} diverged")]),
    ]),
]


def dashboard():
    panels, pid, y = [], 1, 0
    for title, row in ROWS:
        panels.append({"type": "row", "id": pid, "title": title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        pid, y = pid + 1, y + 1
        for i, (ptitle, unit, targets) in enumerate(row):
            panels.append({
                "type": "timeseries", "id": pid, "title": ptitle, "datasource": DS,
                "gridPos": {"h": 8, "w": 8, "x": (i % 3) * 8, "y": y + (i // 3) * 8},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
                "targets": [{"refId": chr(65 + j), "datasource": DS, "expr": expr, "legendFormat": legend}
                            for j, (expr, legend) in enumerate(targets)],
            })
            pid += 1
        y += ((len(row) + 2) // 3) * 8
    return {
        "uid": "warden-overview", "title": "Warden", "tags": ["warden", "zookeeper"],
        "schemaVersion": 39, "version": 1, "editable": True, "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
            {"name": "instance", "type": "query", "datasource": DS, "label": "Member",
             "query": 'label_values(znode_count{job="warden"}, instance)', "refresh": 2,
             "includeAll": True, "multi": True, "allValue": ".*",
             "current": {"text": "All", "value": "$__all"}},
        ]},
        "panels": panels,
    }


if __name__ == "__main__":
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dashboards", "warden.json")
    with open(out, "w") as f:
        json.dump(dashboard(), f, indent=2)
        f.write("\n")
    print(f"wrote {out}")
